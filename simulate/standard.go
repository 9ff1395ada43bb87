package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
)

func init() {
	RegisterFlow(orderly.FlowStandard, func() FlowDriver { return &standardFlow{} })
}

// standardFlow drives the standard flow: orders created with POST /v1/orders, their buyers
// paying on time, just before the deadline, late, twice, after a failure, cancelling or
// walking away, and the merchant's partial refunds (see the package doc). Its checks are in
// settle.go and refund.go.
type standardFlow struct {
	*runner
	plan     *plan
	couponOf map[string]string // user → coupon id
	tracked  []*tracked        // by plan index; nil for orders that were not created

	sent, created, outOfStock, couponUnavailable atomic.Int64
	createErrors                                 atomic.Int64 // order requests without a definite answer
	paidAcks, cancelAcks, closedSeen             atomic.Int64
	latePayments, duplicates, open               atomic.Int64
	refundAcks                                   atomic.Int64

	// filled by Settle
	finalStock   map[string]*orderly.Stock
	finalCoupons map[string]*orderly.Coupon
}

// Plan draws the orders, their buyers and the catalogue.
func (r *standardFlow) Plan(run *runner, orders int) {
	r.runner = run
	r.couponOf = map[string]string{}
	r.plan = newPlan(run.cfg.Seed, run.prefix, orders, run.timeout)
	r.tracked = make([]*tracked, orders)
}

// Progress reports orders sent, created, rejected, paid, cancelled, closed, …
func (r *standardFlow) Progress() string {
	line := fmt.Sprintf("sent %d/%d created %d rejected %d paid %d cancelled %d closed %d late %d dup %d",
		r.sent.Load(), len(r.plan.orders), r.created.Load(), r.outOfStock.Load()+r.couponUnavailable.Load(),
		r.paidAcks.Load(), r.cancelAcks.Load(), r.closedSeen.Load(), r.latePayments.Load(), r.duplicates.Load())
	if *r.phase.Load() == PhaseSettle {
		line += fmt.Sprintf(" unsettled %d", r.open.Load())
	}
	return line
}

// tracked is a created order and what its buyer did. Its buyer goroutine owns it until the
// send phase ends; then settle and evaluate read it.
type tracked struct {
	po       *plannedOrder
	order    *orderly.Order // as created
	couponID string
	payments []*orderly.Payment // attempts started, in order
	// unknownStarts counts payment starts that were sent again after a try that got no
	// answer: each may have started one more attempt, which the buyer never learnt of.
	unknownStarts int
	// successID is the payment whose success callback the server acknowledged (200), and
	// successAt when; "" if none was.
	successID string
	successAt time.Time
	failedID  string // the attempt whose failure callback was acknowledged
	lateSent  bool   // a late success callback was acknowledged
	cancelled bool   // the cancel was acknowledged
	seenClose bool   // counted in closedSeen
	// missed marks a buyer whose payment start or cancel was refused because it reached
	// the server after the order's deadline (excused: counted in Result.MissedDeadline).
	missed bool
	notes  []string

	refunds []*orderly.Refund // partial refunds acknowledged (201 or 200), in order

	final         *orderly.Order
	finalPayments []*orderly.Payment
	finalRefunds  []*orderly.Refund
	settled       bool
}

func (t *tracked) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

// Seed stocks the SKUs and issues the coupons.
func (r *standardFlow) Seed(ctx context.Context, _ *runner) error {
	skus := r.plan.skus
	initial := make([]int64, len(skus))
	err := forEach(ctx, len(skus), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		s := skus[i]
		if err := r.c.setStock(ctx, s.sku, s.stock); err != nil {
			return err
		}
		st, err := r.c.stock(ctx, s.sku)
		if err != nil {
			return err
		}
		if st.Available != s.stock {
			return fmt.Errorf("sku %s: set available to %d, read back %d", s.sku, s.stock, st.Available)
		}
		initial[i] = st.Available + st.Held + st.Sold
		return nil
	})
	if err != nil {
		return err
	}
	for i, s := range skus {
		r.stocked(s.sku, initial[i])
	}
	var holders []string
	for i, u := range r.plan.users {
		if couponHolder(i) {
			holders = append(holders, u)
		}
	}
	ids := make([]string, len(holders))
	err = forEach(ctx, len(holders), r.cfg.Concurrency, func(ctx context.Context, i int) error {
		cp, err := r.c.createCoupon(ctx, holders[i], couponAmountOff, currency)
		ids[i] = cp.ID
		return err
	})
	if err != nil {
		return err
	}
	for i, u := range holders {
		r.couponOf[u] = ids[i]
	}
	return nil
}

