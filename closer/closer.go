// Package closer closes orders whose payment deadline passed, with double insurance
// (docs/concepts/deadlines-and-closing.md): a precise timer that sleeps until the earliest wake_at among open
// orders, an independent periodic sweep, and a deep check that counts and closes orders
// the other two missed. All three run the same claim-and-close operation, whose guarded
// update evaluates "due" with the database clock, so no trigger can close early (I1).
package closer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
)

// Triggers of a claim-and-close pass, used in audit rows (actor) and metrics.
const (
	TriggerTimer     = "timer"
	TriggerSweep     = "sweep"
	TriggerDeepCheck = "deep_check"
)

// Inspector settles the in-flight payment of a due order (package payment implements it):
// GatewaySucceeded when the payment was applied, GatewayFailed when the attempt was marked
// failed (the order may close), GatewayUnknown otherwise.
type Inspector interface {
	InspectPayment(ctx context.Context, orderID, paymentID string) (orderly.GatewayStatus, error)
}

// DelayItem is an order's entry in a delay queue: its id, due at CloseAt.
type DelayItem struct {
	OrderID string
	CloseAt time.Time
}

// DelayQueue is an optional external delay queue (the Redis sorted set of package
// redisq). The closer adds each order's close_at after the order commits, claims due ids
// from it, and repairs it in the deep check; the database's guarded update still decides
// what closes, so losing the queue's data only delays closes until the next sweep.
type DelayQueue interface {
	// Add records items (or moves them to their new CloseAt).
	Add(ctx context.Context, items []DelayItem) error
	// ClaimDue removes and returns up to limit ids whose CloseAt <= now, earliest first.
	ClaimDue(ctx context.Context, now time.Time, limit int) ([]string, error)
	// Scores returns the CloseAt recorded for each of ids; ids the queue lacks are absent.
	Scores(ctx context.Context, ids []string) (map[string]time.Time, error)
	// Earliest returns the earliest CloseAt in the queue; ok=false when it is empty.
	Earliest(ctx context.Context) (at time.Time, ok bool, err error)
	// Remove deletes ids (orders that left pending_payment); missing ids are ignored.
	Remove(ctx context.Context, ids []string) error
}

// Timed is a kind of timed entity besides orders (group-buy groups, wallet holds): it keeps
// its own deadlines in its own table, and the closer's timer, sweep and deep check drive it
// as they drive orders, with no code of its own in the closer. Every method runs in the
// closer's transaction; "due" is decided by the database clock (now comes from tx.Now).
type Timed interface {
	// Name names the kind in logs, metrics and audit rows ("group").
	Name() string
	// NextWakeAt returns the earliest deadline among the entities that wait on one;
	// ok=false when none does.
	NextWakeAt(ctx context.Context, tx store.Tx) (at time.Time, ok bool, err error)
	// FireDue claims up to limit entities whose deadline <= now, locking them where the
	// dialect can (SKIP LOCKED), and fires their timed event in tx (trigger is the actor of
	// audit rows). It returns how many it claimed and how many changed.
	FireDue(ctx context.Context, tx store.Tx, now time.Time, limit int, trigger string) (claimed, fired int, err error)
	// OverdueCount counts the entities still waiting whose deadline is before before.
	OverdueCount(ctx context.Context, tx store.Tx, before time.Time) (int64, error)
}

// Outranking is implemented by a Timed kind whose deadline takes precedence over the timed
// event of the orders that belong to its entities (a group's failure over its members'
// payment timeouts). Passes run concurrently on several instances, so "fire the kind
// first" within one pass does not order them: the close of an order asks, in the
// transaction that claimed it, whether an entity outranking it is due at the same instant.
type Outranking interface {
	// Outranked returns those of the due orders whose own timed event must not fire at now
	// because an entity of this kind that they belong to is due too: its firing moves them.
	// It reads in tx and locks nothing.
	Outranked(ctx context.Context, tx store.Tx, due []*store.DueOrder, now time.Time) ([]string, error)
}

// outrankedBackoff is how long an order left to the entity that outranks it waits before the
// close path claims it again: that entity fires at once in the same or another pass; should
// its transaction fail, the order is looked at again soon after.
const outrankedBackoff = time.Second

