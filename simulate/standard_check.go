package simulate

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
)

// paidLike reports whether an order in state s took its payment and keeps it.
func paidLike(s orderly.State) bool {
	return s == orderly.StatePaid || s == orderly.StateShipped || s == orderly.StateCompleted
}

// LastDeadline is the latest close_at of the orders created.
func (r *standardFlow) LastDeadline() time.Time {
	var last time.Time
	for _, t := range r.tracked {
		if t != nil && t.order.CloseAt.After(last) {
			last = t.order.CloseAt
		}
	}
	return last
}

// Settle reads the orders, the stock and the coupons once and reports whether every order
// settled, no SKU holds stock and the coupons are where the orders' states say.
func (r *standardFlow) Settle(ctx context.Context, _ *runner) bool {
	ordersDone := r.refreshOrders(ctx)
	stockDone := r.refreshStock(ctx)
	couponsDone := r.refreshCoupons(ctx)
	return ordersDone && stockDone && couponsDone
}

// Payments returns the payments of every order as read at rest, and its refunds' ids.
func (r *standardFlow) Payments() ([]FinalPayment, []string) {
	var ps []FinalPayment
	var ids []string
	for _, t := range r.tracked {
		if t == nil {
			continue
		}
		for _, p := range t.finalPayments {
			ps = append(ps, FinalPayment{OrderID: t.order.ID, Who: t.po.behaviour.String(), Payment: p})
		}
		for _, f := range t.finalRefunds {
			ids = append(ids, f.ID)
		}
	}
	return ps, ids
}

// refreshOrders reads every order that has not settled and whose close_at passed (an
// order before its deadline may still change) and reports whether all have settled.
func (r *standardFlow) refreshOrders(ctx context.Context) bool {
	var todo []*tracked
	for _, t := range r.tracked {
		if t != nil && !t.settled {
			todo = append(todo, t)
		}
	}
	now := time.Now()
	var due []*tracked
	for _, t := range todo {
		if t.final == nil || t.final.State != orderly.StatePendingPayment || !now.Before(t.order.CloseAt) {
			due = append(due, t)
		}
	}
	_ = forEach(ctx, len(due), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		r.refreshOrder(ctx, due[i])
		return nil
	})
	open := 0
	for _, t := range todo {
		if !t.settled {
			open++
		}
	}
	r.open.Store(int64(open))
	return open == 0
}

// refreshOrder reads one order (and its payments and refunds when it has any) and decides
// whether it settled: not pending, no refund under way, no captured payment left on a
// closed order, and the order read the same after its payments and refunds as before them
// (see unchanged).
func (r *standardFlow) refreshOrder(ctx context.Context, t *tracked) {
	o, err := r.c.order(ctx, t.order.ID)
	if err != nil {
		if ctx.Err() == nil {
			r.httpProblem("read order %s: %v", t.order.ID, err)
		}
		return
	}
	t.final = o
	if o.State == orderly.StateClosed && !t.seenClose {
		t.seenClose = true
		r.closedSeen.Add(1)
	}
	if o.State == orderly.StatePendingPayment {
		return
	}
	if len(t.payments) > 0 || t.unknownStarts > 0 || paidLike(o.State) {
		ps, err := r.c.payments(ctx, o.ID)
		if err != nil {
			if ctx.Err() == nil {
				r.httpProblem("read payments of order %s: %v", o.ID, err)
			}
			return
		}
		t.finalPayments = ps
		for _, p := range ps {
			if p.State == orderly.PaymentRefundPending || (o.State == orderly.StateClosed && p.State == orderly.PaymentSucceeded) {
				return
			}
		}
	}
	if !r.refreshRefunds(ctx, t) {
		return
	}
	// An order read alone is one reading; one read with its payments or refunds must read
	// the same after them.
	if (t.finalPayments != nil || t.finalRefunds != nil) && !r.unchanged(ctx, o) {
		return
	}
	t.settled = true
}

// refreshStock reads every SKU and reports whether none holds stock.
func (r *standardFlow) refreshStock(ctx context.Context) bool {
	skus := r.plan.skus
	got := make([]*orderly.Stock, len(skus))
	_ = forEach(ctx, len(skus), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		s, err := r.c.stock(ctx, skus[i].sku)
		if err != nil {
			if ctx.Err() == nil {
				r.httpProblem("read stock of %s: %v", skus[i].sku, err)
			}
			return nil
		}
		got[i] = s
		return nil
	})
	r.finalStock = map[string]*orderly.Stock{}
	done := true
	for i, s := range got {
		if s == nil {
			done = false
			continue
		}
		r.finalStock[skus[i].sku] = s
		done = done && s.Held == 0
	}
	return done
}