// Drive sends order i at sendStart + i/rate, each in its own goroutine that then plays the
// buyer, and returns when every buyer is done (or ctx is cancelled and they all stopped).
func (r *standardFlow) Drive(ctx context.Context, _ *runner) {
	var wg sync.WaitGroup
	defer wg.Wait()
	rate := r.rate(len(r.plan.orders))
	for i, po := range r.plan.orders {
		at := r.sendStart.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		if sleepUntil(ctx, at) != nil {
			return
		}
		wg.Go(func() { r.runOrder(ctx, po) })
	}
}

// runOrder creates one order and plays its buyer.
func (r *standardFlow) runOrder(ctx context.Context, po *plannedOrder) {
	r.sent.Add(1)
	req := &orderRequest{UserID: po.user, Items: po.items, Currency: currency, PaymentTimeoutSeconds: int64(r.timeout / time.Second)}
	if po.useCoupon {
		req.CouponID = r.couponOf[po.user]
	}
	o, _, err := r.c.createOrder(ctx, req, fmt.Sprintf("%s-order-%d", r.prefix, po.index))
	r.answered()
	if err != nil {
		var he *httpError
		switch {
		case ctx.Err() != nil:
			r.createErrors.Add(1)
		case errors.As(err, &he) && he.Status == http.StatusConflict && he.code() == orderly.EOUTOFSTOCK:
			r.outOfStock.Add(1)
			if !r.plan.asksScarce(po) {
				r.wrongRefusal("order %d (%s) was refused out-of-stock, but it asks only for SKUs stocked above the run's whole demand: %s",
					po.index, po.behaviour, itemList(po.items))
			}
		case errors.As(err, &he) && he.Status == http.StatusConflict && he.code() == orderly.ECOUPONUNAVAIL:
			r.couponUnavailable.Add(1)
			if req.CouponID == "" {
				r.wrongRefusal("order %d (%s) was refused coupon-unavailable, but it uses no coupon", po.index, po.behaviour)
			}
		default:
			r.createErrors.Add(1)
			r.httpProblem("create order %d (%s): %v", po.index, po.behaviour, err)
		}
		return
	}
	r.created.Add(1)
	t := &tracked{po: po, order: o, couponID: req.CouponID}
	r.tracked[po.index] = t
	// A create sent again after a try without answer is answered with the order the first
	// try made, as it is now: it may have closed for payment timeout meanwhile. The client
	// does not see every such replay: net/http sends a request with an Idempotency-Key
	// again by itself when its connection broke before any answer (an instance killed or
	// stopped mid-request), so the answer's time decides, not ambiguous: a closed order is
	// accepted only when the answer came after its close_at.
	replayedClosed := o.State == orderly.StateClosed && o.CloseReason == orderly.CloseReasonPaymentTimeout &&
		time.Now().After(o.CloseAt.Add(-r.margin))
	if (o.State != orderly.StatePendingPayment && !replayedClosed) || o.CloseAt.Before(o.ExpiresAt) || o.ExpiresAt.Before(o.CreatedAt) {
		t.note("HTTP: order %s was created %s/%s with expires_at %s and close_at %s, want pending_payment/unpaid with close_at ≥ expires_at",
			o.ID, o.State, o.PayStatus, formatTime(o.ExpiresAt), formatTime(o.CloseAt))
	}
	r.play(ctx, t, time.Now())
}