// Config configures a Closer. Zero values mean the documented defaults.
type Config struct {
	Store store.Store
	// Machine applies the timed events through the orders' flows; nil → order.DefaultMachine().
	Machine *order.Machine
	// Timed are the other kinds of timed entities (groups, …), driven like orders.
	Timed []Timed
	// Inspector settles paying orders at close time; nil means they wait for InspectionHold.
	Inspector Inspector
	// DelayQueue, when set, replaces the database-driven precise timer (see DelayQueue).
	DelayQueue DelayQueue
	// BatchSize is the number of orders claimed and closed per transaction; 1000.
	BatchSize int
	// DeepCheckTolerance is how overdue an open order may be before the deep check counts it
	// as missed by the timer; 5 s.
	DeepCheckTolerance time.Duration
	// MaxSleep caps one sleep of the precise timer: a lost wake-up or a deadline created on
	// another instance costs at most this much. 5 s; use ~200 ms on MySQL, which has no
	// cross-instance notification.
	MaxSleep time.Duration
	// Clock is this instance's wall clock (time.Now); tests skew it. It is only compared
	// with the database clock to export the offset (metric, warning): the database clock
	// decides what is due, and the timer's sleeps run on the monotonic clock anchored to a
	// reading of it, so a skewed or stepping wall clock changes no close.
	Clock func() time.Time
	// ClockCheckInterval is how often the timer measures this instance's offset to the
	// database clock, which decides what is due; 10 s.
	ClockCheckInterval time.Duration
	// Notify, when set, tells the other instances that an order due at closeAt was created
	// earlier than this instance's earliest deadline (PostgreSQL NOTIFY).
	Notify func(ctx context.Context, closeAt time.Time)
	// InspectionBackoff is how long a paying order waits between inspections; 2 s.
	InspectionBackoff time.Duration
	// InspectionHold is how long after close_at a paying order whose payment stays unknown is
	// kept open; after it the order closes (once more inspected, the answer still unknown) and
	// a later success is refunded. An order whose payment channel is unavailable (an answer
	// matching orderly.ErrChannelUnavailable: its circuit breaker is open) is never closed
	// blindly: it keeps waiting past the hold, inspected again with a backoff that grows up
	// to InspectionBackoffMax, until the channel answers. 1 min.
	InspectionHold time.Duration
	// InspectionBackoffMax caps the backoff between inspections of an order held past its
	// InspectionHold because its payment channel is unavailable: each wait is half the time
	// spent past the hold, at least InspectionBackoff, at most this. 30 s (the default open
	// period of a channel's circuit breaker, channel.DefaultBreakerOpen).
	InspectionBackoffMax time.Duration
	// InspectionTimeout bounds one inspection; 5 s.
	InspectionTimeout time.Duration
	// PassTimeout bounds one claim-and-close pass; 30 s.
	PassTimeout time.Duration
	// Signals is told of outbox messages written (the relay); nil drops them.
	Signals orderly.Signals
	Logger  *slog.Logger
	Metrics *telemetry.Metrics
	// TracerProvider receives the "close batch" spans; nil means the global provider
	// (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
}

