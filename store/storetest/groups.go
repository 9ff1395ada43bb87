package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func testGroups(t *testing.T, open opener) {
	t.Run("RoundTrip", func(t *testing.T) { testGroupRoundTrip(t, open) })
	t.Run("Seats", func(t *testing.T) { testGroupSeats(t, open) })
	t.Run("AddPaid", func(t *testing.T) { testGroupAddPaid(t, open) })
	t.Run("SetStateAndDue", func(t *testing.T) { testGroupSetStateAndDue(t, open) })
	t.Run("DueSkipsLocked", func(t *testing.T) { testGroupDueSkipsLocked(t, open) })
	t.Run("List", func(t *testing.T) { testGroupList(t, open) })
	t.Run("MembersFailing", func(t *testing.T) { testGroupMembersFailing(t, open) })
}

// insertGroup inserts a deal (min 2, max members) and a forming group of it with deadline.
func insertGroup(t *testing.T, s store.Store, maxMembers int64, deadline time.Time) *orderly.Group {
	t.Helper()
	d := &orderly.Deal{ID: nextID("deal"), SKU: "sku-1", GroupPrice: 990, Currency: "EUR", MinMembers: 2, MaxMembers: maxMembers,
		GroupTimeLimitSeconds: 3600, MemberPaymentTimeoutSeconds: 600, CreatedAt: t0}
	g := &orderly.Group{ID: nextID("group"), DealID: d.ID, State: orderly.GroupForming, LeaderUserID: "user-1",
		MinMembers: 2, MaxMembers: maxMembers, DeadlineAt: deadline, CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.DealInsert(t.Context(), d); err != nil {
			return err
		}
		return tx.GroupInsert(t.Context(), g)
	})
	return g
}

// insertMember inserts an order of user and its seat in group g.
func insertMember(t *testing.T, s store.Store, g *orderly.Group, user string) *orderly.Order {
	t.Helper()
	o := insertOrder(t, s, &orderOpts{UserID: user})
	inTx(t, s, func(tx store.Tx) error {
		return tx.GroupMemberInsert(t.Context(), &orderly.GroupMember{GroupID: g.ID, UserID: user, OrderID: o.ID, JoinedAt: t0})
	})
	return o
}

func testGroupRoundTrip(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	g := insertGroup(t, s, 3, t0.Add(time.Hour))
	o := insertMember(t, s, g, "user-1")
	var (
		deal    *orderly.Deal
		got     *orderly.Group
		members []*orderly.GroupMember
		byOrder *orderly.GroupMember
	)
	readTx(t, s, func(tx store.Tx) (err error) {
		if deal, err = tx.DealGet(ctx, g.DealID); err != nil {
			return err
		}
		if got, err = tx.GroupGet(ctx, g.ID); err != nil {
			return err
		}
		if members, err = tx.GroupMembers(ctx, g.ID); err != nil {
			return err
		}
		byOrder, err = tx.GroupMemberByOrder(ctx, o.ID)
		return err
	})
	if deal.GroupTimeLimitSeconds != 3600 || deal.MemberPaymentTimeoutSeconds != 600 || deal.GroupPrice != 990 || !deal.CreatedAt.Equal(t0) {
		t.Errorf("deal: %+v", deal)
	}
	if got.State != orderly.GroupForming || !got.DeadlineAt.Equal(g.DeadlineAt) || got.SeatsTaken != 1 || got.PaidMembers != 0 || got.Version != 1 {
		t.Errorf("group: %+v", got)
	}
	if len(members) != 1 || members[0].OrderID != o.ID || members[0].OrderState != orderly.StatePendingPayment ||
		members[0].PayStatus != orderly.PayUnpaid || members[0].LeftAt != nil || *byOrder != *members[0] {
		t.Errorf("members: %+v, by order %+v", members, byOrder)
	}
	readTx(t, s, func(tx store.Tx) error {
		if _, err := tx.GroupGet(ctx, "no-such-group"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
			t.Errorf("GroupGet of a missing group: %v", err)
		}
		if _, err := tx.GroupMemberByOrder(ctx, "no-such-order"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
			t.Errorf("GroupMemberByOrder of a missing order: %v", err)
		}
		if _, err := tx.DealGet(ctx, "no-such-deal"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
			t.Errorf("DealGet of a missing deal: %v", err)
		}
		return nil
	})
}

