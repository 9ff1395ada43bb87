package payment_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
)

// stockFigures is a SKU's stock beside the order's reservation counts of it.
type stockFigures struct {
	available, held, sold int64
	refunded, restocked   int64
}

func figures(t *testing.T, e interface {
	StockOf(testing.TB, string) orderly.Stock
	Read(testing.TB, func(store.Tx) error)
}, orderID, sku string) stockFigures {
	t.Helper()
	st := e.StockOf(t, sku)
	got := stockFigures{available: st.Available, held: st.Held, sold: st.Sold}
	e.Read(t, func(tx store.Tx) error {
		rs, err := tx.ReservationList(context.Background(), orderID)
		for _, r := range rs {
			if r.SKU == sku {
				got.refunded, got.restocked = r.Refunded, r.Restocked
			}
		}
		return err
	})
	return got
}

// TestRefusedRefundDoesNotRestock is the fresh-user trial's report: an order of 2×R2,
// paid (stock 8/0/2); the gateway refuses refunds of the trade (Alipay's TRADE_FINISHED).
// Each refused refund of one unit with restock used to put a unit back in stock and keep it
// there (8/0/2 → 9/0/1 → 10/0/0, refunded 0 and restocked 2, the order still paid), and a
// third attempt was refused with refund-exceeds-items. Restock now waits for the gateway's
// confirmation: refused refunds move no stock, and a refund the gateway accepts later
// restocks its unit once.
func TestRefusedRefundDoesNotRestock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e, _ := newCounted(t)
	o, p := paidOrder(t, e, orderly.Item{SKU: "R2", Quantity: 2, UnitPrice: 500})
	want := func(step string, w stockFigures) {
		t.Helper()
		if got := figures(t, e, o.ID, "R2"); got != w {
			t.Fatalf("%s: stock and reservation %+v, want %+v", step, got, w)
		}
	}
	want("paid", stockFigures{available: 8, sold: 2})
	e.Gateway.RefuseRefunds(p.ID, "TRADE_FINISHED: the trade no longer takes refunds")
	returned := orderly.CreateRefundParams{OrderID: o.ID, Amount: 500, Items: []orderly.RefundItem{{SKU: "R2", Quantity: 1}}, Restock: true}
	for i := range 2 {
		f := refund(t, e, &returned)
		want("requested", stockFigures{available: 8, sold: 2, refunded: 1})
		e.Drain(t)
		want("refused", stockFigures{available: 8, sold: 2})
		if fs := refundsOf(t, e, o.ID); len(fs) != i+1 || fs[i].ID != f.ID || fs[i].State != orderly.RefundFailed {
			t.Fatalf("attempt %d: refunds %+v, want the last one failed", i+1, fs)
		}
		wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 0)
		wantVerified(t, e)
	}
	if got := e.Gateway.Refunds(p.ID); len(got) != 0 {
		t.Fatalf("gateway moved money for refused refunds: %+v", got)
	}

	e.Gateway.RefuseRefunds(p.ID, "")
	f, created, err := e.Orders.CreateRefund(ctx, &returned)
	if err != nil || !created {
		t.Fatalf("third attempt, accepted by the gateway: %v (created %v); want it refundable again", err, created)
	}
	e.Drain(t)
	want("confirmed", stockFigures{available: 9, sold: 1, refunded: 1, restocked: 1})
	if got, ok := e.Gateway.RefundedFor(f.ID); !ok || got != 500 {
		t.Fatalf("gateway refunded %d (%v) under refund %s, want 500", got, ok, f.ID)
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 500)
	// One unit is left to return: two are refused, one is taken.
	_, _, err = e.Orders.CreateRefund(ctx, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 1, Restock: true, Items: []orderly.RefundItem{{SKU: "R2", Quantity: 2}}})
	if orderly.ErrorCode(err) != orderly.EREFUNDITEMS {
		t.Fatalf("two more units with one left: %v, want %s", err, orderly.EREFUNDITEMS)
	}
	refund(t, e, &returned)
	e.Drain(t)
	want("both returned", stockFigures{available: 10, sold: 0, refunded: 2, restocked: 2})
	wantOrder(t, e, o.ID, orderly.StateRefunded, orderly.PayRefunded, 1000)
	wantVerified(t, e)
}

// TestRefundUnknownOutcomeRestocksOnConfirmation: while the gateway's answer is unknown
// (a transient error: the relay retries with the same idempotency key), the refund's units
// are counted as refunded but not restocked; the confirmation that follows restocks them
// once.
func TestRefundUnknownOutcomeRestocksOnConfirmation(t *testing.T) {
	t.Parallel()
	e, gw := newCounted(t)
	o, p := paidOrder(t, e, orderly.Item{SKU: "U1", Quantity: 3, UnitPrice: 400})
	gw.mu.Lock()
	gw.refundErr[p.ID] = errors.New("gateway timeout")
	gw.mu.Unlock()
	refund(t, e, &orderly.CreateRefundParams{OrderID: o.ID, Amount: 800, Items: []orderly.RefundItem{{SKU: "U1", Quantity: 2}}, Restock: true})
	e.Drain(t)
	if got := figures(t, e, o.ID, "U1"); got != (stockFigures{available: 7, sold: 3, refunded: 2}) {
		t.Fatalf("outcome unknown: %+v, want 7/0/3 with 2 refunded, none restocked", got)
	}
	if fs := refundsOf(t, e, o.ID); len(fs) != 1 || fs[0].State != orderly.RefundRequested {
		t.Fatalf("refunds %+v, want one requested", fs)
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPaid, 800)
	gw.mu.Lock()
	delete(gw.refundErr, p.ID)
	gw.mu.Unlock()
	e.Clock.Advance(time.Hour) // past the retry's backoff
	e.Drain(t)
	if got := figures(t, e, o.ID, "U1"); got != (stockFigures{available: 9, sold: 1, refunded: 2, restocked: 2}) {
		t.Fatalf("confirmed: %+v, want 9/0/1 with 2 refunded and restocked", got)
	}
	wantOrder(t, e, o.ID, orderly.StatePaid, orderly.PayPartiallyRefunded, 800)
	wantVerified(t, e)
}

