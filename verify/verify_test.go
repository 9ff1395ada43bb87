package verify_test

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// now is the database clock of every test database.
var now = time.Date(2026, 1, 2, 10, 0, 0, 0, time.UTC)

// initialStock is what the clean database was stocked with.
var initialStock = map[string]int64{"SKU-A": 100, "SKU-B": 50}

// setup returns a database holding the clean fixture: one order of every kind the engine
// produces, consistent in every respect.
func setup(t *testing.T) *sqlstore.DB {
	t.Helper()
	return setupAt(t, sqlitetest.Path(t))
}

// setupAt is setup with the SQLite file at path (for tests that break a figure with SQL).
func setupAt(t *testing.T, path string) *sqlstore.DB {
	t.Helper()
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.Config{
		URL: path,
		Now: func() time.Time { return now },
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	inTx(t, db, func(tx store.Tx) {
		for sku, n := range initialStock {
			must(tx.StockSet(ctx, sku, n))
		}
		for _, id := range []string{"c-open", "c-paid", "c-timeout", "c-refunded"} {
			check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: id, UserID: "u-1", AmountOff: 100, Currency: "USD",
				State: orderly.CouponAvailable, CreatedAt: now.Add(-time.Hour)}))
		}

		newOrder(t, tx, orderOpts{ID: "o-open", CouponID: "c-open", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 2, UnitPrice: 500}}})

		newOrder(t, tx, orderOpts{ID: "o-paid", CouponID: "c-paid", Items: []orderly.Item{
			{SKU: "SKU-A", Quantity: 1, UnitPrice: 500}, {SKU: "SKU-B", Quantity: 3, UnitPrice: 200}}})
		pay(t, tx, "o-paid", "p-paid")

		newOrder(t, tx, orderOpts{ID: "o-timeout", CouponID: "c-timeout", CloseIn: -time.Minute,
			Items: []orderly.Item{{SKU: "SKU-B", Quantity: 1, UnitPrice: 900}}})
		payment(t, tx, "o-timeout", "p-timeout", orderly.PaymentFailed)
		closeOrder(t, tx, "o-timeout", orderly.EventTimeout, orderly.CloseReasonPaymentTimeout)

		newOrder(t, tx, orderOpts{ID: "o-late", CloseIn: -2 * time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 700}}})
		closeOrder(t, tx, "o-late", orderly.EventTimeout, orderly.CloseReasonPaymentTimeout)
		payment(t, tx, "o-late", "p-late", orderly.PaymentRefunded)

		newOrder(t, tx, orderOpts{ID: "o-cancel", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 700}}})
		closeOrder(t, tx, "o-cancel", orderly.EventCancel, orderly.CloseReasonBuyerCancelled)

		newOrder(t, tx, orderOpts{ID: "o-retry", Items: []orderly.Item{{SKU: "SKU-B", Quantity: 2, UnitPrice: 300}}})
		payment(t, tx, "o-retry", "p-retry-1", orderly.PaymentFailed)
		pay(t, tx, "o-retry", "p-retry-2")

		newOrder(t, tx, orderOpts{ID: "o-double", Items: []orderly.Item{{SKU: "SKU-B", Quantity: 1, UnitPrice: 300}}})
		pay(t, tx, "o-double", "p-double-1")
		payment(t, tx, "o-double", "p-double-2", orderly.PaymentRefunded)

		newOrder(t, tx, orderOpts{ID: "o-refunded", CouponID: "c-refunded", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 800}}})
		pay(t, tx, "o-refunded", "p-refunded")
		transition(t, tx, "o-refunded", orderly.StatePaid, orderly.EventRefund, orderly.StateRefunding, "")
		setPayment(t, tx, "p-refunded", orderly.PaymentRefunded)
		transition(t, tx, "o-refunded", orderly.StateRefunding, orderly.EventRefundComplete, orderly.StateRefunded, orderly.PayRefunded)

		check(t, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicOrderPaid, Key: "o-paid", Payload: []byte(`{"sequence":1}`), Sequence: 1, Now: now}}))
		msgs := must(tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10}))
		check(t, tx.OutboxMarkDelivered(ctx, []int64{msgs[0].ID}, now))
	})
	return db
}

