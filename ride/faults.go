package ride

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/orderlyhq/orderly/payment"
)

// Faults injects failures into the participants of the trips' sagas, for tests and
// `orderly simulate` only (the engine gives it engine.Config.SagaFaults' rates: serve
// --test-saga-fail-rate, --test-saga-slow-rate, --test-saga-timeout-after-apply-rate). Rates are probabilities per call, 0..1.
type Faults struct {
	// FailRate: the call fails transiently before doing anything (the saga retries it).
	FailRate float64
	// SlowRate: the call waits Slow before doing anything (or until its context ends).
	SlowRate float64
	// Slow is the delay of a slow call; 200 ms.
	Slow time.Duration
	// TimeoutAfterApplyRate: a gateway call applies its effect, then answers
	// payment.ErrGatewayTimeout, as a reply lost on the way back: the retry, under the same
	// idempotency key, must not apply it twice.
	TimeoutAfterApplyRate float64
}

func (f Faults) validate() error {
	for _, r := range []float64{f.FailRate, f.SlowRate, f.TimeoutAfterApplyRate} {
		if r < 0 || r > 1 {
			return fmt.Errorf("ride: fault rates must be 0..1, got %v", r)
		}
	}
	if f.Slow < 0 {
		return errors.New("ride: Faults.Slow must not be negative")
	}
	return nil
}

// errInjected is the transient failure that Faults.FailRate injects.
var errInjected = errors.New("ride: injected participant failure")

type faults struct{ Faults }

func newFaults(f Faults) *faults {
	if f.Slow == 0 {
		f.Slow = 200 * time.Millisecond
	}
	return &faults{f}
}

// before runs before a participant call: it may wait (SlowRate) and may fail (FailRate).
func (f *faults) before(ctx context.Context) error {
	if f.SlowRate > 0 && rand.Float64() < f.SlowRate { //nolint:gosec // fault injection, not security
		t := time.NewTimer(f.Slow)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	if f.FailRate > 0 && rand.Float64() < f.FailRate { //nolint:gosec // fault injection, not security
		return errInjected
	}
	return nil
}

// after runs after a gateway call that applied (err == nil): it may turn the answer into
// payment.ErrGatewayTimeout (TimeoutAfterApplyRate).
func (f *faults) after(err error) error {
	if err == nil && f.TimeoutAfterApplyRate > 0 && rand.Float64() < f.TimeoutAfterApplyRate { //nolint:gosec // fault injection
		return payment.ErrGatewayTimeout
	}
	return err
}