// Closer runs the close path. CloseDue may be called directly (tests, tools); Start runs
// the precise timer in the background; Sweep and DeepCheck are job.Func bodies, run under
// a lease by package job (so one instance runs each at a time).
type Closer struct {
	cfg    Config
	tracer trace.Tracer // of cfg.TracerProvider

	armMu sync.Mutex
	armed time.Time // the wake_at the timer sleeps until; zero when it sleeps without one
	arm   chan struct{}
	// timedNext is each Config.Timed kind's earliest deadline as the timer last read it
	// (nextWakeAt); timedGen counts the times it was forgotten (forgetTimedLocked). Both
	// under armMu.
	timedNext []timedNext
	timedGen  uint64

	offset atomic.Int64                  // database clock − local clock, in ns (see measureOffset)
	anchor atomic.Pointer[dbClockAnchor] // the last database clock reading; nil before one (see dbNow)
	// inspections feeds the background inspection workers while the timer runs; nil
	// before Start, and then inspections run inline.
	inspections chan []inspection

	mu     sync.Mutex
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New returns a Closer; it returns an error when cfg has no Store or a negative value.
func New(cfg Config) (*Closer, error) {
	if cfg.Store == nil {
		return nil, errors.New("closer: Config.Store is required")
	}
	if cfg.BatchSize < 0 || cfg.MaxSleep < 0 || cfg.ClockCheckInterval < 0 || cfg.DeepCheckTolerance < 0 ||
		cfg.InspectionBackoff < 0 || cfg.InspectionBackoffMax < 0 || cfg.InspectionHold < 0 || cfg.InspectionTimeout < 0 || cfg.PassTimeout < 0 {
		return nil, errors.New("closer: Config values must not be negative")
	}
	if cfg.Machine == nil {
		cfg.Machine = order.DefaultMachine()
	}
	cfg.BatchSize = cmp.Or(cfg.BatchSize, 1000)
	cfg.MaxSleep = cmp.Or(cfg.MaxSleep, 5*time.Second)
	cfg.ClockCheckInterval = cmp.Or(cfg.ClockCheckInterval, 10*time.Second)
	cfg.DeepCheckTolerance = cmp.Or(cfg.DeepCheckTolerance, 5*time.Second)
	cfg.InspectionBackoff = cmp.Or(cfg.InspectionBackoff, 2*time.Second)
	cfg.InspectionHold = cmp.Or(cfg.InspectionHold, time.Minute)
	cfg.InspectionBackoffMax = max(cmp.Or(cfg.InspectionBackoffMax, 30*time.Second), cfg.InspectionBackoff)
	cfg.InspectionTimeout = cmp.Or(cfg.InspectionTimeout, 5*time.Second)
	cfg.PassTimeout = cmp.Or(cfg.PassTimeout, 30*time.Second)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.Metrics = telemetry.OrDefault(cfg.Metrics)
	if cfg.Signals == nil {
		cfg.Signals = orderly.NoSignals{}
	}
	if cfg.Clock == nil {
		cfg.Clock = time.Now
	}
	return &Closer{cfg: cfg, tracer: telemetry.TracerOf(cfg.TracerProvider), arm: make(chan struct{}, 1)}, nil
}

// PassResult is what one claim-and-close call did.
type PassResult struct {
	Claimed   int // due orders and other timed entities claimed
	Closed    int // orders whose timed event fired (closed for payment timeout in the built-in flows)
	Inspected int // paying orders whose payment was inspected
	Fired     int // other timed entities (Config.Timed) whose deadline fired
}

// CloseDue claims and closes due orders in batches until a batch comes back short
// (docs/concepts/deadlines-and-closing.md), inspecting the in-flight payments of paying orders between batches.
// trigger names the caller in audit rows and metrics.
func (c *Closer) CloseDue(ctx context.Context, trigger string) (PassResult, error) {
	return c.closeDue(ctx, trigger, nil)
}

// closeDue is CloseDue with an optional fence checked in every transaction (the lease of
// the sweep or the deep check).
func (c *Closer) closeDue(ctx context.Context, trigger string, fence job.Fence) (PassResult, error) {
	var total PassResult
	// The other timed kinds first: a group's deadline is the payment deadline of its members
	// who joined late (capped at it), so both are due at the same instant; the group's
	// failure then closes its unpaid members as group_failed, holding their seats, instead
	// of their own timeouts closing them one by one as payment_timeout first.
	for i, t := range c.cfg.Timed {
		if trigger == TriggerTimer && c.timedIdle(i, c.dbNow()) {
			continue // nothing of it is due: no transaction (see timedIdle)
		}
		claimed, fired, err := c.fireTimed(ctx, t, trigger, fence)
		total.Claimed += claimed
		total.Fired += fired
		if err != nil {
			return total, err
		}
	}
	for {
		res, paying, err := c.closeBatch(ctx, trigger, fence, batchOf{})
		total.Claimed += res.Claimed
		total.Closed += res.Closed
		if err != nil {
			return total, err
		}
		if len(paying) > 0 {
			total.Inspected += len(paying)
			// The timer must not wait for gateways: while it runs, inspections run in the
			// background; the sweep, the deep check and direct calls inspect inline.
			if trigger != TriggerTimer || !c.inspectAsync(paying) {
				closed, err := c.inspect(ctx, trigger, paying, fence)
				total.Closed += closed
				if err != nil {
					return total, err
				}
			}
		}
		if res.Claimed < c.cfg.BatchSize {
			break
		}
	}
	c.cfg.Metrics.CloserPasses.WithLabelValues(trigger).Inc()
	return total, nil
}

// fireTimed fires the due entities of one Timed kind in batches until a batch comes back
// short, each batch in one transaction under the fence.
func (c *Closer) fireTimed(ctx context.Context, t Timed, trigger string, fence job.Fence) (claimed, fired int, err error) {
	for {
		var n, f int
		err := job.InFencedTx(ctx, c.cfg.Store, fence, func(tx store.Tx, now time.Time) (err error) {
			n, f, err = t.FireDue(ctx, tx, now, c.cfg.BatchSize, trigger)
			return err
		})
		if err != nil {
			return claimed, fired, fmt.Errorf("%s deadlines (%s): %w", t.Name(), trigger, err)
		}
		claimed, fired = claimed+n, fired+f
		if f > 0 {
			c.cfg.Signals.OutboxWritten()
		}
		if n < c.cfg.BatchSize {
			return claimed, fired, nil
		}
	}
}

// inspection is a paying order due for payment inspection, as claimed at now (the database
// clock of the claim).
type inspection struct {
	order *store.DueOrder
	// holdOver: close_at + InspectionHold had passed; an answer that stays unknown closes the
	// order, unless the order's payment channel is unavailable.
	holdOver bool
	now      time.Time
}

// batchOf says which orders a close batch takes. The zero value claims up to BatchSize
// due orders.
type batchOf struct {
	// ids: claim only the due orders among these (the delay queue's claim).
	ids []string
	// claimed: take these orders, already claimed (an inspection's outcome), instead of
	// claiming.
	claimed []*store.DueOrder
	// closeUnknown: close the paying orders of claimed whose inspection hold has passed too
	// (their last inspection could not tell).
	closeUnknown bool
}

// closeBatch is one transaction of the close path: take the due orders that of names,
// close the unpaid and failed ones with the guarded update, write their outbox messages
// and audit rows, and push back the wake_at of paying orders that need inspection, which
// it returns. Without an Inspector, every paying order past its hold is closed.
//
// Tracing: the batch runs in a "close batch" span (attributes orderly.trigger,
// orderly.claimed, orderly.closed); each order's transition continues the trace of the
// request that created it, linked to that span (order.ContinueOrderTraces).
func (c *Closer) closeBatch(ctx context.Context, trigger string, fence job.Fence, of batchOf) (_ PassResult, _ []inspection, err error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.PassTimeout)
	defer cancel()
	ctx, span := c.tracer.Start(order.ContinueOrderTraces(ctx), "close batch",
		trace.WithAttributes(attribute.String("orderly.trigger", trigger)))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	var (
		res    PassResult
		paying []inspection
		closed []*store.DueOrder
		now    time.Time
	)
	err = job.InFencedTx(ctx, c.cfg.Store, fence, func(tx store.Tx, txNow time.Time) (err error) {
		res, paying, closed, now = PassResult{}, nil, nil, txNow
		due := of.claimed
		if due == nil {
			if due, err = tx.OrdersDue(ctx, &store.OrdersDueParams{Now: now, Limit: c.cfg.BatchSize, IDs: of.ids}); err != nil {
				return err
			}
		}
		res.Claimed = len(due)
		if due, err = c.outranked(ctx, tx, due, now); err != nil {
			return err
		}
		// Group by flow, state and whether the event may take a paying order (its
		// inspection hold expired): each group is one guarded transition.
		type group struct {
			flow   string
			state  orderly.State
			forced bool
		}
		groups := map[group][]*store.DueOrder{}
		var inspect []string
		for _, d := range due {
			forced := false
			if d.PayStatus == orderly.PayPaying {
				holdOver := !now.Before(d.CloseAt.Add(c.cfg.InspectionHold))
				if !holdOver || (!of.closeUnknown && c.cfg.Inspector != nil) {
					// Past the hold too, the provider is asked once more: an answer, or
					// its channel being unavailable, must not be overtaken by a blind close.
					paying = append(paying, inspection{order: d, holdOver: holdOver, now: now})
					inspect = append(inspect, d.ID)
					continue
				}
				forced = true
			}
			g := group{d.Flow, d.State, forced}
			groups[g] = append(groups[g], d)
		}
		// The paying orders wait for their inspection before anything else is written: the
		// transitions below take stock rows, which come last in every transaction (on MySQL,
		// moving wake_at after them deadlocked with another close batch holding the
		// wake_at index entries and waiting for those stock rows).
		if err := tx.OrdersSetWakeAt(ctx, inspect, now.Add(c.cfg.InspectionBackoff)); err != nil {
			return err
		}
		for g, orders := range groups {
			flow, err := c.cfg.Machine.Flow(g.flow)
			if err != nil {
				return err
			}
			timed, ok := flow.TimedIn(g.state)
			if !ok {
				// wake_at is set only in timed states: a flow changed under its orders.
				return fmt.Errorf("flow %s declares no deadline for state %s, where %d orders wait (first %s)", flow.Name, g.state, len(orders), orders[0].ID)
			}
			payIn := []orderly.PayStatus{orderly.PayUnpaid, orderly.PayFailed}
			cause := string(timed.Event)
			if timed.CloseReason != "" {
				cause = string(timed.CloseReason)
			}
			if g.forced {
				payIn = append(payIn, orderly.PayPaying)
				cause += "; payment unknown after inspection hold"
			}
			ids := make([]string, len(orders))
			byID := make(map[string]*store.DueOrder, len(orders))
			coupons := map[string]string{}
			for i, d := range orders {
				ids[i], byID[d.ID] = d.ID, d
				if d.CouponID != "" {
					coupons[d.ID] = d.CouponID
				}
			}
			changed, err := c.cfg.Machine.Transition(ctx, tx, flow, &store.OrdersTransitionParams{
				IDs: ids, From: g.state, Event: timed.Event,
				PayStatusIn: payIn, CloseAtBy: &now, Now: now, CloseReason: timed.CloseReason,
				Cause: cause, Actor: trigger,
			}, coupons)
			if err != nil {
				return err
			}
			for _, id := range changed {
				closed = append(closed, byID[id])
			}
		}
		return nil
	})
	if err != nil {
		return res, nil, fmt.Errorf("close due orders (%s): %w", trigger, err)
	}
	res.Closed = len(closed)
	span.SetAttributes(attribute.Int("orderly.claimed", res.Claimed), attribute.Int("orderly.closed", res.Closed))
	if len(closed) > 0 {
		c.cfg.Signals.OutboxWritten()
		// orderly_orders_closed_total is counted by the machine's transition, after the commit.
		lateness := c.cfg.Metrics.CloseLateness.WithLabelValues(trigger)
		for _, d := range closed {
			lateness.Observe(now.Sub(d.CloseAt).Seconds())
		}
	}
	return res, paying, nil
}

