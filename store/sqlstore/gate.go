package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"
)

// rowGates admit the transactions of this process one at a time to a hot row: a
// transaction about to lock a stock row for a reservation takes the row's gate first, and
// keeps it until it committed or rolled back. The other transactions of the process that
// want the row wait at the gate, not in the database's lock queue.
//
// Why: a process stopped while its sessions wait in a row's lock queue (SIGSTOP, a frozen
// VM, a long pause) keeps every one of them there; each, granted the lock in turn, holds
// it until the server ends its idle transaction (IdleInTransactionTimeout; MariaDB counts
// whole seconds: 1–2 s each), so that with a pool of 20 a hot SKU stayed locked for tens
// of seconds, the other instances' reservations of it ran into the lock timeout, and
// their pools ran dry (`simulate --faults sigstop` on MariaDB: 503s, and EOFs after the
// server's 30 s write timeout). With the gates a stopped process has at most one session
// per row in the queue, and the row is free again after one idle timeout. They also keep
// the database's lock queues short under contention: one waiter per instance and row.
//
// A transaction never waits for a gate while it is open: idle in its transaction, the
// server would end its session after the idle timeout. When a gate is taken, tx.gate
// fails the attempt (gateBusyError); InTx rolls it back, waits for the gate with the
// transaction closed and its connection back in the pool, and runs the transaction again
// holding the gate from the start. Gates are waited for in key order and with no other
// gate of a higher key held, so two transactions of the process cannot wait on each other.
type rowGates struct {
	mu    sync.Mutex
	gates map[string]*rowGate
}

type rowGate struct {
	ch   chan struct{} // holds a token while a transaction is admitted
	refs int           // holders and waiters; the gate is dropped at zero
}

// errGateTimeout is the wait for a row's gate running past the lock timeout; it is
// EUNAVAILABLE like a lock wait the database ended (connlost.go lockTimedOut).
var errGateTimeout = errors.New("row gate: the row stayed locked by another transaction of this process past the lock timeout")

// tryAcquire takes key's gate if it is free and returns its release (idempotent).
func (g *rowGates) tryAcquire(key string) (func(), bool) {
	gt := g.ref(key)
	select {
	case gt.ch <- struct{}{}:
		return g.releaser(key, gt), true
	default:
		g.unref(key, gt)
		return nil, false
	}
}

// acquire waits until key's gate admits the caller and returns its release (idempotent).
// It gives up when ctx ends (ctx's cause) or, when timeout > 0, after timeout
// (errGateTimeout).
func (g *rowGates) acquire(ctx context.Context, key string, timeout time.Duration) (func(), error) {
	gt := g.ref(key)
	select {
	case gt.ch <- struct{}{}:
		return g.releaser(key, gt), nil
	default:
	}
	var expired <-chan time.Time
	if timeout > 0 {
		tm := time.NewTimer(timeout)
		defer tm.Stop()
		expired = tm.C
	}
	select {
	case gt.ch <- struct{}{}:
		return g.releaser(key, gt), nil
	case <-ctx.Done():
		g.unref(key, gt)
		return nil, fmt.Errorf("row gate %s: %w", key, context.Cause(ctx))
	case <-expired:
		g.unref(key, gt)
		return nil, fmt.Errorf("%s: %w", key, errGateTimeout)
	}
}

// ref returns key's gate, made if needed, counting the caller.
func (g *rowGates) ref(key string) *rowGate {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gates == nil {
		g.gates = map[string]*rowGate{}
	}
	gt := g.gates[key]
	if gt == nil {
		gt = &rowGate{ch: make(chan struct{}, 1)}
		g.gates[key] = gt
	}
	gt.refs++
	return gt
}

// unref uncounts a caller of key's gate, dropping the gate when it was the last.
func (g *rowGates) unref(key string, gt *rowGate) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if gt.refs--; gt.refs == 0 {
		delete(g.gates, key)
	}
}

func (g *rowGates) releaser(key string, gt *rowGate) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			<-gt.ch
			g.unref(key, gt)
		})
	}
}

// gateBusyError fails a transaction's attempt that needs a gate another transaction of
// the process holds: InTx waits for the gate with the transaction closed, then runs it
// again.
type gateBusyError struct{ key string }

func (e *gateBusyError) Error() string {
	return "row gate " + e.key + " is held by another transaction of this process"
}

// heldGates are the gates a call of InTx holds, by key, with their releases; they stay
// held across its attempts and are released when it returns.
type heldGates map[string]func()

// release releases every gate.
func (h heldGates) release() {
	for k, release := range h {
		release()
		delete(h, k)
	}
}

// wait releases the gates and takes them again with key, in key order, waiting for each:
// a gate is never waited for while one of a higher key is held.
func (h heldGates) wait(ctx context.Context, g *rowGates, key string, timeout time.Duration) error {
	keys := slices.Sorted(maps.Keys(h))
	if !slices.Contains(keys, key) {
		keys = append(keys, key)
		slices.Sort(keys)
	}
	h.release()
	for _, k := range keys {
		release, err := g.acquire(ctx, k, timeout)
		if err != nil {
			h.release()
			return err
		}
		h[k] = release
	}
	return nil
}

// gate takes key's gate for the rest of the call of InTx (see rowGates). When another
// transaction of the process holds it, gate returns a gateBusyError, and the attempt
// fails whatever the caller does with the error (run checks tx.busy). On SQLite gate does
// nothing: its one writer connection already admits one transaction at a time, and no
// session of it can wait in a lock queue.
func (t *tx) gate(key string) error {
	if t.gates == nil || t.db.d == sqliteDialect { // Read: no row locks to take
		return nil
	}
	if _, ok := t.gates[key]; ok {
		return nil
	}
	release, ok := t.db.gates.tryAcquire(key)
	if !ok {
		t.busy = &gateBusyError{key: key}
		return t.busy
	}
	t.gates[key] = release
	return nil
}
