package closer

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/store"
)

// Created tells the closer that order id with this close_at was committed: the timer
// re-arms when the deadline is earlier than the one it sleeps until, and the delay queue,
// when configured, records it (a failure there is logged: the sweep covers it).
func (c *Closer) Created(ctx context.Context, id string, closeAt time.Time) {
	c.deadline(ctx, closeAt, false)
	if c.cfg.DelayQueue != nil {
		if err := c.cfg.DelayQueue.Add(ctx, []DelayItem{{OrderID: id, CloseAt: closeAt}}); err != nil {
			c.cfg.Logger.Warn("delay queue add failed; the sweep will close the order", "order_id", id, "error", err)
		}
	}
}

// Deadline tells the closer that something timed with this deadline was committed (an
// order, or another of Config.Timed: a group-buy group): when it is earlier than the one
// the timer sleeps until, the other instances are told (Config.Notify), so that a deadline
// committed here is kept on time by them too when this instance stops; then the timer
// re-arms (Arm).
func (c *Closer) Deadline(ctx context.Context, at time.Time) {
	c.deadline(ctx, at, true)
}

// deadline is Deadline; timed says that the deadline may be one of Config.Timed (not only
// an order's), so the timer's pass must not skip them (see timedIdle).
func (c *Closer) deadline(ctx context.Context, at time.Time, timed bool) {
	c.armMu.Lock()
	earliest := c.armed.IsZero() || at.Before(c.armed)
	c.armMu.Unlock()
	if earliest && c.cfg.Notify != nil {
		c.cfg.Notify(ctx, at)
	}
	c.rearm(at, timed)
}

// Arm tells the timer that something timed with this deadline was committed (an order, or
// another of Config.Timed: the wake-up of another instance does not say which); when it is
// earlier than the deadline the timer sleeps until, the timer re-arms. It never blocks.
func (c *Closer) Arm(closeAt time.Time) { c.rearm(closeAt, true) }

// rearm is Arm; timed as in deadline.
func (c *Closer) rearm(closeAt time.Time, timed bool) {
	c.armMu.Lock()
	if timed {
		c.forgetTimedLocked()
	}
	earlier := c.armed.IsZero() || closeAt.Before(c.armed)
	if earlier {
		c.armed = closeAt
	}
	c.armMu.Unlock()
	if earlier {
		select {
		case c.arm <- struct{}{}:
		default:
		}
	}
}

// Start runs the precise timer in the background until ctx ends or Stop is called. It
// returns an error when already started.
func (c *Closer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return errors.New("closer: closer already started")
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.inspections = make(chan []inspection, 64)
	const inspectors = 2
	for range inspectors {
		c.wg.Add(1)
		go func() { defer c.wg.Done(); c.runInspections(ctx, c.inspections) }()
	}
	c.wg.Go(func() { c.runTimer(ctx) })
	return nil
}

// Stop stops the timer and waits for the pass in progress. Safe to call twice.
func (c *Closer) Stop() {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	c.wg.Wait()
	c.mu.Lock()
	c.inspections = nil
	c.mu.Unlock()
}

// ClockOffset returns the last measured offset of the database clock to this instance's
// clock (database − local).
func (c *Closer) ClockOffset() time.Duration { return time.Duration(c.offset.Load()) }

// maxOffsetRTT is the slowest database clock read that still measures the offset: the
// offset is known to ± half the round trip.
const maxOffsetRTT = 250 * time.Millisecond

// dbClockAnchor is a reading of the database clock and the local monotonic clock at the
// same instant (the midpoint of the read).
type dbClockAnchor struct {
	db   time.Time // the database clock
	mono time.Time // time.Now() at the same instant; carries a monotonic reading
}

// dbNow estimates the database clock: the last reading plus the time elapsed since on the
// monotonic clock. The local wall clock (Config.Clock) plays no part, so a step of it (NTP,
// an operator, a VM resumed) can neither delay nor advance a wake-up; between two
// measurements the estimate drifts only by the rate difference of the two clocks. Before
// the first measurement it is the local clock.
func (c *Closer) dbNow() time.Time {
	if a := c.anchor.Load(); a != nil {
		return a.db.Add(time.Since(a.mono))
	}
	return c.cfg.Clock()
}