// refreshCoupons reads every coupon and reports whether each is where its orders' final
// states say (see couponWant).
func (r *standardFlow) refreshCoupons(ctx context.Context) bool {
	ids := slices.Sorted(maps.Values(r.couponOf))
	got := make([]*orderly.Coupon, len(ids))
	_ = forEach(ctx, len(ids), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		c, err := r.c.coupon(ctx, ids[i])
		if err != nil {
			if ctx.Err() == nil {
				r.httpProblem("read coupon %s: %v", ids[i], err)
			}
			return nil
		}
		got[i] = c
		return nil
	})
	r.finalCoupons = map[string]*orderly.Coupon{}
	users := r.couponOrders()
	done := true
	for i, c := range got {
		if c == nil {
			done = false
			continue
		}
		r.finalCoupons[ids[i]] = c
		done = done && couponProblem(c, users[ids[i]]) == ""
	}
	return done
}

// couponOrders returns the created orders that froze each coupon, by coupon id.
func (r *standardFlow) couponOrders() map[string][]*tracked {
	out := map[string][]*tracked{}
	for _, t := range r.tracked {
		if t != nil && t.couponID != "" {
			out[t.couponID] = append(out[t.couponID], t)
		}
	}
	return out
}

// couponProblem says what is wrong with coupon c given the final states of the orders
// that froze it, "" if nothing: used by the one paid order, else available (or expired).
func couponProblem(c *orderly.Coupon, orders []*tracked) string {
	var paid []string
	for _, t := range orders {
		if t.final != nil && paidLike(t.final.State) {
			paid = append(paid, t.order.ID)
		}
	}
	switch len(paid) {
	case 0:
		if (c.State != orderly.CouponAvailable && c.State != orderly.CouponExpired) || c.OrderID != "" {
			return fmt.Sprintf("coupon %s is %s%s, want available: none of its %d orders was paid", c.ID, c.State, by(c.OrderID), len(orders))
		}
	case 1:
		if c.State != orderly.CouponUsed || c.OrderID != paid[0] {
			return fmt.Sprintf("coupon %s is %s%s, want used by its paid order %s", c.ID, c.State, by(c.OrderID), paid[0])
		}
	default:
		return fmt.Sprintf("coupon %s was used by %d paid orders %v (a coupon is used at most once)", c.ID, len(paid), paid)
	}
	return ""
}

func by(orderID string) string {
	if orderID == "" {
		return ""
	}
	return " by order " + orderID
}

