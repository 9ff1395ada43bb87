package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testMany checks statements that write the rows of many orders at once: the commit of
// many orders' reservations, per-order audit causes, and outbox batches of every size
// between the prepared statements' row counts.
func testMany(t *testing.T, open opener) {
	t.Run("ReservationsCommitMany", func(t *testing.T) { testReservationsCommitMany(t, open) })
	t.Run("OrdersTransitionCauses", func(t *testing.T) { testOrdersTransitionCauses(t, open) })
	t.Run("OutboxInsertSizes", func(t *testing.T) { testOutboxInsertSizes(t, open) })
}

// testReservationsCommitMany: the held reservations of several orders (over several SKUs,
// two orders sharing one) become committed and their units move from held to sold; a
// reservation released already, an order without reservations, an unknown order and an
// order not named are left alone; a second call changes nothing.
func testReservationsCommitMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	for _, id := range []string{"o1", "o2", "o3", "o4", "o5"} {
		insertOrder(t, s, &orderOpts{ID: id})
	}
	setStock(t, s, "sku-a", 10)
	setStock(t, s, "sku-b", 10)
	reserve(t, s, "o1", "sku-a", 2)
	reserve(t, s, "o1", "sku-b", 1)
	reserve(t, s, "o2", "sku-a", 3)
	reserve(t, s, "o4", "sku-b", 2)
	reserve(t, s, "o5", "sku-a", 1)
	inTx(t, s, func(tx store.Tx) error { _, err := tx.ReservationsRelease(ctx, "o4", t0); return err })
	// sku-a: available 4, held 6; sku-b: available 9, held 1.

	commit := func(ids ...string) []*orderly.Reservation {
		return write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsCommitMany(ctx, ids, t0.Add(time.Minute))
		})
	}
	ids := []string{"o4", "o2", "missing", "o3", "o1"}
	equal(t, "committed", commit(ids...), []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, State: orderly.ReservationCommitted},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, State: orderly.ReservationCommitted},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, State: orderly.ReservationCommitted},
	})
	wantStock := []*orderly.Stock{{SKU: "sku-a", Available: 4, Held: 1, Sold: 5}, {SKU: "sku-b", Available: 9, Sold: 1}}
	wantRes := []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, State: orderly.ReservationCommitted},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, State: orderly.ReservationCommitted},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, State: orderly.ReservationCommitted},
		{OrderID: "o4", SKU: "sku-b", Quantity: 2, State: orderly.ReservationReleased},
		{OrderID: "o5", SKU: "sku-a", Quantity: 1, State: orderly.ReservationHeld},
	}
	equal(t, "stock", []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}, wantStock)
	equal(t, "reservations", reservations(t, s, ""), wantRes)

	equal(t, "committed by a second call", commit(ids...), []*orderly.Reservation(nil))
	equal(t, "committed without orders", commit(), []*orderly.Reservation(nil))
	equal(t, "committed of orders without reservations", commit("o3", "missing"), []*orderly.Reservation(nil))
	equal(t, "stock after the calls that change nothing", []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}, wantStock)
	equal(t, "reservations after the calls that change nothing", reservations(t, s, ""), wantRes)

	// One order of one SKU, among orders done already.
	equal(t, "committed o5", commit("o1", "o5"), []*orderly.Reservation{
		{OrderID: "o5", SKU: "sku-a", Quantity: 1, State: orderly.ReservationCommitted}})
	equal(t, "stock of sku-a at last", getStock(t, s, "sku-a"), &orderly.Stock{SKU: "sku-a", Available: 4, Sold: 6})
}

