package order_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
)

// cancelGateway wraps the simulated gateway: it counts Cancel calls and can make them fail.
type cancelGateway struct {
	orderly.Gateway
	mu      sync.Mutex
	cancels int
	err     error
}

func (g *cancelGateway) Cancel(ctx context.Context, p *orderly.Payment) (*orderly.GatewayPayment, error) {
	g.mu.Lock()
	g.cancels++
	err := g.err
	g.mu.Unlock()
	if err != nil {
		return nil, err
	}
	return g.Gateway.Cancel(ctx, p)
}

func newCancelEnv(t *testing.T) (*enginetest.Env, *cancelGateway) {
	t.Helper()
	var gw *cancelGateway
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(g orderly.Gateway) orderly.Gateway {
		gw = &cancelGateway{Gateway: g}
		return gw
	}})
	e.SetStock(t, "SKU-1", 5)
	return e, gw
}

func startPayment(t *testing.T, e *enginetest.Env, o *orderly.Order) *orderly.Payment {
	t.Helper()
	p, err := e.Payments.StartPayment(context.Background(), &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatalf("start payment: %v", err)
	}
	return p
}

// TestCancelSettlesThePaymentInFlight: a buyer cancel while an attempt is in flight cancels
// it at the gateway, marks it failed and closes the order with pay_status failed and its
// releases, as the timeout path does; a capture reported later is refunded (I2).
func TestCancelSettlesThePaymentInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := newCancelEnv(t)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 2})
	p := startPayment(t, e, o)
	got, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", "trace-c")
	if err != nil {
		t.Fatalf("cancel: %v", err)
	}
	if got.State != orderly.StateClosed || got.CloseReason != orderly.CloseReasonBuyerCancelled || got.PayStatus != orderly.PayFailed {
		t.Fatalf("cancelled order %s/%s pay_status %s, want closed/buyer_cancelled, failed", got.State, got.CloseReason, got.PayStatus)
	}
	pay, _ := e.Payments.Payment(ctx, p.ID)
	if pay.State != orderly.PaymentFailed || pay.FailReason != "cancelled by buyer" {
		t.Fatalf("attempt %s (%q) after the cancel, want failed: cancelled by buyer", pay.State, pay.FailReason)
	}
	if gw.cancels != 1 {
		t.Fatalf("gateway Cancel called %d times, want 1", gw.cancels)
	}
	if gp, _ := e.Gateway.Query(ctx, p); gp.Status != orderly.GatewayFailed {
		t.Fatalf("gateway says %s of the attempt, want failed (cancelled)", gp.Status)
	}
	trail := e.StateTrail(t, o.ID)
	if len(trail) != 1 || trail[0].Event != orderly.EventCancel || trail[0].PayStatusFrom != orderly.PayPaying ||
		trail[0].PayStatusTo != orderly.PayFailed || trail[0].TraceID != "trace-c" {
		t.Fatalf("trail %+v, want one cancel from paying to failed", trail)
	}
	e.Drain(t)
	if s := e.StockOf(t, "SKU-1"); s != (orderly.Stock{SKU: "SKU-1", Available: 5}) {
		t.Fatalf("stock %+v after the cancel, want all 5 available", s)
	}
	// The provider captured after all: the money goes back.
	res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: "txn-1",
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: enginetest.Start})
	if err != nil || !res.Refund {
		t.Fatalf("capture after the cancel = %+v, %v; want refunded", res, err)
	}
	e.Drain(t)
	if got := e.OrderOf(t, o.ID); got.State != orderly.StateClosed || got.PayStatus != orderly.PayRefunded {
		t.Fatalf("order %s/%s, want closed with its payment refunded", got.State, got.PayStatus)
	}
}

// TestCancelAfterCapture: the gateway captured the attempt before the cancel reached it: the
// payment is applied, the order is paid and the cancel is refused.
func TestCancelAfterCapture(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _ := newCancelEnv(t)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 2})
	p := startPayment(t, e, o)
	if !e.Gateway.Capture(p.ID, "txn-1") {
		t.Fatal("capture refused by the simulated gateway")
	}
	if _, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", ""); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("cancel of a captured order: %v, want %s", err, orderly.EILLEGAL)
	}
	got := e.OrderOf(t, o.ID)
	if got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid {
		t.Fatalf("order %s/%s, want paid/paid", got.State, got.PayStatus)
	}
	if pay, _ := e.Payments.Payment(ctx, p.ID); pay.State != orderly.PaymentSucceeded || pay.ChannelTxnID != "txn-1" {
		t.Fatalf("attempt %s %q, want succeeded with txn-1", pay.State, pay.ChannelTxnID)
	}
	if s := e.StockOf(t, "SKU-1"); s != (orderly.Stock{SKU: "SKU-1", Available: 3, Sold: 2}) {
		t.Fatalf("stock %+v, want 2 sold", s)
	}
	// The provider's own callback for that capture is a duplicate.
	res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: "txn-1",
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: enginetest.Start})
	if err != nil || res.Applied || res.Refund {
		t.Fatalf("callback for the capture = %+v, %v; want a duplicate", res, err)
	}
}

