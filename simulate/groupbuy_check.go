package simulate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
)

// keptLike reports whether a member order in state s kept its payment: its group
// succeeded (shipped and completed follow).
func keptLike(s orderly.State) bool {
	return s == stateGroupSucceeded || s == orderly.StateShipped || s == orderly.StateCompleted
}

// LastDeadline is the latest group deadline or member close_at of the groups opened.
func (g *groupFlow) LastDeadline() time.Time {
	var last time.Time
	for _, tg := range g.groups {
		if tg == nil {
			continue
		}
		if d := g.local(tg.opened.DeadlineAt); d.After(last) {
			last = d
		}
		for _, m := range tg.members {
			if d := g.local(m.order.CloseAt); d.After(last) {
				last = d
			}
		}
	}
	return last
}

// Settle reads every group past its deadline and its member orders once and reports
// whether every group ended, every member order settled (no refund under way, no captured
// payment left on a closed order) and no deal SKU holds stock.
func (g *groupFlow) Settle(ctx context.Context, _ *runner) bool {
	var todo []*trackedGroup
	now := time.Now()
	for _, tg := range g.groups {
		if tg != nil && !tg.settled && !now.Before(g.local(tg.opened.DeadlineAt)) {
			todo = append(todo, tg)
		}
	}
	_ = forEach(ctx, len(todo), g.cfg.Concurrency, func(ctx context.Context, i int) error {
		g.refreshGroup(ctx, todo[i])
		return nil
	})
	done := true
	for _, tg := range g.groups {
		done = done && (tg == nil || tg.settled)
	}
	return g.refreshStock(ctx) && done
}

// refreshGroup reads one group and its unsettled member orders.
func (g *groupFlow) refreshGroup(ctx context.Context, tg *trackedGroup) {
	gr, err := g.c.group(ctx, tg.opened.ID)
	if err != nil {
		if ctx.Err() == nil {
			g.httpProblem("read group %s: %v", tg.opened.ID, err)
		}
		return
	}
	tg.final = gr
	settled := gr.State != groupForming
	for _, m := range tg.members {
		if !m.settled {
			g.refreshMember(ctx, m)
		}
		settled = settled && m.settled
	}
	tg.settled = settled
}

// refreshMember reads a member order, its payments and refunds, and decides whether it
// settled; as refreshOrder, only when the order read the same after them (see unchanged).
func (g *groupFlow) refreshMember(ctx context.Context, m *trackedMember) {
	o, err := g.c.order(ctx, m.order.ID)
	if err != nil {
		if ctx.Err() == nil {
			g.httpProblem("read member order %s: %v", m.order.ID, err)
		}
		return
	}
	m.final = o
	switch o.State {
	case orderly.StatePendingPayment, orderly.StatePaid, stateGroupFailed, orderly.StateRefunding:
		return
	}
	ps, err := g.c.payments(ctx, o.ID)
	if err != nil {
		if ctx.Err() == nil {
			g.httpProblem("read payments of member order %s: %v", o.ID, err)
		}
		return
	}
	m.finalPayments = ps
	for _, p := range ps {
		if p.State == orderly.PaymentRefundPending || (o.State == orderly.StateClosed && p.State == orderly.PaymentSucceeded) {
			return
		}
	}
	if o.RefundedAmount > 0 || o.State == orderly.StateRefunded {
		fs, err := g.c.refunds(ctx, o.ID)
		if err != nil {
			if ctx.Err() == nil {
				g.httpProblem("read refunds of member order %s: %v", o.ID, err)
			}
			return
		}
		m.finalRefunds = fs
		if slices.ContainsFunc(fs, func(f *orderly.Refund) bool { return f.State == orderly.RefundRequested }) {
			return
		}
	}
	if !g.unchanged(ctx, o) {
		return
	}
	m.settled = true
}

// refreshStock reads every deal's SKU and reports whether none holds stock.
func (g *groupFlow) refreshStock(ctx context.Context) bool {
	deals := g.plan.deals
	got := make([]*orderly.Stock, len(deals))
	_ = forEach(ctx, len(deals), g.cfg.Concurrency, func(ctx context.Context, i int) error {
		s, err := g.c.stock(ctx, deals[i].sku)
		if err != nil {
			if ctx.Err() == nil {
				g.httpProblem("read stock of %s: %v", deals[i].sku, err)
			}
			return nil
		}
		got[i] = s
		return nil
	})
	g.finalStock = map[string]*orderly.Stock{}
	done := true
	for i, s := range got {
		if s == nil {
			done = false
			continue
		}
		g.finalStock[deals[i].sku] = s
		done = done && s.Held == 0
	}
	return done
}

