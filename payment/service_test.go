package payment_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func success(o *orderly.Order, p *orderly.Payment, txn string) *orderly.Callback {
	return &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, ChannelTxnID: txn, Amount: p.Amount, Currency: p.Currency,
		Status: orderly.CallbackSucceeded, OccurredAt: time.Now().UTC()}
}

// assertOneRefund checks the gateway's ledger: exactly one refund of payment p moved
// money, for p's amount, and every refund call about p used the same idempotency key (a
// replay by the outbox is fine, a second refund is not).
func assertOneRefund(t *testing.T, e *enginetest.Env, p *orderly.Payment) {
	t.Helper()
	refunds := e.Gateway.Refunds(p.ID)
	if len(refunds) != 1 || refunds[0].Amount != p.Amount {
		t.Fatalf("gateway refunds of payment %s: %+v, want exactly one of %d", p.ID, refunds, p.Amount)
	}
	for _, c := range e.Gateway.Ledger() {
		if c.Op == sim.GatewayRefund && c.PaymentID == p.ID && c.IdempotencyKey != refunds[0].IdempotencyKey {
			t.Fatalf("refund call %+v uses another key than the refund %+v", c, refunds[0])
		}
	}
}

func start(t *testing.T, e *enginetest.Env, o *orderly.Order) *orderly.Payment {
	t.Helper()
	p, err := e.Payments.StartPayment(context.Background(), &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatalf("start payment: %v", err)
	}
	return p
}

// TestDuplicateCallbacks: five identical success callbacks in parallel and one more later
// are all acknowledged; the order changes state once and its stock is committed once.
func TestDuplicateCallbacks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 10)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 3, UnitPrice: 250})
	p := start(t, e, o)
	if o2 := e.OrderOf(t, o.ID); o2.PayStatus != orderly.PayPaying || o2.CurrentPaymentID != p.ID {
		t.Fatalf("after start: pay_status %s current %q", o2.PayStatus, o2.CurrentPaymentID)
	}
	cb := success(o, p, "txn-1")
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		applied int
	)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			res, err := e.Payments.HandleCallback(ctx, cb)
			if err != nil {
				t.Errorf("callback: %v", err)
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
	e.Clock.Advance(2 * time.Hour)
	res, err := e.Payments.HandleCallback(ctx, cb)
	if err != nil || res.Applied || res.Refund {
		t.Fatalf("late duplicate = %+v, %v; want acknowledged, not applied", res, err)
	}
	if applied != 1 {
		t.Fatalf("%d callbacks applied, want 1", applied)
	}
	got := e.OrderOf(t, o.ID)
	if got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid || got.PaidAt == nil || got.Amount != 750 {
		t.Fatalf("order %s/%s paid_at %v amount %d", got.State, got.PayStatus, got.PaidAt, got.Amount)
	}
	if trail := e.StateTrail(t, o.ID); len(trail) != 1 || trail[0].Event != orderly.EventPay {
		t.Fatalf("trail %+v, want one pay transition", trail)
	}
	if s := e.StockOf(t, "SKU-1"); s != (orderly.Stock{SKU: "SKU-1", Available: 7, Held: 0, Sold: 3}) {
		t.Fatalf("stock %+v, want 7 available, 3 sold", s)
	}
	pay, _ := e.Payments.Payment(ctx, p.ID)
	if pay.State != orderly.PaymentSucceeded || pay.ChannelTxnID != "txn-1" {
		t.Fatalf("payment %s/%q", pay.State, pay.ChannelTxnID)
	}
}

// TestLatePaymentIsRefunded: a success callback 20 minutes after the order closed is
// recorded and refunded; the order stays closed and its stock is not committed (I2).
func TestLatePaymentIsRefunded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 4, TimeoutSeconds: 60})
	p := start(t, e, o)
	// The attempt expires, so the order closes for timeout at close_at.
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackExpired}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(o.CloseAt)
	if res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer); err != nil || res.Closed != 1 {
		t.Fatalf("close = %+v, %v", res, err)
	}
	e.Drain(t)
	e.Clock.Advance(20 * time.Minute)
	res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-late"))
	if err != nil || !res.Applied || !res.Refund {
		t.Fatalf("late success = %+v, %v; want applied with refund", res, err)
	}
	e.Drain(t)
	got := e.OrderOf(t, o.ID)
	if got.State != orderly.StateClosed || got.CloseReason != orderly.CloseReasonPaymentTimeout || got.PayStatus != orderly.PayRefunded {
		t.Fatalf("order is %s/%s pay_status %s, want closed for payment_timeout, refunded", got.State, got.CloseReason, got.PayStatus)
	}
	pay, _ := e.Payments.Payment(ctx, p.ID)
	if pay.State != orderly.PaymentRefunded || pay.ChannelTxnID != "txn-late" || pay.RefundedAt == nil {
		t.Fatalf("payment %s txn %q refunded_at %v, want refunded", pay.State, pay.ChannelTxnID, pay.RefundedAt)
	}
	assertOneRefund(t, e, p)
	if s := e.StockOf(t, "SKU-1"); s != (orderly.Stock{SKU: "SKU-1", Available: 4}) {
		t.Fatalf("stock %+v, want all 4 available and none sold", s)
	}
	// The refund ran once: a duplicate of the late callback changes nothing.
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-late")); err != nil || res.Applied {
		t.Fatalf("duplicate late callback = %+v, %v", res, err)
	}
	e.Drain(t)
	assertOneRefund(t, e, p)
}

