package alipay_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/alipay"
	"github.com/orderlyhq/orderly/channel/alipay/alipaytest"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// These tests run the adapter inside a real engine (SQLite): the adapter is the payment
// service's gateway, and a verified notification is handed to the payment service the way
// the webhook route does it (callbackOf), so that the duplicate handling the mapping relies
// on is exercised, not assumed.

// callbackOf is the payment callback a verified payment notification stands for.
func callbackOf(t *testing.T, e *enginetest.Env, n *channel.Notification) *orderly.Callback {
	t.Helper()
	p, err := e.Payments.Payment(context.Background(), n.PaymentID)
	if err != nil {
		t.Fatalf("payment %s: %v", n.PaymentID, err)
	}
	status := orderly.CallbackSucceeded
	if n.Kind == channel.PaymentFailed {
		status = orderly.CallbackFailed
	}
	return &orderly.Callback{PaymentID: n.PaymentID, OrderID: p.OrderID, ChannelTxnID: n.ChannelTxnID, Amount: n.Amount,
		Currency: n.Currency, Status: status, OccurredAt: n.OccurredAt, Body: n.Body}
}

func engineWith(t *testing.T, b *bundle) (*enginetest.Env, *orderly.Order, *orderly.Payment) {
	t.Helper()
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(orderly.Gateway) orderly.Gateway { return b.a }})
	e.SetStock(t, "SKU-1", 10)
	o, p := startPayment(t, e, b)
	return e, o, p
}

// startPayment creates an order of 11.00 yuan and starts its payment, which precreates
// the trade at the imitation.
func startPayment(t *testing.T, e *enginetest.Env, b *bundle) (*orderly.Order, *orderly.Payment) {
	t.Helper()
	ctx := context.Background()
	o, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Currency: "CNY", PaymentTimeoutSeconds: 60,
		Items: []orderly.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 550}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	if tr, ok := b.srv.Trade(p.ID); !ok || tr.Total != 1100 || tr.Status != alipay.TradeWaitBuyerPay {
		t.Fatalf("trade after StartPayment: %+v, %v; want 11.00 yuan waiting", tr, ok)
	}
	return o, p
}

// A notification re-sent 5 times in parallel, and TRADE_FINISHED after a full refund, are
// applied once: the order is paid once, refunded once, and stays refunded.
func TestEngineSuccessRefundFinished(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, o, p := engineWith(t, b)
	ctx := context.Background()
	if _, err := b.srv.Pay(p.ID, 0); err != nil {
		t.Fatal(err)
	}
	body, err := b.srv.PaymentNotification(p.ID)
	if err != nil {
		t.Fatal(err)
	}
	var applied atomic.Int64
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := b.a.Verify(nil, alipaytest.Reencode(body, uint64(i)), clock)
			if err != nil {
				t.Errorf("verify: %v", err)
				return
			}
			res, err := e.Payments.HandleCallback(ctx, callbackOf(t, e, n))
			if err != nil || res.Refund {
				t.Errorf("callback: %+v, %v", res, err)
				return
			}
			if res.Applied {
				applied.Add(1)
			}
		}()
	}
	wg.Wait()
	if applied.Load() != 1 {
		t.Fatalf("%d deliveries applied, want 1", applied.Load())
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, 0)

	if _, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1100, Reason: "buyer returned it"}); err != nil {
		t.Fatal(err)
	}
	e.Drain(t)
	tr, _ := b.srv.Trade(p.ID)
	if tr.Refunded != 1100 || len(tr.Refunds) != 1 || tr.Status != alipay.TradeClosed {
		t.Fatalf("trade after the refund: %+v", tr)
	}
	wantOrder(t, e, o.ID, orderly.StateRefunded, 1100)

	if err := b.srv.Finish(p.ID); err != nil {
		t.Fatal(err)
	}
	finished, err := b.a.Verify(nil, must(b.srv.PaymentNotification(p.ID)), clock)
	if err != nil {
		t.Fatal(err)
	}
	res, err := e.Payments.HandleCallback(ctx, callbackOf(t, e, finished))
	if err != nil || res.Applied || res.Refund {
		t.Fatalf("TRADE_FINISHED after the refund: %+v, %v; want acknowledged, nothing applied", res, err)
	}
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunded, 1100)
	if tr, _ := b.srv.Trade(p.ID); tr.Refunded != 1100 || len(tr.Refunds) != 1 {
		t.Fatalf("trade after TRADE_FINISHED: %+v; want the one refund", tr)
	}
	if ps, err := e.Payments.OrderPayments(ctx, o.ID); err != nil || len(ps) != 1 {
		t.Fatalf("payments of the order: %d, %v; want 1", len(ps), err)
	}
}

