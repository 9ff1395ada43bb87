// Package verify checks the invariants of docs/getting-started.md against a database at rest: after the
// traffic stopped and the workers settled, every order, payment, reservation, coupon, stock
// row and outbox message must agree. It is used by `orderly verify`, by package simulate at
// the end of a run, and by tests.
//
// Check reads everything in one read transaction through the store.Tx methods (no SQL of its
// own), so it works on every dialect and sees one consistent snapshot. It reports; it never
// repairs (repairs go through the state machine, in package reconcile).
package verify

import (
	"cmp"
	"context"
	"fmt"
	"maps"
	"math"
	"math/bits"
	"slices"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Defaults of Options.
const (
	DefaultTolerance     = time.Minute
	DefaultMaxViolations = 1000
)

// pageSize is the keyset page size of the order scan.
const pageSize = 1000

// Options configures Check. Zero values mean the defaults.
type Options struct {
	// Tolerance is how far past close_at an open (pending_payment) order may be before it
	// is an I5 violation, measured with the database clock. Default DefaultTolerance (1 min).
	Tolerance time.Duration
	// InitialStock, when set, is the total units ever put in per SKU: I4 then checks
	// initial = available + held + sold for every SKU in the map. SKUs not in the map are
	// checked for the other I4 rules only.
	InitialStock map[string]int64
	// RequireDrained makes pending outbox messages a violation (I7). Set it when the
	// database is at rest and the relay had time to deliver everything.
	RequireDrained bool
	// Flows resolves each order's flow for the I6 check. Default orderly.DefaultFlows().
	Flows orderly.Flows
	// Groups, when set, reads the group-buy groups (docs/flows/group-buy.md) in the check's
	// read transaction, for the group_buy checks (groupbuy.go): ReadGroups on an orderly
	// database, a fixture in tests; nil skips the checks that span a group (Report.Groups
	// stays nil).
	Groups func(ctx context.Context, tx store.Tx) ([]*GroupRow, error)
	// Holds, when set, reads in the check's read transaction the card holds of a gateway
	// that keeps them in this database (channel/sim's ReadHolds), by id, with the faults its
	// own books show (a hold captured under two keys); the ride_hailing checks compare
	// every trip with its holds. nil, or no holds, skips that comparison.
	Holds func(ctx context.Context, tx store.Tx) (holds map[string]*orderly.Hold, faults []string, err error)
	// MaxViolations caps the number of violation texts kept in the report; the rest are
	// counted in Report.ViolationsOmitted. Default DefaultMaxViolations (1000).
	MaxViolations int
}

// Report is the result of Check. Counts are keyed by the state names of package orderly.
type Report struct {
	// CheckedAt is the database clock at the start of the check.
	CheckedAt time.Time `json:"checked_at"`
	// Orders is the number of orders; the maps below break it down.
	Orders              int64            `json:"orders"`
	OrdersByState       map[string]int64 `json:"orders_by_state"`
	OrdersByPayStatus   map[string]int64 `json:"orders_by_pay_status"`
	OrdersByCloseReason map[string]int64 `json:"orders_by_close_reason"`
	// Payments is the number of payment attempts, broken down by state.
	Payments        int64            `json:"payments"`
	PaymentsByState map[string]int64 `json:"payments_by_state"`
	// OutboxByState counts outbox messages by state (pending, delivered, dead).
	OutboxByState map[string]int64 `json:"outbox_by_state"`
	// EarlyCloses counts orders closed for payment_timeout with closed_at < close_at (I1).
	EarlyCloses int `json:"early_closes"`
	// Overdue counts open orders past close_at by more than the tolerance (I5).
	Overdue int `json:"overdue"`
	// Violations are human-readable, each prefixed with its invariant ("I3: …"), in a
	// stable order: per order by id, then stock by SKU, coupons by id, outbox. Never nil.
	Violations []string `json:"violations"`
	// Groups counts the group-buy groups by state, when Options.Groups was set.
	Groups map[string]int64 `json:"groups,omitempty"`
	// ViolationsOmitted counts violations found beyond Options.MaxViolations.
	ViolationsOmitted int `json:"violations_omitted"`
}

// OK reports whether the check found no violation.
func (r *Report) OK() bool { return len(r.Violations) == 0 && r.ViolationsOmitted == 0 }

// Check reads the whole database in one read transaction and checks invariants I1–I7:
//
//   - I1: no order closed for payment_timeout before its close_at.
//   - I2: a closed order keeps no captured payment (succeeded or refund_pending): it must be
//     refunded; once the outbox is drained (Options.RequireDrained), a closed order's
//     attempt in flight at its close has been settled (payment.cancel); a paid, shipped or completed order has pay_status paid and exactly one
//     succeeded payment of the order's amount, and any other captured attempt is refunded.
//   - I3: reservations of closed orders are all released, of paid, shipped, completed,
//     refunding and refunded orders all committed (a merchant refund returns the money, not
//     the goods), of open orders all held, and match the order's items; a frozen or used
//     coupon names an order that exists and references it; a closed order's coupon is not
//     frozen or used by it, the coupon of an order that was paid (refunded ones included) is
//     used by it, an open order's coupon is frozen by it.
//   - I4: every order's amount is Σ quantity × unit_price − its coupon's amount_off (in the
//     coupon's currency), and a paid order's payment took that amount; per SKU held = Σ
//     held reservations, sold = Σ committed reservations, none negative, and initial =
//     available + held + sold when Options.InitialStock is given (sold less the units
//     refunds restocked); per order captured − refunded (payments refunded whole and
//     succeeded refunds) equals the amount less its succeeded refunds for paid, shipped and
//     completed orders and 0 for open, closed and refunded ones; refunds never exceed the
//     captured amount, the order's refunded_amount is the sum of its refunds not failed,
//     pay_status says how much was refunded, refunded items never exceed those bought (see
//     checkRefunds).
//   - I5: no open order is past close_at by more than Options.Tolerance (database clock).
//   - I6: each order's audit trail is a chain of legal transitions of its flow from the
//     flow's initial state to the order's current state.
//   - I7: no dead outbox message; no pending one when Options.RequireDrained.
//
// It returns an error only when the database cannot be read; violations are in the report.
func Check(ctx context.Context, s store.Store, opts Options) (*Report, error) {
	opts.Tolerance = cmp.Or(opts.Tolerance, DefaultTolerance)
	opts.MaxViolations = cmp.Or(opts.MaxViolations, DefaultMaxViolations)
	if opts.Flows == nil {
		opts.Flows = orderly.DefaultFlows()
	}
	var rep *Report
	err := s.Read(ctx, func(tx store.Tx) error {
		c := newChecker(opts)
		if err := c.run(ctx, tx); err != nil {
			return err
		}
		rep = c.rep
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("verify: %w", err)
	}
	return rep, nil
}

// checker holds the indexes of one Check. Entries of the per-order indexes are deleted as
// their order is checked, so what remains at the end refers to orders that do not exist.
type checker struct {
	opts Options
	now  time.Time
	rep  *Report

	paymentsByOrder     map[string][]*orderly.Payment
	refundsByOrder      map[string][]*orderly.Refund
	reservationsByOrder map[string][]*orderly.Reservation
	coupons             map[string]*orderly.Coupon   // by id
	couponsByOrder      map[string][]*orderly.Coupon // frozen or used, by order_id
	flows               map[string]FlowChecks        // per-flow checks, by flow name (flow.go)
	heldBySKU           map[string]int64             // Σ held reservations
	committedBySKU      map[string]int64             // Σ committed reservations
}

func newChecker(opts Options) *checker {
	return &checker{
		opts: opts,
		rep: &Report{
			OrdersByState:       map[string]int64{},
			OrdersByPayStatus:   map[string]int64{},
			OrdersByCloseReason: map[string]int64{},
			PaymentsByState:     map[string]int64{},
			OutboxByState:       map[string]int64{},
			Violations:          []string{},
		},
		paymentsByOrder:     map[string][]*orderly.Payment{},
		refundsByOrder:      map[string][]*orderly.Refund{},
		reservationsByOrder: map[string][]*orderly.Reservation{},
		coupons:             map[string]*orderly.Coupon{},
		couponsByOrder:      map[string][]*orderly.Coupon{},
		flows:               newFlowChecks(),
		heldBySKU:           map[string]int64{},
		committedBySKU:      map[string]int64{},
	}
}

// violate records one violation of invariant inv.
func (c *checker) violate(inv, format string, args ...any) {
	if len(c.rep.Violations) >= c.opts.MaxViolations {
		c.rep.ViolationsOmitted++
		return
	}
	c.rep.Violations = append(c.rep.Violations, inv+": "+fmt.Sprintf(format, args...))
}

func (c *checker) run(ctx context.Context, tx store.Tx) error {
	now, err := tx.Now(ctx)
	if err != nil {
		return err
	}
	c.now, c.rep.CheckedAt = now, now
	if err := c.load(ctx, tx); err != nil {
		return err
	}
	for _, name := range sortedKeys(c.flows) {
		if err := c.flows[name].Load(ctx, tx, &c.opts); err != nil {
			return err
		}
	}
	after := ""
	for {
		page, err := tx.OrderList(ctx, &store.ListParams{AfterID: after, Limit: pageSize})
		if err != nil {
			return err
		}
		for _, o := range page {
			if err := c.checkOrder(ctx, tx, o); err != nil {
				return err
			}
		}
		if len(page) < pageSize {
			break
		}
		after = page[len(page)-1].ID
	}
	for _, name := range sortedKeys(c.flows) {
		c.flows[name].Finish(&Violations{c})
	}
	c.checkOrphans()
	if err := c.checkStock(ctx, tx); err != nil {
		return err
	}
	wallets, err := CheckWallets(ctx, tx)
	if err != nil {
		return err
	}
	for _, v := range wallets {
		c.violate(v[:2], "%s", v[4:])
	}
	return c.checkOutbox(ctx, tx)
}

// load indexes payments, reservations and coupons by order.
func (c *checker) load(ctx context.Context, tx store.Tx) error {
	payments, err := tx.PaymentList(ctx, "")
	if err != nil {
		return err
	}
	for _, p := range payments {
		c.rep.Payments++
		c.rep.PaymentsByState[string(p.State)]++
		c.paymentsByOrder[p.OrderID] = append(c.paymentsByOrder[p.OrderID], p)
	}
	reservations, err := tx.ReservationList(ctx, "")
	if err != nil {
		return err
	}
	for _, r := range reservations {
		c.reservationsByOrder[r.OrderID] = append(c.reservationsByOrder[r.OrderID], r)
		switch r.State {
		case orderly.ReservationHeld:
			c.heldBySKU[r.SKU] += r.Quantity
		case orderly.ReservationCommitted:
			c.committedBySKU[r.SKU] += r.Quantity - r.Restocked // restocked units went back to available
		}
	}
	if err := c.loadRefunds(ctx, tx); err != nil {
		return err
	}
	coupons, err := tx.CouponList(ctx)
	if err != nil {
		return err
	}
	for _, cp := range coupons {
		c.coupons[cp.ID] = cp
		if cp.State == orderly.CouponFrozen || cp.State == orderly.CouponUsed {
			if cp.OrderID == "" {
				c.violate("I3", "coupon %s is %s by no order", cp.ID, cp.State)
				continue
			}
			c.couponsByOrder[cp.OrderID] = append(c.couponsByOrder[cp.OrderID], cp)
		}
	}
	return nil
}

// paidLike reports whether an order in state s has taken its payment and still keeps it.
func paidLike(s orderly.State) bool {
	return s == orderly.StatePaid || s == orderly.StateShipped || s == orderly.StateCompleted || s == stateGroupSucceeded
}

func (c *checker) checkOrder(ctx context.Context, tx store.Tx, o *orderly.Order) error {
	c.rep.Orders++
	c.rep.OrdersByState[string(o.State)]++
	c.rep.OrdersByPayStatus[string(o.PayStatus)]++
	if o.CloseReason != "" {
		c.rep.OrdersByCloseReason[string(o.CloseReason)]++
	}
	payments, reservations, coupons := c.paymentsByOrder[o.ID], c.reservationsByOrder[o.ID], c.couponsByOrder[o.ID]
	delete(c.paymentsByOrder, o.ID)
	delete(c.reservationsByOrder, o.ID)
	delete(c.couponsByOrder, o.ID)
	refunds := c.refundsByOrder[o.ID]
	delete(c.refundsByOrder, o.ID)

	c.checkTiming(o)
	c.checkAmount(o)
	c.checkPayments(o, payments, refunds)
	c.checkRefunds(o, payments, refunds, reservations)
	c.checkReservations(o, reservations)
	c.checkCoupons(o, coupons)
	trail, err := tx.TransitionList(ctx, o.ID)
	if err != nil {
		return err
	}
	c.checkTrail(o, trail)
	if fc := c.flows[o.Flow]; fc != nil {
		fc.Order(&Violations{c}, o, payments, refunds)
	}
	return nil
}

// checkTiming checks I1 (never early) and I5 (bounded lateness) for one order.
func (c *checker) checkTiming(o *orderly.Order) {
	switch o.State {
	case orderly.StateClosed:
		if o.ClosedAt == nil {
			c.violate("I1", "order %s is closed without closed_at", o.ID)
			return
		}
		if o.CloseReason == orderly.CloseReasonPaymentTimeout && o.ClosedAt.Before(o.CloseAt) {
			c.rep.EarlyCloses++
			c.violate("I1", "order %s closed for payment_timeout at %s, %s before its close_at %s",
				o.ID, stamp(*o.ClosedAt), o.CloseAt.Sub(*o.ClosedAt), stamp(o.CloseAt))
		}
	case orderly.StatePendingPayment:
		if late := c.now.Sub(o.CloseAt); late > c.opts.Tolerance {
			c.rep.Overdue++
			c.violate("I5", "order %s is still pending_payment %s after its close_at %s (tolerance %s)",
				o.ID, late.Truncate(time.Millisecond), stamp(o.CloseAt), c.opts.Tolerance)
		}
	}
}

// checkPayments checks I2 (paid is never lost) and I4 for money.
func (c *checker) checkPayments(o *orderly.Order, payments []*orderly.Payment, refunds []*orderly.Refund) {
	refunded := succeededRefunds(refunds)
	var captured int64
	for _, p := range payments {
		switch p.State {
		case orderly.PaymentSucceeded, orderly.PaymentRefundPending:
			captured += p.Amount
		case orderly.PaymentRefunded:
			captured += p.Amount
			refunded += p.Amount
		}
	}
	switch {
	case o.State == orderly.StateClosed:
		for _, p := range payments {
			if p.State == orderly.PaymentSucceeded || p.State == orderly.PaymentRefundPending {
				c.violate("I2", "order %s is closed but its payment %s is %s (must be refunded)", o.ID, p.ID, p.State)
			}
			if c.opts.RequireDrained && o.PayStatus == orderly.PayPaying && p.ID == o.CurrentPaymentID && p.State == orderly.PaymentInitiated {
				c.violate("I2", "order %s closed with its payment %s in flight, and nothing settled the attempt at the gateway", o.ID, p.ID)
			}
		}
	case paidLike(o.State):
		if o.PayStatus != orderly.PayPaid && o.PayStatus != orderly.PayPartiallyRefunded {
			c.violate("I2", "order %s is %s but its pay_status is %s", o.ID, o.State, o.PayStatus)
		}
		var succeeded []*orderly.Payment
		for _, p := range payments {
			switch p.State {
			case orderly.PaymentSucceeded:
				succeeded = append(succeeded, p)
			case orderly.PaymentRefundPending:
				c.violate("I2", "order %s is %s and its extra payment %s is refund_pending (must be refunded)", o.ID, o.State, p.ID)
			}
		}
		switch len(succeeded) {
		case 0:
			c.violate("I2", "order %s is %s but has no succeeded payment", o.ID, o.State)
		case 1:
			p := succeeded[0]
			switch priced, ok := c.price(o); {
			case p.Amount != o.Amount || p.Currency != o.Currency:
				c.violate("I2", "order %s is %s for %d %s but its payment %s is %d %s",
					o.ID, o.State, o.Amount, o.Currency, p.ID, p.Amount, p.Currency)
			case ok && p.Amount != priced:
				c.violate("I4", "order %s is %s and its payment %s took %d %s, but its items and coupon price it at %d",
					o.ID, o.State, p.ID, p.Amount, p.Currency, priced)
			}
		default:
			ids := make([]string, len(succeeded))
			for i, p := range succeeded {
				ids[i] = p.ID
			}
			c.violate("I2", "order %s is %s with %d succeeded payments %v (exactly one may be kept)", o.ID, o.State, len(succeeded), ids)
		}
	}
	want, check := int64(0), true
	switch {
	case paidLike(o.State):
		want = o.Amount - succeededRefunds(refunds)
	case o.State == orderly.StateClosed, o.State == orderly.StateRefunded, o.State == orderly.StatePendingPayment:
	default: // refunding: the refund is under way, either figure is right
		check = false
	}
	if net := captured - refunded; check && net != want {
		c.violate("I4", "order %s is %s: captured %d − refunded %d = %d %s, want %d",
			o.ID, o.State, captured, refunded, net, o.Currency, want)
	}
}

// price returns what the order must cost: Σ quantity × unit_price of its items, minus its
// coupon's amount_off (order/service.go prices orders so). ok is false when the order names
// a coupon that does not exist (reported by checkCoupons) or the sum overflows int64.
func (c *checker) price(o *orderly.Order) (amount int64, ok bool) {
	for _, it := range o.Items {
		overflow, line := bits.Mul64(uint64(max(it.Quantity, 0)), uint64(max(it.UnitPrice, 0)))
		if overflow != 0 || line > math.MaxInt64 || amount > math.MaxInt64-int64(line) {
			return 0, false
		}
		amount += int64(line)
	}
	if o.CouponID != "" {
		cp, found := c.coupons[o.CouponID]
		if !found {
			return 0, false
		}
		amount -= cp.AmountOff
	}
	return amount, true
}

// checkAmount checks I4 for the order's price: amount = Σ quantity × unit_price −
// coupon amount_off, in the coupon's currency.
func (c *checker) checkAmount(o *orderly.Order) {
	priced, ok := c.price(o)
	if !ok {
		return
	}
	if o.Amount != priced {
		detail := ""
		if cp := c.coupons[o.CouponID]; cp != nil {
			detail = fmt.Sprintf(" − coupon %s %d", cp.ID, cp.AmountOff)
		}
		c.violate("I4", "order %s amount is %d %s, but Σ quantity × unit_price %d%s = %d",
			o.ID, o.Amount, o.Currency, priced+c.amountOff(o), detail, priced)
	}
	if cp := c.coupons[o.CouponID]; cp != nil && cp.Currency != o.Currency {
		c.violate("I4", "order %s in %s uses coupon %s in %s", o.ID, o.Currency, cp.ID, cp.Currency)
	}
}

// amountOff returns the order's coupon's amount_off, 0 without one.
func (c *checker) amountOff(o *orderly.Order) int64 {
	if cp := c.coupons[o.CouponID]; cp != nil {
		return cp.AmountOff
	}
	return 0
}

// checkReservations checks I3 for the order's stock: every reservation is in the state the
// order's state implies, and together they match the order's items.
func (c *checker) checkReservations(o *orderly.Order, reservations []*orderly.Reservation) {
	var want string
	switch {
	case o.State == orderly.StatePendingPayment:
		want = orderly.ReservationHeld
	case o.State == orderly.StateClosed:
		want = orderly.ReservationReleased
	case paidLike(o.State), o.State == orderly.StateRefunding, o.State == orderly.StateRefunded:
		// A merchant refund returns the money, not the goods: what was sold stays sold.
		want = orderly.ReservationCommitted
	}
	reserved := map[string]int64{}
	for _, r := range reservations {
		reserved[r.SKU] += r.Quantity
		if want == "" || r.State == want {
			continue
		}
		if o.State == orderly.StateClosed {
			c.violate("I3", "order %s reservation %s %s after close", o.ID, r.SKU, r.State)
		} else {
			c.violate("I3", "order %s is %s but its reservation %s is %s, want %s", o.ID, o.State, r.SKU, r.State, want)
		}
	}
	ordered := map[string]int64{}
	for _, it := range o.Items {
		ordered[it.SKU] += it.Quantity
	}
	for _, sku := range sortedKeys(ordered) {
		if reserved[sku] != ordered[sku] {
			c.violate("I3", "order %s ordered %d of %s but reserved %d", o.ID, ordered[sku], sku, reserved[sku])
		}
	}
	for _, sku := range sortedKeys(reserved) {
		if _, ok := ordered[sku]; !ok {
			c.violate("I3", "order %s has a reservation of %s, which it did not order", o.ID, sku)
		}
	}
}

// checkCoupons checks I3 for coupons: held is the list of coupons frozen or used by o.
func (c *checker) checkCoupons(o *orderly.Order, held []*orderly.Coupon) {
	for _, cp := range held {
		if cp.ID != o.CouponID {
			c.violate("I3", "coupon %s is %s by order %s, which does not use it", cp.ID, cp.State, o.ID)
		}
	}
	if o.CouponID == "" {
		return
	}
	cp, ok := c.coupons[o.CouponID]
	if !ok {
		c.violate("I3", "order %s uses coupon %s, which does not exist", o.ID, o.CouponID)
		return
	}
	byThis := cp.OrderID == o.ID && (cp.State == orderly.CouponFrozen || cp.State == orderly.CouponUsed)
	switch {
	case o.State == orderly.StateClosed:
		if byThis {
			c.violate("I3", "order %s is closed but its coupon %s is still %s by it", o.ID, cp.ID, cp.State)
		}
	case paidLike(o.State), o.State == orderly.StateRefunding, o.State == orderly.StateRefunded:
		// A merchant refund does not give the coupon back: it was used by the sale.
		if cp.State != orderly.CouponUsed || cp.OrderID != o.ID {
			c.violate("I3", "order %s is %s but its coupon %s is %s%s, want used by it", o.ID, o.State, cp.ID, cp.State, by(cp.OrderID))
		}
	case o.State == orderly.StatePendingPayment:
		if cp.State != orderly.CouponFrozen || cp.OrderID != o.ID {
			c.violate("I3", "order %s is pending_payment but its coupon %s is %s%s, want frozen by it", o.ID, cp.ID, cp.State, by(cp.OrderID))
		}
	}
}

func by(orderID string) string {
	if orderID == "" {
		return ""
	}
	return " by order " + orderID
}

// checkTrail checks I6: the audit trail is a chain of legal transitions of the order's flow
// from its initial state to the order's current state. The creation row (event create,
// from "" to the initial state) and the rows of pay_status changes (an audit event, from =
// to = the current state) are part of the chain without moving it.
func (c *checker) checkTrail(o *orderly.Order, trail []*orderly.Transition) {
	flow, err := c.opts.Flows.Get(o.Flow)
	if err != nil {
		c.violate("I6", "order %s has unknown flow %q", o.ID, o.Flow)
		return
	}
	at := flow.Initial
	for i, tr := range trail {
		if tr.Event == orderly.EventCreate && i == 0 && tr.From == "" && tr.To == at {
			continue
		}
		if orderly.AuditEvent(tr.Event) && tr.Event != orderly.EventCreate && tr.From == at && tr.To == at {
			continue
		}
		if tr.From != at {
			if i == 0 {
				c.violate("I6", "order %s audit trail starts at %s, want the %s flow's initial state %s", o.ID, tr.From, flow.Name, at)
			} else {
				c.violate("I6", "order %s audit row %d goes from %s but the previous row ended at %s", o.ID, tr.ID, tr.From, at)
			}
			return
		}
		if to, err := flow.Next(tr.From, tr.Event); err != nil || to != tr.To {
			c.violate("I6", "order %s audit row %d %s --%s--> %s is not a transition of the %s flow", o.ID, tr.ID, tr.From, tr.Event, tr.To, flow.Name)
			return
		}
		at = tr.To
	}
	if at != o.State {
		c.violate("I6", "order %s is %s but its audit trail ends at %s", o.ID, o.State, at)
	}
}

// checkOrphans reports rows that refer to orders the scan did not find.
func (c *checker) checkOrphans() {
	for _, id := range sortedKeys(c.couponsByOrder) {
		for _, cp := range c.couponsByOrder[id] {
			c.violate("I3", "coupon %s is %s by order %s, which does not exist", cp.ID, cp.State, id)
		}
	}
	for _, id := range sortedKeys(c.paymentsByOrder) {
		c.violate("I2", "%d payments belong to order %s, which does not exist", len(c.paymentsByOrder[id]), id)
	}
	for _, id := range sortedKeys(c.refundsByOrder) {
		c.violate("I4", "%d refunds belong to order %s, which does not exist", len(c.refundsByOrder[id]), id)
	}
	for _, id := range sortedKeys(c.reservationsByOrder) {
		c.violate("I3", "%d reservations belong to order %s, which does not exist", len(c.reservationsByOrder[id]), id)
	}
}

// checkStock checks I4 for stock.
func (c *checker) checkStock(ctx context.Context, tx store.Tx) error {
	stock, err := tx.StockList(ctx, "", 0)
	if err != nil {
		return err
	}
	seen := map[string]bool{}
	for _, s := range stock {
		seen[s.SKU] = true
		if s.Available < 0 || s.Held < 0 || s.Sold < 0 {
			c.violate("I4", "sku %s has a negative count: available %d, held %d, sold %d", s.SKU, s.Available, s.Held, s.Sold)
		}
		if h := c.heldBySKU[s.SKU]; s.Held != h {
			c.violate("I4", "sku %s held is %d but its held reservations sum to %d", s.SKU, s.Held, h)
		}
		if cm := c.committedBySKU[s.SKU]; s.Sold != cm {
			c.violate("I4", "sku %s sold is %d but its committed reservations sum to %d", s.SKU, s.Sold, cm)
		}
		if initial, ok := c.opts.InitialStock[s.SKU]; ok {
			if total := s.Available + s.Held + s.Sold; total != initial {
				c.violate("I4", "sku %s: available %d + held %d + sold %d = %d, want the initial %d",
					s.SKU, s.Available, s.Held, s.Sold, total, initial)
			}
		}
	}
	for _, sku := range sortedKeys(c.opts.InitialStock) {
		if !seen[sku] {
			c.violate("I4", "sku %s was stocked with %d but has no stock row", sku, c.opts.InitialStock[sku])
		}
	}
	for _, sku := range sortedKeys(c.heldBySKU) {
		if !seen[sku] {
			c.violate("I4", "sku %s has reservations but no stock row", sku)
		}
	}
	return nil
}

// checkOutbox checks I7.
func (c *checker) checkOutbox(ctx context.Context, tx store.Tx) error {
	counts, err := tx.OutboxCounts(ctx)
	if err != nil {
		return err
	}
	for k, v := range counts {
		c.rep.OutboxByState[k] = v
	}
	if n := counts[orderly.MessageDead]; n > 0 {
		dead, err := tx.OutboxList(ctx, orderly.MessageDead, 5)
		if err != nil {
			return err
		}
		detail := ""
		for _, m := range dead {
			detail += fmt.Sprintf("; #%d %s %s after %d attempts: %s", m.ID, m.Topic, m.Key, m.Attempts, m.LastError)
		}
		c.violate("I7", "%d outbox messages are dead%s", n, detail)
	}
	if n := counts[orderly.MessagePending]; n > 0 && c.opts.RequireDrained {
		c.violate("I7", "%d outbox messages are still pending at rest", n)
	}
	return nil
}

// stamp formats a time as in the HTTP contract: RFC 3339 UTC with milliseconds.
func stamp(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000Z07:00") }

// sortedKeys returns m's keys in order, for a stable report.
func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
