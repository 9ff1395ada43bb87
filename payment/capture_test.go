package payment_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// countingGateway counts the refunds and cancels asked of the gateway it wraps, per payment
// id, and can make Cancel fail.
type countingGateway struct {
	orderly.Gateway
	mu        sync.Mutex
	refunds   map[string]int
	cancels   map[string]int
	cancelErr error
	refundErr map[string]error
}

func newCountingGateway(g orderly.Gateway) *countingGateway {
	return &countingGateway{Gateway: g, refunds: map[string]int{}, cancels: map[string]int{}, refundErr: map[string]error{}}
}

func (g *countingGateway) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	g.mu.Lock()
	g.refunds[r.PaymentID]++
	err := g.refundErr[r.PaymentID]
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g.Gateway.Refund(ctx, r)
}

func (g *countingGateway) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	g.mu.Lock()
	g.cancels[p.ID]++
	err := g.cancelErr
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g.Gateway.Cancel(ctx, p)
}

func (g *countingGateway) refundsOf(paymentID string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.refunds[paymentID]
}

// newCounted returns an engine whose payment service calls a counting gateway.
func newCounted(t *testing.T) (*enginetest.Env, *countingGateway) {
	t.Helper()
	var gw *countingGateway
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(g orderly.Gateway) orderly.Gateway {
		gw = newCountingGateway(g)
		return gw
	}})
	return e, gw
}

func payments(t *testing.T, e *enginetest.Env, orderID string) []*orderly.Payment {
	t.Helper()
	ps, err := e.Payments.OrderPayments(context.Background(), orderID)
	if err != nil {
		t.Fatalf("payments of %s: %v", orderID, err)
	}
	return ps
}

// refundMessages counts the payment.refund messages written for a payment, in any state.
func refundMessages(t *testing.T, e *enginetest.Env, paymentID string) int {
	t.Helper()
	n := 0
	e.Read(t, func(tx store.Tx) error {
		for _, state := range []string{orderly.MessagePending, orderly.MessageDelivered, orderly.MessageDead} {
			msgs, err := tx.OutboxList(context.Background(), state, 1000)
			if err != nil {
				return err
			}
			for _, m := range msgs {
				if m.Topic == orderly.TopicPaymentRefund && strings.Contains(string(m.Payload), `"payment_id":"`+paymentID+`"`) {
					n++
				}
			}
		}
		return nil
	})
	return n
}