// TestStaleAttempt: an abandoned attempt's failure does not touch an order that another
// attempt paid, and its later success is refunded.
func TestStaleAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	first := start(t, e, o)
	second := start(t, e, o)
	if first.Attempt != 1 || second.Attempt != 2 {
		t.Fatalf("attempts %d, %d", first.Attempt, second.Attempt)
	}
	if _, err := e.Payments.HandleCallback(ctx, success(o, second, "txn-2")); err != nil {
		t.Fatal(err)
	}
	res, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: first.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackFailed})
	if err != nil || !res.Applied {
		t.Fatalf("stale failure = %+v, %v", res, err)
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePaid || got.PayStatus != orderly.PayPaid {
		t.Fatalf("order %s/%s after stale failure, want paid/paid", got.State, got.PayStatus)
	}
	// A success of the first attempt after all (the gateway retried) is refunded.
	res, err = e.Payments.HandleCallback(ctx, success(o, first, "txn-1"))
	if err != nil || !res.Refund {
		t.Fatalf("double payment = %+v, %v; want refund", res, err)
	}
	e.Drain(t)
	if p, _ := e.Payments.Payment(ctx, first.ID); p.State != orderly.PaymentRefunded {
		t.Fatalf("first attempt %s, want refunded", p.State)
	}
	assertOneRefund(t, e, first)
	if got := e.Gateway.Refunds(second.ID); len(got) != 0 {
		t.Fatalf("the kept payment %s was refunded: %+v", second.ID, got)
	}
	if s := e.StockOf(t, "SKU-1"); s.Sold != 1 || s.Available != 3 {
		t.Fatalf("stock %+v, want one sold", s)
	}
}

func TestCallbackRejects(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	other := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	for _, tc := range []struct {
		name string
		cb   orderly.Callback
		code string
	}{
		{"unknown payment", orderly.Callback{PaymentID: "nope", OrderID: o.ID, Currency: "USD", Status: "succeeded", Amount: p.Amount}, orderly.ENOTFOUND},
		{"other order", orderly.Callback{PaymentID: p.ID, OrderID: other.ID, Currency: "USD", Status: "succeeded", Amount: p.Amount}, orderly.EORDERMISMATCH},
		{"amount", orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: "succeeded", Amount: p.Amount - 1}, orderly.EAMOUNTMISMATCH},
		{"currency", orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "EUR", Status: "succeeded", Amount: p.Amount}, orderly.EAMOUNTMISMATCH},
		{"status", orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: "maybe", Amount: p.Amount}, orderly.EINVALID},
	} {
		if _, err := e.Payments.HandleCallback(ctx, &tc.cb); orderly.ErrorCode(err) != tc.code {
			t.Errorf("%s: error %v, want %s", tc.name, err, tc.code)
		}
	}
	if got := e.OrderOf(t, o.ID); got.State != orderly.StatePendingPayment || got.PayStatus != orderly.PayPaying || got.Version != 2 {
		t.Fatalf("rejected callbacks changed the order: %s/%s v%d", got.State, got.PayStatus, got.Version)
	}
	if pay, _ := e.Payments.Payment(ctx, p.ID); pay.State != orderly.PaymentInitiated {
		t.Fatalf("rejected callbacks changed the payment: %s", pay.State)
	}
}

func TestStartPaymentNotPayable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{TimeoutSeconds: 10})
	e.Clock.Set(o.ExpiresAt)
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID}); orderly.ErrorCode(err) != orderly.ENOTPAYABLE {
		t.Fatalf("start at the deadline: %v, want %s", err, orderly.ENOTPAYABLE)
	}
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: "missing"}); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Fatalf("start for a missing order: %v", err)
	}
	var n int
	e.Read(t, func(tx store.Tx) error {
		ps, err := tx.PaymentList(ctx, o.ID)
		n = len(ps)
		return err
	})
	if n != 0 {
		t.Fatalf("%d payments written by refused starts", n)
	}
}