// measureOffset reads the database clock and re-anchors dbNow to it at the midpoint of the
// read, timed on the monotonic clock (a read slower than maxOffsetRTT only when there is no
// anchor yet); it also sets the offset to the local wall clock, exported as a metric and
// logged when large. The offset never causes an early close, because the database clock
// decides what is due, and never times a sleep.
func (c *Closer) measureOffset(ctx context.Context) {
	before, wall := time.Now(), c.cfg.Clock()
	var db time.Time
	err := c.cfg.Store.Read(ctx, func(tx store.Tx) (err error) {
		db, err = tx.Now(ctx)
		return err
	})
	if err != nil {
		if ctx.Err() == nil {
			c.cfg.Logger.Warn("measure clock offset", "error", err)
		}
		return
	}
	rtt := time.Since(before) // monotonic: never negative, immune to wall clock steps
	if rtt > maxOffsetRTT && c.anchor.Load() != nil {
		return // a slow read (a busy pool) says nothing precise; keep the last anchor
	}
	c.anchor.Store(&dbClockAnchor{db: db, mono: before.Add(rtt / 2)})
	offset := db.Sub(wall.Add(rtt / 2))
	c.offset.Store(int64(offset))
	c.cfg.Metrics.ClockOffset.Set(offset.Seconds())
	if offset > time.Second || offset < -time.Second {
		c.cfg.Logger.Warn("this instance's clock is off the database clock", "offset", offset)
	}
}

// measureOffsetEvery measures the clock offset when ClockCheckInterval passed since *last.
func (c *Closer) measureOffsetEvery(ctx context.Context, last *time.Time) {
	if time.Since(*last) >= c.cfg.ClockCheckInterval {
		c.measureOffset(ctx)
		*last = time.Now()
	}
}

// runTimer is the precise timer: it sleeps until the earliest wake_at among open orders (an
// indexed MIN query; nothing is kept per order, so memory does not grow with them) or, with
// a delay queue, the queue's earliest deadline when that is earlier, runs a claim-and-close
// pass, and re-arms. Arm wakes it early for an earlier deadline. Sleeps are computed on the
// estimated database clock (see dbNow) and capped at MaxSleep. With a delay queue a pass
// first closes the ids claimed from the queue (closeQueued), then whatever else the
// database says is due: orders the queue never had or lost (an instance killed between its
// claim and its close, an instance running without the queue), so they wait milliseconds,
// not a sweep interval. While the queue fails, the database's deadlines drive the timer.
func (c *Closer) runTimer(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	var lastMeasure time.Time
	idle := false // the last pass found nothing due although the earliest wake_at had passed
	for {
		c.measureOffsetEvery(ctx, &lastMeasure)
		next, ok, err := c.nextWakeAt(ctx)
		if ctx.Err() != nil {
			return
		}
		if q := c.cfg.DelayQueue; q != nil {
			qNext, qOK, qErr := q.Earliest(ctx)
			switch {
			case qErr != nil && ctx.Err() == nil:
				c.cfg.Logger.Warn("delay queue: earliest deadline; the database timer covers", "error", qErr)
			case qErr == nil && qOK && (err != nil || !ok || qNext.Before(next)):
				next, ok, err = qNext, true, nil
			}
		}
		sleep := c.cfg.MaxSleep
		switch {
		case err != nil:
			c.cfg.Logger.Error("timer: earliest deadline", "error", err)
			sleep = min(time.Second, c.cfg.MaxSleep)
		case ok:
			// +1 ms: stored times are whole milliseconds and the database clock truncates.
			sleep = min(max(next.Sub(c.dbNow())+time.Millisecond, 0), c.cfg.MaxSleep)
			if idle && sleep == 0 {
				sleep = 2 * time.Millisecond // the offset estimate is a little off; don't spin
			}
		}
		c.armMu.Lock()
		if ok {
			c.armed = next
		} else {
			c.armed = time.Time{}
		}
		c.armMu.Unlock()
		timer.Reset(sleep)
		select {
		case <-ctx.Done():
			return
		case <-c.arm:
			if !timer.Stop() {
				<-timer.C
			}
			idle = false
			continue
		case <-timer.C:
		}
		if !ok || c.dbNow().Before(next) {
			idle = false
			continue
		}
		if c.cfg.DelayQueue != nil {
			if err := c.closeQueued(ctx); err != nil && ctx.Err() == nil {
				c.cfg.Logger.Warn("delay queue pass failed; the database timer covers", "error", err)
			}
		}
		res, err := c.CloseDue(ctx, TriggerTimer)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error("timer: close due orders", "error", err)
		}
		idle = res.Claimed == 0
	}
}