// Payments returns the member orders' payments as read at rest and their refunds' ids.
func (g *groupFlow) Payments() ([]FinalPayment, []string) {
	var ps []FinalPayment
	var ids []string
	for _, tg := range g.groups {
		if tg == nil {
			continue
		}
		for _, m := range tg.members {
			for _, p := range m.finalPayments {
				ps = append(ps, FinalPayment{OrderID: m.order.ID, Who: m.pm.behaviour.String(), Payment: p})
			}
			for _, f := range m.finalRefunds {
				ids = append(ids, f.ID)
			}
		}
	}
	return ps, ids
}

// Check counts the groups and member orders and checks them (docs/flows/group-buy.md; "G:"
// violations are the group rules, the others the order invariants):
//   - every group ended: succeeded no later than its deadline with min..max members who
//     kept their payment, and none of its members refunded but those who left it first;
//     or failed, not before its deadline (an early failure, like an early close) unless
//     a leave freed its last seat, no
//     member keeping a payment: every paid member refunded — exactly once, by the
//     gateway's ledger — and nothing shipped;
//   - no member order shipped in a group that did not succeed;
//   - failed_at − deadline_at is the group lateness, bounded by Config.MaxLateness;
//   - member orders: closed for payment timeout never before close_at (I1), within the
//     lateness bound (I5), never left pending (I5); a success acknowledged before close_at
//     by more than the clock margin is never dropped, and any success on a closed order is
//     refunded (I2); captured − refunded is the price for a kept order and 0 otherwise
//     (I4); every order costs the deal's group price;
//   - per deal SKU: seeded = available + held + sold, held 0 at rest, sold = the orders
//     kept (I4);
//   - seat requests refused for a reason the server's own state did not allow (see
//     judgeRefusal).
func (g *groupFlow) Check(_ *runner, res *Result) {
	gres := &GroupResult{Deals: len(g.dealOf), Planned: map[string]int{}, Joins: JoinCounts{Refused: map[string]int{}},
		DeadlinePayments: DeadlinePayments{WindowMS: float64(deadlineJitter / time.Millisecond),
			Before: int(g.deadlineBefore.Load()), After: int(g.deadlineAfter.Load())}}
	res.Groups = gres
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	g.mu.Lock()
	for code, n := range g.refused {
		gres.Joins.Refused[code] = n
		res.Rejected[code] += n
		switch code {
		case orderly.EOUTOFSTOCK:
			res.OutOfStock += n
		case orderly.ECOUPONUNAVAIL:
			res.CouponUnavailable += n
		}
	}
	gres.Joins.LatencyMS = newPercentiles(g.seatLatency)
	g.mu.Unlock()
	gres.Joins.Sent, gres.Joins.Created, gres.Joins.Errors = int(g.sent.Load()), int(g.created.Load()), int(g.errs.Load())
	res.Sent += gres.Joins.Sent
	res.Errors += gres.Joins.Errors

	var groupLateness []float64
	var tooLate []string
	var worst time.Duration
	kept := map[string]int64{}
	for _, tg := range g.groups {
		if tg == nil {
			continue
		}
		gres.Groups++
		gres.Planned[tg.pg.fate.String()]++
		res.Violations = append(res.Violations, tg.notes...)
		gr := tg.final
		if gr == nil {
			violate("HTTP: group %s could not be read after the run", tg.opened.ID)
			continue
		}
		if len(gr.Members) < len(tg.members) {
			violate("HTTP: group %s lists %d members, %d seats were taken", gr.ID, len(gr.Members), len(tg.members))
		}
		leftAt := map[string]*time.Time{}
		for _, gm := range gr.Members {
			leftAt[gm.OrderID] = gm.LeftAt
		}
		switch gr.State {
		case groupSucceeded:
			gres.Succeeded++
			n := 0
			for _, m := range tg.members {
				if m.final != nil && keptLike(m.final.State) {
					n++
				}
			}
			switch {
			case gr.SucceededAt == nil:
				violate("HTTP: group %s succeeded without succeeded_at", gr.ID)
			case gr.SucceededAt.After(gr.DeadlineAt):
				violate("G: group %s succeeded at %s, %s after its deadline %s", gr.ID, formatTime(*gr.SucceededAt),
					gr.SucceededAt.Sub(gr.DeadlineAt), formatTime(gr.DeadlineAt))
			}
			if n < gr.MinMembers || n > gr.MaxMembers {
				violate("G: group %s succeeded with %d members keeping their payment, want %d..%d", gr.ID, n, gr.MinMembers, gr.MaxMembers)
			}
			for _, m := range tg.members {
				o := m.final
				if o == nil {
					continue
				}
				refundedOrder := o.State == stateGroupFailed || o.State == orderly.StateRefunding || o.State == orderly.StateRefunded
				left := leftAt[o.ID]
				if refundedOrder && (left == nil || (gr.SucceededAt != nil && left.After(*gr.SucceededAt))) {
					violate("G: group %s succeeded and its member order %s (%s) is %s: a succeeded group refunds none but members who left before",
						gr.ID, o.ID, m.pm.behaviour, o.State)
				}
			}
		case groupFailed:
			gres.Failed++
			if gr.FailedAt == nil {
				violate("HTTP: group %s failed without failed_at", gr.ID)
				break
			}
			late := gr.FailedAt.Sub(gr.DeadlineAt)
			if late < 0 && emptied(gr, finals(tg), *gr.FailedAt) {
				late = 0 // its last member left: the group ends then, before its deadline
			} else {
				groupLateness = append(groupLateness, float64(late)/float64(time.Millisecond))
			}
			if late < 0 {
				gres.EarlyFailures++
				res.EarlyCloses++
				violate("G: group %s failed at %s, %s before its deadline %s", gr.ID, formatTime(*gr.FailedAt), -late, formatTime(gr.DeadlineAt))
			}
			if b := g.cfg.MaxLateness; b > 0 && late > b {
				tooLate = append(tooLate, gr.ID)
				worst = max(worst, late)
			}
			for _, m := range tg.members {
				res.Violations = append(res.Violations, g.checkFailedMember(gr, m)...)
			}
			if paid := g.paidInTime(tg, gr, leftAt); len(paid) >= gr.MinMembers {
				violate("G: group %s failed although the payments of %d members, min_members %d, were acknowledged before its deadline %s and none of them left: %s",
					gr.ID, len(paid), gr.MinMembers, formatTime(gr.DeadlineAt), strings.Join(paid, ", "))
			}
		default:
			gres.Forming++
			violate("G: group %s is still %s %s after its deadline %s", gr.ID, gr.State,
				time.Since(g.local(gr.DeadlineAt)).Truncate(time.Millisecond), formatTime(gr.DeadlineAt))
		}
		seats := 0
		for _, m := range tg.members {
			if o := m.final; o != nil && o.State != orderly.StateClosed && leftAt[o.ID] == nil {
				seats++
			}
			if o := m.final; o != nil && (o.State == orderly.StateShipped || o.State == orderly.StateCompleted || m.shipAck) && gr.State != groupSucceeded {
				violate("G: member order %s of group %s is %s (ship acknowledged: %v), but the group %s", o.ID, gr.ID, o.State, m.shipAck, gr.State)
			}
		}
		if seats > gr.MaxMembers {
			violate("G: group %s holds %d seats at rest, above max_members %d", gr.ID, seats, gr.MaxMembers)
		}
		for _, m := range tg.members {
			g.checkMember(res, gres, tg, m, kept)
		}
		orders := map[string]*orderly.Order{}
		for _, m := range tg.members {
			if m.final != nil {
				orders[m.final.ID] = m.final
			}
		}
		for _, r := range tg.refusals {
			if why := g.judgeRefusal(gr, orders, r); why != "" {
				g.wrongRefusal("seat %d of group %d (%s, %s) was refused %s: %s", r.pm.index, r.pm.group.index, gr.ID, r.pm.behaviour, r.code, why)
			}
		}
	}
	gres.Lateness = newPercentiles(groupLateness)
	if len(tooLate) > 0 {
		violate("I5: %d groups failed more than the lateness bound %s after their deadline (the latest %s): %s",
			len(tooLate), g.cfg.MaxLateness, worst.Truncate(time.Millisecond), strings.Join(tooLate[:min(len(tooLate), 5)], ", "))
	}
	for _, pd := range g.plan.deals {
		st := g.finalStock[pd.sku]
		if st == nil {
			violate("HTTP: stock of %s could not be read after the run", pd.sku)
			continue
		}
		initial := g.initial[pd.sku]
		if total := st.Available + st.Held + st.Sold; total != initial || st.Available < 0 || st.Held < 0 || st.Sold < 0 {
			violate("I4: sku %s: available %d + held %d + sold %d = %d, seeded %d", pd.sku, st.Available, st.Held, st.Sold, total, initial)
		}
		if st.Held != 0 {
			violate("I4: sku %s still holds %d units at rest", pd.sku, st.Held)
		}
		if st.Sold != kept[pd.sku] {
			violate("I4: sku %s sold %d units but the member orders kept %d", pd.sku, st.Sold, kept[pd.sku])
		}
	}
}