type orderOpts struct {
	ID       string
	Items    []orderly.Item
	CouponID string
	CloseIn  time.Duration // close_at - now; default 10 min
	// FullPrice charges Σ quantity × unit_price although a coupon is used (a broken
	// server); by default the coupon's amount_off is taken off, as the order service does.
	FullPrice bool
}

// newOrder writes an open order the way the order service does: priced at Σ quantity ×
// unit_price − the coupon's amount_off, stock reserved, coupon frozen, order inserted.
func newOrder(t *testing.T, tx store.Tx, o orderOpts) {
	t.Helper()
	ctx := context.Background()
	closeIn := o.CloseIn
	if closeIn == 0 {
		closeIn = 10 * time.Minute
	}
	var amount int64
	for _, it := range o.Items {
		amount += it.Quantity * it.UnitPrice
	}
	if o.CouponID != "" && !o.FullPrice {
		amount -= must(tx.CouponGet(ctx, o.CouponID)).AmountOff
	}
	check(t, tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{
		ID: o.ID, UserID: "u-1", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
		PayStatus: orderly.PayUnpaid, Items: o.Items, Amount: amount, Currency: "USD", CouponID: o.CouponID,
		CreatedAt: now.Add(closeIn - 15*time.Minute), ExpiresAt: now.Add(closeIn - time.Second),
		CloseAt: now.Add(closeIn), Version: 1,
	}}))
	for _, it := range o.Items {
		if ok := must(tx.StockReserve(ctx, &store.StockReserveParams{OrderID: o.ID, SKU: it.SKU, Quantity: it.Quantity, Now: now})); !ok {
			t.Fatalf("reserve %s for %s: not enough stock", it.SKU, o.ID)
		}
	}
	if o.CouponID != "" {
		if !must(tx.CouponFreeze(ctx, &store.CouponFreezeParams{ID: o.CouponID, UserID: "u-1", OrderID: o.ID, Currency: "USD", Now: now})) {
			t.Fatalf("freeze coupon %s for %s", o.CouponID, o.ID)
		}
	}
}

// payment writes an attempt of the order's amount in the given state.
func payment(t *testing.T, tx store.Tx, orderID, id string, state orderly.PaymentState) *orderly.Payment {
	t.Helper()
	ctx := context.Background()
	o := must(tx.OrderGet(ctx, orderID))
	p := &orderly.Payment{ID: id, OrderID: orderID, Channel: "sim", Amount: o.Amount, Currency: o.Currency,
		State: orderly.PaymentInitiated, CreatedAt: now}
	check(t, tx.PaymentInsert(ctx, p))
	if state != orderly.PaymentInitiated {
		setPayment(t, tx, id, state)
	}
	return p
}

func setPayment(t *testing.T, tx store.Tx, id string, state orderly.PaymentState) {
	t.Helper()
	params := &store.PaymentSetStateParams{ID: id, To: state, From: []orderly.PaymentState{
		orderly.PaymentInitiated, orderly.PaymentSucceeded, orderly.PaymentFailed, orderly.PaymentRefundPending, orderly.PaymentRefunded}}
	switch state {
	case orderly.PaymentSucceeded, orderly.PaymentRefundPending:
		params.ChannelTxnID, params.SucceededAt = "txn-"+id, &now
	case orderly.PaymentRefunded:
		params.ChannelTxnID, params.SucceededAt, params.RefundedAt = "txn-"+id, &now, &now
	case orderly.PaymentFailed:
		params.FailReason = "declined"
	}
	if !must(tx.PaymentSetState(context.Background(), params)) {
		t.Fatalf("set payment %s to %s: no row changed", id, state)
	}
}