// nextWakeAt returns the earliest deadline among orders and Config.Timed, and records each
// kind's own earliest deadline for the timer's next pass (timedIdle).
func (c *Closer) nextWakeAt(ctx context.Context) (next time.Time, ok bool, err error) {
	c.armMu.Lock()
	gen := c.timedGen
	c.armMu.Unlock()
	kinds := make([]timedNext, len(c.cfg.Timed))
	err = c.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if next, ok, err = tx.OrderNextWakeAt(ctx); err != nil {
			return err
		}
		for i, t := range c.cfg.Timed {
			at, tok, err := t.NextWakeAt(ctx, tx)
			if err != nil {
				return fmt.Errorf("%s: %w", t.Name(), err)
			}
			kinds[i] = timedNext{known: true, ok: tok, at: at}
			if tok && (!ok || at.Before(next)) {
				next, ok = at, true
			}
		}
		return nil
	})
	if err == nil {
		c.armMu.Lock()
		if c.timedGen == gen { // no deadline of another kind was committed meanwhile
			c.timedNext = kinds
		}
		c.armMu.Unlock()
	}
	return next, ok, err
}

// timedNext is what the timer's last read of the earliest deadlines says of one kind of
// Config.Timed: nothing when !known (not read since a deadline of it may have been added),
// none waiting when !ok, else the earliest deadline at.
type timedNext struct {
	known, ok bool
	at        time.Time
}

// forgetTimedLocked drops what the timer knows of the deadlines of Config.Timed (a deadline
// of one of them may have been committed since); armMu is held.
func (c *Closer) forgetTimedLocked() {
	c.timedGen++
	c.timedNext = nil
}

// timedIdle reports whether the timer's pass may skip the i-th kind of Config.Timed at
// now (the estimated database clock): its last read found no deadline of it, or one still
// ahead, and no deadline that may be of it was committed since. A skipped kind costs no
// transaction; its deadline, when there is one, is the earliest the timer sleeps until, so
// the timer's next pass runs it. The sweep and the deep check never skip.
func (c *Closer) timedIdle(i int, now time.Time) bool {
	c.armMu.Lock()
	defer c.armMu.Unlock()
	if i >= len(c.timedNext) || !c.timedNext[i].known {
		return false
	}
	k := c.timedNext[i]
	return !k.ok || k.at.After(now)
}

// Sweep is the periodic compensating scan, a job.Func: the same claim-and-close as the
// timer, independent of it, catching whatever it missed (crash, lost wake-up, lost Redis
// data). It returns the orders claimed and closed.
func (c *Closer) Sweep(ctx context.Context, fence job.Fence) (scanned, changed int64, err error) {
	res, err := c.closeDue(ctx, TriggerSweep, fence)
	if res.Closed > 0 {
		c.cfg.Logger.Info("sweep closed orders the timer had not", "closed", res.Closed)
	}
	return int64(res.Claimed), int64(res.Closed), err
}

// DeepCheck is a job.Func: it counts open orders overdue by more than the tolerance
// (each one means the timer failed; paying orders held for inspection are not counted),
// exports and logs the count, and closes them. With a delay queue it also repairs the
// queue (see repairQueue).
func (c *Closer) DeepCheck(ctx context.Context, fence job.Fence) (scanned, changed int64, err error) {
	var overdue int64
	err = c.cfg.Store.Read(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		if overdue, err = tx.OrdersOverdueCount(ctx, now.Add(-c.cfg.DeepCheckTolerance)); err != nil {
			return err
		}
		for _, t := range c.cfg.Timed {
			n, err := t.OverdueCount(ctx, tx, now.Add(-c.cfg.DeepCheckTolerance))
			if err != nil {
				return fmt.Errorf("%s: %w", t.Name(), err)
			}
			overdue += n
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if overdue > 0 {
		c.cfg.Metrics.OverdueOrders.Add(float64(overdue))
		c.cfg.Logger.Warn("deep check found overdue open orders", "count", overdue, "tolerance", c.cfg.DeepCheckTolerance)
	}
	res, err := c.closeDue(ctx, TriggerDeepCheck, fence)
	scanned, changed = int64(res.Claimed), int64(res.Closed)
	if err == nil && c.cfg.DelayQueue != nil {
		var repaired, seen int64
		seen, repaired, err = c.repairQueue(ctx)
		scanned += seen
		changed += repaired
	}
	return scanned, changed, err
}