// paidInTime returns the member orders of tg (as "id (behaviour)") whose success callback
// was acknowledged before both the group deadline and the order's close_at, by more than
// the clock margin, and that did not leave the group or cancel: once min_members of them
// are paid, the group has succeeded (the payment that brought the count there did it).
func (g *groupFlow) paidInTime(tg *trackedGroup, gr *group, leftAt map[string]*time.Time) []string {
	var out []string
	for _, m := range tg.members {
		if m.successID == "" || m.leftAck || m.cancelled || leftAt[m.order.ID] != nil {
			continue
		}
		by := g.local(gr.DeadlineAt)
		if c := g.local(m.order.CloseAt); c.Before(by) {
			by = c
		}
		if m.successAt.Before(by.Add(-g.margin)) {
			out = append(out, fmt.Sprintf("%s (%s)", m.order.ID, m.pm.behaviour))
		}
	}
	return out
}

// checkFailedMember checks a member of a failed group: it keeps nothing, and every payment
// of it that succeeded was refunded.
func (g *groupFlow) checkFailedMember(gr *group, m *trackedMember) []string {
	o := m.final
	if o == nil {
		return nil
	}
	var out []string
	if keptLike(o.State) || o.State == orderly.StatePaid {
		out = append(out, fmt.Sprintf("G: member order %s (%s) of failed group %s is %s: a failed group keeps no payment", o.ID, m.pm.behaviour, gr.ID, o.State))
	}
	for _, p := range m.finalPayments {
		if p.State != orderly.PaymentSucceeded && p.State != orderly.PaymentRefundPending {
			continue
		}
		if refundedByRefunds(p, m.finalRefunds) {
			continue
		}
		out = append(out, fmt.Sprintf("G: member order %s (%s) of failed group %s is %s and its payment %s is %s: every paid member of a failed group is refunded",
			o.ID, m.pm.behaviour, gr.ID, o.State, p.ID, p.State))
	}
	return out
}