// pay applies a succeeded payment to an open order as the payment service does.
func pay(t *testing.T, tx store.Tx, orderID, paymentID string) {
	t.Helper()
	ctx := context.Background()
	payment(t, tx, orderID, paymentID, orderly.PaymentSucceeded)
	transition(t, tx, orderID, orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
	must(tx.ReservationsCommit(ctx, orderID, now))
	if o := must(tx.OrderGet(ctx, orderID)); o.CouponID != "" {
		if !must(tx.CouponUse(ctx, o.CouponID, orderID)) {
			t.Fatalf("use coupon %s for %s", o.CouponID, orderID)
		}
	}
}

// closeOrder closes an open order and releases its stock and coupon, as the close path and
// the outbox handlers do together.
func closeOrder(t *testing.T, tx store.Tx, orderID string, event orderly.Event, reason orderly.CloseReason) {
	t.Helper()
	ctx := context.Background()
	params := &store.OrdersTransitionParams{IDs: []string{orderID}, From: orderly.StatePendingPayment,
		To: orderly.StateClosed, Event: event, CloseReason: reason, Now: now, Actor: "test"}
	if reason == orderly.CloseReasonPaymentTimeout {
		params.CloseAtBy = &now
	}
	if got := must(tx.OrdersTransition(ctx, params)); len(got) != 1 {
		t.Fatalf("close %s: changed %v", orderID, got)
	}
	must(tx.ReservationsRelease(ctx, orderID, now))
	if o := must(tx.OrderGet(ctx, orderID)); o.CouponID != "" {
		must(tx.CouponRelease(ctx, o.CouponID, orderID, now))
	}
}

func transition(t *testing.T, tx store.Tx, id string, from orderly.State, event orderly.Event, to orderly.State, ps orderly.PayStatus) {
	t.Helper()
	got := must(tx.OrdersTransition(context.Background(), &store.OrdersTransitionParams{
		IDs: []string{id}, From: from, To: to, Event: event, SetPayStatus: ps, SetPaidAt: event == orderly.EventPay,
		Now: now, Actor: "test"}))
	if len(got) != 1 {
		t.Fatalf("transition %s %s -> %s: changed %v", id, from, to, got)
	}
}

func inTx(t *testing.T, db store.Store, fn func(tx store.Tx)) {
	t.Helper()
	check(t, db.InTx(context.Background(), func(tx store.Tx) error { fn(tx); return nil }))
}

func check(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// must returns v, and panics on error (which fails the test with a stack trace); it keeps
// the fixture code short where every call returns a value and an error.
func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

func TestCheckClean(t *testing.T) {
	t.Parallel()
	db := setup(t)
	rep, err := verify.Check(context.Background(), db, verify.Options{InitialStock: initialStock, RequireDrained: true})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Fatalf("clean database has violations:\n%s", strings.Join(rep.Violations, "\n"))
	}
	if rep.Orders != 8 || rep.EarlyCloses != 0 || rep.Overdue != 0 {
		t.Errorf("orders %d, early closes %d, overdue %d; want 8, 0, 0", rep.Orders, rep.EarlyCloses, rep.Overdue)
	}
	wantStates := map[string]int64{"pending_payment": 1, "paid": 3, "closed": 3, "refunded": 1}
	for k, v := range wantStates {
		if rep.OrdersByState[k] != v {
			t.Errorf("orders_by_state[%s] = %d, want %d (all: %v)", k, rep.OrdersByState[k], v, rep.OrdersByState)
		}
	}
	if rep.OrdersByCloseReason["payment_timeout"] != 2 || rep.OrdersByCloseReason["buyer_cancelled"] != 1 {
		t.Errorf("orders_by_close_reason = %v", rep.OrdersByCloseReason)
	}
	if rep.OrdersByPayStatus["paid"] != 3 || rep.OrdersByPayStatus["refunded"] != 1 || rep.OrdersByPayStatus["unpaid"] != 4 {
		t.Errorf("orders_by_pay_status = %v", rep.OrdersByPayStatus)
	}
	wantPayments := map[string]int64{"succeeded": 3, "failed": 2, "refunded": 3}
	for k, v := range wantPayments {
		if rep.PaymentsByState[k] != v {
			t.Errorf("payments_by_state[%s] = %d, want %d (all: %v)", k, rep.PaymentsByState[k], v, rep.PaymentsByState)
		}
	}
	if rep.Payments != 8 {
		t.Errorf("payments = %d, want 8", rep.Payments)
	}
	if rep.OutboxByState["delivered"] != 1 || rep.OutboxByState["pending"] != 0 || rep.OutboxByState["dead"] != 0 {
		t.Errorf("outbox_by_state = %v", rep.OutboxByState)
	}
	b, err := json.Marshal(rep)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), `"violations":[]`) {
		t.Errorf("violations must encode as []: %s", b)
	}
}