// testOrdersTransitionCauses: with Causes each changed order's audit row has its own cause
// (Cause for the orders Causes does not name, or names with ""); orders that a guard
// keeps get no row whatever Causes says; an empty Causes gives every row Cause.
func testOrdersTransitionCauses(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	paying := func(id string) *orderOpts {
		return &orderOpts{ID: id, PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-" + id}
	}
	before := map[string]*orderly.Order{}
	for _, o := range []*orderOpts{paying("a"), paying("b"), {ID: "c"}, paying("d"), paying("e"), paidOpts("f", t0), paying("g"), paying("h")} {
		before[o.ID] = insertOrder(t, s, o)
	}
	now := t0.Add(time.Minute)
	pay := func(ids []string, causes map[string]string) store.OrdersTransitionParams {
		return store.OrdersTransitionParams{IDs: ids, From: orderly.StatePendingPayment, To: orderly.StatePaid, Event: orderly.EventPay,
			PayStatusIn: []orderly.PayStatus{orderly.PayPaying, orderly.PayUnpaid}, Now: now, SetPayStatus: orderly.PayPaid,
			SetPaidAt: true, Cause: "batch", Causes: causes, Actor: "payment", TraceID: "trace-set"}
	}
	check := func(p store.OrdersTransitionParams, wantChanged []string, wantCause map[string]string) {
		t.Helper()
		changed := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, &p) })
		slices.Sort(changed)
		equal(t, "changed", changed, wantChanged)
		for _, id := range p.IDs {
			b, ok := before[id]
			if !ok {
				continue
			}
			var wantTrail []*orderly.Transition
			want := *b
			if slices.Contains(wantChanged, id) {
				want.State, want.PayStatus, want.PaidAt, want.Version = orderly.StatePaid, orderly.PayPaid, &now, b.Version+1
				wantTrail = []*orderly.Transition{{OrderID: id, From: p.From, To: p.To, Event: p.Event, PayStatusFrom: b.PayStatus,
					PayStatusTo: orderly.PayPaid, Cause: wantCause[id], Actor: p.Actor, At: now, TraceID: p.TraceID}}
			}
			equal(t, "order "+id, getOrder(t, s, id), &want)
			equalTrail(t, s, id, wantTrail)
		}
	}
	// a, b: their own causes; c (unpaid) and d: not named; e: named with ""; f: paid
	// already, named; "missing": no such order, named.
	check(pay([]string{"f", "e", "d", "c", "b", "a", "missing"},
		map[string]string{"a": "pay-a", "b": "pay-b", "e": "", "f": "pay-f", "missing": "pay-missing", "zz": "pay-zz"}),
		[]string{"a", "b", "c", "d", "e"},
		map[string]string{"a": "pay-a", "b": "pay-b", "c": "batch", "d": "batch", "e": "batch"})
	// An empty Causes, not nil: every row gets Cause.
	check(pay([]string{"g", "h"}, map[string]string{}), []string{"g", "h"}, map[string]string{"g": "batch", "h": "batch"})

	// Every audit row has an id of its own.
	seen := map[int64]string{}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		for _, tr := range trail(t, s, id) {
			if other, ok := seen[tr.ID]; ok {
				t.Errorf("audit row id %d of %s and of %s", tr.ID, id, other)
			}
			seen[tr.ID] = id
		}
	}
}

// testOutboxInsertSizes: OutboxInsert of batches of every size around the prepared
// statements' row counts (128, 16, 1) and the multi-row statement of the rest (2 to 15
// messages): every message is written once, in order, with its own topic, key, sequence,
// payload, times and trace parent; an order event without a sequence fails the call,
// which writes nothing.
func testOutboxInsertSizes(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	var want []*orderly.Message
	for _, n := range []int{1, 2, 5, 15, 16, 17, 31, 130, 145} {
		batch := make([]*store.OutboxInsertParams, n)
		for i := range batch {
			p := &store.OutboxInsertParams{Topic: orderly.TopicPaymentCancel, Key: fmt.Sprintf("b%d-%d", n, i%3),
				Payload: fmt.Appendf(nil, `{"batch":%d,"i":%d}`, n, i), Now: t0.Add(time.Duration(n*1000+i) * time.Millisecond)}
			if i%2 == 1 {
				p.Topic, p.Sequence = orderly.TopicOrderPaid, int64(i+1)
			}
			if i%4 == 3 {
				p.TraceParent = fmt.Sprintf("00-%032x-%016x-01", n*1000+i, i+1)
			}
			batch[i] = p
			want = append(want, &orderly.Message{Topic: p.Topic, Key: p.Key, Sequence: p.Sequence, Payload: p.Payload,
				State: orderly.MessagePending, NextAttemptAt: p.Now, CreatedAt: p.Now, TraceParent: p.TraceParent})
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, batch) })
		got := listMessages(t, s, orderly.MessagePending, 10_000)
		equalMessages(t, fmt.Sprintf("messages after a batch of %d", n), got, want)
		if t.Failed() {
			return
		}
		ids := map[string]bool{}
		for i, m := range got {
			if ids[m.MessageID] {
				t.Errorf("message id %s given twice", m.MessageID)
			}
			ids[m.MessageID] = true
			if i > 0 && m.ID <= got[i-1].ID {
				t.Errorf("message ids not increasing in insert order: %d after %d", m.ID, got[i-1].ID)
			}
		}
	}

	bad := make([]*store.OutboxInsertParams, 5)
	for i := range bad {
		bad[i] = &store.OutboxInsertParams{Topic: orderly.TopicOrderPaid, Key: "bad", Payload: []byte(`{}`), Sequence: int64(i + 1), Now: t0}
	}
	bad[3].Sequence = 0
	if err := txErr(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, bad) }); err == nil {
		t.Error("OutboxInsert of an order event without a sequence succeeded")
	}
	equal(t, "pending messages after the refused batch", len(listMessages(t, s, orderly.MessagePending, 10_000)), len(want))
}
