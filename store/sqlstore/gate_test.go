package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
)

// TestHotRowOneWaiterPerProcess is the lock queue of a hot SKU: while a transaction of
// another instance holds the stock row (its reservation), this process's other reservations of
// the SKU must wait for the row's gate, not in the database's lock queue: a process
// stopped there (SIGSTOP) would keep each of its queued sessions, and each would hold the
// row for the server's idle-in-transaction timeout in turn (`simulate --faults sigstop` on
// MariaDB: the hot row locked 20–40 s, lock timeouts, pools run dry). When the holder
// commits, every waiter reserves, and the row counts each reservation once.
func TestHotRowOneWaiterPerProcess(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			ctx := t.Context()
			open := func() *DB {
				db, err := Open(ctx, Config{URL: url, MaxConns: 8})
				if err != nil {
					t.Fatalf("open: %v", err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			}
			// The holder is another instance: its transaction is not at this process's gate.
			db, other := open(), open()
			lockWaits := testdb.LockWaits(t, url)
			const sku, waiters = "hot", 5
			if err := db.InTx(ctx, func(tx store.Tx) error { _, err := tx.StockSet(ctx, sku, 100); return err }); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			reserve := func(tx store.Tx, id string) error {
				o := &orderly.Order{ID: id, UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
					PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: sku, Quantity: 1, UnitPrice: 100}}, Amount: 100,
					Currency: "EUR", CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(2 * time.Minute), Version: 1}
				if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o}); err != nil {
					return err
				}
				ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: sku, Quantity: 1, Now: now})
				if err == nil && !ok {
					err = errors.New("out of stock")
				}
				return err
			}

			locked, resume := make(chan struct{}), make(chan struct{})
			errs := make(chan error, waiters+1)
			go func() {
				errs <- other.InTx(ctx, func(tx store.Tx) error {
					if err := reserve(tx, "holder"); err != nil {
						return err
					}
					close(locked)
					<-resume
					return nil
				})
			}()
			select {
			case <-locked:
			case err := <-errs:
				t.Fatalf("holder: %v", err)
			}
			for i := range waiters {
				go func() {
					errs <- db.InTx(ctx, func(tx store.Tx) error { return reserve(tx, fmt.Sprintf("waiter-%d", i)) })
				}()
			}

			// Every waiter is queued somewhere: at the gate or in the database.
			deadline := time.Now().Add(10 * time.Second)
			var (
				inDB int64
				err  error
			)
			for {
				if inDB, err = lockWaits(ctx); err != nil {
					t.Fatal(err)
				}
				atGate := db.gates.waiters("stock " + sku)
				if int(inDB)+atGate >= waiters {
					break
				}
				if time.Now().After(deadline) {
					close(resume)
					t.Fatalf("after 10 s, %d reservations wait in the database and %d at the gate, want %d in all", inDB, atGate, waiters)
				}
				time.Sleep(5 * time.Millisecond) // polling the server's lock view
			}
			if inDB != 1 {
				close(resume)
				t.Fatalf("%d reservations of the process wait in the database's lock queue of the row, want 1 (the rest at its gate)", inDB)
			}

			close(resume)
			for range waiters + 1 {
				if err := <-errs; err != nil {
					t.Errorf("reservation: %v", err)
				}
			}
			var st *orderly.Stock
			if err := db.Read(ctx, func(tx store.Tx) (err error) { st, err = tx.StockGet(ctx, sku); return err }); err != nil {
				t.Fatal(err)
			}
			if st.Available != 100-(waiters+1) || st.Held != waiters+1 {
				t.Errorf("stock after %d reservations: available %d, held %d; want %d, %d", waiters+1, st.Available, st.Held, 100-(waiters+1), waiters+1)
			}
			if n := db.gates.waiters("stock " + sku); n != 0 {
				t.Errorf("%d transactions still wait at the gate", n)
			}
		})
	}
}