// tamperStore hands Check a Tx whose lists are changed by the function fields: it makes the
// states that the schema's CHECK constraints cannot hold (negative stock, counts that disagree
// with the reservations, a lost audit trail).
type tamperStore struct {
	store.Store
	stock func([]*orderly.Stock) []*orderly.Stock
	trail func(orderID string, trail []*orderly.Transition) []*orderly.Transition
}

func (s *tamperStore) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.Read(ctx, func(tx store.Tx) error { return fn(&tamperTx{Tx: tx, s: s}) })
}

type tamperTx struct {
	store.Tx
	s *tamperStore
}

var _ store.Tx = (*tamperTx)(nil)

func (t *tamperTx) StockList(ctx context.Context, after string, limit int) ([]*orderly.Stock, error) {
	list, err := t.Tx.StockList(ctx, after, limit)
	if err == nil && t.s.stock != nil {
		list = t.s.stock(list)
	}
	return list, err
}

func (t *tamperTx) TransitionList(ctx context.Context, orderID string) ([]*orderly.Transition, error) {
	trail, err := t.Tx.TransitionList(ctx, orderID)
	if err == nil && t.s.trail != nil {
		trail = t.s.trail(orderID, trail)
	}
	return trail, err
}

// changeStock returns a stock tamper that applies fn to one SKU's row.
func changeStock(sku string, fn func(s *orderly.Stock)) func([]*orderly.Stock) []*orderly.Stock {
	return func(list []*orderly.Stock) []*orderly.Stock {
		for _, s := range list {
			if s.SKU == sku {
				fn(s)
			}
		}
		return list
	}
}