// Check counts the orders by how they ended and checks each against its buyer (see the
// package doc), then the coupons and the stock of the flow's catalogue.
func (r *standardFlow) Check(_ *runner, res *Result) {
	res.Sent += int(r.sent.Load())
	res.Errors += int(r.createErrors.Load())
	res.OutOfStock += int(r.outOfStock.Load())
	res.CouponUnavailable += int(r.couponUnavailable.Load())
	res.LatePayments += int(r.latePayments.Load())
	res.DuplicateCallbacks += int(r.duplicates.Load())
	violate := func(format string, args ...any) {
		res.Violations = append(res.Violations, fmt.Sprintf(format, args...))
	}
	bought := map[string]int64{}
	var orders, paid int
	for _, t := range r.tracked {
		if t == nil {
			continue
		}
		res.Orders++
		orders++
		if t.po.behaviour.paysInTime() {
			res.Payers++
			if t.final != nil && paidLike(t.final.State) {
				res.PayersPaid++
			}
		}
		res.Behaviours[t.po.behaviour.String()]++
		if t.missed {
			res.MissedDeadline++
		}
		res.Violations = append(res.Violations, t.notes...)
		o := t.final
		if o == nil {
			violate("HTTP: order %s (%s) could not be read after the run", t.order.ID, t.po.behaviour)
			continue
		}
		switch {
		case paidLike(o.State):
			res.Paid++
			paid++
			for _, it := range o.Items {
				bought[it.SKU] += it.Quantity - t.restocked(it.SKU)
			}
		case o.State == orderly.StateClosed && o.CloseReason == orderly.CloseReasonPaymentTimeout:
			res.Closed++
			if o.ClosedAt == nil {
				violate("HTTP: order %s is closed without closed_at", o.ID)
				break
			}
			late := o.ClosedAt.Sub(o.CloseAt)
			res.addLateness(late)
			if late < 0 {
				res.EarlyCloses++
				violate("I1: order %s closed for payment_timeout at %s, %s before its close_at %s",
					o.ID, formatTime(*o.ClosedAt), -late, formatTime(o.CloseAt))
			}
		case o.State == orderly.StateClosed && o.CloseReason == orderly.CloseReasonBuyerCancelled:
			res.Cancelled++
		case o.State == orderly.StatePendingPayment:
			violate("I5: order %s (%s) is still pending_payment %s after its close_at %s",
				o.ID, t.po.behaviour, time.Since(o.CloseAt).Truncate(time.Millisecond), formatTime(o.CloseAt))
		default:
			violate("expect: order %s (%s) ended %s/%s, which no buyer of this run asks for", o.ID, t.po.behaviour, o.State, o.CloseReason)
		}
		for _, p := range t.finalPayments {
			if p.State == orderly.PaymentRefunded {
				res.Refunded++
			}
		}
		res.Violations = append(res.Violations, r.checkPayments(t)...)
		res.Violations = append(res.Violations, r.checkAmounts(t)...)
		res.Violations = append(res.Violations, r.checkMoney(t)...)
		res.PartialRefunds += len(t.refunds)
		if v := r.checkExpectation(t, res); v != "" {
			violate("%s", v)
		}
		r.countNearDeadline(t, res)
	}
	if orders > 0 {
		res.PaidShare = float64(paid) / float64(orders)
		res.PlannedPaidShare = float64(res.Payers) / float64(orders)
	}
	if v := r.checkLateness(); v != "" {
		violate("%s", v)
	}

	users := r.couponOrders()
	for _, id := range slices.Sorted(maps.Values(r.couponOf)) {
		c := r.finalCoupons[id]
		if c == nil {
			violate("HTTP: coupon %s could not be read after the run", id)
		} else if p := couponProblem(c, users[id]); p != "" {
			violate("I3: %s", p)
		}
	}
	for _, s := range r.plan.skus {
		st := r.finalStock[s.sku]
		if st == nil {
			violate("HTTP: stock of %s could not be read after the run", s.sku)
			continue
		}
		if total := st.Available + st.Held + st.Sold; total != r.initial[s.sku] || st.Available < 0 || st.Held < 0 || st.Sold < 0 {
			violate("I4: sku %s: available %d + held %d + sold %d = %d, seeded %d", s.sku, st.Available, st.Held, st.Sold, total, r.initial[s.sku])
		}
		if st.Held != 0 {
			violate("I4: sku %s still holds %d units at rest", s.sku, st.Held)
		}
		if st.Sold != bought[s.sku] {
			violate("I4: sku %s sold %d units but the paid orders bought %d", s.sku, st.Sold, bought[s.sku])
		}
	}
}

