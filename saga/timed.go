package saga

import (
	"context"
	"time"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/store"
)

// Timed returns the sagas as a timed kind of the close path (give it to
// closer.Config.Timed): the closer's one timer, sweep and deep check claim the instances
// whose wake_at passed on the database clock — a retry time, a re-drive, or the lease of
// an attempt whose runner died — and this orchestrator's workers run them.
func (o *Orchestrator) Timed() closer.Timed { return timed{o} }

type timed struct{ o *Orchestrator }

var _ closer.Timed = timed{}

// Name implements closer.Timed.
func (timed) Name() string { return "saga" }

// NextWakeAt implements closer.Timed: the earliest wake_at of a running or compensating
// saga; none while the workers are not started (nothing would run them).
func (t timed) NextWakeAt(ctx context.Context, tx store.Tx) (time.Time, bool, error) {
	if t.o.room() == 0 {
		return time.Time{}, false, nil
	}
	return tx.SagaNextWakeAt(ctx)
}

// OverdueCount implements closer.Timed.
func (timed) OverdueCount(ctx context.Context, tx store.Tx, before time.Time) (int64, error) {
	return tx.SagasOverdueCount(ctx, before)
}

// FireDue implements closer.Timed: it claims up to limit due sagas (no more than the
// workers' free queue room), starts a new attempt of each in tx (an attempt whose lease
// ended is logged as lost and counts as a transient failure) and queues the claimed ones
// for the workers, which wait for tx to end before they run them.
func (t timed) FireDue(ctx context.Context, tx store.Tx, now time.Time, limit int, _ string) (claimed, fired int, err error) {
	o := t.o
	limit = min(limit, o.room())
	if limit <= 0 {
		return 0, 0, nil
	}
	due, err := tx.SagasDue(ctx, now, limit)
	if err != nil {
		return 0, 0, err
	}
	var ready []*store.SagaInstance
	for _, s := range due {
		def := o.defs[s.Definition]
		if def == nil {
			continue // another deployment's definition: its instances run it
		}
		next := clone(s)
		var run bool
		if s.AttemptStartedAt != nil {
			// The lease of the attempt in flight ended without an answer.
			var logged Outcome
			run, logged = o.advance(next, def, OutcomeLost, "the attempt's lease ended without an answer", now)
			if err := tx.SagaStepInsert(ctx, o.logRow(s, next, run, def, logged, "lease ended without an answer", now)); err != nil {
				return len(due), fired, err
			}
			o.cfg.Metrics.SagaAttempts.WithLabelValues(string(phaseOf(s)), string(logged)).Inc()
		} else {
			run = o.claim(next, def, now)
		}
		ok, err := tx.SagaUpdate(ctx, next)
		if err != nil {
			return len(due), fired, err
		}
		if !ok {
			continue
		}
		fired++
		if run {
			ready = append(ready, next)
		}
	}
	o.enqueue(ready)
	return len(due), fired, nil
}

func phaseOf(s *store.SagaInstance) Phase {
	if State(s.State) == StateCompensating {
		return PhaseCompensation
	}
	return PhaseAction
}

// room is the free room of the worker queue; 0 when not started.
func (o *Orchestrator) room() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.queue == nil {
		return 0
	}
	return cap(o.queue) - len(o.queue)
}

// enqueue hands claimed attempts to the workers, to run once the claiming transaction
// has ended; those that find no room run when their leases end.
func (o *Orchestrator) enqueue(list []*store.SagaInstance) {
	o.mu.Lock()
	queue := o.queue
	o.mu.Unlock()
	for _, s := range list {
		select {
		case queue <- work{s: s, confirm: true}:
		default:
		}
	}
}
