package closer_test

import (
	"context"
	"errors"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// TestUnavailableChannelDefersClose: an order whose inspection answers "channel unavailable"
// (orderly.ErrChannelUnavailable) is never closed, however far past its hold, and is asked
// again with a growing backoff (half the time past the hold, at least InspectionBackoff, at
// most InspectionBackoffMax); each deferral is counted per channel. A plain unknown answer
// past the hold closes the order, as before.
func TestUnavailableChannelDefersClose(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 10)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID}); err != nil {
		t.Fatal(err)
	}
	var unavailable atomic.Bool
	unavailable.Store(true)
	var asked atomic.Int64
	cl, err := closer.New(closer.Config{Store: e.Store, Metrics: e.Metrics,
		Inspector: inspectorFunc(func(context.Context, string, string) (orderly.GatewayStatus, error) {
			asked.Add(1)
			if unavailable.Load() {
				return orderly.GatewayUnknown, &orderly.ChannelUnavailableError{Channel: "acme", Op: "query", Cause: errors.New("circuit breaker is open")}
			}
			return orderly.GatewayUnknown, errors.New("provider answered 500")
		}),
		InspectionBackoff: time.Second, InspectionHold: 30 * time.Second, InspectionBackoffMax: 8 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	hold := o.CloseAt.Add(30 * time.Second)
	wakeAt := func() time.Time {
		var d []*store.DueOrder
		e.Read(t, func(tx store.Tx) (err error) {
			d, err = tx.OrdersOpen(ctx, &store.OrdersOpenParams{IDs: []string{o.ID}})
			return err
		})
		if len(d) != 1 {
			t.Fatalf("order %s is not open", o.ID)
		}
		return d[0].WakeAt
	}
	// Past the hold by 0 s, 1 s, 4 s, 20 s, 10 min: still open, re-inspected after
	// max(1 s, over/2) capped at 8 s.
	for i, step := range []struct{ over, wait time.Duration }{
		{0, time.Second}, {4 * time.Second, 2 * time.Second}, {20 * time.Second, 8 * time.Second}, {10 * time.Minute, 8 * time.Second},
	} {
		e.Clock.Set(hold.Add(step.over))
		if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
			t.Fatal(err)
		}
		if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
			t.Fatalf("hold+%s with the channel unavailable: %s/%s, want pending_payment/paying", step.over, got.State, got.PayStatus)
		}
		if got, want := wakeAt(), e.Clock.Now().Add(step.wait); !got.Equal(want) {
			t.Errorf("hold+%s: next inspection at %s, want %s (backoff %s)", step.over, got, want, step.wait)
		}
		if got := asked.Load(); got != int64(i+1) {
			t.Errorf("hold+%s: asked %d times, want %d", step.over, got, i+1)
		}
	}
	if got := testutil.ToFloat64(e.Metrics.ClosesDeferred.WithLabelValues("acme")); got != 4 {
		t.Errorf("orderly_close_deferred_total{channel=acme} = %v, want 4", got)
	}
	// The channel answers again, but cannot tell: past the hold, the order closes.
	unavailable.Store(false)
	e.Clock.Advance(8 * time.Second)
	if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.CloseReason != orderly.CloseReasonPaymentTimeout {
		t.Fatalf("unknown answer past the hold: %s (%s), want closed/payment_timeout", got.State, got.CloseReason)
	}
}

// switchAdapter is a payment channel whose provider is down (every call fails at the
// network) until told otherwise; then each payment's query answers what answers[id] says
// ("paid" captured, "closed" pending, and a cancel closes it). It counts the calls that
// reached the provider.
type switchAdapter struct {
	down    atomic.Bool
	calls   atomic.Int64
	mu      sync.Mutex
	answers map[string]string
}

func (a *switchAdapter) Name() string { return "switch" }
func (a *switchAdapter) Create(context.Context, *orderly.Payment) (*orderly.GatewayAttempt, error) {
	return &orderly.GatewayAttempt{}, nil
}
func (a *switchAdapter) answer(id string) (*orderly.GatewayPayment, error) {
	a.calls.Add(1)
	if a.down.Load() {
		return nil, errors.New("dial tcp: connection refused")
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	switch a.answers[id] {
	case "paid":
		return &orderly.GatewayPayment{Status: orderly.GatewaySucceeded, ChannelTxnID: "txn-" + id}, nil
	case "cancelled":
		return &orderly.GatewayPayment{Status: orderly.GatewayFailed}, nil
	}
	return &orderly.GatewayPayment{Status: orderly.GatewayPending}, nil
}
func (a *switchAdapter) Query(_ context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	return a.answer(p.ID)
}
func (a *switchAdapter) Cancel(_ context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	id := p.ID
	gp, err := a.answer(id)
	if err == nil && gp.Status == orderly.GatewayPending {
		a.mu.Lock()
		a.answers[id] = "cancelled"
		a.mu.Unlock()
		gp = &orderly.GatewayPayment{Status: orderly.GatewayFailed}
	}
	return gp, err
}
func (a *switchAdapter) Refund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
}
func (a *switchAdapter) QueryRefund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return &orderly.GatewayRefundResult{Status: orderly.GatewaySucceeded}, nil
}
func (a *switchAdapter) Verify(http.Header, []byte, time.Time) (*channel.Notification, error) {
	return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "not used")
}
func (a *switchAdapter) Ack(http.ResponseWriter, error) {}

