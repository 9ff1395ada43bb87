package payment_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// delegate returns an outbox handler that calls *inner, set once the engine is open (the
// handler of a service built on the engine's store).
func delegate(inner *outbox.Handler) outbox.Handler {
	return outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error { return inner.Call(ctx, m) },
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			return inner.Apply(ctx, tx, msgs)
		},
	}
}

// paidOrder creates an order of items (stock set to 10 per SKU first), pays it and
// returns it with its payment.
func paidOrder(t *testing.T, e *enginetest.Env, items ...orderly.Item) (*orderly.Order, *orderly.Payment) {
	t.Helper()
	ctx := context.Background()
	for _, it := range items {
		e.SetStock(t, it.SKU, 10)
	}
	o, _, err := e.Orders.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "user-1", Items: items, Currency: "USD", PaymentTimeoutSeconds: 60})
	if err != nil {
		t.Fatalf("create order: %v", err)
	}
	p := start(t, e, o)
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-"+p.ID)); err != nil || !res.Applied {
		t.Fatalf("pay: %+v, %v", res, err)
	}
	e.Drain(t)
	return e.OrderOf(t, o.ID), p
}

func refund(t *testing.T, e *enginetest.Env, p *orderly.CreateRefundParams) *orderly.Refund {
	t.Helper()
	f, created, err := e.Orders.CreateRefund(context.Background(), p)
	if err != nil || !created {
		t.Fatalf("refund %+v: created %v, %v", p, created, err)
	}
	return f
}

func refundsOf(t *testing.T, e *enginetest.Env, orderID string) []*orderly.Refund {
	t.Helper()
	fs, err := e.Orders.OrderRefunds(context.Background(), orderID)
	if err != nil {
		t.Fatal(err)
	}
	return fs
}

// events returns the events of an audit trail from the payment on (the creation and the
// payment attempts before it are other tests' concern).
func events(trail []*orderly.Transition) []orderly.Event {
	var out []orderly.Event
	for _, tr := range trail {
		if tr.Event == orderly.EventPay || len(out) > 0 {
			out = append(out, tr.Event)
		}
	}
	return out
}

func wantOrder(t *testing.T, e *enginetest.Env, id string, state orderly.State, pay orderly.PayStatus, refunded int64) {
	t.Helper()
	if o := e.OrderOf(t, id); o.State != state || o.PayStatus != pay || o.RefundedAmount != refunded {
		t.Fatalf("order %s/%s refunded_amount %d, want %s/%s %d", o.State, o.PayStatus, o.RefundedAmount, state, pay, refunded)
	}
}

// wantVerified delivers the events that the last deliveries wrote, then runs the database
// check: every invariant holds, money included.
func wantVerified(t *testing.T, e *enginetest.Env) {
	t.Helper()
	e.Drain(t)
	rep, err := verify.Check(context.Background(), e.Store, verify.Options{RequireDrained: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("verify: %v", rep.Violations)
	}
}

// TestPartialRefundsUpToCaptured: two partial refunds add up to the captured amount; a
// third is refused while they are under way and after; the order goes paid/paid →
// paid/partially_refunded → refunding → refunded/refunded, each step in the audit trail,
// and the gateway refunds each amount once.
func TestPartialRefundsUpToCaptured(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 3, UnitPrice: 1000})

	first := refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000, Reason: "price adjustment"})
	if first.State != orderly.RefundRequested || first.PaymentID != p.ID || first.Currency != "USD" {
		t.Fatalf("first refund %+v", first)
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 1000)
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 1000)

	second := refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 2000})
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPartiallyRefunded, 3000)
	_, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1})
	if orderly.ErrorCode(err) != orderly.EREFUNDEXCEEDS {
		t.Fatalf("third refund while refunding: %v, want %s", err, orderly.EREFUNDEXCEEDS)
	}
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 3000)
	_, _, err = e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1})
	if orderly.ErrorCode(err) != orderly.EILLEGAL {
		t.Fatalf("third refund of a refunded order: %v, want %s", err, orderly.EILLEGAL)
	}

	fs := refundsOf(t, e, o.ID)
	if len(fs) != 2 || fs[0].ID != first.ID || fs[1].ID != second.ID ||
		fs[0].State != orderly.RefundSucceeded || fs[1].State != orderly.RefundSucceeded || fs[1].CompletedAt == nil {
		t.Fatalf("refunds %+v", fs)
	}
	for _, f := range fs {
		if got, ok := e.Gateway.RefundedFor(f.ID); !ok || got != f.Amount {
			t.Errorf("gateway refunded %d (%v) under refund %s, want %d", got, ok, f.ID, f.Amount)
		}
	}
	if got := e.Gateway.Refunded(p.ID); got != 3000 {
		t.Errorf("gateway refunded %d of payment %s, want 3000", got, p.ID)
	}
	want := []orderly.Event{orderly.EventPay, orderly.EventPartialRefund, orderly.EventRefund, orderly.EventRefundComplete}
	if got := events(e.Trail(t, o.ID)); !equalEvents(got, want) {
		t.Fatalf("trail %v, want %v", got, want)
	}
	if ps := payments(t, e, o.ID); len(ps) != 1 || ps[0].State != orderly.PaymentSucceeded {
		t.Fatalf("payments %+v: the captured payment stays succeeded, its refunds are refunds", ps)
	}
	wantVerified(t, e)
}