// TestRowGateTimeout is the wait for a gate bounded by the lock timeout: it ends with
// errGateTimeout, which the store answers as EUNAVAILABLE (nothing changed, retry), and a
// cancelled context ends it with the context's error; the gate still admits afterwards.
func TestRowGateTimeout(t *testing.T) {
	t.Parallel()
	var g rowGates
	release, err := g.acquire(t.Context(), "k", time.Second)
	if err != nil {
		t.Fatal(err)
	}
	_, err = g.acquire(t.Context(), "k", 20*time.Millisecond)
	if !errors.Is(err, errGateTimeout) {
		t.Fatalf("second acquire: %v, want errGateTimeout", err)
	}
	if code := orderly.ErrorCode(connectionUnavailable(err)); code != orderly.EUNAVAILABLE {
		t.Errorf("gate timeout is %s, want %s", code, orderly.EUNAVAILABLE)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := g.acquire(ctx, "k", 0); !errors.Is(err, context.Canceled) {
		t.Errorf("acquire with a cancelled context: %v, want context.Canceled", err)
	}
	release()
	release() // a second release is a no-op
	r2, err := g.acquire(t.Context(), "k", 20*time.Millisecond)
	if err != nil {
		t.Fatalf("acquire after release: %v", err)
	}
	r2()
	g.mu.Lock()
	n := len(g.gates)
	g.mu.Unlock()
	if n != 0 {
		t.Errorf("%d gates left after every release, want 0", n)
	}
}

// TestGateWaitOutsideTransaction is a reservation waiting for a row's gate longer than
// the idle-in-transaction timeout: it must wait with no transaction open, or the server
// ends its session for idling (MariaDB error 4031, "connection lost") and the order is
// refused with a 503. The holder keeps the gate for 2.5 s in a running statement (not
// idle); the waiter then reserves.
func TestGateWaitOutsideTransaction(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			ctx := t.Context()
			db, err := Open(ctx, Config{URL: url, MaxConns: 4, IdleInTransactionTimeout: time.Second})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			t.Cleanup(func() { _ = db.Close() })
			const sku = "hot"
			if err := db.InTx(ctx, func(tx store.Tx) error { _, err := tx.StockSet(ctx, sku, 10); return err }); err != nil {
				t.Fatal(err)
			}
			now := time.Now().UTC().Truncate(time.Millisecond)
			reserve := func(tx store.Tx, id string) error {
				o := &orderly.Order{ID: id, UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
					PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: sku, Quantity: 1, UnitPrice: 100}}, Amount: 100,
					Currency: "EUR", CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(2 * time.Minute), Version: 1}
				if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o}); err != nil {
					return err
				}
				_, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: sku, Quantity: 1, Now: now})
				return err
			}
			sleep := map[string]string{"postgres": "SELECT pg_sleep(2.5)", "mysql": "SELECT SLEEP(2.5)"}[dialect]

			locked := make(chan struct{})
			holderErr := make(chan error, 1)
			go func() {
				holderErr <- db.InTx(ctx, func(stx store.Tx) error {
					if err := reserve(stx, "holder"); err != nil {
						return err
					}
					close(locked)
					_, err := stx.(*tx).q.ExecContext(ctx, sleep) // busy, not idle, holding the gate
					return err
				})
			}()
			select {
			case <-locked:
			case err := <-holderErr:
				t.Fatalf("holder: %v", err)
			}
			if err := db.InTx(ctx, func(tx store.Tx) error { return reserve(tx, "waiter") }); err != nil {
				t.Errorf("waiter: %v (code %s)", err, orderly.ErrorCode(err))
			}
			if err := <-holderErr; err != nil {
				t.Errorf("holder: %v", err)
			}
			var st *orderly.Stock
			if err := db.Read(ctx, func(tx store.Tx) (err error) { st, err = tx.StockGet(ctx, sku); return err }); err != nil {
				t.Fatal(err)
			}
			if st.Held != 2 {
				t.Errorf("stock held %d after two reservations, want 2", st.Held)
			}
		})
	}
}

// TestNoGatesOnSQLite: SQLite's one writer connection admits one transaction at a time, so
// a reservation there takes no row gate (no mutex and map entry per SKU for nothing).
func TestNoGatesOnSQLite(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	db, err := Open(ctx, Config{URL: "sqlite:" + t.TempDir() + "/orderly.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	now := time.Now().UTC().Truncate(time.Millisecond)
	var gates int
	err = db.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.StockSet(ctx, "hot", 10); err != nil {
			return err
		}
		o := &orderly.Order{ID: "o1", UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
			PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: "hot", Quantity: 1, UnitPrice: 100}}, Amount: 100,
			Currency: "EUR", CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(time.Minute), Version: 1}
		if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o}); err != nil {
			return err
		}
		if ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o1", SKU: "hot", Quantity: 1, Now: now}); err != nil || !ok {
			return fmt.Errorf("reserve: %v, %w", ok, err)
		}
		db.gates.mu.Lock()
		gates = len(db.gates.gates)
		db.gates.mu.Unlock()
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if gates != 0 {
		t.Errorf("%d row gates held by a reservation on SQLite, want 0", gates)
	}
}