// TestStartPaymentChannel: "wallet" is refused as a payment attempt's channel: it is the
// wallet checkout's, whose payments are refunded by crediting the debit back; an attempt
// named so was captured by the gateway and its refund failed for ever, the order stuck in
// refunding. Nothing is written for a refused start. (Config.Gateway serves every other
// name: here the simulated gateway.)
func TestStartPaymentChannel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	for _, ch := range []string{"wallet", "wallet@v2"} {
		_, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID, Channel: ch})
		if orderly.ErrorCode(err) != orderly.EINVALID {
			t.Fatalf("start on channel %q: %v, want %s", ch, err, orderly.EINVALID)
		}
	}
	if got := e.OrderOf(t, o.ID); got.PayStatus != orderly.PayUnpaid || got.CurrentPaymentID != "" {
		t.Fatalf("after the refused starts: pay_status %s, current %q", got.PayStatus, got.CurrentPaymentID)
	}
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID, Channel: "sim"})
	if err != nil || p.Channel != "sim" || p.Attempt != 1 {
		t.Fatalf("start on the configured channel: %+v, %v; want attempt 1 on sim", p, err)
	}
	// Nor can a server make it the default channel of its attempts.
	if _, err := payment.NewService(payment.Config{Store: e.Store, Gateway: e.Gateway, Channel: "wallet@v1"}); err == nil {
		t.Fatal("a service whose default channel is wallet was built")
	}
}

// TestMerchantRefund: paid → refunding → refunded through the outbox and the gateway.
func TestMerchantRefund(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p := start(t, e, o)
	if _, err := e.Payments.HandleCallback(ctx, success(o, p, "txn")); err != nil {
		t.Fatal(err)
	}
	got, err := e.Orders.ApplyEvent(ctx, o.ID, orderly.EventRefund, "merchant", "")
	if err != nil || got.State != orderly.StateRefunding {
		t.Fatalf("refund event: %v, %v", got, err)
	}
	e.Drain(t)
	got = e.OrderOf(t, o.ID)
	if got.State != orderly.StateRefunded || got.PayStatus != orderly.PayRefunded {
		t.Fatalf("order %s/%s, want refunded/refunded", got.State, got.PayStatus)
	}
	assertOneRefund(t, e, p)
	if _, err := e.Orders.ApplyEvent(ctx, o.ID, orderly.EventShip, "merchant", ""); orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("ship a refunded order: %v, want %s", err, orderly.EILLEGAL)
	}
}

// pickyGateway is the simulated gateway, except that it refuses attempts in EUR before
// they are created (orderly.AttemptValidator, as a channel that takes one currency does) and
// that its creates fail without an answer while down is set.
type pickyGateway struct {
	*sim.Gateway
	down    atomic.Bool
	creates atomic.Int64
}

func (g *pickyGateway) ValidateAttempt(p *orderly.Payment) error {
	if p.Currency == "EUR" {
		return orderly.Errorf(orderly.EINVALID, "payment in EUR, channel takes USD")
	}
	return nil
}

func (g *pickyGateway) Create(ctx context.Context, p *orderly.Payment) (*orderly.GatewayAttempt, error) {
	g.creates.Add(1)
	if g.down.Load() {
		return nil, errors.New("dial tcp 127.0.0.1:1: connection refused")
	}
	return g.Gateway.Create(ctx, p)
}

// TestStartPaymentRefusals: an attempt the channel refuses for what it says (another
// currency) is 422 invalid-input and writes nothing — no attempt, the order's pay status
// unchanged, the provider not called; a provider that does not answer the create is 503
// unavailable (retry), not 500.
func TestStartPaymentRefusals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var gw *pickyGateway
	e := enginetest.New(t, enginetest.Options{WrapGateway: func(g orderly.Gateway) orderly.Gateway {
		gw = &pickyGateway{Gateway: g.(*sim.Gateway)}
		return gw
	}})
	e.SetStock(t, "SKU-1", 4)
	eur, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u1", Currency: "EUR",
		Items: []orderly.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: eur.ID}); orderly.ErrorCode(err) != orderly.EINVALID ||
		orderly.ErrorMessage(err) != "payment in EUR, channel takes USD" {
		t.Fatalf("start in EUR: %v; want EINVALID from the channel", err)
	}
	if ps, _ := e.Payments.OrderPayments(ctx, eur.ID); len(ps) != 0 || gw.creates.Load() != 0 {
		t.Fatalf("%d attempts written, %d creates; want none", len(ps), gw.creates.Load())
	}
	if o := e.OrderOf(t, eur.ID); o.PayStatus != orderly.PayUnpaid || o.CurrentPaymentID != "" || o.Version != eur.Version {
		t.Fatalf("order %s pay_status %s, current %q, version %d; want unchanged", o.ID, o.PayStatus, o.CurrentPaymentID, o.Version)
	}
	usd := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	gw.down.Store(true)
	if _, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: usd.ID}); orderly.ErrorCode(err) != orderly.EUNAVAILABLE {
		t.Fatalf("start while the provider does not answer: %v (code %s); want EUNAVAILABLE", err, orderly.ErrorCode(err))
	}
	gw.down.Store(false)
	if p := start(t, e, usd); p.State != orderly.PaymentInitiated || p.Attempt != 2 {
		t.Fatalf("retry: %+v; want attempt 2 initiated", p)
	}
}
