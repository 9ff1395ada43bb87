package order_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
)

// TestDeferEffects: under DeferEffects, two transitions leave their releases to Flush, which
// applies them once on both orders; the stock is untouched until then, a second Flush runs
// nothing, and a transition at another Now in the same deferral is refused.
func TestDeferEffects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "A", 10)
	a := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: "A", Quantity: 2})
	b := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: "A", Quantity: 3})
	m := e.Orders.Machine()
	flow, err := m.Flow("standard")
	if err != nil {
		t.Fatal(err)
	}
	now := enginetest.Start.Add(time.Second)
	cancel := func(ctx context.Context, tx store.Tx, id string, at time.Time) error {
		_, err := m.Transition(ctx, tx, flow, &store.OrdersTransitionParams{IDs: []string{id}, From: orderly.StatePendingPayment,
			Event: orderly.EventCancel, Now: at, CloseReason: orderly.CloseReasonBuyerCancelled, Actor: "test"}, nil)
		return err
	}
	e.InTx(t, func(tx store.Tx) error {
		ctx, releases := order.DeferEffects(ctx, orderly.EffectReleaseReservations, orderly.EffectReleaseCoupon)
		for _, id := range []string{a.ID, b.ID} {
			if err := cancel(ctx, tx, id, now); err != nil {
				return err
			}
		}
		if s, err := tx.StockGet(ctx, "A"); err != nil || s.Held != 5 || s.Available != 5 {
			t.Errorf("stock before the flush: %+v, %v; want 5 still held", s, err)
		}
		if err := releases.Flush(ctx, tx); err != nil {
			return err
		}
		if s, err := tx.StockGet(ctx, "A"); err != nil || s.Held != 0 || s.Available != 10 {
			t.Errorf("stock after the flush: %+v, %v; want all 10 available", s, err)
		}
		return releases.Flush(ctx, tx) // nothing left: no error, no second release
	})
	if s := e.StockOf(t, "A"); s.Held != 0 || s.Available != 10 {
		t.Fatalf("stock after the commit: %+v", s)
	}
	for _, id := range []string{a.ID, b.ID} {
		if o := e.OrderOf(t, id); o.State != orderly.StateClosed {
			t.Fatalf("order %s: %s, want closed", id, o.State)
		}
	}

	c := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: "A", Quantity: 1})
	d := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: "A", Quantity: 1})
	err = e.Store.InTx(ctx, func(tx store.Tx) error {
		ctx, _ := order.DeferEffects(ctx, orderly.EffectReleaseReservations)
		if err := cancel(ctx, tx, c.ID, now); err != nil {
			return err
		}
		return cancel(ctx, tx, d.ID, now.Add(time.Millisecond))
	})
	if err == nil || !strings.Contains(err.Error(), "in one deferral") {
		t.Fatalf("two Nows in one deferral: %v, want refused", err)
	}
	if o := e.OrderOf(t, c.ID); o.State != orderly.StatePendingPayment {
		t.Fatalf("order %s after the refused deferral: %s, want pending_payment (rolled back)", c.ID, o.State)
	}
}