// Payment inspection at close_at asks Alipay: a trade paid without a notification makes
// the order paid with its trade_no; a trade still waiting is closed at Alipay (the buyer
// can no longer pay it) and the order closes.
func TestEngineInspection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, captured, pc := engineWith(t, b)
	pending, pp := startPayment(t, e, b)
	tr, err := b.srv.Pay(pc.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(pending.CloseAt)
	res, err := e.Closer.CloseDue(context.Background(), closer.TriggerTimer)
	if err != nil || res.Inspected != 2 || res.Closed != 1 {
		t.Fatalf("CloseDue = %+v, %v; want 2 inspected, 1 closed", res, err)
	}
	if got := e.OrderOf(t, captured.ID); got.State != orderly.StatePaid {
		t.Fatalf("order paid at Alipay: %s", got.State)
	}
	if p, _ := e.Payments.Payment(context.Background(), pc.ID); p.State != orderly.PaymentSucceeded || p.ChannelTxnID != tr.TradeNo {
		t.Fatalf("payment %s %q, want succeeded with trade_no %s", p.State, p.ChannelTxnID, tr.TradeNo)
	}
	if got := e.OrderOf(t, pending.ID); got.State != orderly.StateClosed {
		t.Fatalf("order never paid: %s, want closed", got.State)
	}
	if tr, _ := b.srv.Trade(pp.ID); tr.Status != alipay.TradeClosed {
		t.Fatalf("trade of the closed order: %s, want TRADE_CLOSED", tr.Status)
	}
	if _, err := b.srv.Pay(pp.ID, 0); err == nil {
		t.Fatal("the buyer paid the trade of a closed order")
	}
}

func wantOrder(t *testing.T, e *enginetest.Env, id string, state orderly.State, refunded int64) {
	t.Helper()
	if o := e.OrderOf(t, id); o.State != state || o.RefundedAmount != refunded {
		t.Fatalf("order %s refunded %d, want %s %d", o.State, o.RefundedAmount, state, refunded)
	}
}

// The imitation's Webhook (what `orderly simulate` asks a provider for) gives the same
// notification for the same outcome, signed so that the adapter verifies it, and the
// payment service applies it once; a failed outcome closes the trade and fails the attempt.
func TestEngineWebhookPlays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e, o, p := engineWith(t, b)
	_, failedP := startPayment(t, e, b)
	ctx := context.Background()
	path, body, _, err := b.srv.Webhook(p.ID, orderly.CallbackSucceeded)
	if err != nil || path != "/v1/channels/alipay/webhook" {
		t.Fatalf("webhook: %s, %v", path, err)
	}
	_, again, _, err := b.srv.Webhook(p.ID, orderly.CallbackSucceeded)
	if err != nil || string(again) != string(body) {
		t.Fatalf("second webhook of the same outcome differs (%v)", err)
	}
	for i, want := range []bool{true, false} {
		n, err := b.a.Verify(nil, body, clock)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Payments.HandleCallback(ctx, callbackOf(t, e, n))
		if err != nil || res.Applied != want {
			t.Fatalf("delivery %d: %+v, %v; want applied %v", i, res, err, want)
		}
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, 0)

	_, body, _, err = b.srv.Webhook(failedP.ID, orderly.CallbackFailed)
	if err != nil {
		t.Fatal(err)
	}
	n, err := b.a.Verify(nil, body, clock)
	if err != nil || n.Kind != channel.PaymentFailed {
		t.Fatalf("failed outcome: %+v, %v", n, err)
	}
	if res, err := e.Payments.HandleCallback(ctx, callbackOf(t, e, n)); err != nil || !res.Applied {
		t.Fatalf("failed outcome: %+v, %v", res, err)
	}
	if got, _ := e.Payments.Payment(ctx, failedP.ID); got.State != orderly.PaymentFailed {
		t.Fatalf("attempt after TRADE_CLOSED: %s", got.State)
	}
}

// Webhook asked in parallel for one outcome plays it once and gives every caller the same
// notification (simulate sends 5 identical callbacks at once).
func TestWebhookParallel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const id = "019a7f3c-5e2b-7c11-9d3e-000000000001"
	if _, err := b.a.Create(t.Context(), &orderly.Payment{ID: id, Amount: 100, Currency: "CNY"}); err != nil {
		t.Fatal(err)
	}
	bodies := make([][]byte, 5)
	var wg sync.WaitGroup
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, body, _, err := b.srv.Webhook(id, orderly.CallbackSucceeded)
			if err != nil {
				t.Error(err)
			}
			bodies[i] = body
		}()
	}
	wg.Wait()
	for i := range bodies {
		if string(bodies[i]) != string(bodies[0]) || len(bodies[i]) == 0 {
			t.Fatalf("caller %d got another notification", i)
		}
	}
}
