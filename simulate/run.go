package simulate

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// Run seeds the catalogue, sends the orders and plays their buyers against cfg.Targets,
// waits for everything to settle and checks the invariants (see the package doc).
//
// Violations are not errors: they are in the Result. Run returns an error for an invalid
// Config, when seeding fails (the server is unreachable or refuses the catalogue) and when
// Config.Store cannot be read. When ctx is cancelled, Run stops every loop and waits for
// its goroutines; after seeding it returns the result of what it saw so far together with
// ctx's error, during seeding only ctx's error.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	r := newRunner(cfg)
	defer r.close()
	return r.run(ctx)
}

// runner is one run.
type runner struct {
	cfg     Config
	c       *client
	own     *http.Transport // the transport Run created, closed at the end; nil if given
	prefix  string          // makes SKU and user names unique to the run
	timeout time.Duration   // the payment timeout the server is asked for
	plan    *plan

	couponOf map[string]string // user → coupon id
	initial  map[string]int64  // SKU → available+held+sold after seeding
	tracked  []*tracked        // by plan index; nil for orders that were not created

	begin, sendStart time.Time
	lastCreated      atomic.Int64 // unix ns of the latest create answer

	phase                                        atomic.Pointer[string]
	sent, created, outOfStock, couponUnavailable atomic.Int64
	createErrors                                 atomic.Int64 // order requests without a definite answer
	paidAcks, cancelAcks, closedSeen             atomic.Int64
	latePayments, duplicates, open               atomic.Int64
	refundAcks                                   atomic.Int64
	ledgerOnce                                   sync.Once
	ledgerByKey                                  map[string][]payment.GatewayCall // refund calls by idempotency key

	// clock is the server's clock offset, measured after seeding; margin is its
	// ClockOffset.margin(), how far a judgement of a deadline is excused either way.
	clock  ClockOffset
	margin time.Duration

	mu           sync.Mutex
	httpProblems []string // unexpected answers outside a buyer's script
	httpDropped  int      // beyond maxHTTPProblems
	refusals     []string // refusals no plan explains (capped like httpProblems)
	refusalsLeft int      // beyond maxHTTPProblems

	// filled by settle
	finalStock   map[string]*orderly.Stock
	finalCoupons map[string]*orderly.Coupon
}

const maxHTTPProblems = 50

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
	notes     []string

	refunds []*orderly.Refund // partial refunds acknowledged (201 or 200), in order

	final         *orderly.Order
	finalPayments []*orderly.Payment
	finalRefunds  []*orderly.Refund
	settled       bool
}

func (t *tracked) note(format string, args ...any) {
	t.notes = append(t.notes, fmt.Sprintf(format, args...))
}

func newRunner(cfg Config) *runner {
	r := &runner{
		cfg:      cfg,
		prefix:   "sim-" + strconv.FormatInt(time.Now().UnixMilli(), 36),
		timeout:  time.Duration(cfg.timeoutSeconds()) * time.Second,
		couponOf: map[string]string{},
		initial:  map[string]int64{},
	}
	hc := cfg.HTTPClient
	if hc == nil {
		r.own = &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			MaxIdleConns:        2 * cfg.Concurrency,
			MaxIdleConnsPerHost: 2 * cfg.Concurrency,
			IdleConnTimeout:     30 * time.Second,
		}
		hc = &http.Client{Transport: r.own, Timeout: 30 * time.Second}
	}
	r.c = newClient(cfg.Targets, hc, cfg.Concurrency, cfg.CallbackSecret, cfg.RetryFor)
	r.plan = newPlan(cfg.Seed, r.prefix, cfg.Orders, r.timeout)
	r.tracked = make([]*tracked, cfg.Orders)
	seed := PhaseSeed
	r.phase.Store(&seed)
	return r
}

func (r *runner) close() {
	if r.own != nil {
		r.own.CloseIdleConnections()
	}
}

// setPhase enters phase p and tells Config.OnPhase.
func (r *runner) setPhase(p string) {
	r.phase.Store(&p)
	if r.cfg.OnPhase != nil {
		r.cfg.OnPhase(p)
	}
}

// httpProblem records an unexpected answer outside a buyer's script.
func (r *runner) httpProblem(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.httpProblems) >= maxHTTPProblems {
		r.httpDropped++
		return
	}
	r.httpProblems = append(r.httpProblems, "HTTP: "+fmt.Sprintf(format, args...))
}

// wrongRefusal records an order refused for a reason the plan does not explain.
func (r *runner) wrongRefusal(format string, args ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.refusals) >= maxHTTPProblems {
		r.refusalsLeft++
		return
	}
	r.refusals = append(r.refusals, "refused: "+fmt.Sprintf(format, args...))
}

