package mock

import (
	"context"

	"github.com/orderlyhq/orderly"
)

var _ orderly.RefundService = (*RefundService)(nil)

// RefundService is a mock of orderly.RefundService.
type RefundService struct {
	CreateRefundFn func(ctx context.Context, params *orderly.CreateRefundParams) (*orderly.Refund, bool, error)
	OrderRefundsFn func(ctx context.Context, orderID string) ([]*orderly.Refund, error)
	RefundFn       func(ctx context.Context, id string) (*orderly.Refund, error)
}

// CreateRefund calls CreateRefundFn.
func (s *RefundService) CreateRefund(ctx context.Context, params *orderly.CreateRefundParams) (*orderly.Refund, bool, error) {
	if s.CreateRefundFn == nil {
		unset("RefundService.CreateRefund")
	}
	return s.CreateRefundFn(ctx, params)
}

// OrderRefunds calls OrderRefundsFn.
func (s *RefundService) OrderRefunds(ctx context.Context, orderID string) ([]*orderly.Refund, error) {
	if s.OrderRefundsFn == nil {
		unset("RefundService.OrderRefunds")
	}
	return s.OrderRefundsFn(ctx, orderID)
}

// Refund calls RefundFn.
func (s *RefundService) Refund(ctx context.Context, id string) (*orderly.Refund, error) {
	if s.RefundFn == nil {
		unset("RefundService.Refund")
	}
	return s.RefundFn(ctx, id)
}