// outranked returns due without the orders whose close an entity of a Config.Timed kind
// outranks (Outranking): their wake_at moves outrankedBackoff on, so that the rest of this
// pass does not claim them again, and that entity's firing moves them instead. It runs
// before any transition of the batch, as the inspection's wake_at update does (lock order).
func (c *Closer) outranked(ctx context.Context, tx store.Tx, due []*store.DueOrder, now time.Time) ([]*store.DueOrder, error) {
	if len(due) == 0 {
		return due, nil
	}
	skip := map[string]bool{}
	for _, t := range c.cfg.Timed {
		o, ok := t.(Outranking)
		if !ok {
			continue
		}
		ids, err := o.Outranked(ctx, tx, due, now)
		if err != nil {
			return nil, fmt.Errorf("%s deadlines outranking due orders: %w", t.Name(), err)
		}
		for _, id := range ids {
			skip[id] = true
		}
	}
	if len(skip) == 0 {
		return due, nil
	}
	ids := make([]string, 0, len(skip))
	kept := make([]*store.DueOrder, 0, len(due))
	for _, d := range due {
		if skip[d.ID] {
			ids = append(ids, d.ID)
		} else {
			kept = append(kept, d)
		}
	}
	if err := tx.OrdersSetWakeAt(ctx, ids, now.Add(outrankedBackoff)); err != nil {
		return nil, err
	}
	return kept, nil
}

