package verify_test

import (
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

// TestCheckGroupsFromDatabase runs Check with ReadGroups on a database holding the clean
// fixture and one group: a clean succeeded group passes; a group failed a minute before
// its deadline with a member keeping its payment is caught — and only through the reader.
func TestCheckGroupsFromDatabase(t *testing.T) {
	t.Parallel()
	flows, err := orderly.NewFlows(orderly.StandardFlow, groupbuy.Flow)
	if err != nil {
		t.Fatal(err)
	}
	deadline := now.Add(-time.Minute)
	// fixture writes a deal, a group of it and two paid member orders, then succeeds the
	// group at 10 s before its deadline (broken false) or fails it a minute before, its
	// members left paid (broken true).
	fixture := func(t *testing.T, broken bool) *sqlstore.DB {
		db := setup(t)
		ctx := t.Context()
		inTx(t, db, func(tx store.Tx) {
			check(t, tx.DealInsert(ctx, &orderly.Deal{ID: "d-1", SKU: "SKU-A", GroupPrice: 400, Currency: "USD", MinMembers: 2,
				MaxMembers: 3, GroupTimeLimitSeconds: 600, MemberPaymentTimeoutSeconds: 600, CreatedAt: deadline.Add(-10 * time.Minute)}))
			check(t, tx.GroupInsert(ctx, &orderly.Group{ID: "g-1", DealID: "d-1", State: orderly.GroupForming, LeaderUserID: "u-1",
				MinMembers: 2, MaxMembers: 3, DeadlineAt: deadline, CreatedAt: deadline.Add(-10 * time.Minute)}))
			for _, id := range []string{"m-1", "m-2"} {
				check(t, tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{ID: id, UserID: "u-" + id, Flow: groupbuy.FlowName,
					State: orderly.StatePendingPayment, PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: "SKU-A", Quantity: 1, UnitPrice: 400}},
					Amount: 400, Currency: "USD", CreatedAt: deadline.Add(-9 * time.Minute), ExpiresAt: deadline, CloseAt: deadline.Add(time.Second), Version: 1}}))
				if !must(tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: "SKU-A", Quantity: 1, Now: now})) {
					t.Fatalf("reserve for %s", id)
				}
				check(t, tx.GroupMemberInsert(ctx, &orderly.GroupMember{GroupID: "g-1", UserID: "u-" + id, OrderID: id, JoinedAt: deadline.Add(-9 * time.Minute)}))
				pay(t, tx, id, "p-"+id)
				if !broken {
					transition(t, tx, id, orderly.StatePaid, groupbuy.EventGroupSucceed, groupbuy.StateGroupSucceeded, "")
				}
			}
			to, at := orderly.GroupSucceeded, deadline.Add(-10*time.Second)
			if broken {
				to, at = orderly.GroupFailed, deadline.Add(-time.Minute)
			}
			if !must(tx.GroupSetState(ctx, &store.GroupSetStateParams{ID: "g-1", From: orderly.GroupForming, To: to, At: at})) {
				t.Fatal("set the group's state: no row changed")
			}
		})
		return db
	}

	rep, err := verify.Check(t.Context(), fixture(t, false), verify.Options{Flows: flows, Groups: verify.ReadGroups})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Groups["succeeded"] != 1 || len(rep.Groups) != 1 {
		t.Errorf("clean group: groups %v, violations:\n%s", rep.Groups, strings.Join(rep.Violations, "\n"))
	}

	db := fixture(t, true)
	rep, err = verify.Check(t.Context(), db, verify.Options{Flows: flows, Groups: verify.ReadGroups})
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(rep.Violations, "\n")
	for _, want := range []string{
		"G: group g-1 failed at 2026-01-02T09:58:00.000Z, 1m0s before its deadline 2026-01-02T09:59:00.000Z",
		"G: member order m-1 of failed group g-1 is paid: a failed group keeps no payment",
		"G: member order m-2 of failed group g-1 is paid: a failed group keeps no payment",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("violations:\n%s\nwant one containing %q", got, want)
		}
	}
	if rep.EarlyCloses != 1 || rep.Groups["failed"] != 1 {
		t.Errorf("early closes %d, groups %v; want 1 early failure of 1 failed group", rep.EarlyCloses, rep.Groups)
	}
	// Without the reader the group rules do not run.
	rep, err = verify.Check(t.Context(), db, verify.Options{Flows: flows})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(strings.Join(rep.Violations, "\n"), "G: ") || rep.Groups != nil {
		t.Errorf("without Options.Groups: groups %v, violations:\n%s", rep.Groups, strings.Join(rep.Violations, "\n"))
	}
}