func equalEvents(a, b []orderly.Event) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// outboxCount returns the number of outbox messages in every state.
func outboxCount(t *testing.T, e *enginetest.Env) int64 {
	t.Helper()
	var n int64
	e.Read(t, func(tx store.Tx) error {
		counts, err := tx.OutboxCounts(context.Background())
		for _, c := range counts {
			n += c
		}
		return err
	})
	return n
}

// TestRefundRefused: input errors and a refund beyond the captured amount are refused
// with their problem codes and write nothing.
func TestRefundRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	o, _ := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 2, UnitPrice: 1500})
	pending := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: "SKU-1"})
	messages := outboxCount(t, e)
	for _, tt := range []struct {
		name string
		p    orderly.CreateRefundParams
		code string
	}{
		{"BeyondCaptured", orderly.CreateRefundParams{OrderID: o.ID, Amount: 3001}, orderly.EREFUNDEXCEEDS},
		{"ZeroAmount", orderly.CreateRefundParams{OrderID: o.ID}, orderly.EINVALID},
		{"NegativeAmount", orderly.CreateRefundParams{OrderID: o.ID, Amount: -5}, orderly.EINVALID},
		{"RestockWithoutItems", orderly.CreateRefundParams{OrderID: o.ID, Amount: 5, Restock: true}, orderly.EINVALID},
		{"DuplicateSKU", orderly.CreateRefundParams{OrderID: o.ID, Amount: 5, Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 1}, {SKU: "SKU-1", Quantity: 1}}}, orderly.EINVALID},
		{"ZeroQuantity", orderly.CreateRefundParams{OrderID: o.ID, Amount: 5, Items: []orderly.RefundItem{{SKU: "SKU-1"}}}, orderly.EINVALID},
		{"MoreItemsThanBought", orderly.CreateRefundParams{OrderID: o.ID, Amount: 5, Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 3}}}, orderly.EREFUNDITEMS},
		{"ItemNotBought", orderly.CreateRefundParams{OrderID: o.ID, Amount: 5, Items: []orderly.RefundItem{{SKU: "SKU-2", Quantity: 1}}}, orderly.EREFUNDITEMS},
		{"PendingOrder", orderly.CreateRefundParams{OrderID: pending.ID, Amount: 5}, orderly.EILLEGAL},
		{"MissingOrder", orderly.CreateRefundParams{OrderID: "missing", Amount: 5}, orderly.ENOTFOUND},
	} {
		_, _, err := e.Orders.CreateRefund(ctx, &tt.p)
		if orderly.ErrorCode(err) != tt.code {
			t.Errorf("%s: %v, want %s", tt.name, err, tt.code)
		}
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 0)
	if fs := refundsOf(t, e, o.ID); len(fs) != 0 {
		t.Fatalf("refused refunds wrote %+v", fs)
	}
	if n := outboxCount(t, e); n != messages {
		t.Fatalf("refused refunds wrote %d outbox messages", n-messages)
	}
	if st := e.StockOf(t, "SKU-1"); st.Sold != 2 || st.Available != 7 || st.Held != 1 {
		t.Fatalf("stock %+v, want sold 2 available 7 held 1", st)
	}
}

