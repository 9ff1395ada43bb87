package admin

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// DefaultDeadlines is how many next deadlines Overview returns when none is asked.
const DefaultDeadlines = 10

// Overview is the engine at a glance, as the admin page (/admin) shows it.
type Overview struct {
	// Now is the database clock at the read: the time the ages and countdowns are from.
	Now time.Time
	// Counts are the orders by flow and state (states without orders are absent), counted
	// in the database: every instance's orders, not only this one's.
	Counts []*store.StateCount
	// NextWake are the open orders the timer acts on next, earliest wake_at first.
	NextWake []*store.DueOrder
	// OutboxPending and OutboxDead count undelivered messages; OldestPending is the
	// created_at of the oldest pending one (zero when none is pending).
	OutboxPending, OutboxDead int64
	OldestPending             time.Time
	// Lateness is the close lateness histogram of this instance since it started, by
	// trigger (Config.Lateness); nil without one.
	Lateness []*LatenessSeries
}

// LatenessSeries is the close lateness (closed_at − close_at, invariant I5) of the orders
// one trigger closed, as Prometheus keeps it: cumulative buckets.
type LatenessSeries struct {
	Trigger string
	// Count is the number of closes observed, Sum the sum of their lateness.
	Count uint64
	Sum   time.Duration
	// Buckets are cumulative: Buckets[i].Count closes were at most Buckets[i].UpperBound
	// late. The +Inf bucket is not listed (it is Count).
	Buckets []LatenessBucket
}

// LatenessBucket is one cumulative bucket of a lateness histogram.
type LatenessBucket struct {
	UpperBound time.Duration
	Count      uint64
}

// Overview returns counts by state, the next deadlines (up to deadlines of them, 1 …
// MaxLimit, DefaultDeadlines for 0), the outbox backlog and the lateness histogram, read in
// one transaction. EINVALID for a negative deadlines.
func (s *Service) Overview(ctx context.Context, deadlines int) (*Overview, error) {
	if deadlines < 0 {
		return nil, orderly.Errorf(orderly.EINVALID, "deadlines must be between 1 and %d", MaxLimit)
	}
	if deadlines == 0 {
		deadlines = DefaultDeadlines
	}
	deadlines = min(deadlines, MaxLimit)
	o := &Overview{}
	err := s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		var err error
		if o.Now, err = tx.Now(ctx); err != nil {
			return err
		}
		if o.Counts, err = tx.OrderStateCounts(ctx); err != nil {
			return err
		}
		if o.NextWake, err = tx.OrdersNextWake(ctx, deadlines); err != nil {
			return err
		}
		// The oldest pending time is zero when none is pending (ok false).
		o.OutboxPending, o.OutboxDead, o.OldestPending, _, err = tx.OutboxBacklog(ctx)
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("admin: overview: %w", err)
	}
	if s.cfg.Lateness != nil {
		if o.Lateness, err = lateness(s.cfg.Lateness); err != nil {
			return nil, fmt.Errorf("admin: overview: %w", err)
		}
	}
	return o, nil
}

// lateness reads the histograms that c collects (one per trigger label), in the order
// Collect gives them.
func lateness(c prometheus.Collector) ([]*LatenessSeries, error) {
	ch := make(chan prometheus.Metric)
	go func() {
		c.Collect(ch)
		close(ch)
	}()
	var out []*LatenessSeries
	var firstErr error
	for m := range ch { // drained to the end, so the collecting goroutine always ends
		var d dto.Metric
		if err := m.Write(&d); err != nil {
			if firstErr == nil {
				firstErr = err
			}
			continue
		}
		h := d.GetHistogram()
		if h == nil {
			continue
		}
		ls := &LatenessSeries{Count: h.GetSampleCount(), Sum: seconds(h.GetSampleSum())}
		for _, l := range d.GetLabel() {
			if l.GetName() == "trigger" {
				ls.Trigger = l.GetValue()
			}
		}
		for _, b := range h.GetBucket() {
			if math.IsInf(b.GetUpperBound(), +1) {
				continue
			}
			ls.Buckets = append(ls.Buckets, LatenessBucket{UpperBound: seconds(b.GetUpperBound()), Count: b.GetCumulativeCount()})
		}
		out = append(out, ls)
	}
	return out, firstErr
}

// seconds converts seconds as Prometheus keeps them to a Duration (rounded to the
// nanosecond).
func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// StuckGroupAfter is how long past its deadline a forming group must be to count as stuck:
// the timer fails a group at its deadline, so one still forming a minute later was missed
// (the same tolerance as reconciliation's overdue orders).
const StuckGroupAfter = time.Minute

// GroupStateStuck is the pseudo-state of Groups: forming groups more than StuckGroupAfter
// past their deadline by the database clock.
const GroupStateStuck = "stuck"

// Groups returns one page of group-buy groups in state (forming, succeeded, failed, or
// GroupStateStuck), by id, after afterID, n per page (0: DefaultLimit, at most MaxLimit),
// and the id to continue after ("" when this page is the last). EINVALID for another state
// or a negative n.
func (s *Service) Groups(ctx context.Context, state, afterID string, n int) ([]*orderly.Group, string, error) {
	n, err := limit(n)
	if err != nil {
		return nil, "", err
	}
	p := store.GroupsByStateParams{State: orderly.GroupState(state), AfterID: afterID, Limit: n + 1}
	switch p.State {
	case orderly.GroupForming, orderly.GroupSucceeded, orderly.GroupFailed, GroupStateStuck:
	default:
		return nil, "", orderly.Errorf(orderly.EINVALID, "state must be forming, succeeded, failed or %s", GroupStateStuck)
	}
	var gs []*orderly.Group
	err = s.cfg.Store.Read(ctx, func(tx store.Tx) error {
		if p.State == GroupStateStuck {
			now, err := tx.Now(ctx)
			if err != nil {
				return err
			}
			p.State, p.DeadlineBefore = orderly.GroupForming, now.Add(-StuckGroupAfter)
		}
		var err error
		gs, err = tx.GroupsByState(ctx, &p)
		return err
	})
	if err != nil {
		return nil, "", fmt.Errorf("admin: groups %s: %w", state, err)
	}
	if len(gs) <= n {
		return gs, "", nil
	}
	return gs[:n], gs[n-1].ID, nil
}
