package mock

import (
	"context"

	"github.com/orderlyhq/orderly"
)

var _ orderly.OrderService = (*OrderService)(nil)

// OrderService is a mock of orderly.OrderService.
type OrderService struct {
	CreateOrderFn  func(ctx context.Context, params *orderly.CreateOrderParams) (*orderly.Order, bool, error)
	OrderFn        func(ctx context.Context, id string) (*orderly.Order, error)
	OrderHistoryFn func(ctx context.Context, id string) ([]*orderly.Transition, error)
	CancelOrderFn  func(ctx context.Context, id, actor, traceID string) (*orderly.Order, error)
	ApplyEventFn   func(ctx context.Context, id string, event orderly.Event, actor, traceID string) (*orderly.Order, error)
}

// CreateOrder calls CreateOrderFn.
func (s *OrderService) CreateOrder(ctx context.Context, params *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	if s.CreateOrderFn == nil {
		unset("OrderService.CreateOrder")
	}
	return s.CreateOrderFn(ctx, params)
}

// Order calls OrderFn.
func (s *OrderService) Order(ctx context.Context, id string) (*orderly.Order, error) {
	if s.OrderFn == nil {
		unset("OrderService.Order")
	}
	return s.OrderFn(ctx, id)
}

// OrderHistory calls OrderHistoryFn.
func (s *OrderService) OrderHistory(ctx context.Context, id string) ([]*orderly.Transition, error) {
	if s.OrderHistoryFn == nil {
		unset("OrderService.OrderHistory")
	}
	return s.OrderHistoryFn(ctx, id)
}

// CancelOrder calls CancelOrderFn.
func (s *OrderService) CancelOrder(ctx context.Context, id, actor, traceID string) (*orderly.Order, error) {
	if s.CancelOrderFn == nil {
		unset("OrderService.CancelOrder")
	}
	return s.CancelOrderFn(ctx, id, actor, traceID)
}

// ApplyEvent calls ApplyEventFn.
func (s *OrderService) ApplyEvent(ctx context.Context, id string, event orderly.Event, actor, traceID string) (*orderly.Order, error) {
	if s.ApplyEventFn == nil {
		unset("OrderService.ApplyEvent")
	}
	return s.ApplyEventFn(ctx, id, event, actor, traceID)
}
