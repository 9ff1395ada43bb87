package verify

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// TestGroupChecks feeds the group_buy checks with groups and member orders as the
// database would hold them, one broken rule per case.
func TestGroupChecks(t *testing.T) {
	t.Parallel()
	deadline := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) *time.Time { t := deadline.Add(d); return &t }
	order := func(id string, s orderly.State, pays ...orderly.PaymentState) *groupOrder {
		mo := &groupOrder{o: &orderly.Order{ID: id, Flow: flowGroupBuy, State: s, Amount: 500}}
		for i, ps := range pays {
			mo.payments = append(mo.payments, &orderly.Payment{ID: id + "-p" + string(rune('0'+i)), OrderID: id, Amount: 500, State: ps})
		}
		return mo
	}
	members := func(ids ...string) []GroupMemberRow {
		var out []GroupMemberRow
		for _, id := range ids {
			out = append(out, GroupMemberRow{OrderID: id})
		}
		return out
	}
	tests := []struct {
		name   string
		group  *GroupRow
		orders []*groupOrder
		want   string // "" for no violation
		early  int
	}{
		{name: "succeeded, clean", group: &GroupRow{ID: "g", State: groupSucceeded, MinMembers: 2, MaxMembers: 3, DeadlineAt: deadline,
			SucceededAt: at(-time.Second), Members: members("a", "b")},
			orders: []*groupOrder{order("a", orderly.StateShipped, orderly.PaymentSucceeded), order("b", stateGroupSucceeded, orderly.PaymentSucceeded)}},
		{name: "failed, clean", group: &GroupRow{ID: "g", State: groupFailed, MinMembers: 3, MaxMembers: 3, DeadlineAt: deadline,
			FailedAt: at(5 * time.Millisecond), Members: members("a", "b")},
			orders: []*groupOrder{order("a", orderly.StateRefunded, orderly.PaymentRefunded), order("b", orderly.StateClosed)}},
		{name: "succeeded and refunded", group: &GroupRow{ID: "g", State: groupSucceeded, MinMembers: 2, MaxMembers: 3, DeadlineAt: deadline,
			SucceededAt: at(-time.Second), Members: members("a", "b", "c")},
			orders: []*groupOrder{order("a", stateGroupSucceeded, orderly.PaymentSucceeded), order("b", stateGroupSucceeded, orderly.PaymentSucceeded),
				order("c", orderly.StateRefunded, orderly.PaymentRefunded)},
			want: "G: group g succeeded and its member order c is refunded"},
		{name: "too few kept", group: &GroupRow{ID: "g", State: groupSucceeded, MinMembers: 3, MaxMembers: 3, DeadlineAt: deadline,
			SucceededAt: at(-time.Second), Members: members("a", "b")},
			orders: []*groupOrder{order("a", stateGroupSucceeded, orderly.PaymentSucceeded), order("b", orderly.StateClosed)},
			want:   "succeeded with 1 members keeping their payment, want 3..3"},
		{name: "failed early", group: &GroupRow{ID: "g", State: groupFailed, MinMembers: 3, MaxMembers: 3, DeadlineAt: deadline,
			FailedAt: at(-2 * time.Millisecond), Members: members("a")}, orders: []*groupOrder{order("a", orderly.StateClosed)},
			want: "G: group g failed at 2026-11-30T11:59:59.998Z, 2ms before its deadline", early: 1},
		{name: "paid member of a failed group kept", group: &GroupRow{ID: "g", State: groupFailed, MinMembers: 3, MaxMembers: 3,
			DeadlineAt: deadline, FailedAt: at(0), Members: members("a")}, orders: []*groupOrder{order("a", orderly.StateRefunding, orderly.PaymentSucceeded)},
			want: "member order a of failed group g is refunding and its payment a-p0 is succeeded"},
		{name: "shipped in a failed group", group: &GroupRow{ID: "g", State: groupFailed, MinMembers: 3, MaxMembers: 3,
			DeadlineAt: deadline, FailedAt: at(0), Members: members("a")}, orders: []*groupOrder{order("a", orderly.StateShipped, orderly.PaymentSucceeded)},
			want: "member order a of group g is shipped, but the group is failed"},
		{name: "still forming", group: &GroupRow{ID: "g", State: groupForming, MinMembers: 3, MaxMembers: 3,
			DeadlineAt: deadline.Add(-2 * time.Minute)}, want: "I5: group g is still forming 2m0s after its deadline"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			opts := Options{Tolerance: time.Minute, MaxViolations: 10,
				Groups: func(context.Context, store.Tx) ([]*GroupRow, error) { return []*GroupRow{tt.group}, nil }}
			c := newChecker(opts)
			c.now = deadline
			g := &groupChecks{orders: map[string]*groupOrder{}}
			if err := g.Load(t.Context(), nil, &c.opts); err != nil {
				t.Fatal(err)
			}
			for _, mo := range tt.orders {
				g.Order(&Violations{c}, mo.o, mo.payments, mo.refunds)
			}
			g.Finish(&Violations{c})
			got := strings.Join(c.rep.Violations, "\n")
			switch {
			case tt.want == "" && got != "":
				t.Errorf("violations on a correct group:\n%s", got)
			case tt.want != "" && !strings.Contains(got, tt.want):
				t.Errorf("violations:\n%s\nwant one containing %q", got, tt.want)
			}
			if c.rep.EarlyCloses != tt.early || c.rep.Groups[tt.group.State] != 1 {
				t.Errorf("early closes %d, groups %v; want %d and one %s", c.rep.EarlyCloses, c.rep.Groups, tt.early, tt.group.State)
			}
		})
	}
}