func TestCheckViolations(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	tests := []struct {
		name   string
		opts   verify.Options
		mutate func(t *testing.T, tx store.Tx)
		tamper *tamperStore
		// want is a substring of one violation; "" means no violation at all.
		want string
		// invariants lists the invariants every reported violation must belong to;
		// default: the prefix of want.
		invariants []string
		early      int
	}{
		{
			name: "I1 closed for timeout before close_at",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-early", CloseIn: 5 * time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
				must(tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: []string{"o-early"}, From: orderly.StatePendingPayment,
					To: orderly.StateClosed, Event: orderly.EventTimeout, CloseReason: orderly.CloseReasonPaymentTimeout, Now: now, Actor: "test"}))
				must(tx.ReservationsRelease(ctx, "o-early", now))
			},
			want:  "I1: order o-early closed for payment_timeout at 2026-01-02T10:00:00.000Z, 5m0s before its close_at",
			early: 1,
		},
		{
			name:       "I2 closed order keeps a succeeded payment",
			mutate:     func(t *testing.T, tx store.Tx) { payment(t, tx, "o-timeout", "p-kept", orderly.PaymentSucceeded) },
			want:       "I2: order o-timeout is closed but its payment p-kept is succeeded (must be refunded)",
			invariants: []string{"I2", "I4"},
		},
		{
			name: "I2 closed order's attempt in flight never settled",
			opts: verify.Options{RequireDrained: true},
			mutate: func(t *testing.T, tx store.Tx) {
				payment(t, tx, "o-timeout", "p-flight", orderly.PaymentInitiated)
				must(tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{ID: "o-timeout", State: orderly.StateClosed,
					From: []orderly.PayStatus{orderly.PayUnpaid}, To: orderly.PayPaying, SetPaymentID: "p-flight",
					Event: orderly.EventPaymentStarted, Actor: "test", Now: now}))
			},
			want: "I2: order o-timeout closed with its payment p-flight in flight, and nothing settled the attempt at the gateway",
		},
		{
			name:       "I2 closed order's refund never completes",
			mutate:     func(t *testing.T, tx store.Tx) { setPayment(t, tx, "p-late", orderly.PaymentRefundPending) },
			want:       "I2: order o-late is closed but its payment p-late is refund_pending (must be refunded)",
			invariants: []string{"I2", "I4"},
		},
		{
			name:       "I2 paid order without a succeeded payment",
			mutate:     func(t *testing.T, tx store.Tx) { setPayment(t, tx, "p-paid", orderly.PaymentFailed) },
			want:       "I2: order o-paid is paid but has no succeeded payment",
			invariants: []string{"I2", "I4"},
		},
		{
			name:       "I2 paid order with two succeeded payments",
			mutate:     func(t *testing.T, tx store.Tx) { payment(t, tx, "o-paid", "p-second", orderly.PaymentSucceeded) },
			want:       "I2: order o-paid is paid with 2 succeeded payments [p-paid p-second]",
			invariants: []string{"I2", "I4"},
		},
		{
			name: "I2 paid order's payment is of another amount",
			mutate: func(t *testing.T, tx store.Tx) {
				setPayment(t, tx, "p-paid", orderly.PaymentFailed)
				check(t, tx.PaymentInsert(ctx, &orderly.Payment{ID: "p-cheap", OrderID: "o-paid", Channel: "sim", Amount: 1,
					Currency: "USD", State: orderly.PaymentSucceeded, ChannelTxnID: "txn-cheap", CreatedAt: now}))
			},
			want:       "I2: order o-paid is paid for 1000 USD but its payment p-cheap is 1 USD",
			invariants: []string{"I2", "I4"},
		},
		{
			name: "I2 paid order's extra payment is refund_pending",
			mutate: func(t *testing.T, tx store.Tx) {
				setPayment(t, tx, "p-double-2", orderly.PaymentRefundPending)
			},
			want:       "I2: order o-double is paid and its extra payment p-double-2 is refund_pending",
			invariants: []string{"I2", "I4"},
		},
		{
			name: "I2 paid order's pay_status is not paid",
			mutate: func(t *testing.T, tx store.Tx) {
				must(tx.OrderSetPayStatus(ctx, &store.OrderSetPayStatusParams{ID: "o-paid", State: orderly.StatePaid,
					From: []orderly.PayStatus{orderly.PayPaid}, To: orderly.PayFailed, Event: orderly.EventPaymentFailed, Actor: "test"}))
			},
			want: "I2: order o-paid is paid but its pay_status is failed",
		},
		{
			name: "I3 closed order's reservation still held",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-held", CloseIn: -time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
				closeOrderNoRelease(t, tx, "o-held")
			},
			want: "I3: order o-held reservation SKU-A held after close",
		},
		{
			name: "I3 closed order's reservation committed",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-sold", CloseIn: -time.Minute, Items: []orderly.Item{{SKU: "SKU-B", Quantity: 1, UnitPrice: 100}}})
				closeOrderNoRelease(t, tx, "o-sold")
				must(tx.ReservationsCommit(ctx, "o-sold", now))
			},
			want: "I3: order o-sold reservation SKU-B committed after close",
		},
		{
			name: "I3 paid order's reservation not committed",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-uncommitted", Items: []orderly.Item{{SKU: "SKU-B", Quantity: 2, UnitPrice: 100}}})
				payment(t, tx, "o-uncommitted", "p-uncommitted", orderly.PaymentSucceeded)
				transition(t, tx, "o-uncommitted", orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
			},
			want: "I3: order o-uncommitted is paid but its reservation SKU-B is held, want committed",
		},
		{
			name: "I3 open order's reservation released",
			mutate: func(t *testing.T, tx store.Tx) {
				must(tx.ReservationsRelease(ctx, "o-open", now))
			},
			want: "I3: order o-open is pending_payment but its reservation SKU-A is released, want held",
		},
		{
			name: "I3 reservation does not match the items",
			mutate: func(t *testing.T, tx store.Tx) {
				must(tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o-open", SKU: "SKU-B", Quantity: 1, Now: now}))
			},
			want: "I3: order o-open has a reservation of SKU-B, which it did not order",
		},
		{
			name: "I3 coupon frozen by an order that does not exist",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-ghost", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponFrozen, OrderID: "o-ghost", CreatedAt: now}))
			},
			want: "I3: coupon c-ghost is frozen by order o-ghost, which does not exist",
		},
		{
			name: "I3 coupon used by an order that does not reference it",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-stray", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponUsed, OrderID: "o-paid", CreatedAt: now}))
			},
			want: "I3: coupon c-stray is used by order o-paid, which does not use it",
		},
		{
			name: "I3 closed order's coupon still frozen",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-stuck", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: now}))
				newOrder(t, tx, orderOpts{ID: "o-stuck", CouponID: "c-stuck", CloseIn: -time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 900}}})
				closeOrderNoRelease(t, tx, "o-stuck")
				must(tx.ReservationsRelease(ctx, "o-stuck", now))
			},
			want: "I3: order o-stuck is closed but its coupon c-stuck is still frozen by it",
		},
		{
			name: "I3 paid order's coupon not used",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-unused", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: now}))
				newOrder(t, tx, orderOpts{ID: "o-unused", CouponID: "c-unused", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 900}}})
				payment(t, tx, "o-unused", "p-unused", orderly.PaymentSucceeded)
				transition(t, tx, "o-unused", orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
				must(tx.ReservationsCommit(ctx, "o-unused", now))
			},
			want: "I3: order o-unused is paid but its coupon c-unused is frozen by order o-unused, want used by it",
		},
		{
			name: "I3 refunded order's reservation never committed",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-refund-held", Items: []orderly.Item{{SKU: "SKU-B", Quantity: 2, UnitPrice: 100}}})
				payment(t, tx, "o-refund-held", "p-refund-held", orderly.PaymentSucceeded)
				transition(t, tx, "o-refund-held", orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
				transition(t, tx, "o-refund-held", orderly.StatePaid, orderly.EventRefund, orderly.StateRefunding, "")
				setPayment(t, tx, "p-refund-held", orderly.PaymentRefunded)
				transition(t, tx, "o-refund-held", orderly.StateRefunding, orderly.EventRefundComplete, orderly.StateRefunded, orderly.PayRefunded)
			},
			want: "I3: order o-refund-held is refunded but its reservation SKU-B is held, want committed",
		},
		{
			name: "I3 refunding order's coupon still frozen",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-refunding", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: now}))
				newOrder(t, tx, orderOpts{ID: "o-refunding", CouponID: "c-refunding", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 900}}})
				payment(t, tx, "o-refunding", "p-refunding", orderly.PaymentSucceeded)
				transition(t, tx, "o-refunding", orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
				must(tx.ReservationsCommit(ctx, "o-refunding", now))
				transition(t, tx, "o-refunding", orderly.StatePaid, orderly.EventRefund, orderly.StateRefunding, "")
			},
			want: "I3: order o-refunding is refunding but its coupon c-refunding is frozen by order o-refunding, want used by it",
		},
		{
			name: "I3 refunded order's coupon released",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-given-back", UserID: "u-1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: now}))
				newOrder(t, tx, orderOpts{ID: "o-given-back", CouponID: "c-given-back", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 900}}})
				payment(t, tx, "o-given-back", "p-given-back", orderly.PaymentSucceeded)
				transition(t, tx, "o-given-back", orderly.StatePendingPayment, orderly.EventPay, orderly.StatePaid, orderly.PayPaid)
				must(tx.ReservationsCommit(ctx, "o-given-back", now))
				transition(t, tx, "o-given-back", orderly.StatePaid, orderly.EventRefund, orderly.StateRefunding, "")
				setPayment(t, tx, "p-given-back", orderly.PaymentRefunded)
				transition(t, tx, "o-given-back", orderly.StateRefunding, orderly.EventRefundComplete, orderly.StateRefunded, orderly.PayRefunded)
				must(tx.CouponRelease(ctx, "c-given-back", "o-given-back", now))
			},
			want: "I3: order o-given-back is refunded but its coupon c-given-back is available, want used by it",
		},
		{
			name: "I4 full price charged with a coupon",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-ignored", UserID: "u-1", AmountOff: 150, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: now}))
				newOrder(t, tx, orderOpts{ID: "o-full-price", CouponID: "c-ignored", FullPrice: true,
					Items: []orderly.Item{{SKU: "SKU-A", Quantity: 2, UnitPrice: 400}, {SKU: "SKU-B", Quantity: 1, UnitPrice: 250}}})
				pay(t, tx, "o-full-price", "p-full-price")
			},
			want: "I4: order o-full-price amount is 1050 USD, but Σ quantity × unit_price 1050 − coupon c-ignored 150 = 900",
		},
		{
			name: "I3 order names a coupon that does not exist",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-nocoupon", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 900}}})
				check(t, tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{ID: "o-phantom", UserID: "u-1",
					Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid,
					Amount: 0, Currency: "USD", CouponID: "c-phantom", CreatedAt: now, ExpiresAt: now.Add(time.Minute),
					CloseAt: now.Add(time.Minute), Version: 1}}))
			},
			want: "I3: order o-phantom uses coupon c-phantom, which does not exist",
		},
		{
			name:   "I4 held disagrees with the reservations",
			tamper: &tamperStore{stock: changeStock("SKU-A", func(s *orderly.Stock) { s.Held++; s.Available-- })},
			want:   "I4: sku SKU-A held is 3 but its held reservations sum to 2",
		},
		{
			name:   "I4 sold disagrees with the reservations",
			tamper: &tamperStore{stock: changeStock("SKU-B", func(s *orderly.Stock) { s.Sold--; s.Available++ })},
			want:   "I4: sku SKU-B sold is 5 but its committed reservations sum to 6",
		},
		{
			name:   "I4 negative stock",
			tamper: &tamperStore{stock: changeStock("SKU-B", func(s *orderly.Stock) { s.Available = -1 })},
			want:   "I4: sku SKU-B has a negative count: available -1, held 0, sold 6",
		},
		{
			name:   "I4 units appeared from nowhere",
			mutate: func(t *testing.T, tx store.Tx) { must(tx.StockSet(ctx, "SKU-A", 500)) },
			want:   "I4: sku SKU-A: available 500 + held 2 + sold 2 = 504, want the initial 100",
		},
		{
			name: "I4 stocked SKU missing",
			opts: verify.Options{InitialStock: map[string]int64{"SKU-A": 100, "SKU-B": 50, "SKU-C": 7}},
			want: "I4: sku SKU-C was stocked with 7 but has no stock row",
		},
		{
			name:   "I4 money: refunded order keeps its payment",
			mutate: func(t *testing.T, tx store.Tx) { setPayment(t, tx, "p-refunded", orderly.PaymentSucceeded) },
			want:   "I4: order o-refunded is refunded: captured 700 − refunded 0 = 700 USD, want 0",
		},
		{
			name: "I5 open order overdue",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-overdue", CloseIn: -2 * time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
			},
			want: "I5: order o-overdue is still pending_payment 2m0s after its close_at 2026-01-02T09:58:00.000Z (tolerance 1m0s)",
		},
		{
			name: "I5 open order overdue within the tolerance",
			opts: verify.Options{Tolerance: 3 * time.Minute},
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-overdue", CloseIn: -2 * time.Minute, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
			},
		},
		{
			name: "I6 illegal transition",
			mutate: func(t *testing.T, tx store.Tx) {
				newOrder(t, tx, orderOpts{ID: "o-illegal", Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
				transition(t, tx, "o-illegal", orderly.StatePendingPayment, orderly.EventCancel, orderly.StateRefunding, "")
			},
			want: "pending_payment --cancel--> refunding is not a transition of the standard flow",
			// and its reservation is still held, as a refunding order's must not be
			invariants: []string{"I6", "I3"},
		},
		{
			name: "I6 audit trail lost",
			tamper: &tamperStore{trail: func(id string, trail []*orderly.Transition) []*orderly.Transition {
				if id == "o-paid" {
					return nil
				}
				return trail
			}},
			want: "I6: order o-paid is paid but its audit trail ends at pending_payment",
		},
		{
			name: "I6 audit trail broken",
			tamper: &tamperStore{trail: func(id string, trail []*orderly.Transition) []*orderly.Transition {
				if id == "o-refunded" {
					return []*orderly.Transition{trail[0], trail[2]}
				}
				return trail
			}},
			want: "goes from refunding but the previous row ended at paid",
		},
		{
			name: "I6 audit trail starts elsewhere",
			tamper: &tamperStore{trail: func(id string, trail []*orderly.Transition) []*orderly.Transition {
				if id == "o-refunded" {
					return trail[1:]
				}
				return trail
			}},
			want: "I6: order o-refunded audit trail starts at paid, want the standard flow's initial state pending_payment",
		},
		{
			name: "I6 unknown flow",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{ID: "o-flow", UserID: "u-1",
					Flow: "group_buy", State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid, Currency: "USD",
					CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(time.Minute), Version: 1}}))
			},
			want: `I6: order o-flow has unknown flow "group_buy"`,
		},
		{
			name: "I7 dead message",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicPaymentRefund, Key: "p-late", Payload: []byte(`{}`), Now: now}}))
				msgs := must(tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 10}))
				check(t, tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: msgs[0].ID, LastError: "gateway down", Dead: true}))
			},
			want: "I7: 1 outbox messages are dead; #2 payment.refund p-late after 1 attempts: gateway down",
		},
		{
			name: "I7 pending message when drained is required",
			opts: verify.Options{RequireDrained: true},
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicOrderClosed, Key: "o-timeout", Payload: []byte(`{"sequence":1}`), Sequence: 1, Now: now}}))
			},
			want: "I7: 1 outbox messages are still pending at rest",
		},
		{
			name: "I7 pending message is in flight otherwise",
			mutate: func(t *testing.T, tx store.Tx) {
				check(t, tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicOrderClosed, Key: "o-timeout", Payload: []byte(`{"sequence":1}`), Sequence: 1, Now: now}}))
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			db := setup(t)
			if tt.mutate != nil {
				inTx(t, db, func(tx store.Tx) { tt.mutate(t, tx) })
			}
			var s store.Store = db
			if tt.tamper != nil {
				tt.tamper.Store = db
				s = tt.tamper
			}
			opts := tt.opts
			if opts.InitialStock == nil {
				opts.InitialStock = initialStock
			}
			rep, err := verify.Check(ctx, s, opts)
			if err != nil {
				t.Fatal(err)
			}
			if rep.EarlyCloses != tt.early {
				t.Errorf("early closes = %d, want %d", rep.EarlyCloses, tt.early)
			}
			if tt.want == "" {
				if !rep.OK() {
					t.Fatalf("want no violation, got:\n%s", strings.Join(rep.Violations, "\n"))
				}
				return
			}
			invariants := tt.invariants
			if invariants == nil {
				invariants = []string{strings.SplitN(tt.name, " ", 2)[0]}
			}
			found := false
			for _, v := range rep.Violations {
				found = found || strings.Contains(v, tt.want)
				inv, _, _ := strings.Cut(v, ":")
				if !slices.Contains(invariants, inv) {
					t.Errorf("unexpected violation of another invariant: %s", v)
				}
			}
			if !found {
				t.Fatalf("want a violation containing\n\t%s\ngot:\n\t%s", tt.want, strings.Join(rep.Violations, "\n\t"))
			}
		})
	}
}

