package closer_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestNeverEarly creates orders with deadlines at random milliseconds and shows that a
// database clock 1–5 ms before an order's close_at closes nothing, and that the clock at
// exactly close_at closes it (I1).
func TestNeverEarly(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	ctx := context.Background()
	e.SetStock(t, "SKU-1", 1000)
	rng := rand.New(rand.NewPCG(1, 2))
	var orders []*orderly.Order
	for range 40 {
		e.Clock.Advance(time.Duration(rng.IntN(997)+1) * time.Millisecond)
		orders = append(orders, e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: int64(rng.IntN(5) + 1)}))
	}
	slices.SortFunc(orders, func(a, b *orderly.Order) int { return a.CloseAt.Compare(b.CloseAt) })
	for i, o := range orders {
		if i > 0 && orders[i-1].CloseAt.Equal(o.CloseAt) {
			continue // closed with its twin at the same millisecond
		}
		early := time.Duration(rng.IntN(5)+1) * time.Millisecond
		e.Clock.Set(o.CloseAt.Add(-early))
		if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
			t.Fatal(err)
		}
		if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment {
			t.Fatalf("order closed %s before its close_at %s", early, o.CloseAt)
		}
		e.Clock.Set(o.CloseAt)
		if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
			t.Fatal(err)
		}
		got := e.OrderOf(t, o.ID)
		if got.State != orderly.StateClosed || got.CloseReason != orderly.CloseReasonPaymentTimeout {
			t.Fatalf("order at its close_at: state %s reason %q, want closed/payment_timeout", got.State, got.CloseReason)
		}
		if got.ClosedAt == nil || got.ClosedAt.Before(got.CloseAt) {
			t.Fatalf("closed_at %v is before close_at %s", got.ClosedAt, got.CloseAt)
		}
	}
}

// TestBatchesUntilShort: 250 due orders with a batch size of 100 all close in one call, with
// one audit row each and their stock released once the outbox drains.
func TestBatchesUntilShort(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{CloseBatchSize: 100})
	ctx := context.Background()
	e.SetStock(t, "SKU-1", 250)
	for range 250 {
		e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 10})
	}
	if s := e.StockOf(t, "SKU-1"); s.Available != 0 || s.Held != 250 {
		t.Fatalf("after create: stock %+v, want available 0 held 250", s)
	}
	e.Clock.Advance(10 * time.Second)
	res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Closed != 250 || res.Claimed != 250 {
		t.Fatalf("CloseDue = %+v, want 250 claimed and closed", res)
	}
	e.Drain(t)
	if s := e.StockOf(t, "SKU-1"); s.Available != 250 || s.Held != 0 || s.Sold != 0 {
		t.Fatalf("after close: stock %+v, want all 250 available", s)
	}
	var orders []*orderly.Order
	e.Read(t, func(tx store.Tx) (err error) {
		orders, err = tx.OrderList(ctx, &store.ListParams{Limit: 1000})
		return err
	})
	for _, o := range orders {
		trail := e.StateTrail(t, o.ID)
		if o.State != orderly.StateClosed || len(trail) != 1 || trail[0].Event != orderly.EventTimeout || trail[0].Actor != closer.TriggerTimer {
			t.Fatalf("order %s: state %s, trail %+v", o.ID, o.State, trail)
		}
	}
	// A second pass finds nothing.
	if res, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil || res.Claimed != 0 {
		t.Fatalf("second pass = %+v, %v; want nothing claimed", res, err)
	}
}

