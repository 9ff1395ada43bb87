package wechatpay_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/wechatpay/wechatpaytest"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// These tests run the adapter inside a real engine (SQLite): the adapter is the payment
// service's gateway, and a verified notification is handed to the payment service the way
// the webhook route does it (callbackOf).

func callbackOf(t *testing.T, e *enginetest.Env, n *channel.Notification) *orderly.Callback {
	t.Helper()
	p, err := e.Payments.Payment(context.Background(), n.PaymentID)
	if err != nil {
		t.Fatalf("payment %s: %v", n.PaymentID, err)
	}
	return &orderly.Callback{PaymentID: n.PaymentID, OrderID: p.OrderID, ChannelTxnID: n.ChannelTxnID, Amount: n.Amount,
		Currency: n.Currency, Status: orderly.CallbackSucceeded, OccurredAt: n.OccurredAt, Body: n.Body}
}

func engineWith(t *testing.T, b *bundle) *enginetest.Env {
	t.Helper()
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(orderly.Gateway) orderly.Gateway { return b.a }})
	e.SetStock(t, "SKU-1", 10)
	return e
}

// startPayment creates an order of 10.00 yuan and starts its payment, which creates the
// Native order at the imitation.
func startPayment(t *testing.T, e *enginetest.Env, b *bundle) (*orderly.Order, *orderly.Payment) {
	t.Helper()
	ctx := context.Background()
	o, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Currency: "CNY", PaymentTimeoutSeconds: 60,
		Items: []orderly.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000}}})
	if err != nil {
		t.Fatal(err)
	}
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	if wo, ok := b.srv.Order(p.ID); !ok || wo.Total != 1000 || wo.State != "NOTPAY" {
		t.Fatalf("order at WeChat Pay after StartPayment: %+v, %v", wo, ok)
	}
	return o, p
}

// A payment with a discount WeChat Pay funded (the buyer paid 8.00 of 10.00) is applied
// for the order total, once, whatever number of deliveries arrive in parallel.
func TestEngineDiscountedPaymentAppliedOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := engineWith(t, b)
	o, p := startPayment(t, e, b)
	if _, err := b.srv.Pay(p.ID, 800); err != nil {
		t.Fatal(err)
	}
	h, body, err := b.srv.TransactionNotification(p.ID, wechatpaytest.NotifyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var applied atomic.Int64
	var wg sync.WaitGroup
	for range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := b.a.Verify(h, body, clock)
			if err != nil {
				t.Errorf("verify: %v", err)
				return
			}
			res, err := e.Payments.HandleCallback(context.Background(), callbackOf(t, e, n))
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
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid {
		t.Fatalf("order %s/%s, want paid", got.State, got.PayStatus)
	}
	if refusals, err := e.Payments.CallbackRefusals(context.Background(), p.ID); err != nil || len(refusals) != 0 {
		t.Fatalf("refusals %+v, %v; want none (no amount mismatch)", refusals, err)
	}
}

// Payment inspection at close_at asks WeChat Pay: an order paid without a notification is
// applied with its transaction_id; one not paid is closed at WeChat Pay and in orderly.
func TestEngineInspection(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := engineWith(t, b)
	captured, pc := startPayment(t, e, b)
	pending, pp := startPayment(t, e, b)
	wo, err := b.srv.Pay(pc.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(pending.CloseAt)
	res, err := e.Closer.CloseDue(context.Background(), closer.TriggerTimer)
	if err != nil || res.Inspected != 2 || res.Closed != 1 {
		t.Fatalf("CloseDue = %+v, %v; want 2 inspected, 1 closed", res, err)
	}
	if got := e.OrderOf(t, captured.ID); got.State != orderly.StatePaid {
		t.Fatalf("order paid at WeChat Pay: %s", got.State)
	}
	if p, _ := e.Payments.Payment(context.Background(), pc.ID); p.State != orderly.PaymentSucceeded || p.ChannelTxnID != wo.TransactionID {
		t.Fatalf("payment %s %q, want succeeded with %s", p.State, p.ChannelTxnID, wo.TransactionID)
	}
	if got := e.OrderOf(t, pending.ID); got.State != orderly.StateClosed {
		t.Fatalf("order never paid: %s, want closed", got.State)
	}
	if wo, _ := b.srv.Order(pp.ID); wo.State != "CLOSED" {
		t.Fatalf("WeChat order of the closed order: %s, want CLOSED", wo.State)
	}
}

// The imitation's Webhook (what `orderly simulate` asks a provider for) gives the same
// signed notification for the same outcome, applied once; a failed outcome is not
// notified (WeChat Pay notifies successes only) and reads failed on query.
func TestEngineWebhookPlays(t *testing.T) {
	t.Parallel()
	b := setup(t)
	e := engineWith(t, b)
	o, p := startPayment(t, e, b)
	_, failedP := startPayment(t, e, b)
	ctx := context.Background()
	path, body, h, err := b.srv.Webhook(p.ID, orderly.CallbackSucceeded)
	if err != nil || path != "/v1/channels/wechat/webhook" {
		t.Fatalf("webhook: %s, %v", path, err)
	}
	_, again, h2, err := b.srv.Webhook(p.ID, orderly.CallbackSucceeded)
	if err != nil || string(again) != string(body) || h2.Get("Wechatpay-Signature") != h.Get("Wechatpay-Signature") {
		t.Fatalf("second webhook of the same outcome differs (%v)", err)
	}
	for i, want := range []bool{true, false} {
		n, err := b.a.Verify(h, body, clock)
		if err != nil {
			t.Fatal(err)
		}
		res, err := e.Payments.HandleCallback(ctx, callbackOf(t, e, n))
		if err != nil || res.Applied != want {
			t.Fatalf("delivery %d: %+v, %v; want applied %v", i, res, err, want)
		}
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePaid {
		t.Fatalf("order %s, want paid", got.State)
	}
	if _, _, _, err := b.srv.Webhook(failedP.ID, orderly.CallbackFailed); !errors.Is(err, wechatpaytest.ErrNotNotified) {
		t.Fatalf("failed outcome: %v; want ErrNotNotified", err)
	}
	if got, err := b.a.Query(ctx, failedP); err != nil || got.Status != orderly.GatewayFailed {
		t.Fatalf("query after a failed payment: %+v, %v", got, err)
	}
}