// TestRefundRestock: only restocked items go back to available stock, when the gateway
// confirms their refund, at most the units bought per SKU; refunded items without restock
// stay sold.
func TestRefundRestock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	o, _ := paidOrder(t, e, orderly.Item{SKU: "A", Quantity: 3, UnitPrice: 500}, orderly.Item{SKU: "B", Quantity: 2, UnitPrice: 700})
	stock := func(sku string, available, sold int64) {
		t.Helper()
		if st := e.StockOf(t, sku); st.Available != available || st.Held != 0 || st.Sold != sold {
			t.Fatalf("stock of %s %+v, want available %d sold %d", sku, st, available, sold)
		}
	}
	stock("A", 7, 3)
	stock("B", 8, 2)
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000, Restock: true, Items: []orderly.RefundItem{{SKU: "A", Quantity: 2}}})
	stock("A", 7, 3) // requested: back in stock once the gateway confirms
	e.Drain(t)
	stock("A", 9, 1)
	stock("B", 8, 2)
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 700, Items: []orderly.RefundItem{{SKU: "B", Quantity: 1}}})
	stock("B", 8, 2) // refunded, not restocked: the unit stays sold (kept by the buyer, or written off)
	_, _, err := e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 100, Restock: true,
		Items: []orderly.RefundItem{{SKU: "A", Quantity: 1}, {SKU: "B", Quantity: 2}}})
	if orderly.ErrorCode(err) != orderly.EREFUNDITEMS {
		t.Fatalf("refund 2 more of B (1 left): %v, want %s", err, orderly.EREFUNDITEMS)
	}
	stock("A", 9, 1) // the refused refund's A line rolled back with it
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 100, Restock: true, Items: []orderly.RefundItem{{SKU: "A", Quantity: 1}}})
	stock("A", 9, 1)
	e.Drain(t)
	stock("A", 10, 0)
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 1800)
	wantVerified(t, e)
}

// TestRefundIdempotencyKey: the same key and body return the first refund and refund
// once; the same key with another body is refused.
func TestRefundIdempotencyKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000})
	params := func(amount int64) *orderly.CreateRefundParams {
		return &orderly.CreateRefundParams{OrderID: o.ID, Amount: amount, Reason: "damaged", IdempotencyKey: "rk-1",
			Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 1}}, Restock: true}
	}
	first := refund(t, e, params(400))
	again, created, err := e.Orders.CreateRefund(ctx, params(400))
	if err != nil || created || again.ID != first.ID || again.Amount != 400 {
		t.Fatalf("replay: %+v created %v, %v; want refund %s, not created", again, created, err, first.ID)
	}
	if _, _, err := e.Orders.CreateRefund(ctx, params(500)); orderly.ErrorCode(err) != orderly.EIDEMPOTENCY {
		t.Fatalf("same key, other amount: %v, want %s", err, orderly.EIDEMPOTENCY)
	}
	e.Drain(t)
	if _, created, err := e.Orders.CreateRefund(ctx, params(400)); err != nil || created {
		t.Fatalf("replay after success: created %v, %v", created, err)
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 400)
	if got := e.Gateway.Refunded(p.ID); got != 400 {
		t.Fatalf("gateway refunded %d, want 400", got)
	}
	if st := e.StockOf(t, "SKU-1"); st.Available != 10 || st.Sold != 0 {
		t.Fatalf("stock %+v, want the one unit restocked once", st)
	}
}

