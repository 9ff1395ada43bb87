package mock_test

import (
	"context"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/mock"
)

func TestOrderServiceCallsFn(t *testing.T) {
	t.Parallel()
	want := &orderly.Order{ID: "ord_1"}
	var gotID string
	s := &mock.OrderService{OrderFn: func(_ context.Context, id string) (*orderly.Order, error) {
		gotID = id
		return want, nil
	}}
	got, err := s.Order(t.Context(), "ord_1")
	if err != nil || got != want || gotID != "ord_1" {
		t.Fatalf("Order = %v, %v (id %q); want %v, nil (id ord_1)", got, err, gotID, want)
	}
}

func TestUnsetFnPanicsWithMethodName(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		call func()
	}{
		{"OrderService.CancelOrder", func() { _, _ = (&mock.OrderService{}).CancelOrder(t.Context(), "o", "buyer", "") }},
		{"PaymentService.HandleCallback", func() { _, _ = (&mock.PaymentService{}).HandleCallback(t.Context(), &orderly.Callback{}) }},
		{"CatalogService.Coupon", func() { _, _ = (&mock.CatalogService{}).Coupon(t.Context(), "c") }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				msg, _ := recover().(string)
				if !strings.Contains(msg, tt.name) {
					t.Errorf("panic message %q does not name %s", msg, tt.name)
				}
			}()
			tt.call()
		})
	}
}