// TestPayingOrderIsInspected: an order whose payment is in flight at close_at is not closed
// blindly; the gateway is asked. Captured → paid; still pending → cancelled and closed.
func TestPayingOrderIsInspected(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 10)
	captured := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	pending := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	pc, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: captured.ID})
	if err != nil {
		t.Fatal(err)
	}
	pp, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: pending.ID})
	if err != nil {
		t.Fatal(err)
	}
	if !e.Gateway.Capture(pc.ID, "txn-captured") {
		t.Fatal("capture refused")
	}
	e.Clock.Advance(5 * time.Second)
	res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer)
	if err != nil {
		t.Fatal(err)
	}
	if res.Inspected != 2 || res.Closed != 1 {
		t.Fatalf("CloseDue = %+v, want 2 inspected and 1 closed", res)
	}
	if got := e.OrderOf(t, captured.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid {
		t.Fatalf("captured order: %s/%s, want paid/paid", got.State, got.PayStatus)
	}
	if got := e.OrderOf(t, pending.ID); got.State != orderly.StateClosed || got.PayStatus != orderly.PayFailed {
		t.Fatalf("pending order: %s/%s, want closed/failed", got.State, got.PayStatus)
	}
	if p, _ := e.Payments.Payment(ctx, pp.ID); p.State != orderly.PaymentFailed {
		t.Fatalf("cancelled attempt is %s, want failed", p.State)
	}
	if p, _ := e.Payments.Payment(ctx, pc.ID); p.State != orderly.PaymentSucceeded || p.ChannelTxnID != "txn-captured" {
		t.Fatalf("captured attempt is %s/%q", p.State, p.ChannelTxnID)
	}
}

// TestUnknownPaymentHeldThenClosed: when the gateway cannot tell, the order stays open
// until the inspection hold passes, then closes; money arriving later is refunded.
func TestUnknownPaymentHeldThenClosed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 10)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(o.CloseAt)
	cl, err := closer.New(closer.Config{Store: e.Store, Inspector: inspectorFunc(func(context.Context, string, string) (orderly.GatewayStatus, error) {
		return orderly.GatewayUnknown, nil
	}), InspectionBackoff: time.Second, InspectionHold: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		advance time.Duration
		want    orderly.State
	}{
		{0, orderly.StatePendingPayment},
		{999 * time.Millisecond, orderly.StatePendingPayment}, // inspection backoff not over: not even claimed
		{20 * time.Second, orderly.StatePendingPayment},
		{10 * time.Second, orderly.StateClosed}, // close_at + 30 s hold
	} {
		e.Clock.Advance(step.advance)
		if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
			t.Fatal(err)
		}
		if got := e.OrderOf(t, o.ID); got.State != step.want {
			t.Fatalf("at close_at+%s: %s, want %s", e.Clock.Now().Sub(o.CloseAt), got.State, step.want)
		}
	}
	res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: "late", Amount: o.Amount, Currency: "USD", Status: orderly.CallbackSucceeded})
	if err != nil || !res.Refund {
		t.Fatalf("late success = %+v, %v; want a refund", res, err)
	}
}