// testGroupSeats: one seat per user per group; a freed seat counts no more and can be
// taken again; freeing twice changes nothing.
func testGroupSeats(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	g := insertGroup(t, s, 3, t0.Add(time.Hour))
	first := insertMember(t, s, g, "user-1")
	insertMember(t, s, g, "user-2")
	second := insertOrder(t, s, &orderOpts{UserID: "user-1"})
	err := s.InTx(ctx, func(tx store.Tx) error {
		return tx.GroupMemberInsert(ctx, &orderly.GroupMember{GroupID: g.ID, UserID: "user-1", OrderID: second.ID, JoinedAt: t0})
	})
	if orderly.ErrorCode(err) != orderly.ECONFLICT {
		t.Fatalf("a second seat of user-1: %v, want %s", err, orderly.ECONFLICT)
	}
	var n1, n2 int64
	inTx(t, s, func(tx store.Tx) (err error) {
		if n1, err = tx.GroupMembersFree(ctx, []string{first.ID}, t0.Add(time.Minute)); err != nil {
			return err
		}
		n2, err = tx.GroupMembersFree(ctx, []string{first.ID}, t0.Add(2*time.Minute))
		return err
	})
	if n1 != 1 || n2 != 0 {
		t.Fatalf("free a seat: %d, then %d; want 1, 0", n1, n2)
	}
	inTx(t, s, func(tx store.Tx) error {
		return tx.GroupMemberInsert(ctx, &orderly.GroupMember{GroupID: g.ID, UserID: "user-1", OrderID: second.ID, JoinedAt: t0.Add(3 * time.Minute)})
	})
	var (
		got  *orderly.Group
		seat *orderly.GroupMember
		left *orderly.GroupMember
	)
	readTx(t, s, func(tx store.Tx) (err error) {
		if got, err = tx.GroupGet(ctx, g.ID); err != nil {
			return err
		}
		if seat, err = tx.GroupMemberSeat(ctx, g.ID, "user-1"); err != nil {
			return err
		}
		left, err = tx.GroupMemberByOrder(ctx, first.ID)
		return err
	})
	if got.SeatsTaken != 2 || seat.OrderID != second.ID || left.LeftAt == nil || !left.LeftAt.Equal(t0.Add(time.Minute)) {
		t.Fatalf("after free and rejoin: %d seats, seat %+v, left %+v", got.SeatsTaken, seat, left)
	}
}

// testGroupList: keyset pages of groups by id, each with its own members only (a member
// who left included, with left_at), seats counted, an empty page past the last.
func testGroupList(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	var groups []*orderly.Group
	for range 3 {
		groups = append(groups, insertGroup(t, s, 3, t0.Add(time.Hour)))
	}
	a1 := insertMember(t, s, groups[0], "user-1")
	a2 := insertMember(t, s, groups[0], "user-2")
	c1 := insertMember(t, s, groups[2], "user-1")
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.GroupMembersFree(ctx, []string{a2.ID}, t0.Add(time.Minute))
		return err
	})
	page := func(after string, limit int) []*orderly.Group {
		return read(t, s, func(tx store.Tx) ([]*orderly.Group, error) {
			return tx.GroupList(ctx, &store.ListParams{AfterID: after, Limit: limit})
		})
	}
	members := func(g *orderly.Group) []string {
		var out []string
		for _, m := range g.Members {
			left := "seated"
			if m.LeftAt != nil {
				left = "left " + m.LeftAt.Sub(t0).String()
			}
			out = append(out, m.GroupID+" "+m.OrderID+" "+m.UserID+" "+string(m.OrderState)+" "+left)
		}
		return out
	}
	first := page("", 2)
	if len(first) != 2 || first[0].ID != groups[0].ID || first[1].ID != groups[1].ID {
		t.Fatalf("first page: %+v, want groups %s, %s", first, groups[0].ID, groups[1].ID)
	}
	equal(t, "members of the first group", members(first[0]), []string{
		groups[0].ID + " " + a1.ID + " user-1 pending_payment seated",
		groups[0].ID + " " + a2.ID + " user-2 pending_payment left 1m0s"})
	if g := first[0]; g.SeatsTaken != 1 || g.State != orderly.GroupForming || !g.DeadlineAt.Equal(t0.Add(time.Hour)) || g.MaxMembers != 3 || g.Version != 1 {
		t.Errorf("first group: %+v", g)
	}
	if first[1].Members == nil || len(first[1].Members) != 0 || first[1].SeatsTaken != 0 {
		t.Errorf("second group: members %v, %d seats; want none (an empty list)", first[1].Members, first[1].SeatsTaken)
	}
	second := page(first[1].ID, 2)
	if len(second) != 1 || second[0].ID != groups[2].ID {
		t.Fatalf("second page: %+v, want group %s", second, groups[2].ID)
	}
	equal(t, "members of the third group", members(second[0]), []string{groups[2].ID + " " + c1.ID + " user-1 pending_payment seated"})
	if rest := page(groups[2].ID, 2); len(rest) != 0 {
		t.Errorf("page after the last group: %+v", rest)
	}
}

