package payment_test

import (
	"context"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// row is the part of an audit row that a test checks.
type row struct {
	from, to         orderly.State
	event            orderly.Event
	payFrom, payTo   orderly.PayStatus
	actor, causeHint string
}

func checkTrail(t *testing.T, e *enginetest.Env, orderID string, want []row) {
	t.Helper()
	trail := e.Trail(t, orderID)
	got := make([]row, len(trail))
	for i, tr := range trail {
		got[i] = row{tr.From, tr.To, tr.Event, tr.PayStatusFrom, tr.PayStatusTo, tr.Actor, ""}
		if i < len(want) {
			got[i].causeHint = want[i].causeHint
			if tr.Cause != want[i].causeHint && want[i].causeHint != "" {
				t.Errorf("audit row %d cause %q, want %q", i, tr.Cause, want[i].causeHint)
			}
		}
		if i > 0 && (tr.ID <= trail[i-1].ID || tr.At.Before(trail[i-1].At)) {
			t.Errorf("audit row %d (id %d at %s) is not after row %d (id %d at %s)", i, tr.ID, tr.At, i-1, trail[i-1].ID, trail[i-1].At)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("audit trail has %d rows, want %d:\n got %+v\nwant %+v", len(got), len(want), got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("audit row %d = %+v, want %+v", i, got[i], want[i])
		}
	}
}

// TestAuditTrailRecordsEveryChange: the creation, each payment started and failed, the
// payment that paid and the shipping are each one row recording the state and pay_status
// before and after (I6).
func TestAuditTrailRecordsEveryChange(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	first := start(t, e, o)
	e.Clock.Advance(time.Second)
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: first.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackFailed}); err != nil {
		t.Fatal(err)
	}
	second := start(t, e, o)
	pay(t, e, o, second)
	event(orderly.EventShip)(t, e, o, second)
	pending, paid := orderly.StatePendingPayment, orderly.StatePaid
	checkTrail(t, e, o.ID, []row{
		{"", pending, orderly.EventCreate, "", orderly.PayUnpaid, "buyer", ""},
		{pending, pending, orderly.EventPaymentStarted, orderly.PayUnpaid, orderly.PayPaying, "buyer", "payment " + first.ID},
		{pending, pending, orderly.EventPaymentFailed, orderly.PayPaying, orderly.PayFailed, "callback", "payment " + first.ID + ": failed"},
		{pending, pending, orderly.EventPaymentStarted, orderly.PayFailed, orderly.PayPaying, "buyer", "payment " + second.ID},
		{pending, paid, orderly.EventPay, orderly.PayPaying, orderly.PayPaid, "callback", "payment " + second.ID},
		{paid, orderly.StateShipped, orderly.EventShip, orderly.PayPaid, orderly.PayPaid, "merchant", ""},
	})
	if got := e.OrderOf(t, o.ID); got.Version != 6 {
		t.Errorf("order version %d, want 6: one per change after the creation", got.Version)
	}
}

// TestAuditTrailOfALatePayment: a close for timeout and the refund of a payment that came
// after it are in the trail, the refund as a pay_status change of the closed order.
func TestAuditTrailOfALatePayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	// The attempt is in flight at close_at: inspection cancels it at the gateway, then the order closes.
	e.Clock.Set(o.CloseAt)
	if res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer); err != nil {
		t.Fatalf("close = %+v, %v", res, err)
	}
	if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	e.Drain(t)
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed {
		t.Fatalf("order %s after close_at, want closed", got.State)
	}
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-late")); err != nil || !res.Refund {
		t.Fatalf("late payment = %+v, %v", res, err)
	}
	e.Drain(t)
	pending, closed := orderly.StatePendingPayment, orderly.StateClosed
	checkTrail(t, e, o.ID, []row{
		{"", pending, orderly.EventCreate, "", orderly.PayUnpaid, "buyer", ""},
		{pending, pending, orderly.EventPaymentStarted, orderly.PayUnpaid, orderly.PayPaying, "buyer", ""},
		{pending, pending, orderly.EventPaymentFailed, orderly.PayPaying, orderly.PayFailed, "inspection", ""},
		{pending, closed, orderly.EventTimeout, orderly.PayFailed, orderly.PayFailed, closer.TriggerTimer, ""},
		{closed, closed, orderly.EventPaymentRefunded, orderly.PayFailed, orderly.PayRefunded, "gateway", "payment " + p.ID},
	})
}
