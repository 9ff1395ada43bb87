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
	t.Run("GroupsByState", func(t *testing.T) { testGroupsByState(t, open) })
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

func testGroupsByState(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	past := insertGroup(t, s, 3, t0.Add(-time.Hour))    // forming, its deadline passed
	past2 := insertGroup(t, s, 3, t0.Add(-time.Minute)) // forming, just passed
	future := insertGroup(t, s, 3, t0.Add(time.Hour))   // forming, deadline ahead
	failed := insertGroup(t, s, 3, t0.Add(-2*time.Hour))
	insertMember(t, s, past, "user-1")
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: failed.ID, From: orderly.GroupForming, To: orderly.GroupFailed, At: t0})
		return err
	})
	list := func(p store.GroupsByStateParams) []string {
		t.Helper()
		if p.Limit == 0 {
			p.Limit = 10
		}
		var ids []string
		for _, g := range read(t, s, func(tx store.Tx) ([]*orderly.Group, error) { return tx.GroupsByState(ctx, &p) }) {
			ids = append(ids, g.ID)
		}
		return ids
	}
	for _, c := range []struct {
		name string
		p    store.GroupsByStateParams
		want []string
	}{
		{"forming", store.GroupsByStateParams{State: orderly.GroupForming}, []string{past.ID, past2.ID, future.ID}},
		{"forming past a deadline", store.GroupsByStateParams{State: orderly.GroupForming, DeadlineBefore: t0}, []string{past.ID, past2.ID}},
		{"deadline before is strict", store.GroupsByStateParams{State: orderly.GroupForming, DeadlineBefore: t0.Add(-time.Minute)}, []string{past.ID}},
		{"failed", store.GroupsByStateParams{State: orderly.GroupFailed}, []string{failed.ID}},
		{"succeeded", store.GroupsByStateParams{State: orderly.GroupSucceeded}, nil},
		{"keyset", store.GroupsByStateParams{State: orderly.GroupForming, AfterID: past.ID, Limit: 1}, []string{past2.ID}},
	} {
		equal(t, c.name, list(c.p), c.want)
	}
	got := read(t, s, func(tx store.Tx) ([]*orderly.Group, error) {
		return tx.GroupsByState(ctx, &store.GroupsByStateParams{State: orderly.GroupForming, Limit: 1})
	})
	if g := got[0]; g.SeatsTaken != 1 || !g.DeadlineAt.Equal(past.DeadlineAt) || g.MaxMembers != 3 || g.DealID != past.DealID || g.Members != nil {
		t.Errorf("group read back as %+v, want 1 seat taken, its deadline and deal, no members", g)
	}
}
