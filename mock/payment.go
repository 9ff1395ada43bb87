package mock

import (
	"context"

	"github.com/orderlyhq/orderly"
)

var _ orderly.PaymentService = (*PaymentService)(nil)

// PaymentService is a mock of orderly.PaymentService.
type PaymentService struct {
	StartPaymentFn   func(ctx context.Context, params *orderly.StartPaymentParams) (*orderly.Payment, error)
	HandleCallbackFn func(ctx context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error)
	PaymentFn        func(ctx context.Context, id string) (*orderly.Payment, error)
	OrderPaymentsFn  func(ctx context.Context, orderID string) ([]*orderly.Payment, error)
	// RefuseCallbackFn may be left nil, unlike the other fields: the refusal is then
	// dropped. It is a notification whose absence cannot change a response, and every test
	// of a malformed callback would otherwise have to set it.
	RefuseCallbackFn   func(ctx context.Context, cb *orderly.Callback, reason string, cause error)
	CallbackRefusalsFn func(ctx context.Context, paymentID string) ([]*orderly.CallbackRefusal, error)
}

// StartPayment calls StartPaymentFn.
func (s *PaymentService) StartPayment(ctx context.Context, params *orderly.StartPaymentParams) (*orderly.Payment, error) {
	if s.StartPaymentFn == nil {
		unset("PaymentService.StartPayment")
	}
	return s.StartPaymentFn(ctx, params)
}

// HandleCallback calls HandleCallbackFn.
func (s *PaymentService) HandleCallback(ctx context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
	if s.HandleCallbackFn == nil {
		unset("PaymentService.HandleCallback")
	}
	return s.HandleCallbackFn(ctx, cb)
}

// Payment calls PaymentFn.
func (s *PaymentService) Payment(ctx context.Context, id string) (*orderly.Payment, error) {
	if s.PaymentFn == nil {
		unset("PaymentService.Payment")
	}
	return s.PaymentFn(ctx, id)
}

// OrderPayments calls OrderPaymentsFn.
func (s *PaymentService) OrderPayments(ctx context.Context, orderID string) ([]*orderly.Payment, error) {
	if s.OrderPaymentsFn == nil {
		unset("PaymentService.OrderPayments")
	}
	return s.OrderPaymentsFn(ctx, orderID)
}

// RefuseCallback calls RefuseCallbackFn when it is set.
func (s *PaymentService) RefuseCallback(ctx context.Context, cb *orderly.Callback, reason string, cause error) {
	if s.RefuseCallbackFn != nil {
		s.RefuseCallbackFn(ctx, cb, reason, cause)
	}
}

// CallbackRefusals calls CallbackRefusalsFn.
func (s *PaymentService) CallbackRefusals(ctx context.Context, paymentID string) ([]*orderly.CallbackRefusal, error) {
	if s.CallbackRefusalsFn == nil {
		unset("PaymentService.CallbackRefusals")
	}
	return s.CallbackRefusalsFn(ctx, paymentID)
}