// checkPayments checks I2 on an order's final payments: a closed order keeps no captured
// money, and the success its buyer was told about is refunded; a paid order has exactly
// one succeeded payment, the one acknowledged, of the order's amount. Attempts the buyer
// does not know of may come from payment starts sent again after a try that got no answer
// (one each at most); the rules above keep them from being applied.
func (r *standardFlow) checkPayments(t *tracked) []string {
	o, ps := t.final, t.finalPayments
	var out []string
	unknown := 0
	for _, p := range ps {
		if !slices.ContainsFunc(t.payments, func(q *orderly.Payment) bool { return q.ID == p.ID }) {
			unknown++
		}
	}
	if unknown > t.unknownStarts {
		out = append(out, fmt.Sprintf("HTTP: order %s (%s) has %d payment attempts; its buyer started %d, and %d starts sent again after no answer may have added one each",
			o.ID, t.po.behaviour, len(ps), len(t.payments), t.unknownStarts))
	}
	switch {
	case o.State == orderly.StateClosed:
		for _, p := range ps {
			switch {
			case p.State == orderly.PaymentSucceeded || p.State == orderly.PaymentRefundPending:
				out = append(out, fmt.Sprintf("I2: order %s (%s) is closed but its payment %s is %s (must be refunded)", o.ID, t.po.behaviour, p.ID, p.State))
			case p.ID == t.successID && p.State != orderly.PaymentRefunded:
				out = append(out, fmt.Sprintf("I2: order %s (%s) is closed and its payment %s, acknowledged as succeeded, is %s: want refunded",
					o.ID, t.po.behaviour, p.ID, p.State))
			}
		}
		if t.successID != "" && !slices.ContainsFunc(ps, func(p *orderly.Payment) bool { return p.ID == t.successID }) {
			out = append(out, fmt.Sprintf("I2: order %s (%s) is closed and its payment %s, acknowledged as succeeded, is missing", o.ID, t.po.behaviour, t.successID))
		}
	case paidLike(o.State):
		var succeeded []*orderly.Payment
		for _, p := range ps {
			switch p.State {
			case orderly.PaymentSucceeded:
				succeeded = append(succeeded, p)
			case orderly.PaymentRefundPending:
				out = append(out, fmt.Sprintf("I2: order %s (%s) is %s and its payment %s is still refund_pending", o.ID, t.po.behaviour, o.State, p.ID))
			}
		}
		switch {
		case len(succeeded) != 1:
			ids := make([]string, len(succeeded))
			for i, p := range succeeded {
				ids[i] = p.ID
			}
			out = append(out, fmt.Sprintf("I2: order %s (%s) is %s with %d succeeded payments %v, want exactly 1", o.ID, t.po.behaviour, o.State, len(succeeded), ids))
		case t.successID != "" && succeeded[0].ID != t.successID:
			out = append(out, fmt.Sprintf("I2: order %s (%s) is paid by payment %s, but its buyer paid with %s", o.ID, t.po.behaviour, succeeded[0].ID, t.successID))
		case succeeded[0].Amount != o.Amount:
			out = append(out, fmt.Sprintf("I2: order %s (%s) costs %d but its payment %s is %d", o.ID, t.po.behaviour, o.Amount, succeeded[0].ID, succeeded[0].Amount))
		}
	}
	if t.failedID != "" {
		for _, p := range ps {
			if p.ID == t.failedID && p.State != orderly.PaymentFailed {
				out = append(out, fmt.Sprintf("I2: order %s (%s): payment %s failed at the gateway but is %s", o.ID, t.po.behaviour, p.ID, p.State))
			}
		}
	}
	return out
}

// checkExpectation compares the order's final state with what its buyer's behaviour
// implies and returns a violation, or "". A buyer who paid in time but whose order was
// closed is a violation when the success was acknowledged (the answer received) before
// close_at by more than the clock margin: the server then applied it before the deadline,
// or ignored it. Acknowledged later, the callback may have reached the server after
// close_at: a race (counted in res.Races), and checkPayments requires the refund.
func (r *standardFlow) checkExpectation(t *tracked, res *Result) string {
	o, b := t.final, t.po.behaviour
	if o.State == orderly.StatePendingPayment {
		return "" // reported as I5
	}
	state := string(o.State)
	if o.CloseReason != "" {
		state += "/" + string(o.CloseReason)
	}
	switch {
	case b.paysInTime():
		if t.successID == "" || paidLike(o.State) {
			return "" // no success acknowledged: nothing is expected; paid: as expected
		}
		if o.State == orderly.StateClosed && o.CloseReason == orderly.CloseReasonPaymentTimeout {
			if t.successAt.Before(o.CloseAt.Add(-r.margin)) {
				return fmt.Sprintf("I2: order %s (%s) was closed at %s although its payment %s was acknowledged at %s, %s before close_at (clock margin %s)",
					o.ID, b, stampPtr(o.ClosedAt), t.successID, formatTime(t.successAt), o.CloseAt.Sub(t.successAt).Truncate(time.Millisecond), r.margin)
			}
			res.Races++
			return ""
		}
		return fmt.Sprintf("expect: order %s (%s) ended %s, want paid", o.ID, b, state)
	case b == payLate:
		if paidLike(o.State) {
			return fmt.Sprintf("I2: order %s (%s) ended %s: a closed order must stay closed and its late payment be refunded", o.ID, b, state)
		}
		if o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonPaymentTimeout {
			return fmt.Sprintf("expect: order %s (%s) ended %s, want closed/payment_timeout", o.ID, b, state)
		}
		if t.lateSent {
			late := t.payments[0].ID
			i := slices.IndexFunc(t.finalPayments, func(p *orderly.Payment) bool { return p.ID == late })
			switch {
			case i < 0:
				return fmt.Sprintf("I2: order %s (%s): its late payment %s, acknowledged as succeeded, is missing from the order's payments", o.ID, b, late)
			case t.finalPayments[i].State != orderly.PaymentRefunded:
				return fmt.Sprintf("I2: order %s (%s): its late payment %s is %s, want refunded", o.ID, b, late, t.finalPayments[i].State)
			}
		}
	case b == cancelOrder:
		if t.cancelled && (o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonBuyerCancelled) {
			return fmt.Sprintf("expect: order %s (%s) ended %s, want closed/buyer_cancelled", o.ID, b, state)
		}
	case b == neverPay:
		if o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonPaymentTimeout {
			return fmt.Sprintf("expect: order %s (%s) ended %s, want closed/payment_timeout", o.ID, b, state)
		}
	}
	return ""
}