// TestRefundRedeliveryRefundsOnce: the relay calls the gateway, then the transaction that
// would mark the refund succeeded fails (a crash before commit); the message is delivered
// again and the gateway asked again with the same idempotency key. The money goes back
// once and the refund succeeds once.
func TestRefundRedeliveryRefundsOnce(t *testing.T) {
	t.Parallel()
	var (
		inner     outbox.Handler
		calls     atomic.Int64
		failApply atomic.Bool
	)
	failApply.Store(true)
	h := outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error {
			calls.Add(1)
			return inner.Call(ctx, m)
		},
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			if failApply.Swap(false) {
				return errors.New("crash before commit")
			}
			return inner.Apply(ctx, tx, msgs)
		},
	}
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	inner = e.Payments.RefundExecuteHandler()
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000})
	f := refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000})
	e.Drain(t)
	if got := refundsOf(t, e, o.ID)[0].State; got != orderly.RefundRequested || calls.Load() != 1 {
		t.Fatalf("after the failed delivery: refund %s, %d gateway calls; want requested, 1", got, calls.Load())
	}
	e.Clock.Advance(time.Minute) // past the retry's backoff
	e.Drain(t)
	if calls.Load() != 2 {
		t.Fatalf("%d gateway calls, want 2 (one redelivery)", calls.Load())
	}
	if got, _ := e.Gateway.RefundedFor(f.ID); got != 1000 || e.Gateway.Refunded(p.ID) != 1000 {
		t.Fatalf("gateway refunded %d under the refund id and %d of the payment, want 1000 once", got, e.Gateway.Refunded(p.ID))
	}
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1000)
	if got := events(e.Trail(t, o.ID)); !equalEvents(got, []orderly.Event{orderly.EventPay, orderly.EventRefund, orderly.EventRefundComplete}) {
		t.Fatalf("trail %v", got)
	}
	wantVerified(t, e)
}

// TestFullRefundOfShippedOrder: a shipped order refunded in full goes shipped → refunding →
// refunded; a completed order refunded in part stays completed, partially_refunded.
func TestFullRefundOfShippedOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 2, UnitPrice: 800})
	if _, err := e.Orders.ApplyEvent(ctx, o.ID, orderly.EventShip, "merchant", ""); err != nil {
		t.Fatal(err)
	}
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1600, Restock: true, Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 2}}, Reason: "returned"})
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 1600)
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1600)
	want := []orderly.Event{orderly.EventPay, orderly.EventShip, orderly.EventRefund, orderly.EventRefundComplete}
	if got := events(e.Trail(t, o.ID)); !equalEvents(got, want) {
		t.Fatalf("trail %v, want %v", got, want)
	}
	if e.Gateway.Refunded(p.ID) != 1600 {
		t.Fatalf("gateway refunded %d", e.Gateway.Refunded(p.ID))
	}
	if st := e.StockOf(t, "SKU-1"); st.Available != 10 || st.Sold != 0 {
		t.Fatalf("stock %+v, want both units back", st)
	}

	c, _ := paidOrder(t, e, orderly.Item{SKU: "SKU-2", Quantity: 1, UnitPrice: 900})
	for _, ev := range []orderly.Event{orderly.EventShip, orderly.EventComplete} {
		if _, err := e.Orders.ApplyEvent(ctx, c.ID, ev, "merchant", ""); err != nil {
			t.Fatal(err)
		}
	}
	refund(t, e, &orderly.CreateRefundParams{OrderID: c.ID, Amount: 300})
	e.Drain(t)
	wantOrder(t, e, c.ID, orderly.StateCompleted, orderly.PayPartiallyRefunded, 300)
	// The merchant's refund event refunds the rest.
	if got, err := e.Orders.ApplyEvent(ctx, c.ID, orderly.EventRefund, "merchant", ""); err != nil || got.State != orderly.StateRefunding {
		t.Fatalf("refund event: %+v, %v", got, err)
	}
	e.Drain(t)
	wantOrder(t, e, c.ID, orderly.StateRefunded, orderly.PayRefunded, 900)
	if fs := refundsOf(t, e, c.ID); len(fs) != 2 || fs[1].Amount != 600 {
		t.Fatalf("refunds %+v, want 300 then the rest, 600", fs)
	}
	wantVerified(t, e)
}