// play acts out the buyer's behaviour; created is when the order's create answer came.
func (r *standardFlow) play(ctx context.Context, t *tracked, created time.Time) {
	po := t.po
	switch po.behaviour {
	case payOnTime:
		if p := r.startPayment(ctx, t, created.Add(po.startDelay)); p != nil {
			r.succeed(ctx, t, p, time.Now().Add(po.callbackDelay))
		}
	case payJustBefore:
		if p := r.startPayment(ctx, t, created.Add(po.startDelay)); p != nil {
			r.succeed(ctx, t, p, t.order.ExpiresAt.Add(-po.beforeDeadline))
		}
	case payDuplicate:
		if p := r.startPayment(ctx, t, created.Add(po.startDelay)); p != nil {
			r.duplicate(ctx, t, p, time.Now().Add(po.callbackDelay))
		}
	case payFailRetry:
		p := r.startPayment(ctx, t, created.Add(po.startDelay))
		if p == nil || !r.fail(ctx, t, p, time.Now().Add(po.callbackDelay)) {
			return
		}
		if p2 := r.startPayment(ctx, t, time.Now()); p2 != nil {
			r.succeed(ctx, t, p2, time.Now().Add(po.callbackDelay))
		}
	case payLate:
		if p := r.startPayment(ctx, t, created.Add(po.startDelay)); p != nil {
			r.payLate(ctx, t, p)
		}
	case cancelOrder:
		if sleepUntil(ctx, created.Add(po.startDelay)) != nil {
			return
		}
		o, ambiguous, err := r.c.cancel(ctx, t.order.ID)
		var he *httpError
		if ambiguous && errors.As(err, &he) && he.code() == orderly.EILLEGAL {
			// A try that got no answer may have cancelled the order: then it is closed by
			// the buyer, and that is the cancel's answer.
			if cur, rerr := r.c.order(ctx, t.order.ID); rerr == nil && cur.State == orderly.StateClosed &&
				cur.CloseReason == orderly.CloseReasonBuyerCancelled {
				o, err = cur, nil
			}
		}
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &he) && he.code() == orderly.EILLEGAL && time.Now().After(t.order.CloseAt.Add(-r.margin)):
			// The cancel may have reached the server after close_at (an overloaded client
			// or server) and found the order closed for timeout: the buyer was late.
			t.missed = true
		case err != nil:
			t.note("HTTP: cancel of order %s: %v", t.order.ID, err)
		case o.State != orderly.StateClosed || o.CloseReason != orderly.CloseReasonBuyerCancelled:
			t.note("expect: cancel of order %s answered %s/%s, want closed/buyer_cancelled", t.order.ID, o.State, o.CloseReason)
		default:
			t.cancelled = true
			r.cancelAcks.Add(1)
		}
	case neverPay:
	}
	r.refund(ctx, t)
}

// startPayment starts a payment attempt at the given time; nil when it failed (noted).
func (r *standardFlow) startPayment(ctx context.Context, t *tracked, at time.Time) *orderly.Payment {
	if sleepUntil(ctx, at) != nil {
		return nil
	}
	p, ambiguous, err := r.c.startPayment(ctx, t.order.ID)
	if ambiguous {
		t.unknownStarts++
	}
	if err != nil {
		var he *httpError
		switch {
		case ctx.Err() != nil:
		case errors.As(err, &he) && he.code() == orderly.ENOTPAYABLE && time.Now().After(t.order.ExpiresAt.Add(-r.margin)):
			// The request may have reached the server after the deadline (an overloaded
			// client or server): the buyer was late, not the server wrong.
			t.missed = true
		default:
			t.note("HTTP: start payment for order %s (%s): %v", t.order.ID, t.po.behaviour, err)
		}
		return nil
	}
	if p.Amount == 0 {
		p.Amount = t.order.Amount
	}
	if p.Currency == "" {
		p.Currency = t.order.Currency
	}
	t.payments = append(t.payments, p)
	return p
}

// callbackFor returns the body of a callback from the gateway about p.
func (r *standardFlow) callbackFor(t *tracked, p *orderly.Payment, status string, occurred time.Time) []byte {
	txn := r.prefix + "-txn-" + p.ID
	if status != orderly.CallbackSucceeded {
		txn += "-" + status
	}
	return encodeCallback(&callbackBody{PaymentID: p.ID, OrderID: t.order.ID, ChannelTxnID: txn,
		Amount: p.Amount, Currency: p.Currency, Status: status, OccurredAt: formatTime(occurred)})
}