// testGroupAddPaid: the paid count stays within 0 … max_members and moves only in the
// given states.
func testGroupAddPaid(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	g := insertGroup(t, s, 2, t0.Add(time.Hour))
	forming := []orderly.GroupState{orderly.GroupForming}
	var results []bool
	inTx(t, s, func(tx store.Tx) error {
		for _, c := range []struct {
			delta  int64
			states []orderly.GroupState
		}{{1, forming}, {1, []orderly.GroupState{orderly.GroupSucceeded}}, {1, forming}, {1, forming}, {-3, forming}} {
			ok, err := tx.GroupAddPaid(ctx, g.ID, c.delta, c.states)
			if err != nil {
				return err
			}
			results = append(results, ok)
		}
		return nil
	})
	if want := []bool{true, false, true, false, false}; !equalBools(results, want) {
		t.Fatalf("GroupAddPaid results %v, want %v", results, want)
	}
	var got *orderly.Group
	readTx(t, s, func(tx store.Tx) (err error) { got, err = tx.GroupGet(ctx, g.ID); return err })
	if got.PaidMembers != 2 || got.Version != 3 {
		t.Fatalf("paid %d version %d, want 2 and 3", got.PaidMembers, got.Version)
	}
}

func equalBools(a, b []bool) bool {
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

// testGroupSetStateAndDue: due groups by deadline on the given clock, the earliest
// deadline, overdue counts; a group that left forming is neither due nor waited on.
func testGroupSetStateAndDue(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	early := insertGroup(t, s, 3, t0.Add(time.Second))
	late := insertGroup(t, s, 3, t0.Add(2*time.Second))
	var (
		next     time.Time
		ok       bool
		due      []*store.DueGroup
		overdue  int64
		changed  bool
		again    bool
		nextLate time.Time
	)
	inTx(t, s, func(tx store.Tx) (err error) {
		if next, ok, err = tx.GroupNextWakeAt(ctx); err != nil {
			return err
		}
		if due, err = tx.GroupsDue(ctx, t0.Add(time.Second), 10); err != nil {
			return err
		}
		if overdue, err = tx.GroupsOverdueCount(ctx, t0.Add(1500*time.Millisecond)); err != nil {
			return err
		}
		if changed, err = tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: early.ID, From: orderly.GroupForming, To: orderly.GroupFailed, At: t0.Add(1003 * time.Millisecond)}); err != nil {
			return err
		}
		if again, err = tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: early.ID, From: orderly.GroupForming, To: orderly.GroupSucceeded, At: t0}); err != nil {
			return err
		}
		nextLate, _, err = tx.GroupNextWakeAt(ctx)
		return err
	})
	if !ok || !next.Equal(early.DeadlineAt) {
		t.Errorf("next wake: %s %v, want %s", next, ok, early.DeadlineAt)
	}
	if len(due) != 1 || due[0].ID != early.ID || due[0].DealID != early.DealID || !due[0].DeadlineAt.Equal(early.DeadlineAt) {
		t.Errorf("due at the early deadline: %+v", due)
	}
	if overdue != 1 || !changed || again || !nextLate.Equal(late.DeadlineAt) {
		t.Errorf("overdue %d, set state %v then %v, next %s", overdue, changed, again, nextLate)
	}
	var got *orderly.Group
	readTx(t, s, func(tx store.Tx) (err error) { got, err = tx.GroupGet(ctx, early.ID); return err })
	if got.State != orderly.GroupFailed || got.FailedAt == nil || !got.FailedAt.Equal(t0.Add(1003*time.Millisecond)) || got.SucceededAt != nil {
		t.Errorf("failed group: %+v", got)
	}
}