// TestConcurrentRefunds: refunds racing for the same order never exceed the captured
// amount together: of eight refunds of 400 on an order of 1000, exactly two pass.
func TestConcurrentRefunds(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000})
	const racers = 8
	errs := make([]error, racers)
	var wg sync.WaitGroup
	for i := range racers {
		wg.Go(func() {
			_, _, errs[i] = e.Orders.CreateRefund(context.Background(), &orderly.CreateRefundParams{OrderID: o.ID, Amount: 400})
		})
	}
	wg.Wait()
	passed := 0
	for _, err := range errs {
		switch orderly.ErrorCode(err) {
		case "":
			passed++
		case orderly.EREFUNDEXCEEDS:
		default:
			t.Errorf("refund: %v", err)
		}
	}
	if passed != 2 {
		t.Fatalf("%d refunds of 400 passed, want 2", passed)
	}
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 800)
	if e.Gateway.Refunded(p.ID) != 800 {
		t.Fatalf("gateway refunded %d, want 800", e.Gateway.Refunded(p.ID))
	}
}

// refusingGateway is the simulated gateway, except that it refuses every refund.
type refusingGateway struct{ *sim.Gateway }

func (refusingGateway) Refund(context.Context, *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	return nil, orderly.Errorf(orderly.EINVALID, "refund window closed")
}

// TestRefundRefusedByGateway: a refund the gateway refuses ends failed, and its amount and
// item counts become refundable again; the order keeps its state and pay status.
func TestRefundRefusedByGateway(t *testing.T) {
	t.Parallel()
	var inner outbox.Handler
	h := delegate(&inner)
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	refusing, err := payment.NewService(payment.Config{Store: e.Store, Gateway: refusingGateway{e.Gateway}})
	if err != nil {
		t.Fatal(err)
	}
	inner = refusing.RefundExecuteHandler()
	o, _ := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 2, UnitPrice: 500})
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000, Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 2}}})
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 1000)
	e.Drain(t)
	fs := refundsOf(t, e, o.ID)
	if len(fs) != 1 || fs[0].State != orderly.RefundFailed || fs[0].FailReason != "gateway: refund window closed" || fs[0].CompletedAt == nil {
		t.Fatalf("refunds %+v, want one failed", fs)
	}
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 0)
	// The amount and the items are refundable again (here through the working gateway).
	inner = e.Payments.RefundExecuteHandler()
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000, Items: []orderly.RefundItem{{SKU: "SKU-1", Quantity: 2}}})
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1000)
	wantVerified(t, e)
}

// TestExtraCaptureRefundKeepsRefundingOrder: while a merchant refund of an order is under
// way (here refused by the gateway, so nothing is refunded yet), the automatic refund of
// a second capture of the same order (payment.refund) returns that capture only: the order
// stays refunding, not refunded, since its own captured payment was not returned.
func TestExtraCaptureRefundKeepsRefundingOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var inner outbox.Handler
	h := delegate(&inner)
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	refusing, err := payment.NewService(payment.Config{Store: e.Store, Gateway: refusingGateway{e.Gateway}})
	if err != nil {
		t.Fatal(err)
	}
	inner = refusing.RefundExecuteHandler()
	e.SetStock(t, "SKU-1", 5)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{})
	p1, p2 := start(t, e, o), start(t, e, o)
	if _, err := e.Payments.HandleCallback(ctx, success(o, p1, "txn-1")); err != nil {
		t.Fatal(err)
	}
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: o.Amount})
	e.Drain(t)
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 0)
	if res, err := e.Payments.HandleCallback(ctx, success(o, p2, "txn-2")); err != nil || !res.Refund {
		t.Fatalf("second capture: %+v, %v; want refunded", res, err)
	}
	e.Drain(t)
	if e.Gateway.Refunded(p2.ID) != o.Amount || e.Gateway.Refunded(p1.ID) != 0 {
		t.Fatalf("gateway refunded %d of the extra capture and %d of the kept one, want %d and 0",
			e.Gateway.Refunded(p2.ID), e.Gateway.Refunded(p1.ID), o.Amount)
	}
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 0)
}

