package verify

import (
	"context"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func init() {
	RegisterFlowChecks(flowGroupBuy, func() FlowChecks { return &groupChecks{orders: map[string]*groupOrder{}} })
}

// Names of the group_buy flow (docs/flows/group-buy.md).
const (
	flowGroupBuy                      = "group_buy"
	stateGroupSucceeded orderly.State = "group_succeeded"
	stateGroupFailed    orderly.State = "group_failed"
	groupForming                      = "forming"
	groupSucceeded                    = "succeeded"
	groupFailed                       = "failed"
)

// GroupRow is a group-buy group as the group checks need it.
type GroupRow struct {
	ID          string
	State       string // forming | succeeded | failed
	MinMembers  int
	MaxMembers  int
	DeadlineAt  time.Time
	SucceededAt *time.Time
	FailedAt    *time.Time
	Members     []GroupMemberRow
}

// GroupMemberRow is one seat of a group: its member order, and when the member left.
type GroupMemberRow struct {
	OrderID string
	LeftAt  *time.Time
}

// ReadGroups reads every group and its members through store.Tx.GroupList, in keyset
// pages of pageSize groups; it is the Options.Groups of a check on an orderly database
// (`orderly verify`, simulate's end-of-run check).
func ReadGroups(ctx context.Context, tx store.Tx) ([]*GroupRow, error) {
	var out []*GroupRow
	after := ""
	for {
		page, err := tx.GroupList(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return nil, err
		}
		for _, g := range page {
			row := &GroupRow{ID: g.ID, State: string(g.State), MinMembers: int(g.MinMembers), MaxMembers: int(g.MaxMembers),
				DeadlineAt: g.DeadlineAt, SucceededAt: g.SucceededAt, FailedAt: g.FailedAt}
			for _, m := range g.Members {
				row.Members = append(row.Members, GroupMemberRow{OrderID: m.OrderID, LeftAt: m.LeftAt})
			}
			out = append(out, row)
		}
		if len(page) < pageSize {
			return out, nil
		}
		after = page[len(page)-1].ID
	}
}

// groupOrder is a member order with its payments and refunds, kept for Finish.
type groupOrder struct {
	o        *orderly.Order
	payments []*orderly.Payment
	refunds  []*orderly.Refund
}

// groupChecks are the checks of the group_buy flow:
//   - a group at rest is not forming past its deadline by more than the tolerance (I5);
//   - a succeeded group succeeded no later than its deadline, min..max of its members kept
//     their payment (group_succeeded, shipped, completed), and none of its members was
//     refunded but those who left before the success;
//   - a failed group failed no sooner than its deadline (an early failure counts as an
//     early close) unless a leave had freed its last seat (every member left or closed), none of its members kept a payment, and every payment of its members
//     that succeeded was refunded (the payment refunded, or succeeded refunds for all of
//     it);
//   - no member order is shipped or completed in a group that did not succeed.
type groupChecks struct {
	opts   *Options
	groups []*GroupRow
	orders map[string]*groupOrder
}

func (g *groupChecks) Load(ctx context.Context, tx store.Tx, opts *Options) error {
	g.opts = opts
	if opts.Groups == nil {
		return nil
	}
	groups, err := opts.Groups(ctx, tx)
	g.groups = groups
	return err
}

func (g *groupChecks) Order(_ *Violations, o *orderly.Order, payments []*orderly.Payment, refunds []*orderly.Refund) {
	g.orders[o.ID] = &groupOrder{o: o, payments: payments, refunds: refunds}
}

// kept reports whether a member order in state s kept its payment.
// refundedAfter reports whether refunds is not empty and every one of them was requested
// at or after at (nil: never).
func refundedAfter(refunds []*orderly.Refund, at *time.Time) bool {
	return at != nil && len(refunds) > 0 && !slices.ContainsFunc(refunds, func(f *orderly.Refund) bool { return f.CreatedAt.Before(*at) })
}

// emptied reports whether a member had left group gr by at and no member held a seat
// then (each had left or its order was closed): the leave that frees the last seat ends
// a forming group at once, before its deadline.
func (g *groupChecks) emptied(gr *GroupRow, at time.Time) bool {
	left := false
	for _, m := range gr.Members {
		if m.LeftAt != nil && !m.LeftAt.After(at) {
			left = true
			continue
		}
		if mo := g.orders[m.OrderID]; mo == nil || mo.o.ClosedAt == nil || mo.o.ClosedAt.After(at) {
			return false
		}
	}
	return left
}

func kept(s orderly.State) bool {
	return s == stateGroupSucceeded || s == orderly.StateShipped || s == orderly.StateCompleted
}

func (g *groupChecks) Finish(v *Violations) {
	if g.opts == nil || g.opts.Groups == nil {
		return
	}
	counts := map[string]int64{}
	v.c.rep.Groups = counts
	for _, gr := range g.groups {
		counts[gr.State]++
		var members []*groupOrder
		leftAt := map[string]*time.Time{}
		for _, m := range gr.Members {
			leftAt[m.OrderID] = m.LeftAt
			if mo := g.orders[m.OrderID]; mo != nil {
				members = append(members, mo)
			} else {
				v.Add("G", "group %s has member order %s, which does not exist", gr.ID, m.OrderID)
			}
		}
		switch gr.State {
		case groupSucceeded:
			n := 0
			for _, m := range members {
				// A member refunded after the success (a return: the flow refunds
				// group_succeeded, shipped and completed orders as the standard flow does)
				// was one of the members that made it.
				returned := (m.o.State == orderly.StateRefunding || m.o.State == orderly.StateRefunded) && refundedAfter(m.refunds, gr.SucceededAt)
				if kept(m.o.State) || returned {
					n++
				}
				refunded := m.o.State == stateGroupFailed || m.o.State == orderly.StateRefunding || m.o.State == orderly.StateRefunded
				if left := leftAt[m.o.ID]; refunded && !returned && (left == nil || (gr.SucceededAt != nil && left.After(*gr.SucceededAt))) {
					v.Add("G", "group %s succeeded and its member order %s is %s: a succeeded group refunds none but members who left before", gr.ID, m.o.ID, m.o.State)
				}
			}
			if n < gr.MinMembers || n > gr.MaxMembers {
				v.Add("G", "group %s succeeded with %d members keeping their payment, want %d..%d", gr.ID, n, gr.MinMembers, gr.MaxMembers)
			}
			if gr.SucceededAt == nil || gr.SucceededAt.After(gr.DeadlineAt) {
				v.Add("G", "group %s succeeded at %s, after its deadline %s", gr.ID, stampPtr(gr.SucceededAt), stamp(gr.DeadlineAt))
			}
		case groupFailed:
			if gr.FailedAt == nil {
				v.Add("G", "group %s failed without failed_at", gr.ID)
			} else if gr.FailedAt.Before(gr.DeadlineAt) && !g.emptied(gr, *gr.FailedAt) {
				v.EarlyClose()
				v.Add("G", "group %s failed at %s, %s before its deadline %s", gr.ID, stamp(*gr.FailedAt), gr.DeadlineAt.Sub(*gr.FailedAt), stamp(gr.DeadlineAt))
			}
			for _, m := range members {
				if kept(m.o.State) || m.o.State == orderly.StatePaid {
					v.Add("G", "member order %s of failed group %s is %s: a failed group keeps no payment", m.o.ID, gr.ID, m.o.State)
				}
				for _, p := range m.payments {
					if (p.State == orderly.PaymentSucceeded || p.State == orderly.PaymentRefundPending) && succeededRefundsOf(p, m.refunds) < p.Amount {
						v.Add("G", "member order %s of failed group %s is %s and its payment %s is %s: every paid member of a failed group is refunded",
							m.o.ID, gr.ID, m.o.State, p.ID, p.State)
					}
				}
			}
		default:
			if late := v.Now().Sub(gr.DeadlineAt); late > g.opts.Tolerance {
				v.Add("I5", "group %s is still %s %s after its deadline %s (tolerance %s)", gr.ID, gr.State, late.Truncate(time.Millisecond), stamp(gr.DeadlineAt), g.opts.Tolerance)
			}
		}
		if gr.State != groupSucceeded {
			for _, m := range members {
				if m.o.State == orderly.StateShipped || m.o.State == orderly.StateCompleted {
					v.Add("G", "member order %s of group %s is %s, but the group is %s", m.o.ID, gr.ID, m.o.State, gr.State)
				}
			}
		}
	}
}

// succeededRefundsOf is what succeeded refunds of payment p gave back, in minor units.
func succeededRefundsOf(p *orderly.Payment, refunds []*orderly.Refund) int64 {
	var sum int64
	for _, f := range refunds {
		if f.PaymentID == p.ID && f.State == orderly.RefundSucceeded {
			sum += f.Amount
		}
	}
	return sum
}

func stampPtr(t *time.Time) string {
	if t == nil {
		return "(none)"
	}
	return stamp(*t)
}