// TestSecondCaptureIsRecordedAndRefunded: the provider reports a second capture of an attempt
// that already captured (a success with another channel_txn_id). Whatever the order's state,
// the capture is recorded as its own payment linked to the attempt, refunded exactly once
// through the outbox, and leaves the order alone; a repeat of that callback is a duplicate.
func TestSecondCaptureIsRecordedAndRefunded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	cases := []struct {
		name string
		// prepare brings an order whose attempt p captured txn-1 to the state under test.
		prepare   func(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment)
		state     orderly.State
		attempt   orderly.PaymentState // the first attempt's state before the second capture
		wantState orderly.State        // the order's state once the outbox is drained
	}{
		{"paid", pay, orderly.StatePaid, orderly.PaymentSucceeded, orderly.StatePaid},
		{"shipped", then(pay, event(orderly.EventShip)), orderly.StateShipped, orderly.PaymentSucceeded, orderly.StateShipped},
		{"completed", then(pay, event(orderly.EventShip), event(orderly.EventComplete)), orderly.StateCompleted,
			orderly.PaymentSucceeded, orderly.StateCompleted},
		// A merchant refund is a refund of the captured payment, which stays succeeded.
		{"refunding", then(pay, event(orderly.EventRefund)), orderly.StateRefunding, orderly.PaymentSucceeded, orderly.StateRefunded},
		{"refunded", then(pay, event(orderly.EventRefund), drain), orderly.StateRefunded, orderly.PaymentSucceeded, orderly.StateRefunded},
		{"closed, first capture refund pending", payLate, orderly.StateClosed, orderly.PaymentRefundPending, orderly.StateClosed},
		{"closed, first capture refunded", then(payLate, drain), orderly.StateClosed, orderly.PaymentRefunded, orderly.StateClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			e, gw := newCounted(t)
			e.SetStock(t, "SKU-1", 4)
			o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 2, UnitPrice: 600})
			p := start(t, e, o)
			c.prepare(t, e, o, p)
			before := e.OrderOf(t, o.ID)
			if ps := payments(t, e, o.ID); before.State != c.state || len(ps) != 1 || ps[0].State != c.attempt {
				t.Fatalf("prepared order %s with payments %+v, want %s with one %s attempt", before.State, ps, c.state, c.attempt)
			}

			res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2"))
			if err != nil || !res.Applied || !res.Refund {
				t.Fatalf("second capture = %+v, %v; want applied with refund", res, err)
			}
			ps := payments(t, e, o.ID)
			if len(ps) != 2 {
				t.Fatalf("%d payments after the second capture, want 2: %+v", len(ps), ps)
			}
			dup := ps[1]
			if dup.DuplicateOf != p.ID || dup.ChannelTxnID != "txn-2" || dup.State != orderly.PaymentRefundPending ||
				dup.Amount != 1200 || dup.Currency != "USD" || dup.SucceededAt == nil || dup.Attempt != 2 || res.Payment.ID != dup.ID {
				t.Fatalf("second capture recorded as %+v (result %+v), want attempt 2 of 1200 USD, duplicate of %s, txn-2, refund_pending",
					dup, res.Payment, p.ID)
			}
			if got := e.OrderOf(t, o.ID); got.State != before.State || got.PayStatus != before.PayStatus || got.Version != before.Version {
				t.Fatalf("the second capture changed the order: %s/%s v%d, was %s/%s v%d",
					got.State, got.PayStatus, got.Version, before.State, before.PayStatus, before.Version)
			}
			// The same second capture again is a duplicate: nothing new.
			if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2")); err != nil || res.Applied || res.Refund {
				t.Fatalf("repeated second capture = %+v, %v; want a duplicate", res, err)
			}
			if n := len(payments(t, e, o.ID)); n != 2 {
				t.Fatalf("%d payments after the repeat, want 2", n)
			}

			e.Drain(t)
			if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2")); err != nil || res.Applied || res.Refund {
				t.Fatalf("second capture repeated after its refund = %+v, %v; want a duplicate", res, err)
			}
			e.Drain(t)
			if n := refundMessages(t, e, dup.ID); n != 1 {
				t.Errorf("%d refund messages for the second capture, want 1", n)
			}
			if n := gw.refundsOf(dup.ID); n != 1 {
				t.Errorf("gateway asked %d times to refund the second capture, want 1", n)
			}
			if got := e.Gateway.Refunded(dup.ID); got != 1200 {
				t.Errorf("gateway refunded %d for the second capture, want 1200", got)
			}
			got, _ := e.Payments.Payment(ctx, dup.ID)
			if got.State != orderly.PaymentRefunded || got.RefundedAt == nil {
				t.Errorf("second capture %s refunded_at %v, want refunded", got.State, got.RefundedAt)
			}
			if o2 := e.OrderOf(t, o.ID); o2.State != c.wantState {
				t.Errorf("order %s after the refunds, want %s", o2.State, c.wantState)
			}
			if first, _ := e.Payments.Payment(ctx, p.ID); first.ChannelTxnID != "txn-1" {
				t.Errorf("first capture's txn %q, want txn-1", first.ChannelTxnID)
			}
			if s := e.StockOf(t, "SKU-1"); s.Held != 0 || s.Available+s.Sold != 4 {
				t.Errorf("stock %+v, want nothing held and 4 in all", s)
			}
			if n := testutil.ToFloat64(e.Metrics.Callbacks.WithLabelValues(orderly.CallbackSucceeded, "refund")); n < 1 {
				t.Errorf("orderly_payment_callbacks_total{status=succeeded,result=refund} = %v, want at least 1", n)
			}
		})
	}
}

// TestSecondCaptureRefundDoesNotEndAMerchantRefund: while a merchant refund of the order's
// payment waits for a retry, the refund of a second capture completes; the order stays
// refunding until its own payment's refund completes.
func TestSecondCaptureRefundDoesNotEndAMerchantRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := newCounted(t)
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	pay(t, e, o, p)
	event(orderly.EventRefund)(t, e, o, p)
	gw.mu.Lock()
	gw.refundErr[p.ID] = errors.New("gateway unavailable")
	gw.mu.Unlock()
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2")); err != nil || !res.Refund {
		t.Fatalf("second capture = %+v, %v", res, err)
	}
	e.Drain(t)
	ps := payments(t, e, o.ID)
	if len(ps) != 2 || ps[0].State != orderly.PaymentSucceeded || ps[1].State != orderly.PaymentRefunded {
		t.Fatalf("payments %+v, want the first succeeded (its merchant refund waits) and the second capture refunded", ps)
	}
	if fs, err := e.Orders.OrderRefunds(ctx, o.ID); err != nil || len(fs) != 1 || fs[0].State != orderly.RefundRequested {
		t.Fatalf("refunds %+v, %v; want the merchant refund still requested", fs, err)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateRefunding || got.PayStatus != orderly.PayPaid {
		t.Fatalf("order %s/%s while its own refund waits, want refunding/paid", got.State, got.PayStatus)
	}
	gw.mu.Lock()
	delete(gw.refundErr, p.ID)
	gw.mu.Unlock()
	e.Clock.Advance(time.Hour) // past the retry's backoff
	e.Drain(t)
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateRefunded || got.PayStatus != orderly.PayRefunded {
		t.Fatalf("order %s/%s after both refunds, want refunded/refunded", got.State, got.PayStatus)
	}
	if gw.refundsOf(p.ID) != 2 || gw.refundsOf(ps[1].ID) != 1 {
		t.Fatalf("gateway refund calls %v, want 2 for the payment (one failed) and 1 for the second capture", gw.refunds)
	}
}