// closeOrderNoRelease closes an open order for the buyer without releasing anything.
func closeOrderNoRelease(t *testing.T, tx store.Tx, orderID string) {
	t.Helper()
	got := must(tx.OrdersTransition(context.Background(), &store.OrdersTransitionParams{IDs: []string{orderID},
		From: orderly.StatePendingPayment, To: orderly.StateClosed, Event: orderly.EventCancel,
		CloseReason: orderly.CloseReasonBuyerCancelled, Now: now, Actor: "test"}))
	if len(got) != 1 {
		t.Fatalf("close %s: changed %v", orderID, got)
	}
}

func TestCheckMaxViolations(t *testing.T) {
	t.Parallel()
	db := setup(t)
	inTx(t, db, func(tx store.Tx) {
		for _, id := range []string{"o-1", "o-2", "o-3"} {
			newOrder(t, tx, orderOpts{ID: id, CloseIn: -time.Hour, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 100}}})
		}
	})
	rep, err := verify.Check(context.Background(), db, verify.Options{MaxViolations: 2})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Violations) != 2 || rep.ViolationsOmitted != 1 || rep.Overdue != 3 || rep.OK() {
		t.Fatalf("violations %q, omitted %d, overdue %d; want 2 listed, 1 omitted, 3 overdue",
			rep.Violations, rep.ViolationsOmitted, rep.Overdue)
	}
}

func TestCheckPaging(t *testing.T) {
	t.Parallel()
	db := setup(t)
	ctx := context.Background()
	inTx(t, db, func(tx store.Tx) {
		for i := range 1500 { // with the fixture's 8: two pages of 1000 and 508
			check(t, tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{ID: fmt.Sprintf("p-%05d", i),
				UserID: "u-1", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid,
				Currency: "USD", CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(time.Minute), Version: 1}}))
		}
	})
	rep, err := verify.Check(ctx, db, verify.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Orders != 1508 || rep.OrdersByState["pending_payment"] != 1501 || !rep.OK() {
		t.Fatalf("orders %d (want 1508), by state %v, violations %q", rep.Orders, rep.OrdersByState, rep.Violations)
	}
}