// TestBreakerOpenHoldsCloses runs the close path against a real channel breaker: the
// provider goes down, its breaker opens, and two orders past their inspection hold stay
// open under inspection (not closed blindly; calls do not reach the provider). Once the
// breaker lets calls through again, the provider's answers decide: "already paid" → the
// order ends paid; pending, then closed at the provider → the order closes.
func TestBreakerOpenHoldsCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const open = 2 * time.Second
	a := &switchAdapter{answers: map[string]string{}}
	a.down.Store(true)
	e := enginetest.New(t, enginetest.Options{Channels: []channel.Adapter{a}, DefaultChannel: "switch",
		ChannelBreaker: channel.BreakerConfig{Failures: 2, Open: open}, InspectionHold: 30 * time.Second})
	e.SetStock(t, "SKU-1", 10)
	paid := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	closed := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 5})
	pp, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: paid.ID})
	if err != nil {
		t.Fatal(err)
	}
	pc, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: closed.ID})
	if err != nil {
		t.Fatal(err)
	}
	if pp.Channel != "switch" || pc.Channel != "switch" {
		t.Fatalf("payments on %s and %s, want switch", pp.Channel, pc.Channel)
	}
	a.mu.Lock()
	a.answers[pp.ID], a.answers[pc.ID] = "paid", "pending"
	a.mu.Unlock()

	// At close_at the provider fails both inspections: the breaker opens.
	e.Clock.Set(paid.CloseAt)
	if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	reached := a.calls.Load()
	if reached != 2 {
		t.Fatalf("calls that reached the provider: %d, want 2 (one query per order)", reached)
	}
	// Past the hold, with the breaker open: nothing is closed, nothing reaches the provider.
	e.Clock.Set(paid.CloseAt.Add(31 * time.Second))
	res, err := e.Closer.CloseDue(ctx, closer.TriggerSweep)
	if err != nil {
		t.Fatal(err)
	}
	if res.Closed != 0 || res.Inspected != 2 {
		t.Fatalf("pass past the hold with the breaker open = %+v, want 2 inspected, none closed", res)
	}
	for _, o := range []*orderly.Order{paid, closed} {
		if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
			t.Fatalf("order %s past its hold, breaker open: %s/%s, want pending_payment/paying", o.ID, got.State, got.PayStatus)
		}
	}
	if got := a.calls.Load(); got != reached {
		t.Errorf("calls that reached the provider with the breaker open: %d, want none", got-reached)
	}
	if got := testutil.ToFloat64(e.Metrics.ClosesDeferred.WithLabelValues("switch")); got != 2 {
		t.Errorf("orderly_close_deferred_total{channel=switch} = %v, want 2", got)
	}

	// The provider is back; once the breaker lets a call through, the answers decide.
	a.down.Store(false)
	deadline := time.Now().Add(open + 10*time.Second)
	for e.OrderOf(t, paid.ID).State == orderly.StatePendingPayment || e.OrderOf(t, closed.ID).State == orderly.StatePendingPayment {
		if time.Now().After(deadline) {
			t.Fatal("orders still open long after the breaker's open period")
		}
		time.Sleep(100 * time.Millisecond)
		e.Clock.Advance(30 * time.Second) // past any backoff
		if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
			t.Fatal(err)
		}
	}
	if got := e.OrderOf(t, paid.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid || got.ClosedAt != nil {
		t.Errorf("provider said already paid: order %s/%s (closed_at %v), want paid/paid, never closed", got.State, got.PayStatus, got.ClosedAt)
	}
	if p, _ := e.Payments.Payment(ctx, pp.ID); p.State != orderly.PaymentSucceeded || p.ChannelTxnID != "txn-"+pp.ID {
		t.Errorf("paid attempt: %s %q, want succeeded txn-%s", p.State, p.ChannelTxnID, pp.ID)
	}
	if got := e.OrderOf(t, closed.ID); got.State != orderly.StateClosed || got.PayStatus != orderly.PayFailed || got.CloseReason != orderly.CloseReasonPaymentTimeout {
		t.Errorf("provider closed the trade: order %s/%s (%s), want closed/failed payment_timeout", got.State, got.PayStatus, got.CloseReason)
	}
	if p, _ := e.Payments.Payment(ctx, pc.ID); p.State != orderly.PaymentFailed {
		t.Errorf("closed attempt: %s, want failed", p.State)
	}
}
