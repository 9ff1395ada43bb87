package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testOverview covers store.OverviewTx: the order counts by flow and state and the next
// wake-ups of open orders.
func testOverview(t *testing.T, open opener) {
	t.Run("StateCounts", func(t *testing.T) { testOrderStateCounts(t, open) })
	t.Run("NextWake", func(t *testing.T) { testOrdersNextWake(t, open) })
}

func testOrderStateCounts(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	counts := func() []*store.StateCount {
		t.Helper()
		return read(t, s, func(tx store.Tx) ([]*store.StateCount, error) { return tx.OrderStateCounts(ctx) })
	}
	equal(t, "no orders", counts(), []*store.StateCount(nil))

	for range 3 {
		insertOrder(t, s, &orderOpts{})
	}
	closedAt := t0.Add(time.Hour)
	insertOrder(t, s, closedOpts("", closedAt))
	insertOrder(t, s, paidOpts("", t0.Add(time.Minute)))
	insertOrder(t, s, paidOpts("", t0.Add(2*time.Minute)))
	// An order of another flow, in a state the standard flow does not have.
	other := newOrder(&orderOpts{})
	other.Flow, other.State = "group_buy", "awaiting_group"
	inTx(t, s, func(tx store.Tx) error {
		return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: other, NoDeadline: true})
	})

	equal(t, "by flow then state", counts(), []*store.StateCount{
		{Flow: "group_buy", State: "awaiting_group", Count: 1},
		{Flow: orderly.FlowStandard, State: orderly.StateClosed, Count: 1},
		{Flow: orderly.FlowStandard, State: orderly.StatePaid, Count: 2},
		{Flow: orderly.FlowStandard, State: orderly.StatePendingPayment, Count: 3},
	})
}

func testOrdersNextWake(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	next := func(limit int) []string {
		t.Helper()
		var ids []string
		for _, d := range read(t, s, func(tx store.Tx) ([]*store.DueOrder, error) { return tx.OrdersNextWake(ctx, limit) }) {
			ids = append(ids, d.ID)
		}
		return ids
	}
	equal(t, "no open orders", next(10), []string(nil))

	late := insertOrder(t, s, &orderOpts{ID: nextID("nw"), CloseAt: t0.Add(3 * time.Hour)})
	early := insertOrder(t, s, &orderOpts{ID: nextID("nw"), CloseAt: t0.Add(time.Hour)})
	tieA := insertOrder(t, s, &orderOpts{ID: nextID("nw"), CloseAt: t0.Add(2 * time.Hour)})
	tieB := insertOrder(t, s, &orderOpts{ID: nextID("nw"), CloseAt: t0.Add(2 * time.Hour)})
	insertOrder(t, s, closedOpts("", t0.Add(time.Minute))) // closed: no wake_at
	insertOrder(t, s, paidOpts("", t0.Add(time.Minute)))   // paid: no wake_at

	equal(t, "earliest wake_at first, ties by id", next(10), []string{early.ID, tieA.ID, tieB.ID, late.ID})
	equal(t, "limit", next(2), []string{early.ID, tieA.ID})

	got := read(t, s, func(tx store.Tx) ([]*store.DueOrder, error) { return tx.OrdersNextWake(ctx, 1) })
	if d := got[0]; d.Flow != orderly.FlowStandard || d.State != orderly.StatePendingPayment || !d.CloseAt.Equal(early.CloseAt) ||
		!d.WakeAt.Equal(early.CloseAt) {
		t.Errorf("next wake = %+v, want the earliest order pending_payment with wake_at = close_at = %v", d, early.CloseAt)
	}
}
