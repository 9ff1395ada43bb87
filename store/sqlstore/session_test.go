package sqlstore_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// TestStoppedHolderReleasesLease is the lease takeover after the holder stopped inside its
// fenced transaction (SIGSTOP, a frozen VM): the holder has locked the lease row (its
// fence, LeaseCheck) and then goes silent with the transaction open. The server must end
// that session after IdleInTransactionTimeout, so that another instance's LeaseAcquire,
// which waits for the row lock, takes the lease within about that time instead of waiting
// until the holder resumes; the holder's later commit fails, and nothing it wrote stays.
func TestStoppedHolderReleasesLease(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			const idle = time.Second
			open := func() *sqlstore.DB {
				db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 4, IdleInTransactionTimeout: idle})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			holderDB, takerDB := open(), open()
			ctx := t.Context()
			now := time.Now().UTC().Truncate(time.Millisecond)
			var lease *store.Lease
			if err := holderDB.InTx(ctx, func(tx store.Tx) (err error) {
				lease, _, err = tx.LeaseAcquire(ctx, &store.LeaseParams{Name: "sweep", Owner: "holder", Now: now, TTL: time.Second})
				return err
			}); err != nil {
				t.Fatal(err)
			}

			locked, resume := make(chan struct{}), make(chan struct{})
			holderErr := make(chan error, 1)
			go func() {
				holderErr <- holderDB.InTx(ctx, func(tx store.Tx) error {
					ok, err := tx.LeaseCheck(ctx, "sweep", "holder", lease.Token, now)
					if err != nil {
						return err
					} else if !ok {
						return errors.New("the holder does not hold its lease")
					}
					if err := tx.JobRunInsert(ctx, &store.JobRun{Job: "sweep", Instance: "holder", Token: lease.Token,
						StartedAt: now, FinishedAt: now}); err != nil {
						return err
					}
					close(locked)
					<-resume // stopped: the transaction stays open with the lease row locked
					return nil
				})
			}()
			select {
			case <-locked:
			case err := <-holderErr:
				t.Fatalf("holder: %v", err)
			}

			// Another instance takes over once the lease expired (its clock says so).
			started := time.Now()
			takeCtx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			var (
				took *store.Lease
				ok   bool
			)
			err := takerDB.InTx(takeCtx, func(tx store.Tx) (err error) {
				took, ok, err = tx.LeaseAcquire(takeCtx, &store.LeaseParams{Name: "sweep", Owner: "taker", Now: now.Add(time.Minute), TTL: time.Minute})
				return err
			})
			waited := time.Since(started)
			close(resume)
			if err != nil {
				t.Fatalf("takeover after %v: %v (the stopped holder's lock was never released)", waited.Round(time.Millisecond), err)
			}
			if !ok || took.Owner != "taker" || took.Token != lease.Token+1 {
				t.Fatalf("takeover = %+v, ok %v; want owner taker, token %d", took, ok, lease.Token+1)
			}
			if waited < idle/2 || waited > idle+4*time.Second {
				t.Errorf("takeover waited %v; want about the idle-in-transaction timeout, %v", waited.Round(time.Millisecond), idle)
			}
			// Its session is gone: the error says so with EUNAVAILABLE (503 at the API: retry).
			if err := <-holderErr; orderly.ErrorCode(err) != orderly.EUNAVAILABLE {
				t.Errorf("the resumed holder's transaction: %v (code %q); want %s", err, orderly.ErrorCode(err), orderly.EUNAVAILABLE)
			}
			var runs []*store.JobRun
			if err := takerDB.Read(ctx, func(tx store.Tx) (err error) {
				runs, err = tx.JobRunList(ctx, "sweep", 10)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(runs) != 0 {
				t.Errorf("job runs = %d, want 0: the ended transaction's insert must be rolled back", len(runs))
			}
		})
	}
}

// TestLockTimeoutBoundsWait checks LockTimeout alone (the idle-in-transaction timeout
// off): a statement waiting for a row lock that a silent transaction holds fails after
// the lock timeout instead of waiting for the holder, whose session is kept.
func TestLockTimeoutBoundsWait(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			open := func() *sqlstore.DB {
				db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 4,
					IdleInTransactionTimeout: -1, LockTimeout: time.Second})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			holderDB, waiterDB := open(), open()
			ctx := t.Context()
			now := time.Now().UTC().Truncate(time.Millisecond)
			var lease *store.Lease
			if err := holderDB.InTx(ctx, func(tx store.Tx) (err error) {
				lease, _, err = tx.LeaseAcquire(ctx, &store.LeaseParams{Name: "sweep", Owner: "holder", Now: now, TTL: time.Second})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			locked, resume := make(chan struct{}), make(chan struct{})
			holderErr := make(chan error, 1)
			go func() {
				holderErr <- holderDB.InTx(ctx, func(tx store.Tx) error {
					if _, err := tx.LeaseCheck(ctx, "sweep", "holder", lease.Token, now); err != nil {
						return err
					}
					close(locked)
					<-resume
					return nil
				})
			}()
			select {
			case <-locked:
			case err := <-holderErr:
				t.Fatalf("holder: %v", err)
			}
			started := time.Now()
			waitCtx, cancel := context.WithTimeout(ctx, 8*time.Second)
			defer cancel()
			err := waiterDB.InTx(waitCtx, func(tx store.Tx) error {
				_, _, err := tx.LeaseAcquire(waitCtx, &store.LeaseParams{Name: "sweep", Owner: "taker", Now: now.Add(time.Minute), TTL: time.Minute})
				return err
			})
			waited := time.Since(started)
			close(resume)
			if err == nil {
				t.Fatal("the waiter took the lease while the holder's transaction held its row")
			}
			// Once: a lock wait that timed out is not run again (MySQL's InTx used to, 4 times).
			if waitCtx.Err() != nil || waited > 2500*time.Millisecond {
				t.Fatalf("the lock wait lasted %v (%v); want it ended once by the 1 s lock timeout", waited.Round(time.Millisecond), err)
			}
			if orderly.ErrorCode(err) != orderly.EUNAVAILABLE {
				t.Errorf("lock timeout: code %q (%v), want %s", orderly.ErrorCode(err), err, orderly.EUNAVAILABLE)
			}
			if err := <-holderErr; err != nil {
				t.Errorf("holder (its session kept, idle timeout off): %v", err)
			}
		})
	}
}

// TestLongReadKeepsItsSession: the idle-in-transaction timeout ends a write transaction
// whose client went silent (it may hold row locks), but not a read, which holds none: a
// read whose client pauses between statements longer than the timeout still reads (a
// verify pass on a busy machine lost its session to it on PostgreSQL).
func TestLongReadKeepsItsSession(t *testing.T) {
	t.Parallel()
	url := testdb.Fresh(t, testdb.URL(t, "postgres"))
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 2, IdleInTransactionTimeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx := t.Context()
	pause := func(tx store.Tx) error {
		if _, err := tx.Now(ctx); err != nil {
			return err
		}
		time.Sleep(400 * time.Millisecond)
		_, err := tx.Now(ctx)
		return err
	}
	if err := db.Read(ctx, pause); err != nil {
		t.Fatalf("read paused past the idle-in-transaction timeout: %v", err)
	}
	if err := db.InTx(ctx, pause); err == nil {
		t.Fatal("a write transaction paused past the idle-in-transaction timeout went on; want its session ended")
	}
}
