package timeout

import (
	"context"
	"errors"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// Created tells the closer that order id with this close_at was committed: the timer
// re-arms when the deadline is earlier than the one it sleeps until, and the delay queue,
// when configured, records it (a failure there is logged: the sweep covers it).
func (c *Closer) Created(ctx context.Context, id string, closeAt time.Time) {
	c.Arm(closeAt)
	if c.cfg.DelayQueue != nil {
		if err := c.cfg.DelayQueue.Add(ctx, []DelayItem{{OrderID: id, CloseAt: closeAt}}); err != nil {
			c.cfg.Logger.Warn("delay queue add failed; the sweep will close the order", "order_id", id, "error", err)
		}
	}
}

// Arm tells the timer that an order with this close_at was committed; when it is earlier
// than the deadline the timer sleeps until, the timer re-arms. It never blocks.
func (c *Closer) Arm(closeAt time.Time) {
	c.armMu.Lock()
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

// Start runs the precise timer, the sweep and the deep check in the background until ctx
// ends or Stop is called. It returns an error when already started.
func (c *Closer) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cancel != nil {
		return errors.New("timeout: closer already started")
	}
	ctx, c.cancel = context.WithCancel(ctx)
	c.wg.Add(3)
	go func() { defer c.wg.Done(); c.runTimer(ctx) }()
	go func() { defer c.wg.Done(); c.runPeriodic(ctx, TriggerSweep, c.cfg.SweepInterval, c.sweep) }()
	go func() { defer c.wg.Done(); c.runPeriodic(ctx, TriggerDeepCheck, c.cfg.DeepCheckInterval, c.deepCheck) }()
	return nil
}

// Stop stops the background loops and waits for the pass in progress. Safe to call twice.
func (c *Closer) Stop() {
	c.mu.Lock()
	cancel := c.cancel
	c.mu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	c.wg.Wait()
}

// maxTimerSleep caps one sleep of the timer, so that a jump of the local clock or a lost
// wake-up costs at most this much (the sweep covers the rest).
const maxTimerSleep = 5 * time.Second

// runTimer is the precise timer: it sleeps until the earliest wake_at among open orders (an
// indexed MIN query; nothing is kept per order, so memory does not grow with them), runs
// a claim-and-close pass, and re-arms. Arm wakes it early for an earlier deadline.
func (c *Closer) runTimer(ctx context.Context) {
	timer := time.NewTimer(0)
	defer timer.Stop()
	idle := false // the last pass found nothing due although the earliest wake_at had passed
	for {
		next, ok, err := c.nextWakeAt(ctx)
		if ctx.Err() != nil {
			return
		}
		sleep := maxTimerSleep
		switch {
		case err != nil:
			c.cfg.Logger.Error("timer: earliest deadline", "error", err)
			sleep = time.Second
		case ok:
			// +1 ms: stored times are whole milliseconds and the database clock truncates.
			sleep = min(max(time.Until(next)+time.Millisecond, 0), maxTimerSleep)
			if idle && sleep == 0 {
				sleep = 2 * time.Millisecond // the database clock lags ours; don't spin
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
		if !ok || time.Now().Before(next) {
			idle = false
			continue
		}
		res, err := c.CloseDue(ctx, TriggerTimer)
		if err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error("timer: close due orders", "error", err)
		}
		idle = res.Claimed == 0
	}
}

func (c *Closer) nextWakeAt(ctx context.Context) (next time.Time, ok bool, err error) {
	err = c.cfg.Store.Read(ctx, func(tx store.Tx) error {
		next, ok, err = tx.OrderNextWakeAt(ctx)
		return err
	})
	return next, ok, err
}

// runPeriodic runs fn every interval until ctx ends.
func (c *Closer) runPeriodic(ctx context.Context, name string, interval time.Duration, fn func(context.Context) error) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-ticker.C:
		}
		if err := fn(ctx); err != nil && ctx.Err() == nil {
			c.cfg.Logger.Error(name+" failed", "error", err)
		}
	}
}

// sweep is the periodic compensating scan: the same claim-and-close, independent of the
// timer, catching whatever it missed (crash, lost wake-up).
func (c *Closer) sweep(ctx context.Context) error {
	res, err := c.CloseDue(ctx, TriggerSweep)
	if res.Closed > 0 {
		c.cfg.Logger.Info("sweep closed orders the timer had not", "closed", res.Closed)
	}
	return err
}

// deepCheck counts open orders overdue by more than the tolerance (each one means the
// timer failed), exports and logs the count, and closes them.
func (c *Closer) deepCheck(ctx context.Context) error {
	var overdue int64
	err := c.cfg.Store.Read(ctx, func(tx store.Tx) error {
		now, err := tx.Now(ctx)
		if err != nil {
			return err
		}
		overdue, err = tx.OrdersOverdueCount(ctx, now.Add(-c.cfg.DeepCheckTolerance))
		return err
	})
	if err != nil {
		return err
	}
	if overdue > 0 {
		c.cfg.Metrics.OverdueOrders.Add(float64(overdue))
		c.cfg.Logger.Warn("deep check found overdue open orders", "count", overdue, "tolerance", c.cfg.DeepCheckTolerance)
	}
	_, err = c.CloseDue(ctx, TriggerDeepCheck)
	return err
}
