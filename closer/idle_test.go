package closer_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/store"
)

// countingTimed is a kind of timed entity with at most one deadline, which counts the
// transactions the closer spends on it (FireDue calls).
type countingTimed struct {
	mu       sync.Mutex
	at       time.Time
	pending  bool
	calls    int // FireDue calls
	fired    int
	firedLag time.Duration // how late the deadline fired, on the database clock
}

func (f *countingTimed) Name() string { return "counting" }

func (f *countingTimed) NextWakeAt(context.Context, store.Tx) (time.Time, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.at, f.pending, nil
}

func (f *countingTimed) FireDue(_ context.Context, _ store.Tx, now time.Time, _ int, _ string) (int, int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	if !f.pending || f.at.After(now) {
		return 0, 0, nil
	}
	f.pending, f.fired, f.firedLag = false, f.fired+1, now.Sub(f.at)
	return 1, 1, nil
}

func (f *countingTimed) OverdueCount(_ context.Context, _ store.Tx, before time.Time) (int64, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.pending && f.at.Before(before) {
		return 1, nil
	}
	return 0, nil
}

func (f *countingTimed) set(at time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.at, f.pending = at, true
}

func (f *countingTimed) counts() (calls, fired int, lag time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls, f.fired, f.firedLag
}

// TestTimerSkipsIdleTimedKinds: the timer's passes over due orders spend no transaction on
// a kind of Config.Timed that has no deadline due (each such transaction was three round
// trips per kind and pass, on the close path of every order: the PostgreSQL regression of
// the standard flow, BENCHMARKS.md); a deadline of that kind committed later (Deadline) is
// still fired by the timer on time, and the sweep always runs every kind.
func TestTimerSkipsIdleTimedKinds(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	s := openDialect(t, "sqlite")
	var now time.Time
	if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	kind := &countingTimed{}
	cl, err := closer.New(closer.Config{Store: s, Timed: []closer.Timed{kind}, BatchSize: 2, MaxSleep: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	// Orders due in a few passes: 10 orders, 2 per batch, closing from 200 ms on.
	ids := seed(t, s, 10, now.Add(200*time.Millisecond))
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	waitClosed(t, s, ids, 10*time.Second)
	if calls, _, _ := kind.counts(); calls != 0 {
		t.Fatalf("the timer spent %d transactions on a timed kind with no deadline while closing orders; want 0", calls)
	}

	if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
		t.Fatal(err)
	}
	at := now.Add(100 * time.Millisecond)
	kind.set(at)
	cl.Deadline(ctx, at)
	deadline := time.Now().Add(5 * time.Second)
	for {
		calls, fired, lag := kind.counts()
		if fired == 1 {
			if lag < 0 || lag > time.Second {
				t.Fatalf("the kind's deadline fired %s after it, want within 1s", lag)
			}
			if calls < 1 {
				t.Fatalf("fired in %d calls", calls)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the kind's deadline %s did not fire in 5s (%d calls)", at, calls)
		}
		time.Sleep(10 * time.Millisecond)
	}

	before, _, _ := kind.counts()
	if _, err := cl.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	if after, _, _ := kind.counts(); after != before+1 {
		t.Fatalf("the sweep ran the kind %d times, want 1", after-before)
	}
}