// lockOrder records, per transaction, the order in which a refund confirmation takes rows:
// "order <id>" for a transition, "stock <sku>" for a restock.
type lockOrder struct {
	store.Store
	mu  sync.Mutex
	txs [][]string
}

func (l *lockOrder) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	var rows []string
	err := l.Store.InTx(ctx, func(tx store.Tx) error {
		rows = rows[:0]
		return fn(&lockOrderTx{Tx: tx, rows: &rows})
	})
	l.mu.Lock()
	l.txs = append(l.txs, slices.Clone(rows))
	l.mu.Unlock()
	return err
}

type lockOrderTx struct {
	store.Tx
	rows *[]string
}

func (t *lockOrderTx) OrdersTransition(ctx context.Context, p *store.OrdersTransitionParams) ([]string, error) {
	for _, id := range p.IDs {
		*t.rows = append(*t.rows, "order "+id)
	}
	return t.Tx.OrdersTransition(ctx, p)
}

func (t *lockOrderTx) ReservationRefund(ctx context.Context, p *store.ReservationRefundParams) (bool, error) {
	if p.Restock != 0 {
		*t.rows = append(*t.rows, "stock "+p.SKU)
	}
	return t.Tx.ReservationRefund(ctx, p)
}

// TestRefundConfirmationsRestockLastInSKUOrder: the relay confirms the refunds waiting in
// refund.execute in one transaction. It used to restock each refund's units in message
// order, then move its order: a batch holding sku S-b while it waited for S-a deadlocked
// with creates and closes, which take stock rows last and in SKU order (on PostgreSQL
// with three instances under faults: ~250 deadlocks a run, creates timing out behind
// them). Every stock row is now taken after every order row, in SKU order across the batch.
func TestRefundConfirmationsRestockLastInSKUOrder(t *testing.T) {
	t.Parallel()
	log := &lockOrder{}
	e := enginetest.New(t, enginetest.Options{WrapStore: func(s store.Store) store.Store { log.Store = s; return log }})
	first, _ := paidOrder(t, e, orderly.Item{SKU: "S-a", Quantity: 1, UnitPrice: 300}, orderly.Item{SKU: "S-b", Quantity: 1, UnitPrice: 200})
	second, _ := paidOrder(t, e, orderly.Item{SKU: "S-c", Quantity: 1, UnitPrice: 100}, orderly.Item{SKU: "S-a", Quantity: 1, UnitPrice: 400})
	before := map[string]orderly.Stock{}
	for _, sku := range []string{"S-a", "S-b", "S-c"} {
		before[sku] = e.StockOf(t, sku)
	}
	// The first refund lists S-b before S-a; the second (a later message) S-c before S-a.
	refund(t, e, &orderly.CreateRefundParams{OrderID: first.ID, Amount: 500, Restock: true,
		Items: []orderly.RefundItem{{SKU: "S-b", Quantity: 1}, {SKU: "S-a", Quantity: 1}}})
	refund(t, e, &orderly.CreateRefundParams{OrderID: second.ID, Amount: 500, Restock: true,
		Items: []orderly.RefundItem{{SKU: "S-c", Quantity: 1}, {SKU: "S-a", Quantity: 1}}})
	log.mu.Lock()
	log.txs = nil
	log.mu.Unlock()
	e.Drain(t)

	want := []string{"order " + first.ID, "order " + second.ID, "stock S-a", "stock S-a", "stock S-b", "stock S-c"}
	var got []string
	for _, rows := range log.txs {
		if slices.ContainsFunc(rows, func(r string) bool { return strings.HasPrefix(r, "stock ") }) {
			if got != nil {
				t.Fatalf("restocks in two transactions: %q and %q; want the batch in one", got, rows)
			}
			got = rows
		}
	}
	if !slices.Equal(got, want) {
		t.Fatalf("rows taken by the confirmation: %q, want %q (orders first, then stock in SKU order)", got, want)
	}
	for sku, units := range map[string]int64{"S-a": 2, "S-b": 1, "S-c": 1} {
		b := before[sku]
		if st := e.StockOf(t, sku); st.Sold != b.Sold-units || st.Available != b.Available+units {
			t.Errorf("stock of %s after both refunds: %+v, want %d units back from %+v", sku, st, units, b)
		}
	}
	wantOrder(t, e, first.ID, orderly.StateRefunded, orderly.PayRefunded, 500)
	wantOrder(t, e, second.ID, orderly.StateRefunded, orderly.PayRefunded, 500)
	wantVerified(t, e)
}