// TestForcedCloseSettlesItsPayment: an order closed past its inspection hold with its
// payment still unknown does not leave the attempt open. Its close writes a payment.cancel
// message; when the gateway captured the money meanwhile and the callback never arrives,
// the message's settlement finds the capture and refunds it, once, and while the gateway
// cannot answer the message is retried, not dropped.
func TestForcedCloseSettlesItsPayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var queryDown atomic.Bool
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(g orderly.Gateway) orderly.Gateway {
		return &queryFailGateway{Gateway: g, down: &queryDown}
	}})
	e.SetStock(t, "SKU-1", 10)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := closer.New(closer.Config{Store: e.Store, Inspector: inspectorFunc(func(context.Context, string, string) (orderly.GatewayStatus, error) {
		return orderly.GatewayUnknown, nil
	}), InspectionBackoff: time.Second, InspectionHold: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(o.CloseAt)
	if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	e.Clock.Advance(30 * time.Second)
	if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.PayStatus != orderly.PayPaying {
		t.Fatalf("after the hold: %s/%s, want closed/paying", got.State, got.PayStatus)
	}
	if !e.Gateway.Capture(p.ID, "txn-after-close") { // the money arrives; its callback is lost
		t.Fatal("capture refused")
	}
	queryDown.Store(true)
	e.Drain(t)
	if got, _ := e.Payments.Payment(ctx, p.ID); got.State != orderly.PaymentInitiated {
		t.Fatalf("with the gateway down: payment %s, want still initiated", got.State)
	}
	queryDown.Store(false)
	e.Clock.Advance(time.Hour) // past the message's retry
	e.Drain(t)
	got, err := e.Payments.Payment(ctx, p.ID)
	if err != nil || got.State != orderly.PaymentRefunded || got.ChannelTxnID != "txn-after-close" {
		t.Fatalf("payment after the settlement: %+v, %v; want refunded, txn-after-close", got, err)
	}
	if refunds := e.Gateway.Refunds(p.ID); len(refunds) != 1 || refunds[0].Amount != o.Amount {
		t.Fatalf("gateway refunds %+v, want one of %d", refunds, o.Amount)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.PayStatus != orderly.PayRefunded {
		t.Fatalf("order: %s/%s, want closed/refunded", got.State, got.PayStatus)
	}
}

// queryFailGateway fails Query while down is set.
type queryFailGateway struct {
	orderly.Gateway
	down *atomic.Bool
}

func (g *queryFailGateway) Query(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	if g.down.Load() {
		return nil, errors.New("gateway unreachable")
	}
	return g.Gateway.Query(ctx, p)
}

type inspectorFunc func(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error)

func (f inspectorFunc) InspectPayment(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error) {
	return f(ctx, orderID, paymentID)
}

// TestDeadlineNotifies: a deadline committed here (an order's close_at or a group's
// deadline) is told to the other instances (Config.Notify) when it is earlier than the one
// the timer sleeps until, and only then; a group opened on an instance that then stops
// must still be failed on time by the others.
func TestDeadlineNotifies(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	var told []time.Time
	cl, err := closer.New(closer.Config{Store: e.Store, Notify: func(_ context.Context, at time.Time) { told = append(told, at) }})
	if err != nil {
		t.Fatal(err)
	}
	at := enginetest.Start.Add(time.Minute)
	cl.Deadline(t.Context(), at)
	cl.Deadline(t.Context(), at.Add(time.Second))
	cl.Deadline(t.Context(), at.Add(-time.Second))
	cl.Created(t.Context(), "order-1", at.Add(-2*time.Second))
	want := []time.Time{at, at.Add(-time.Second), at.Add(-2 * time.Second)}
	if !slices.Equal(told, want) {
		t.Fatalf("told the other instances %v, want %v", told, want)
	}
}

// TestCloseBatchTakesStockLast: a close batch that claims a paying order (left for
// inspection: its wake_at moves on) and an unpaid one (closed: its stock released) moves
// the paying order's wake_at before it releases any stock, the lock order of every
// transaction (stock rows last).
func TestCloseBatchTakesStockLast(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 10)
	paying := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	unpaid := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: paying.ID}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(unpaid.CloseAt)
	log := &orderCallLog{Store: e.Store}
	cl, err := closer.New(closer.Config{Store: log, Inspector: inspectorFunc(func(context.Context, string, string) (orderly.GatewayStatus, error) {
		return orderly.GatewayUnknown, nil
	}), InspectionBackoff: time.Second, InspectionHold: 30 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	if want := []string{"OrdersSetWakeAt", "ReservationsReleaseMany"}; !slices.Equal(log.calls, want) {
		t.Fatalf("calls of the close batch: %v, want %v", log.calls, want)
	}
	if got := e.OrderOf(t, unpaid.ID); got.State != orderly.StateClosed {
		t.Fatalf("unpaid order: %s, want closed", got.State)
	}
	if got := e.OrderOf(t, paying.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
		t.Fatalf("paying order: %s/%s, want pending_payment/paying (in inspection)", got.State, got.PayStatus)
	}
}

// orderCallLog records the OrdersSetWakeAt and ReservationsReleaseMany calls of its write
// transactions, in order.
type orderCallLog struct {
	store.Store
	calls []string
}

func (l *orderCallLog) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return l.Store.InTx(ctx, func(tx store.Tx) error { return fn(&orderCallLogTx{Tx: tx, l: l}) })
}

type orderCallLogTx struct {
	store.Tx
	l *orderCallLog
}

func (t *orderCallLogTx) OrdersSetWakeAt(ctx context.Context, ids []string, wakeAt time.Time) error {
	t.l.calls = append(t.l.calls, "OrdersSetWakeAt")
	return t.Tx.OrdersSetWakeAt(ctx, ids, wakeAt)
}

func (t *orderCallLogTx) ReservationsReleaseMany(ctx context.Context, ids []string, now time.Time) ([]*orderly.Reservation, error) {
	t.l.calls = append(t.l.calls, "ReservationsReleaseMany")
	return t.Tx.ReservationsReleaseMany(ctx, ids, now)
}
