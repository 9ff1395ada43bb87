package storetest

import (
	"testing"
	"time"

	"github.com/orderlyhq/orderly/store"
)

// testFence: LeaseCheck is a fence only because it locks the lease row until the job's
// transaction ends (FOR UPDATE where the dialect has row locks; SQLite's one writer does
// the same). Without the lock a takeover could commit while the old holder's fenced
// transaction still writes, and a holder could pass the fence while a takeover is under
// way: two instances would run one job at once.
func testFence(t *testing.T, open opener) {
	t.Run("FencedTransactionHoldsOffTakeover", func(t *testing.T) { testFenceHoldsOffTakeover(t, open) })
	t.Run("TakeoverRefusesFence", func(t *testing.T) { testTakeoverRefusesFence(t, open) })
}

// leaseResult is what a transaction in a goroutine reports.
type leaseResult struct {
	ok  bool
	err error
}

// testFenceHoldsOffTakeover: A passes the fence in its job transaction, 1 ms before its
// lease expires; B tries to take the lease over once it has expired. B must wait until A's
// transaction ends (the database shows it blocked), and take over only then.
func testFenceHoldsOffTakeover(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	a, _ := acquire(t, s, "A", t0) // expires at t0+10s
	fenced, release := make(chan struct{}), make(chan struct{})
	resA := make(chan leaseResult, 1)
	go func() {
		var held bool
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			if held, err = tx.LeaseCheck(ctx, "sweep", "A", a.Token, t0.Add(10*time.Second-time.Millisecond)); err != nil || !held {
				close(fenced)
				return err
			}
			close(fenced)
			<-release
			// The job's write, under the fence.
			return tx.JobRunInsert(ctx, &store.JobRun{Job: "sweep", Instance: "A", Token: a.Token, StartedAt: t0, FinishedAt: t0})
		})
		resA <- leaseResult{held, err}
	}()
	<-fenced

	base := lockWaits(t, s)
	doneB := make(chan struct{})
	resB := make(chan leaseResult, 1)
	go func() {
		defer close(doneB)
		var ok bool
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			_, ok, err = tx.LeaseAcquire(ctx, &store.LeaseParams{Name: "sweep", Owner: "B", Now: t0.Add(10 * time.Second), TTL: 10 * time.Second})
			return err
		})
		resB <- leaseResult{ok, err}
	}()
	blocked := waitBlocked(t, s, base, doneB)
	close(release)
	ra, rb := <-resA, <-resB
	if ra.err != nil || !ra.ok {
		t.Fatalf("A's fenced transaction: held %v, error %v; want held and committed", ra.ok, ra.err)
	}
	if !blocked {
		t.Fatalf("B took the lease over (ok %v, error %v) while A's fenced transaction was still open", rb.ok, rb.err)
	}
	if rb.err != nil || !rb.ok {
		t.Fatalf("B's takeover after A's transaction: ok %v, error %v; want it granted", rb.ok, rb.err)
	}
	b, _ := acquire(t, s, "B", t0.Add(11*time.Second))
	equal(t, "lease after the takeover", []any{b.Owner, b.Token}, []any{"B", a.Token + 1})
	runs := read(t, s, func(tx store.Tx) ([]*store.JobRun, error) { return tx.JobRunList(ctx, "sweep", 10) })
	equal(t, "A's write committed", len(runs), 1)
}

// testTakeoverRefusesFence: B takes the expired lease over and has not committed yet when
// A, whose clock is 1 ms behind, checks the fence. A must wait for B's transaction (the
// database shows it blocked) and then be refused: it judges the lease as B left it.
func testTakeoverRefusesFence(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	a, _ := acquire(t, s, "A", t0) // expires at t0+10s
	taken, release := make(chan struct{}), make(chan struct{})
	resB := make(chan leaseResult, 1)
	go func() {
		var ok bool
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			_, ok, err = tx.LeaseAcquire(ctx, &store.LeaseParams{Name: "sweep", Owner: "B", Now: t0.Add(10 * time.Second), TTL: 10 * time.Second})
			close(taken)
			if err != nil {
				return err
			}
			<-release
			return nil
		})
		resB <- leaseResult{ok, err}
	}()
	<-taken

	base := lockWaits(t, s)
	doneA := make(chan struct{})
	resA := make(chan leaseResult, 1)
	go func() {
		defer close(doneA)
		var held bool
		err := s.InTx(ctx, func(tx store.Tx) error {
			var err error
			held, err = tx.LeaseCheck(ctx, "sweep", "A", a.Token, t0.Add(10*time.Second-time.Millisecond))
			return err
		})
		resA <- leaseResult{held, err}
	}()
	blocked := waitBlocked(t, s, base, doneA)
	close(release)
	rb, ra := <-resB, <-resA
	if rb.err != nil || !rb.ok {
		t.Fatalf("B's takeover: ok %v, error %v; want it granted", rb.ok, rb.err)
	}
	if !blocked {
		t.Fatalf("A's fence check returned (held %v, error %v) while B's takeover was uncommitted; want it to wait", ra.ok, ra.err)
	}
	if ra.err != nil || ra.ok {
		t.Fatalf("A's fence check after B's takeover: held %v, error %v; want refused", ra.ok, ra.err)
	}
}
