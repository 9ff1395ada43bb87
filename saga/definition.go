package saga

import (
	"cmp"
	"errors"
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v5"
)

// State is the state of a saga instance (CHECK in migration 00009).
type State string

// The states of a saga instance.
const (
	StateRunning      State = "running"      // actions run forward
	StateCompensating State = "compensating" // compensations run backward; never forward again
	StateSucceeded    State = "succeeded"    // every action succeeded (terminal)
	StateCompensated  State = "compensated"  // every needed compensation succeeded (terminal)
	StateStuck        State = "stuck"        // a compensation used its attempts; waits for Redrive
)

// Phase says whether a call is a step's action or its compensation.
type Phase string

// The phases of a step.
const (
	PhaseAction       Phase = "action"
	PhaseCompensation Phase = "compensation"
)

// Outcome is the recorded result of one attempt (CHECK in migration 00009).
type Outcome string

// The outcomes of an attempt.
const (
	OutcomeSucceeded       Outcome = "succeeded"
	OutcomeBusinessFailure Outcome = "business_failure" // definitive: not retried
	OutcomeTransient       Outcome = "transient"        // retried after a backoff
	OutcomeUnknown         Outcome = "unknown"          // transient past the step's deadline: compensated
	OutcomeLost            Outcome = "lost"             // the attempt's lease ended without an answer (crash)
)

// Definition is a named, ordered list of steps. Register it in Config.Definitions; the
// name is stored with each instance, so a definition must keep its name and the order and
// names of its steps while instances of it are running.
type Definition struct {
	Name  string
	Steps []Step
}

// Step is one step of a saga.
type Step struct {
	// Name is unique within its definition; it is part of the idempotency key.
	Name string
	// Action does the step's work. Required.
	Action Participant
	// Compensation undoes the action; nil when there is nothing to undo (the step is
	// skipped when compensating).
	Compensation Participant
	// Timeout bounds one attempt (the context of the call); an attempt that takes longer is
	// a transient failure. The attempt's lease is Timeout + Config.LeaseMargin. 10 s.
	Timeout time.Duration
	// Retry is the backoff between attempts of the action and of the compensation, and
	// the action's deadline.
	Retry RetryPolicy
	// MaxCompensationAttempts is how many failed attempts of the compensation move the
	// saga to stuck (metric orderly_sagas_stuck_total, a log line, Orchestrator.Redrive).
	// 10.
	MaxCompensationAttempts int
}

// RetryPolicy is capped exponential backoff with jitter (github.com/cenkalti/backoff/v5):
// the delay after failed attempt n (1-based) is InitialInterval × Multiplier^(n−1), capped
// at MaxInterval, times a random factor in [1 − RandomizationFactor, 1 + RandomizationFactor].
// Zero fields mean the defaults.
type RetryPolicy struct {
	InitialInterval     time.Duration // 100 ms
	MaxInterval         time.Duration // 10 s
	Multiplier          float64       // 2
	RandomizationFactor float64       // 0.5; negative for none
	// Deadline is how long after its first attempt a step's action may still be retried;
	// a transient failure whose retry would start after it makes the outcome unknown, and
	// the step is compensated. 1 min.
	Deadline time.Duration
}

// Delay returns the delay before the attempt that follows failed attempt n (1-based).
func (p RetryPolicy) Delay(n int) time.Duration {
	rf := p.RandomizationFactor
	switch {
	case rf == 0:
		rf = 0.5
	case rf < 0:
		rf = 0
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     cmp.Or(p.InitialInterval, 100*time.Millisecond),
		RandomizationFactor: rf,
		Multiplier:          cmp.Or(p.Multiplier, 2),
		MaxInterval:         cmp.Or(p.MaxInterval, 10*time.Second),
	}
	b.Reset()
	d := b.NextBackOff()
	for i := 1; i < n && i < 64; i++ {
		d = b.NextBackOff()
	}
	return d
}

func (p RetryPolicy) deadline() time.Duration { return cmp.Or(p.Deadline, time.Minute) }

func (s *Step) timeout() time.Duration { return cmp.Or(s.Timeout, 10*time.Second) }

func (s *Step) maxCompensationAttempts() int { return cmp.Or(s.MaxCompensationAttempts, 10) }

// validate checks a definition: a name, at least one step, unique step names, every step
// with an action, no negative durations.
func (d *Definition) validate() error {
	if d.Name == "" {
		return errors.New("saga definition: empty name")
	}
	if len(d.Steps) == 0 {
		return fmt.Errorf("saga definition %s: no steps", d.Name)
	}
	seen := map[string]bool{}
	for i, s := range d.Steps {
		switch {
		case s.Name == "":
			return fmt.Errorf("saga definition %s: step %d has no name", d.Name, i)
		case seen[s.Name]:
			return fmt.Errorf("saga definition %s: step name %q is used twice", d.Name, s.Name)
		case s.Action == nil:
			return fmt.Errorf("saga definition %s: step %s has no action", d.Name, s.Name)
		case s.Timeout < 0 || s.Retry.InitialInterval < 0 || s.Retry.MaxInterval < 0 || s.Retry.Deadline < 0 || s.MaxCompensationAttempts < 0:
			return fmt.Errorf("saga definition %s: step %s has a negative duration or count", d.Name, s.Name)
		}
		seen[s.Name] = true
	}
	return nil
}

// businessError marks a definitive business failure.
type businessError struct{ err error }

func (e *businessError) Error() string { return "business failure: " + e.err.Error() }
func (e *businessError) Unwrap() error { return e.err }

// Business wraps err as a definitive business failure of a participant (insufficient
// balance, coupon already used): the step is not retried and compensation starts at once.
// Business(nil) is nil.
func Business(err error) error {
	if err == nil {
		return nil
	}
	return &businessError{err: err}
}

// IsBusiness reports whether err is, or wraps, a business failure made by Business.
func IsBusiness(err error) bool {
	var be *businessError
	return errors.As(err, &be)
}

// IdempotencyKey is the key of one operation: "<saga id>/<step name>/<phase>". It is the
// same on every attempt of the operation and differs between operations.
func IdempotencyKey(sagaID, step string, phase Phase) string {
	return sagaID + "/" + step + "/" + string(phase)
}