// countNearDeadline adds the order to res.NearDeadline when its buyer's success was
// acknowledged within NearDeadlineWindow of close_at.
func (r *standardFlow) countNearDeadline(t *tracked, res *Result) {
	o := t.final
	if t.successID == "" || o == nil || (t.successAt.Sub(t.order.CloseAt)).Abs() > NearDeadlineWindow {
		return
	}
	n := &res.NearDeadline
	n.Successes++
	if t.successAt.Before(t.order.CloseAt) {
		n.BeforeCloseAt++
	}
	switch {
	case paidLike(o.State):
		n.Paid++
	case o.State == orderly.StateClosed:
		n.Closed++
	}
}

// checkAmounts checks the money of one order against what its buyer asked for (I4): the
// order was created with the planned items, for Σ quantity × unit_price − the coupon's
// amount_off, and every payment attempt, started or final, is for that amount.
func (r *standardFlow) checkAmounts(t *tracked) []string {
	var out []string
	want := t.po.price(t.couponID != "")
	o := t.order
	if !slices.Equal(o.Items, t.po.items) {
		out = append(out, fmt.Sprintf("HTTP: order %s (%s) was created with items %s, its buyer asked for %s",
			o.ID, t.po.behaviour, itemList(o.Items), itemList(t.po.items)))
	}
	coupon := ""
	if t.couponID != "" {
		coupon = fmt.Sprintf(" − coupon %s %d", t.couponID, couponAmountOff)
	}
	if o.Amount != want {
		out = append(out, fmt.Sprintf("I4: order %s (%s) costs %d %s, but its items cost %d%s = %d",
			o.ID, t.po.behaviour, o.Amount, o.Currency, t.po.price(false), coupon, want))
	}
	if t.final != nil && t.final.Amount != o.Amount {
		out = append(out, fmt.Sprintf("HTTP: order %s (%s) was created for %d and now costs %d", o.ID, t.po.behaviour, o.Amount, t.final.Amount))
	}
	seen := map[string]bool{}
	for _, p := range slices.Concat(t.payments, t.finalPayments) {
		if seen[p.ID] {
			continue
		}
		seen[p.ID] = true
		if p.Amount != want || p.Currency != currency {
			out = append(out, fmt.Sprintf("I4: payment %s of order %s (%s) is for %d %s, but the order's items cost %d%s = %d %s",
				p.ID, o.ID, t.po.behaviour, p.Amount, p.Currency, t.po.price(false), coupon, want, currency))
		}
	}
	return out
}

// checkLateness reports the orders closed for payment timeout later than
// Config.MaxLateness after their close_at, as one I5 violation; "" if none or no bound.
func (r *standardFlow) checkLateness() string {
	bound := r.cfg.MaxLateness
	if bound <= 0 {
		return ""
	}
	var late []string
	var worst time.Duration
	for _, t := range r.tracked {
		if t == nil || t.final == nil || t.final.ClosedAt == nil || t.final.CloseReason != orderly.CloseReasonPaymentTimeout {
			continue
		}
		if d := t.final.ClosedAt.Sub(t.final.CloseAt); d > bound {
			late = append(late, t.final.ID)
			worst = max(worst, d)
		}
	}
	if len(late) == 0 {
		return ""
	}
	const shown = 5
	ids := strings.Join(late[:min(len(late), shown)], ", ")
	if len(late) > shown {
		ids += ", …"
	}
	return fmt.Sprintf("I5: %d orders closed more than the lateness bound %s after their close_at (the latest %s): %s",
		len(late), bound, worst.Truncate(time.Millisecond), ids)
}