// TestRefundFailedByNotificationNotSentAgain: the gateway's answer to a refund is lost (the
// outcome is unknown, the message stays due), then the provider's notification fails the
// refund. The redelivered message must not ask the gateway again: a second request after a
// failure could start a refund the merchant no longer expects. The amount is refundable
// again and no money moved.
func TestRefundFailedByNotificationNotSentAgain(t *testing.T) {
	t.Parallel()
	var (
		inner outbox.Handler
		lost  atomic.Bool
	)
	lost.Store(true)
	h := outbox.Handler{
		Call: func(ctx context.Context, m *orderly.Message) error {
			if lost.Swap(false) {
				return errors.New("gateway timeout") // no answer: unknown outcome, retried
			}
			return inner.Call(ctx, m)
		},
		Apply: func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
			return inner.Apply(ctx, tx, msgs)
		},
	}
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	inner = e.Payments.RefundExecuteHandler()
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 1, UnitPrice: 1000})
	f := refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000})
	e.Drain(t)
	res, err := e.Payments.HandleNotification(context.Background(), &channel.Notification{
		Channel: "sim", EventID: "evt-refund-failed", Kind: channel.RefundFailed,
		PaymentID: p.ID, Amount: 1000, Currency: p.Currency, RefundID: f.ID, OccurredAt: e.Clock.Now(),
	})
	if err != nil || !res.Applied {
		t.Fatalf("refund.failed notification: %+v, %v; want applied", res, err)
	}
	e.Clock.Advance(time.Minute) // past the retry's backoff
	e.Drain(t)
	if got, _ := e.Gateway.RefundedFor(f.ID); got != 0 || e.Gateway.Refunded(p.ID) != 0 {
		t.Fatalf("the gateway refunded %d under the refund id (%d of the payment) after the provider failed it, want 0",
			got, e.Gateway.Refunded(p.ID))
	}
	fs := refundsOf(t, e, o.ID)
	if len(fs) != 1 || fs[0].State != orderly.RefundFailed {
		t.Fatalf("refunds %+v, want one failed", fs)
	}
	wantOrder(t, e, o.ID, orderly.StateRefunding, orderly.PayPaid, 0)
	wantVerified(t, e)
}

// TestRefundNotFailedByALostConnection: a refund whose payment cannot be read when its
// message is delivered (the database restarted) is not asked, and not failed either: the
// read's error (unavailable) used to be taken for the gateway refusing the refund, and the
// refund was failed for good (a PostgreSQL-restart simulation in CI). It is retried, and
// succeeds.
func TestRefundNotFailedByALostConnection(t *testing.T) {
	t.Parallel()
	var inner outbox.Handler
	h := delegate(&inner)
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{orderly.TopicRefundExecute: h}})
	reads := &failingRead{Store: e.Store}
	// Wallets: the payment is read to learn its channel.
	svc, err := payment.NewService(payment.Config{Store: reads, Gateway: e.Gateway, Wallets: e.Engine.Wallets()})
	if err != nil {
		t.Fatal(err)
	}
	inner = svc.RefundExecuteHandler()
	o, p := paidOrder(t, e, orderly.Item{SKU: "SKU-1", Quantity: 2, UnitPrice: 500})
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1000})
	reads.failAt.Store(2) // the refund's read passes, the payment's fails
	e.Drain(t)
	if fs := refundsOf(t, e, o.ID); len(fs) != 1 || fs[0].State != orderly.RefundRequested {
		t.Fatalf("refunds after the lost connection %+v, want one still requested", fs)
	}
	if n := len(e.Gateway.Refunds(p.ID)); n != 0 {
		t.Fatalf("%d gateway refunds while the payment could not be read", n)
	}
	e.Clock.Advance(time.Hour) // past the message's retry
	e.Drain(t)
	if fs := refundsOf(t, e, o.ID); len(fs) != 1 || fs[0].State != orderly.RefundSucceeded {
		t.Fatalf("refunds after the retry %+v, want one succeeded", fs)
	}
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1000)
}

// failingRead is a store whose failAt-th read transaction (counted from when failAt is
// set) fails as a lost connection does.
type failingRead struct {
	store.Store
	n, failAt atomic.Int32
}

func (s *failingRead) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	if at := s.failAt.Load(); at > 0 && s.n.Add(1) == at {
		return orderly.Errorf(orderly.EUNAVAILABLE, "the database connection was lost (the database restarted or ended the session); retry later")
	}
	return s.Store.Read(ctx, fn)
}

