package fault

import (
	"cmp"
	"context"
	"errors"
	"math/rand/v2"
	"sync/atomic"
	"time"

	"github.com/orderlyhq/orderly/saga"
)

// Saga injects failures into saga participants, as a decorator (Wrap) for
// engine.Config.WrapParticipant: `orderly simulate` gives it to its instances (its
// --fail-rate, --slow-rate, --timeout-after-apply-rate), tests give it to their engines.
// Each attempt draws once: with probability FailRate it fails transiently before the
// participant runs; else with SlowRate it waits Slow first (then runs, or fails with the
// step's Timeout when Slow is longer); else with TimeoutAfterApplyRate it runs and then
// reports a timeout as if its answer was lost: an HTTP or Local participant's effect (a
// gateway capture, a wallet credit) stays applied and its retry carries the same
// idempotency key, while a LocalTx participant's writes roll back with its savepoint.
// Rates are shares in 0 … 1.
type Saga struct {
	FailRate              float64
	SlowRate              float64
	TimeoutAfterApplyRate float64
	// Slow is the delay of a slow attempt; 20 ms.
	Slow time.Duration
	// Float64 draws the attempts' fates; math/rand/v2's Float64 when nil.
	Float64 func() float64

	injected atomic.Int64
}

// Errors of injected faults (transient: the orchestrator retries them).
var (
	ErrInjectedFailure = errors.New("injected failure (saga faults)")
	ErrInjectedTimeout = errors.New("injected timeout after the participant applied the operation (saga faults)")
)

// Enabled reports whether f injects anything.
func (f *Saga) Enabled() bool {
	return f != nil && (f.FailRate > 0 || f.SlowRate > 0 || f.TimeoutAfterApplyRate > 0)
}

// Validate returns an error when a rate is outside 0 … 1 or Slow is negative.
func (f *Saga) Validate() error {
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

// Injected returns how many faults f has injected so far (failures, slow attempts and
// timeouts after apply).
func (f *Saga) Injected() int64 { return f.injected.Load() }

// Wrap returns p with f's faults injected into its attempts (saga.Around).
func (f *Saga) Wrap(p saga.Participant) saga.Participant {
	return saga.Around(p, f.attempt)
}

func (f *Saga) attempt(ctx context.Context, _ *saga.Call, next func(context.Context) error) error {
	draw := f.Float64
	if draw == nil {
		draw = rand.Float64 //nolint:gosec // fault injection, not security
	}
	x := draw()
	if x < f.FailRate+f.SlowRate+f.TimeoutAfterApplyRate {
		f.injected.Add(1)
	}
	switch {
	case x < f.FailRate:
		return ErrInjectedFailure
	case x < f.FailRate+f.SlowRate:
		t := time.NewTimer(cmp.Or(f.Slow, 20*time.Millisecond))
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
		return next(ctx)
	case x < f.FailRate+f.SlowRate+f.TimeoutAfterApplyRate:
		if err := next(ctx); err != nil {
			return err
		}
		return ErrInjectedTimeout
	}
	return next(ctx)
}