// refundedByRefunds reports whether succeeded refunds of payment p give back all of it.
func refundedByRefunds(p *orderly.Payment, refunds []*orderly.Refund) bool {
	var sum int64
	for _, f := range refunds {
		if f.PaymentID == p.ID && f.State == orderly.RefundSucceeded {
			sum += f.Amount
		}
	}
	return sum >= p.Amount
}

// checkMember counts one member order and checks the order invariants on it; kept adds
// the units of orders that kept their payment, by SKU.
func (g *groupFlow) checkMember(res *Result, gres *GroupResult, tg *trackedGroup, m *trackedMember, kept map[string]int64) {
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	res.Orders++
	gres.Members++
	res.Behaviours[m.pm.behaviour.String()]++
	if m.leftAck {
		gres.Left++
	}
	if m.shipAck && tg.final != nil && tg.final.State == groupSucceeded {
		gres.Shipped++
	}
	o, b := m.final, m.pm.behaviour
	if o == nil {
		violate("HTTP: member order %s (%s) could not be read after the run", m.order.ID, b)
		return
	}
	if o.Amount != tg.pg.deal.price {
		violate("I4: member order %s (%s) costs %d, the deal's group price is %d", o.ID, b, o.Amount, tg.pg.deal.price)
	}
	var captured, refunded int64
	for _, p := range m.finalPayments {
		switch p.State {
		case orderly.PaymentSucceeded, orderly.PaymentRefundPending:
			captured += p.Amount
		case orderly.PaymentRefunded:
			captured += p.Amount
			refunded += p.Amount
			res.Refunded++
			gres.Refunds++
		}
		if p.Amount != o.Amount {
			violate("I4: payment %s of member order %s (%s) is for %d, the order costs %d", p.ID, o.ID, b, p.Amount, o.Amount)
		}
	}
	refunded += succeededRefunds(m.finalRefunds)
	want := int64(0)
	switch {
	case keptLike(o.State):
		res.Paid++
		gres.PaidMembers++
		want = o.Amount - succeededRefunds(m.finalRefunds)
		for _, it := range o.Items {
			kept[it.SKU] += it.Quantity
		}
		var succeeded []string
		for _, p := range m.finalPayments {
			if p.State == orderly.PaymentSucceeded {
				succeeded = append(succeeded, p.ID)
			}
		}
		if len(succeeded) != 1 {
			violate("I2: member order %s (%s) is %s with %d succeeded payments %v, want exactly 1", o.ID, b, o.State, len(succeeded), succeeded)
		}
	case o.State == orderly.StateClosed:
		switch o.CloseReason {
		case orderly.CloseReasonPaymentTimeout:
			res.Closed++
			if o.ClosedAt != nil {
				late := o.ClosedAt.Sub(o.CloseAt)
				res.addLateness(late)
				if late < 0 {
					res.EarlyCloses++
					violate("I1: member order %s closed for payment_timeout at %s, %s before its close_at %s", o.ID, formatTime(*o.ClosedAt), -late, formatTime(o.CloseAt))
				}
				if bound := g.cfg.MaxLateness; bound > 0 && late > bound {
					violate("I5: member order %s closed %s after its close_at, above the lateness bound %s", o.ID, late.Truncate(time.Millisecond), bound)
				}
			}
			if m.successID != "" && m.successAt.Before(g.local(o.CloseAt).Add(-g.margin)) && (tg.final == nil || tg.final.State != groupFailed) {
				violate("I2: member order %s (%s) was closed for payment_timeout although its payment %s was acknowledged at %s, before close_at %s (clock margin %s)",
					o.ID, b, m.successID, formatTime(m.successAt), formatTime(o.CloseAt), g.margin)
			}
		case orderly.CloseReasonBuyerCancelled:
			res.Cancelled++
		}
		for _, p := range m.finalPayments {
			if p.State == orderly.PaymentSucceeded || p.State == orderly.PaymentRefundPending {
				violate("I2: member order %s (%s) is closed but its payment %s is %s (must be refunded)", o.ID, b, p.ID, p.State)
			}
		}
	case o.State == orderly.StateRefunded:
	case o.State == orderly.StatePendingPayment:
		violate("I5: member order %s (%s) is still pending_payment after its close_at %s", o.ID, b, formatTime(o.CloseAt))
		return
	default:
		violate("G: member order %s (%s) is %s at rest", o.ID, b, o.State)
		return
	}
	if m.successID != "" && !slices.ContainsFunc(m.finalPayments, func(p *orderly.Payment) bool { return p.ID == m.successID }) {
		violate("I2: member order %s (%s): its payment %s, acknowledged as succeeded, is missing", o.ID, b, m.successID)
	}
	if captured-refunded != want {
		violate("I4: member order %s (%s) is %s: captured %d − refunded %d = %d, want %d", o.ID, b, o.State, captured, refunded, captured-refunded, want)
	}
	if g.cfg.GatewayLedger != nil {
		for _, f := range m.finalRefunds {
			var moved []sim.GatewayCall
			for _, c := range g.refundCalls()[f.ID] {
				if !c.Replay {
					moved = append(moved, c)
				}
			}
			switch {
			case f.State == orderly.RefundSucceeded && (len(moved) != 1 || moved[0].Amount != f.Amount):
				violate("I3: member order %s (%s): refund %s of %d moved money at the gateway %d times, want once", o.ID, b, f.ID, f.Amount, len(moved))
			case f.State != orderly.RefundSucceeded && len(moved) > 0:
				violate("I3: member order %s (%s): refund %s is %s but the gateway refunded %d for it", o.ID, b, f.ID, f.State, moved[0].Amount)
			}
		}
	}
}

// succeededRefunds is the money the gateway confirmed it gave back, in minor units.
func succeededRefunds(refunds []*orderly.Refund) int64 {
	var sum int64
	for _, f := range refunds {
		if f.State == orderly.RefundSucceeded {
			sum += f.Amount
		}
	}
	return sum
}

// emptied reports whether a member had left group gr by at and no member held a seat
// then (each had left or its order was closed): the leave that frees the last seat ends
// a forming group failed at once, before its deadline.
func emptied(gr *group, orders map[string]*orderly.Order, at time.Time) bool {
	left := false
	for _, m := range gr.Members {
		if m.LeftAt != nil && !m.LeftAt.After(at) {
			left = true
			continue
		}
		if o := orders[m.OrderID]; o == nil || o.ClosedAt == nil || o.ClosedAt.After(at) {
			return false
		}
	}
	return left
}

// finals maps the group's member orders, as read at rest, by id.
func finals(tg *trackedGroup) map[string]*orderly.Order {
	out := make(map[string]*orderly.Order, len(tg.members))
	for _, m := range tg.members {
		if m.final != nil {
			out[m.final.ID] = m.final
		}
	}
	return out
}