// pendingRefundGateway is the simulated gateway for payments, but answers every refund as a
// provider that accepts it without confirming it (Stripe "pending", WeChat Pay PROCESSING):
// the outcome is only learnt by asking again (QueryRefund) once settle has decided it.
type pendingRefundGateway struct {
	*sim.Gateway
	mu       sync.Mutex
	asked    map[string]int64                        // refunds asked, by idempotency key: amount
	settled  map[string]*orderly.GatewayRefundResult // the outcome once decided
	refunds  atomic.Int64                            // Refund calls
	queries  atomic.Int64                            // QueryRefund calls
	moneyOut atomic.Int64                            // minor units returned to payers
}

func newPendingRefundGateway(sim *sim.Gateway) *pendingRefundGateway {
	return &pendingRefundGateway{Gateway: sim, asked: map[string]int64{}, settled: map[string]*orderly.GatewayRefundResult{}}
}

func (g *pendingRefundGateway) Refund(_ context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	g.refunds.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.asked[r.IdempotencyKey] = r.Amount
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, ProviderRef: "re_" + r.IdempotencyKey, Detail: "pending"}, nil
}

func (g *pendingRefundGateway) QueryRefund(_ context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	g.queries.Add(1)
	g.mu.Lock()
	defer g.mu.Unlock()
	if _, ok := g.asked[r.IdempotencyKey]; !ok {
		return nil, orderly.Errorf(orderly.ENOTFOUND, "no refund %s", r.IdempotencyKey)
	}
	if res := g.settled[r.IdempotencyKey]; res != nil {
		return res, nil
	}
	return &orderly.GatewayRefundResult{Status: orderly.GatewayPending, ProviderRef: "re_" + r.IdempotencyKey, Detail: "pending"}, nil
}

// withPendingRefunds returns an engine whose messages of topic are delivered by handler of
// a payment service on a pendingRefundGateway, and that gateway.
func withPendingRefunds(t *testing.T, topic string, handler func(*payment.Service) outbox.Handler) (*enginetest.Env, *pendingRefundGateway) {
	t.Helper()
	var inner outbox.Handler
	e := enginetest.New(t, enginetest.Options{Handlers: map[string]outbox.Handler{topic: delegate(&inner)}})
	gw := newPendingRefundGateway(e.Gateway)
	svc, err := payment.NewService(payment.Config{Store: e.Store, Gateway: gw})
	if err != nil {
		t.Fatal(err)
	}
	inner = handler(svc)
	return e, gw
}

// settle decides refund key's outcome at the provider.
func (g *pendingRefundGateway) settle(key string, status orderly.GatewayStatus) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if status == orderly.GatewaySucceeded {
		g.moneyOut.Add(g.asked[key])
	}
	g.settled[key] = &orderly.GatewayRefundResult{Status: status, ProviderRef: "re_" + key, Detail: string(status)}
}