// inspectAsync hands paying orders to the background inspection workers, without
// blocking; it reports false when there are none or their queue is full (then the caller
// inspects inline). The orders' wake_at was pushed back by InspectionBackoff, so nobody
// else inspects them meanwhile.
func (c *Closer) inspectAsync(paying []inspection) bool {
	c.mu.Lock()
	ch := c.inspections
	c.mu.Unlock()
	if ch == nil {
		return false
	}
	select {
	case ch <- paying:
		return true
	default:
		return false
	}
}

// runInspections is one background inspection worker.
func (c *Closer) runInspections(ctx context.Context, ch <-chan []inspection) {
	for {
		select {
		case <-ctx.Done():
			return
		case paying := <-ch:
			if _, err := c.inspect(ctx, TriggerTimer, paying, nil); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("payment inspection pass failed; the orders are retried after the backoff", "error", err)
			}
		}
	}
}

// inspect settles the payments of paying orders, a few at a time, and closes the orders
// whose attempt turned out failed, and those past their inspection hold whose payment is
// still unknown. An order whose payment channel is unavailable (orderly.ErrChannelUnavailable)
// is not closed, whatever the hold: its close is deferred (counted in
// orderly_close_deferred_total{channel}, logged) and it is inspected again after
// unavailableBackoff. It returns how many orders it closed.
func (c *Closer) inspect(ctx context.Context, trigger string, paying []inspection, fence job.Fence) (int, error) {
	if c.cfg.Inspector == nil {
		return 0, nil
	}
	const parallel = 8
	var (
		mu       sync.Mutex
		failed   []*store.DueOrder
		forced   []*store.DueOrder
		deferred = map[time.Time][]string{} // new wake_at → orders whose channel is unavailable
		wg       sync.WaitGroup
		sem      = make(chan struct{}, parallel)
	)
	for _, in := range paying {
		d := in.order
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			ictx, cancel := context.WithTimeout(ctx, c.cfg.InspectionTimeout)
			defer cancel()
			status, err := c.cfg.Inspector.InspectPayment(ictx, d.ID, d.CurrentPaymentID)
			ch, unavailable := orderly.UnavailableChannel(err)
			switch {
			case status == orderly.GatewayFailed:
				mu.Lock()
				failed = append(failed, &store.DueOrder{ID: d.ID, Flow: d.Flow, State: d.State, PayStatus: orderly.PayFailed, CouponID: d.CouponID, CloseAt: d.CloseAt})
				mu.Unlock()
			case status != orderly.GatewayUnknown:
			case unavailable && in.holdOver:
				wake := in.now.Add(c.unavailableBackoff(in.now.Sub(d.CloseAt.Add(c.cfg.InspectionHold))))
				c.cfg.Metrics.ClosesDeferred.WithLabelValues(cmp.Or(ch, "unknown")).Inc()
				c.cfg.Logger.Warn("close deferred: the order's payment channel is unavailable; the order waits in inspection past its hold",
					"order_id", d.ID, "payment_id", d.CurrentPaymentID, "channel", ch, "close_at", d.CloseAt, "next_inspection", wake, "error", err)
				mu.Lock()
				deferred[wake] = append(deferred[wake], d.ID)
				mu.Unlock()
			case in.holdOver:
				c.cfg.Logger.Warn("payment still unknown after the inspection hold; closing the order", "order_id", d.ID, "payment_id", d.CurrentPaymentID, "error", err)
				mu.Lock()
				forced = append(forced, d)
				mu.Unlock()
			case err != nil:
				c.cfg.Logger.Warn("payment inspection failed; will retry", "order_id", d.ID, "payment_id", d.CurrentPaymentID, "channel", ch, "error", err)
			}
		}()
	}
	wg.Wait()
	if len(deferred) > 0 {
		err := c.cfg.Store.InTx(ctx, func(tx store.Tx) error {
			for wake, ids := range deferred {
				if err := tx.OrdersSetWakeAt(ctx, ids, wake); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			// The claim already pushed their wake_at by InspectionBackoff: they wait anyway.
			c.cfg.Logger.Warn("could not back off the inspection of orders whose channel is unavailable", "error", err)
		}
	}
	closed := 0
	if len(failed) > 0 {
		res, _, err := c.closeBatch(ctx, trigger, fence, batchOf{claimed: failed})
		closed += res.Closed
		if err != nil {
			return closed, err
		}
	}
	if len(forced) > 0 {
		res, _, err := c.closeBatch(ctx, trigger, fence, batchOf{claimed: forced, closeUnknown: true})
		closed += res.Closed
		if err != nil {
			return closed, err
		}
	}
	return closed, nil
}

// unavailableBackoff is the wait before the next inspection of an order held past over its
// inspection hold because its payment channel is unavailable: over/2, at least
// InspectionBackoff, at most InspectionBackoffMax (so the waits grow by half each time).
func (c *Closer) unavailableBackoff(over time.Duration) time.Duration {
	return min(max(over/2, c.cfg.InspectionBackoff), c.cfg.InspectionBackoffMax)
}