// testGroupDueSkipsLocked: a group locked by one transaction (a join or a payment holding
// it) is skipped by another's claim on dialects with row locks; on SQLite the one writer
// makes the claim wait instead, so only the lock itself is checked there.
func testGroupDueSkipsLocked(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	a := insertGroup(t, s, 3, t0)
	b := insertGroup(t, s, 3, t0.Add(time.Millisecond))
	o := insertMember(t, s, a, "user-1")
	if s.Dialect() == "sqlite" {
		var locked []string
		inTx(t, s, func(tx store.Tx) (err error) {
			locked, err = tx.GroupsLockByOrders(ctx, []string{o.ID, "not-a-member"})
			return err
		})
		if len(locked) != 1 || locked[0] != a.ID {
			t.Fatalf("locked %v, want [%s]", locked, a.ID)
		}
		return
	}
	holding, release := make(chan []string), make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- s.InTx(ctx, func(tx store.Tx) error {
			ids, err := tx.GroupsLockByOrders(ctx, []string{o.ID})
			if err != nil {
				return err
			}
			holding <- ids
			<-release
			return nil
		})
	}()
	locked := <-holding
	var due []*store.DueGroup
	err := s.InTx(ctx, func(tx store.Tx) (err error) { due, err = tx.GroupsDue(ctx, t0.Add(time.Second), 10); return err })
	close(release)
	if err != nil || <-done != nil {
		t.Fatalf("claim: %v", err)
	}
	if len(locked) != 1 || locked[0] != a.ID || len(due) != 1 || due[0].ID != b.ID {
		t.Fatalf("locked %v, claimed %+v; want %s locked and only %s claimed", locked, due, a.ID, b.ID)
	}
}

// testGroupMembersFailing: of the orders asked about, only the members of forming groups
// whose deadline has come are returned (in id order), whatever locks others hold: a member
// of a group not due yet, of a group no longer forming, and an order of no group are not.
func testGroupMembersFailing(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	due := insertGroup(t, s, 3, t0)
	notYet := insertGroup(t, s, 3, t0.Add(time.Millisecond))
	done := insertGroup(t, s, 3, t0)
	a, b := insertMember(t, s, due, "user-1"), insertMember(t, s, due, "user-2")
	c, d := insertMember(t, s, notYet, "user-3"), insertMember(t, s, done, "user-4")
	loner := insertOrder(t, s, &orderOpts{UserID: "user-5"})
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: done.ID, From: orderly.GroupForming, To: orderly.GroupSucceeded, At: t0})
		return err
	})
	var got, none []string
	inTx(t, s, func(tx store.Tx) (err error) {
		if got, err = tx.GroupMembersFailing(ctx, []string{loner.ID, d.ID, c.ID, b.ID, a.ID}, t0); err != nil {
			return err
		}
		none, err = tx.GroupMembersFailing(ctx, nil, t0)
		return err
	})
	want := []string{a.ID, b.ID}
	if b.ID < a.ID {
		want = []string{b.ID, a.ID}
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] || len(none) != 0 {
		t.Fatalf("members failing at the deadline: %v (none asked: %v), want %v", got, none, want)
	}
}

// readTx runs fn in a read transaction and fails the test if it returns an error.
func readTx(t *testing.T, s store.Store, fn func(tx store.Tx) error) {
	t.Helper()
	if err := s.Read(t.Context(), fn); err != nil {
		t.Fatalf("Read: %v", err)
	}
}