// TestRefundPendingAtProvider: a refund the provider accepted without confirming stays
// requested — not counted as refunded, not restocked, not announced — with the provider's
// state and refund id on it, and is asked about again (QueryRefund, never a second Refund)
// until the provider confirms it (then succeeded, the order partially refunded, the unit
// restocked) or fails it (then failed, its amount refundable again, stock untouched).
func TestRefundPendingAtProvider(t *testing.T) {
	t.Parallel()
	for _, final := range []orderly.GatewayStatus{orderly.GatewaySucceeded, orderly.GatewayFailed} {
		t.Run(string(final), func(t *testing.T) {
			t.Parallel()
			e, gw := withPendingRefunds(t, orderly.TopicRefundExecute, (*payment.Service).RefundExecuteHandler)
			o, _ := paidOrder(t, e, orderly.Item{SKU: "SKU-P", Quantity: 2, UnitPrice: 500})
			f := refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 500, Restock: true,
				Items: []orderly.RefundItem{{SKU: "SKU-P", Quantity: 1}}})
			wantStock := func(available, sold int64) {
				t.Helper()
				if s := e.StockOf(t, "SKU-P"); s.Available != available || s.Sold != sold || s.Held != 0 {
					t.Fatalf("stock %+v, want available %d sold %d held 0", s, available, sold)
				}
			}
			wantRefund := func(state orderly.RefundState, providerStatus string) {
				t.Helper()
				fs := refundsOf(t, e, o.ID)
				if len(fs) != 1 || fs[0].ID != f.ID || fs[0].State != state || fs[0].ProviderStatus != providerStatus ||
					fs[0].ProviderRef != "re_"+f.ID {
					t.Fatalf("refunds %+v, want %s %s with provider_status %q and provider_ref re_%s", fs, f.ID, state, providerStatus, f.ID)
				}
			}
			// Three deliveries while the provider says pending: the refund stays requested.
			for i := range 3 {
				e.Drain(t)
				wantRefund(orderly.RefundRequested, "pending")
				wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 500)
				wantStock(8, 2)
				e.Clock.Advance(time.Duration(10<<i) * time.Second) // past the relay's backoff
			}
			if gw.refunds.Load() != 1 || gw.queries.Load() != 2 {
				t.Fatalf("provider asked %d refunds and %d queries, want 1 and 2", gw.refunds.Load(), gw.queries.Load())
			}
			gw.settle(f.ID, final)
			e.Drain(t)
			if final == orderly.GatewaySucceeded {
				wantRefund(orderly.RefundSucceeded, "")
				wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 500)
				wantStock(9, 1)
				if gw.moneyOut.Load() != 500 {
					t.Fatalf("provider returned %d, want 500", gw.moneyOut.Load())
				}
			} else {
				wantRefund(orderly.RefundFailed, "")
				wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 0)
				wantStock(8, 2)
			}
			if gw.refunds.Load() != 1 {
				t.Fatalf("provider asked %d refunds, want 1 (later deliveries query)", gw.refunds.Load())
			}
		})
	}
}

// TestPaymentRefundPendingAtProvider: the automatic refund of a payment for a closed order
// (I2) that the provider accepts without confirming leaves the payment refund_pending and
// the order closed with pay_status failed — not refunded — while the provider says
// pending; it is asked about again (never refunded twice) and the payment reads refunded
// only once the provider confirms it.
func TestPaymentRefundPendingAtProvider(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, gw := withPendingRefunds(t, orderly.TopicPaymentRefund, (*payment.Service).RefundHandler)
	e.SetStock(t, "SKU-1", 4)
	o := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 4, TimeoutSeconds: 60})
	p := start(t, e, o)
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackExpired}); err != nil {
		t.Fatal(err)
	}
	e.Clock.Set(o.CloseAt)
	if res, err := e.Closer.CloseDue(ctx, closer.TriggerTimer); err != nil || res.Closed != 1 {
		t.Fatalf("close = %+v, %v", res, err)
	}
	e.Drain(t)
	if res, err := e.Payments.HandleCallback(ctx, success(o, p, "txn-late")); err != nil || !res.Refund {
		t.Fatalf("late success = %+v, %v; want a refund", res, err)
	}
	want := func(state orderly.PaymentState, pay orderly.PayStatus) {
		t.Helper()
		got, err := e.Payments.Payment(ctx, p.ID)
		if err != nil || got.State != state {
			t.Fatalf("payment %+v, %v; want %s", got, err, state)
		}
		if o := e.OrderOf(t, o.ID); o.State != orderly.StateClosed || o.PayStatus != pay {
			t.Fatalf("order %s/%s, want closed/%s", o.State, o.PayStatus, pay)
		}
	}
	for i := range 3 {
		e.Drain(t)
		want(orderly.PaymentRefundPending, orderly.PayFailed)
		e.Clock.Advance(time.Duration(10<<i) * time.Second) // past the relay's backoff
	}
	key := payment.PaymentRefundKey(p.ID)
	gw.settle(key, orderly.GatewaySucceeded)
	e.Drain(t)
	want(orderly.PaymentRefunded, orderly.PayRefunded)
	if gw.refunds.Load() != 1 || gw.moneyOut.Load() != o.Amount {
		t.Fatalf("provider asked %d refunds, returned %d; want 1 refund of %d", gw.refunds.Load(), gw.moneyOut.Load(), o.Amount)
	}
}