// TestCancelWhenTheGatewayCannotTell: a gateway error leaves everything as it was and asks
// the buyer to retry; the retry, once the gateway answers, cancels.
func TestCancelWhenTheGatewayCannotTell(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := newCancelEnv(t)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := startPayment(t, e, o)
	gw.mu.Lock()
	gw.err = errors.New("gateway timeout")
	gw.mu.Unlock()
	if _, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", ""); orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Fatalf("cancel with the gateway down: %v, want %s", err, orderly.ECONFLICT)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying || got.Version != 2 {
		t.Fatalf("order %s/%s v%d after a refused cancel, want unchanged", got.State, got.PayStatus, got.Version)
	}
	if pay, _ := e.Payments.Payment(ctx, p.ID); pay.State != orderly.PaymentInitiated {
		t.Fatalf("attempt %s after a refused cancel, want initiated", pay.State)
	}
	gw.mu.Lock()
	gw.err = nil
	gw.mu.Unlock()
	if got, err := e.Orders.CancelOrder(ctx, o.ID, "buyer", ""); err != nil || got.State != orderly.StateClosed || got.PayStatus != orderly.PayFailed {
		t.Fatalf("retried cancel = %+v, %v", got, err)
	}
}

// TestCancelWithoutPayment: an order that never started a payment is closed without asking
// the gateway, and keeps pay_status unpaid.
func TestCancelWithoutPayment(t *testing.T) {
	t.Parallel()
	e, gw := newCancelEnv(t)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	got, err := e.Orders.CancelOrder(context.Background(), o.ID, "", "")
	if err != nil || got.State != orderly.StateClosed || got.PayStatus != orderly.PayUnpaid || gw.cancels != 0 {
		t.Fatalf("cancel = %+v, %v with %d gateway cancels; want closed, unpaid, none", got, err, gw.cancels)
	}
	if tr := e.StateTrail(t, o.ID); len(tr) != 1 || tr[0].Actor != "buyer" {
		t.Fatalf("trail %+v", tr)
	}
}

// TestCreateOrderRefusesAmountZero: an order whose amount would be 0 (free items, or a
// coupon equal to the total) is refused with invalid-input and writes nothing.
func TestCreateOrderRefusesAmountZero(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _ := newCancelEnv(t)
	whole, err := e.Orders.CreateCoupon(ctx, &orderly.CreateCouponParams{UserID: "u1", AmountOff: 1000, Currency: "USD"})
	if err != nil {
		t.Fatal(err)
	}
	free := &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", Items: []orderly.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 0}}}
	covered := &orderly.CreateOrderParams{UserID: "u1", Currency: "USD", CouponID: whole.ID,
		Items: []orderly.Item{{SKU: "SKU-1", Quantity: 2, UnitPrice: 500}}}
	for name, p := range map[string]*orderly.CreateOrderParams{"free items": free, "coupon equal to the total": covered} {
		_, _, err := e.Orders.CreateOrder(ctx, p)
		if orderly.ErrorCode(err) != orderly.EINVALID || orderly.ErrorMessage(err) != "amount after coupon must be at least 1 minor unit" {
			t.Errorf("%s: %v, want %s: amount after coupon must be at least 1 minor unit", name, err, orderly.EINVALID)
		}
	}
	if n := countOrders(t, e); n != 0 {
		t.Fatalf("%d orders written", n)
	}
	if s := e.StockOf(t, "SKU-1"); s.Held != 0 || s.Available != 5 {
		t.Fatalf("stock %+v, want untouched", s)
	}
	if c, _ := e.Orders.Coupon(ctx, whole.ID); c.State != orderly.CouponAvailable {
		t.Fatalf("coupon %s, want available", c.State)
	}
	// One minor unit is enough.
	covered.Items[0].UnitPrice = 501
	o, _, err := e.Orders.CreateOrder(ctx, covered)
	if err != nil || o.Amount != 2 {
		t.Fatalf("order of 2 minor units = %+v, %v", o, err)
	}
}