// TestParallelSecondCaptures: the same second capture reported five times at once is
// recorded once and refunded once.
func TestParallelSecondCaptures(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := newCounted(t)
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	pay(t, e, o, p)
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
	)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2"))
			if err != nil {
				t.Errorf("second capture: %v", err)
				return
			}
			mu.Lock()
			if res.Applied {
				applied++
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	e.Drain(t)
	ps := payments(t, e, o.ID)
	if applied != 1 || len(ps) != 2 || ps[1].State != orderly.PaymentRefunded || gw.refundsOf(ps[1].ID) != 1 {
		t.Fatalf("%d applied, payments %+v, refunds %v; want one second capture refunded once", applied, ps, gw.refunds)
	}
}

// TestSecondCaptureOfAFailedAttempt: an attempt marked failed (expired) that the provider
// captured after all is applied as its first capture, and a second capture of it is
// refunded on its own.
func TestSecondCaptureOfAFailedAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := newCounted(t)
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackExpired}); err != nil {
		t.Fatal(err)
	}
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-1")); err != nil || !res.Applied || res.Refund {
		t.Fatalf("success of a failed attempt = %+v, %v; want applied, no refund", res, err)
	}
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-2")); err != nil || !res.Applied || !res.Refund {
		t.Fatalf("second capture = %+v, %v; want applied with refund", res, err)
	}
	e.Drain(t)
	ps := payments(t, e, o.ID)
	if len(ps) != 2 || ps[0].State != orderly.PaymentSucceeded || ps[1].State != orderly.PaymentRefunded || gw.refundsOf(ps[1].ID) != 1 {
		t.Fatalf("payments %+v, refunds %v; want the attempt succeeded and its second capture refunded once", ps, gw.refunds)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid {
		t.Fatalf("order %s/%s, want paid/paid", got.State, got.PayStatus)
	}
}

// TestChannelTxnIDOfAnotherPayment: a success whose channel_txn_id another payment recorded
// is refused with channel-txn-conflict, naming that transaction and payment, and changes
// nothing.
func TestChannelTxnIDOfAnotherPayment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	a := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	b := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	pa, pb := start(t, e, a), start(t, e, b)
	if _, err := e.Payments.HandleCallback(ctx, success(a, pa, "txn-1")); err != nil {
		t.Fatal(err)
	}
	_, err := e.Payments.HandleCallback(ctx, success(b, pb, "txn-1"))
	if orderly.ErrorCode(err) != orderly.ECHANNELTXN {
		t.Fatalf("success with another payment's txn: %v, want %s", err, orderly.ECHANNELTXN)
	}
	want := `channel_txn_id "txn-1" is already recorded on payment ` + pa.ID + ` of order ` + a.ID + `, not on payment ` + pb.ID
	if msg := orderly.ErrorMessage(err); msg != want {
		t.Errorf("message %q, want %q", msg, want)
	}
	if got, _ := e.Payments.Payment(ctx, pb.ID); got.State != orderly.PaymentInitiated || got.ChannelTxnID != "" {
		t.Errorf("refused callback changed payment %s: %s %q", pb.ID, got.State, got.ChannelTxnID)
	}
	if got := e.OrderOf(t, b.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying {
		t.Errorf("refused callback changed order %s: %s/%s", b.ID, got.State, got.PayStatus)
	}
	rs, err := e.Payments.CallbackRefusals(ctx, pb.ID)
	if err != nil || len(rs) != 1 || rs[0].Reason != orderly.RefusalChannelTxnConflict || rs[0].Detail != want {
		t.Fatalf("refusals of %s = %+v, %v; want one channel_txn_conflict", pb.ID, rs, err)
	}
}

// pay captures p with txn-1 for its pending order.
func pay(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment) {
	t.Helper()
	if res, err := e.Payments.HandleCallback(context.Background(), success(o, p, "txn-1")); err != nil || !res.Applied || res.Refund {
		t.Fatalf("pay = %+v, %v", res, err)
	}
}

// payLate closes o for timeout (its attempt expired) and then captures p with txn-1: the
// capture is refund_pending.
func payLate(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment) {
	t.Helper()
	ctx := context.Background()
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackExpired}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(o.CloseAt)
	if res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer); err != nil || res.Closed != 1 {
		t.Fatalf("close = %+v, %v", res, err)
	}
	e.Drain(t)
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-1")); err != nil || !res.Refund {
		t.Fatalf("late payment = %+v, %v", res, err)
	}
}

func event(ev orderly.Event) func(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment) {
	return func(t *testing.T, e *enginetest.Env, o *orderly.Order, _ *orderly.Payment) {
		t.Helper()
		if _, err := e.Orders.ApplyEvent(context.Background(), o.ID, ev, "merchant", ""); err != nil {
			t.Fatalf("%s: %v", ev, err)
		}
	}
}

func drain(t *testing.T, e *enginetest.Env, _ *orderly.Order, _ *orderly.Payment) {
	t.Helper()
	e.Drain(t)
}

func then(steps ...func(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment)) func(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment) {
	return func(t *testing.T, e *enginetest.Env, o *orderly.Order, p *orderly.Payment) {
		t.Helper()
		for _, step := range steps {
			step(t, e, o, p)
		}
	}
}