func (r *runner) run(ctx context.Context) (*Result, error) {
	r.begin = time.Now()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	r.setPhase(PhaseSeed)
	if r.cfg.Progress != nil {
		done := make(chan struct{})
		var wg sync.WaitGroup
		wg.Go(func() { r.progress(done) })
		defer func() { close(done); wg.Wait() }()
	}
	var health sync.WaitGroup
	health.Go(func() { r.c.watchHealth(ctx) }) // health.go; ends with ctx
	defer health.Wait()
	defer cancel() // before health.Wait
	if err := r.seed(ctx); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("simulate: seed: %w", err)
	}
	r.clock = r.measureClock(ctx)
	r.margin = r.clock.margin()
	r.setPhase(PhaseSend)
	r.send(ctx)
	r.setPhase(PhaseSettle)
	r.settle(ctx)
	res := r.evaluate()
	if r.cfg.Store != nil && ctx.Err() == nil {
		r.setPhase(PhaseVerify)
		if err := r.verify(ctx, res); err != nil {
			return res, err
		}
	}
	res.DurationS = time.Since(r.begin).Seconds()
	return res, ctx.Err()
}

// progress prints one line per second until done is closed.
func (r *runner) progress(done <-chan struct{}) {
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return
		case <-tick.C:
		}
		line := fmt.Sprintf("%6.1fs %-6s sent %d/%d created %d rejected %d paid %d cancelled %d closed %d late %d dup %d",
			time.Since(r.begin).Seconds(), *r.phase.Load(), r.sent.Load(), r.cfg.Orders, r.created.Load(),
			r.outOfStock.Load()+r.couponUnavailable.Load(), r.paidAcks.Load(), r.cancelAcks.Load(),
			r.closedSeen.Load(), r.latePayments.Load(), r.duplicates.Load())
		if *r.phase.Load() == PhaseSettle {
			line += fmt.Sprintf(" unsettled %d", r.open.Load())
		}
		fmt.Fprintln(r.cfg.Progress, line)
	}
}

// seed stocks the SKUs and issues the coupons.
func (r *runner) seed(ctx context.Context) error {
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
		r.initial[s.sku] = initial[i]
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

// send sends order i at sendStart + i/rate, each in its own goroutine that then plays the
// buyer, and returns when every buyer is done (or ctx is cancelled and they all stopped).
func (r *runner) send(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	r.sendStart = time.Now()
	r.lastCreated.Store(r.sendStart.UnixNano())
	for i, po := range r.plan.orders {
		at := r.sendStart.Add(time.Duration(float64(i) / r.cfg.Rate * float64(time.Second)))
		if sleepUntil(ctx, at) != nil {
			return
		}
		wg.Go(func() { r.runOrder(ctx, po) })
	}
}

// runOrder creates one order and plays its buyer.
func (r *runner) runOrder(ctx context.Context, po *plannedOrder) {
	r.sent.Add(1)
	req := &orderRequest{UserID: po.user, Items: po.items, Currency: currency, PaymentTimeoutSeconds: int64(r.timeout / time.Second)}
	if po.useCoupon {
		req.CouponID = r.couponOf[po.user]
	}
	o, _, err := r.c.createOrder(ctx, req, fmt.Sprintf("%s-order-%d", r.prefix, po.index))
	for now := time.Now().UnixNano(); ; {
		last := r.lastCreated.Load()
		if now <= last || r.lastCreated.CompareAndSwap(last, now) {
			break
		}
	}
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
func (r *runner) play(ctx context.Context, t *tracked, created time.Time) {
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
func (r *runner) startPayment(ctx context.Context, t *tracked, at time.Time) *orderly.Payment {
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
func (r *runner) callbackFor(t *tracked, p *orderly.Payment, status string, occurred time.Time) []byte {
	txn := r.prefix + "-txn-" + p.ID
	if status != orderly.CallbackSucceeded {
		txn += "-" + status
	}
	return encodeCallback(&callbackBody{PaymentID: p.ID, OrderID: t.order.ID, ChannelTxnID: txn,
		Amount: p.Amount, Currency: p.Currency, Status: status, OccurredAt: formatTime(occurred)})
}

// succeed sends p's success callback at the given time.
func (r *runner) succeed(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) {
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
func (r *runner) fail(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) bool {
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
func (r *runner) duplicate(ctx context.Context, t *tracked, p *orderly.Payment, at time.Time) {
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
func (r *runner) payLate(ctx context.Context, t *tracked, p *orderly.Payment) {
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
func (r *runner) waitClosed(ctx context.Context, t *tracked) *orderly.Order {
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

// sleepUntil waits until t or ctx's end, whichever comes first, and returns ctx's error.
func sleepUntil(ctx context.Context, t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err()
	}
	timer := time.NewTimer(d)
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
		return nil
	}
}

// forEach calls fn(ctx, i) for i in [0, n) on at most workers goroutines. The first error
// stops the others and is returned; so is ctx's error.
func forEach(ctx context.Context, n, workers int, fn func(ctx context.Context, i int) error) error {
	inner, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		next  atomic.Int64
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	for range min(max(workers, 1), n) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || inner.Err() != nil {
					return
				}
				if err := fn(inner, i); err != nil {
					once.Do(func() { first = err; cancel() })
					return
				}
			}
		})
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
