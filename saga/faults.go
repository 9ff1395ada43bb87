package saga

import (
	"context"
	"errors"
	"math/rand/v2"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// Faults injects failures into participants. It is for tests and `orderly simulate` only
// (engine.Config.SagaFaults, serve --test-saga-*): a production deployment leaves it zero.
// Each attempt draws once: with probability FailRate it fails transiently before the
// participant runs; else with SlowRate it waits Slow first (then runs, and fails with the
// step's Timeout when Slow is longer); else with TimeoutAfterApplyRate it runs and then
// reports a timeout as if its answer was lost: an HTTP or Local participant's effect
// stays applied and its retry carries the same idempotency key, while a LocalTx
// participant's writes roll back with its savepoint. Rates are shares in 0 … 1.
type Faults struct {
	FailRate              float64
	SlowRate              float64
	TimeoutAfterApplyRate float64
	// Slow is the delay of a slow attempt; 20 ms.
	Slow time.Duration
	// Float64 draws the attempts' fates; math/rand/v2's Float64 when nil.
	Float64 func() float64
}

// Enabled reports whether f injects anything.
func (f *Faults) Enabled() bool {
	return f != nil && (f.FailRate > 0 || f.SlowRate > 0 || f.TimeoutAfterApplyRate > 0)
}

// Validate returns an error when a rate is outside 0 … 1 or Slow is negative.
func (f *Faults) Validate() error {
	for _, r := range []float64{f.FailRate, f.SlowRate, f.TimeoutAfterApplyRate} {
		if r < 0 || r > 1 || r != r {
			return errors.New("saga faults: rates must be within 0 and 1")
		}
	}
	if f.Slow < 0 {
		return errors.New("saga faults: Slow must not be negative")
	}
	return nil
}

// Errors of injected faults (transient: the orchestrator retries them).
var (
	ErrInjectedFailure = errors.New("injected failure (saga faults)")
	ErrInjectedTimeout = errors.New("injected timeout after the participant applied the operation (saga faults)")
)

// WithFaults returns p with f's faults injected into its calls; p itself when f injects
// nothing.
func WithFaults(p Participant, f *Faults) Participant {
	if p == nil || !f.Enabled() {
		return p
	}
	return &faulty{p: p, f: *f}
}

type faulty struct {
	p Participant
	f Faults
}

func (w *faulty) inTx() bool { return w.p.inTx() }

// setFunc is the inner participant's SetFunc with the faults drawn per call, as call draws
// them: a call drawn to fail is answered ErrInjectedFailure and left out of the set; a
// slow one delays the set by Slow (once for all of them), or fails with a timeout and is
// left out when Slow is longer than the time left; one drawn to time out after applying is left out and
// answered ErrInjectedTimeout, which is what a LocalTx attempt comes to (its writes roll
// back with its savepoint).
func (w *faulty) setFunc() SetFunc {
	inner := setOf(w.p)
	if inner == nil {
		return nil
	}
	return func(ctx context.Context, tx store.Tx, calls []*Call) ([]error, error) {
		draw := w.f.Float64
		if draw == nil {
			draw = rand.Float64 //nolint:gosec // fault injection, not security
		}
		d := w.f.Slow
		if d == 0 {
			d = 20 * time.Millisecond
		}
		// A slow call longer than the time left fails with the timeout, as it would alone;
		// the others wait for the slow ones once, together.
		dl, bounded := ctx.Deadline()
		tooSlow := bounded && time.Until(dl) <= d
		errs := make([]error, len(calls))
		run := make([]*Call, 0, len(calls))
		at := make([]int, 0, len(calls))
		slow := false
		for i, c := range calls {
			x := draw()
			switch {
			case x < w.f.FailRate:
				errs[i] = ErrInjectedFailure
				continue
			case x < w.f.FailRate+w.f.SlowRate:
				if tooSlow {
					errs[i] = context.DeadlineExceeded
					continue
				}
				slow = true
			case x < w.f.FailRate+w.f.SlowRate+w.f.TimeoutAfterApplyRate:
				errs[i] = ErrInjectedTimeout
				continue
			}
			run, at = append(run, c), append(at, i)
		}
		if slow {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-t.C:
			}
		}
		if len(run) == 0 {
			return errs, nil
		}
		out, err := inner(ctx, tx, run)
		if err != nil {
			return nil, err
		}
		for k, i := range at {
			errs[i] = out[k]
		}
		return errs, nil
	}
}

func (w *faulty) call(ctx context.Context, tx store.Tx, c *Call) error {
	draw := w.f.Float64
	if draw == nil {
		draw = rand.Float64 //nolint:gosec // fault injection, not security
	}
	x := draw()
	switch {
	case x < w.f.FailRate:
		return ErrInjectedFailure
	case x < w.f.FailRate+w.f.SlowRate:
		slow := w.f.Slow
		if slow == 0 {
			slow = 20 * time.Millisecond
		}
		t := time.NewTimer(slow)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return w.p.call(ctx, tx, c)
	case x < w.f.FailRate+w.f.SlowRate+w.f.TimeoutAfterApplyRate:
		if err := w.p.call(ctx, tx, c); err != nil {
			return err
		}
		return ErrInjectedTimeout
	}
	return w.p.call(ctx, tx, c)
}