// succeed sends p's success callback at the given time.
func (r *standardFlow) succeed(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) {
	if sleepUntil(ctx, at) != nil {
		return
	}
	err := r.c.callback(ctx, r.callbackFor(t, p, orderly.CallbackSucceeded, time.Now()))
	switch {
	case ctx.Err() != nil:
	case err != nil:
		t.note("HTTP: success callback for payment %s of order %s (%s): %v", p.ID, t.order.ID, t.po.behaviour, err)
	default:
		t.successID, t.successAt = p.ID, time.Now()
		r.paidAcks.Add(1)
	}
}

// fail sends p's failure callback at the given time and reports whether it was answered 200.
func (r *standardFlow) fail(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) bool {
	if sleepUntil(ctx, at) != nil {
		return false
	}
	err := r.c.callback(ctx, r.callbackFor(t, p, orderly.CallbackFailed, time.Now()))
	switch {
	case ctx.Err() != nil:
		return false
	case err != nil:
		t.note("HTTP: failure callback for payment %s of order %s: %v", p.ID, t.order.ID, err)
		return false
	}
	t.failedID = p.ID
	return true
}

// duplicate sends p's success callback duplicateCount times in parallel at the given time,
// then the same once more duplicateLater after.
func (r *standardFlow) duplicate(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) {
	if sleepUntil(ctx, at) != nil {
		return
	}
	body := r.callbackFor(t, p, orderly.CallbackSucceeded, time.Now())
	errs := make([]error, duplicateCount)
	var wg sync.WaitGroup
	for i := range duplicateCount {
		wg.Go(func() { errs[i] = r.c.callback(ctx, body) })
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	r.duplicates.Add(duplicateCount - 1)
	acked := 0
	for _, err := range errs {
		if err != nil {
			t.note("HTTP: one of %d parallel identical success callbacks for payment %s of order %s: %v", duplicateCount, p.ID, t.order.ID, err)
		} else {
			acked++
		}
	}
	if acked > 0 {
		t.successID, t.successAt = p.ID, time.Now()
		r.paidAcks.Add(1)
	}
	if sleepUntil(ctx, time.Now().Add(duplicateLater)) != nil {
		return
	}
	err := r.c.callback(ctx, body)
	if ctx.Err() != nil {
		return
	}
	r.duplicates.Add(1)
	if err != nil {
		t.note("HTTP: success callback for payment %s of order %s repeated %s later: %v", p.ID, t.order.ID, duplicateLater, err)
	}
}

// payLate waits until the server closed the order, then sends p's success callback as if
// the money had arrived hours later.
func (r *standardFlow) payLate(ctx context.Context, t *tracked, p *orderly.Payment) {
	o := r.waitClosed(ctx, t)
	if o == nil {
		return
	}
	if o.State != orderly.StateClosed {
		t.note("expect: order %s (pay_late) ended %s before its buyer paid, want closed", o.ID, o.State)
		return
	}
	err := r.c.callback(ctx, r.callbackFor(t, p, orderly.CallbackSucceeded, t.order.ExpiresAt.Add(lateOccurredBy)))
	if ctx.Err() != nil {
		return
	}
	r.latePayments.Add(1)
	if err != nil {
		t.note("HTTP: late success callback for payment %s of closed order %s: %v", p.ID, o.ID, err)
		return
	}
	t.lateSent = true
}

// waitClosed polls the order from its close_at until it is no longer pending_payment, at
// most until close_at + Drain. It returns nil if the order stayed open or ctx ended.
func (r *standardFlow) waitClosed(ctx context.Context, t *tracked) *orderly.Order {
	const poll = 100 * time.Millisecond
	until := t.order.CloseAt.Add(r.cfg.Drain)
	next := t.order.CloseAt
	for {
		if sleepUntil(ctx, next) != nil {
			return nil
		}
		o, err := r.c.order(ctx, t.order.ID)
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			t.note("HTTP: poll order %s: %v", t.order.ID, err)
			return nil
		case o.State != orderly.StatePendingPayment:
			if !t.seenClose && o.State == orderly.StateClosed {
				t.seenClose = true
				r.closedSeen.Add(1)
			}
			return o
		}
		if time.Now().After(until) {
			return nil // evaluate reports it as still open
		}
		next = time.Now().Add(poll)
	}
}
