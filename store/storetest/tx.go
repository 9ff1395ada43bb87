package storetest

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testTx checks transactions: commit, rollback on error, panic and goroutine exit,
// savepoints, read-only reads, isolation, and the database clock.
func testTx(t *testing.T, open opener) {
	t.Run("Dialect", func(t *testing.T) {
		_, s := setup(t, open)
		if d := s.Dialect(); !slices.Contains([]string{"sqlite", "postgres", "mysql"}, d) {
			t.Errorf("Dialect() = %q, want sqlite, postgres or mysql", d)
		}
	})

	t.Run("Now", func(t *testing.T) {
		ctx, s := setup(t, open)
		before := time.Now()
		inWrite := write(t, s, func(tx store.Tx) (time.Time, error) { return tx.Now(ctx) })
		inRead := read(t, s, func(tx store.Tx) (time.Time, error) { return tx.Now(ctx) })
		after := time.Now()
		for _, c := range []struct {
			name string
			now  time.Time
		}{{"InTx", inWrite}, {"Read", inRead}} {
			if c.now.Location() != time.UTC {
				t.Errorf("%s: Now() location %v, want UTC", c.name, c.now.Location())
			}
			if !c.now.Equal(c.now.Truncate(time.Millisecond)) {
				t.Errorf("%s: Now() = %v, not truncated to the millisecond", c.name, c.now)
			}
			if c.now.Before(before.Add(-time.Second)) || c.now.After(after.Add(time.Second)) {
				t.Errorf("%s: Now() = %v, more than a second away from the wall clock [%v, %v]", c.name, c.now, before, after)
			}
		}
	})

	t.Run("ReadSeesCommit", func(t *testing.T) {
		ctx, s := setup(t, open)
		setStock(t, s, "sku-1", 7)
		got := read(t, s, func(tx store.Tx) (*orderly.Stock, error) { return tx.StockGet(ctx, "sku-1") })
		equal(t, "stock read after commit", got, &orderly.Stock{SKU: "sku-1", Available: 7})
	})

	t.Run("ErrorRollsBack", func(t *testing.T) {
		ctx, s := setup(t, open)
		err := txErr(t, s, func(tx store.Tx) error {
			if _, err := tx.StockSet(ctx, "sku-1", 7); err != nil {
				return err
			}
			insertOrderTx(ctx, tx, newOrder(&orderOpts{ID: "o1"}))
			return errRollback
		})
		if !errors.Is(err, errRollback) {
			t.Fatalf("InTx returned %v, want the error fn returned", err)
		}
		wantRolledBack(t, s)
	})

	t.Run("PanicRollsBack", func(t *testing.T) {
		ctx, s := setup(t, open)
		var recovered any
		func() {
			defer func() { recovered = recover() }()
			_ = s.InTx(ctx, func(tx store.Tx) error {
				if _, err := tx.StockSet(ctx, "sku-1", 7); err != nil {
					return err
				}
				insertOrderTx(ctx, tx, newOrder(&orderOpts{ID: "o1"}))
				panic("boom")
			})
		}()
		if recovered != "boom" {
			t.Fatalf("recovered %v, want the panic value %q to propagate out of InTx", recovered, "boom")
		}
		wantRolledBack(t, s)
	})

	// A test's t.Fatal inside fn exits the goroutine (runtime.Goexit): neither an error nor a
	// panic, but the transaction must still end, or it holds the writer forever.
	t.Run("GoexitRollsBack", func(t *testing.T) {
		ctx, s := setup(t, open)
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = s.InTx(ctx, func(tx store.Tx) error {
				if _, err := tx.StockSet(ctx, "sku-1", 7); err != nil {
					return err
				}
				runtime.Goexit()
				return nil
			})
		}()
		<-done
		wantRolledBack(t, s)
	})

	t.Run("ReadIsReadOnly", func(t *testing.T) {
		ctx, s := setup(t, open)
		err := s.Read(ctx, func(tx store.Tx) error {
			_, err := tx.StockSet(ctx, "sku-1", 7)
			return err
		})
		if err == nil {
			t.Errorf("StockSet inside Read succeeded, want an error")
		}
		wantRolledBack(t, s)
	})

	// A write transaction's changes are invisible to readers until it commits, and an open
	// write transaction does not block readers.
	t.Run("ReadDuringWrite", func(t *testing.T) {
		ctx, s := setup(t, open)
		setStock(t, s, "sku-1", 1)
		written, release := make(chan struct{}), make(chan struct{})
		errc := make(chan error, 1)
		go func() {
			errc <- s.InTx(ctx, func(tx store.Tx) error {
				if _, err := tx.StockSet(ctx, "sku-1", 2); err != nil {
					close(written)
					return err
				}
				close(written)
				<-release
				return nil
			})
		}()
		<-written
		rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		var during *orderly.Stock
		err := s.Read(rctx, func(tx store.Tx) error {
			var err error
			during, err = tx.StockGet(rctx, "sku-1")
			return err
		})
		cancel()
		close(release)
		if err := <-errc; err != nil {
			t.Fatalf("write transaction: %v", err)
		}
		if err != nil {
			t.Fatalf("Read while a write transaction is open: %v", err)
		}
		equal(t, "stock read during the write", during, &orderly.Stock{SKU: "sku-1", Available: 1})
		equal(t, "stock read after the commit", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 2})
	})

	t.Run("Savepoint", func(t *testing.T) {
		ctx, s := setup(t, open)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		var spErr, dupErr error
		inTx(t, s, func(tx store.Tx) error {
			if _, err := tx.StockSet(ctx, "before", 1); err != nil {
				return err
			}
			// A failing fn undoes only its own changes, including after a failed statement
			// (which aborts the whole transaction on some databases without a savepoint).
			spErr = tx.Savepoint(ctx, func() error {
				if _, err := tx.StockSet(ctx, "inside-failed", 1); err != nil {
					return err
				}
				dupErr = tx.OrderInsert(ctx, &store.OrderInsertParams{Order: newOrder(&orderOpts{ID: "o1"})})
				return dupErr
			})
			// A succeeding fn keeps its changes; savepoints nest.
			if err := tx.Savepoint(ctx, func() error {
				if _, err := tx.StockSet(ctx, "inside-kept", 1); err != nil {
					return err
				}
				_ = tx.Savepoint(ctx, func() error {
					if _, err := tx.StockSet(ctx, "nested-failed", 1); err != nil {
						return err
					}
					return errRollback
				})
				return nil
			}); err != nil {
				return err
			}
			// A savepoint is sent with the first statement inside it: one with none
			// returns fn's error; an outer one whose first statement follows an empty
			// inner one still undoes it.
			if err := tx.Savepoint(ctx, func() error { return errRollback }); !errors.Is(err, errRollback) {
				return fmt.Errorf("empty savepoint: %w, want %w", err, errRollback)
			}
			if err := tx.Savepoint(ctx, func() error {
				if err := tx.Savepoint(ctx, func() error { return nil }); err != nil {
					return err
				}
				if _, err := tx.StockSet(ctx, "outer-kept", 1); err != nil {
					return err
				}
				return tx.Savepoint(ctx, func() error {
					if _, err := tx.StockSet(ctx, "inner-kept", 1); err != nil {
						return err
					}
					return nil
				})
			}); err != nil {
				return err
			}
			if err := tx.Savepoint(ctx, func() error {
				if err := tx.Savepoint(ctx, func() error { return nil }); err != nil {
					return err
				}
				if _, err := tx.StockSet(ctx, "outer-undone", 1); err != nil {
					return err
				}
				return errRollback
			}); !errors.Is(err, errRollback) {
				return fmt.Errorf("outer savepoint: %w, want %w", err, errRollback)
			}
			_, err := tx.StockSet(ctx, "after", 1)
			return err
		})
		wantCode(t, "duplicate order inside the savepoint", dupErr, orderly.ECONFLICT)
		if !errors.Is(spErr, dupErr) || spErr == nil {
			t.Errorf("Savepoint returned %v, want fn's error %v", spErr, dupErr)
		}
		list := read(t, s, func(tx store.Tx) ([]*orderly.Stock, error) { return tx.StockList(ctx, "", 0) })
		var skus []string
		for _, st := range list {
			skus = append(skus, st.SKU)
		}
		equal(t, "SKUs committed", skus, []string{"after", "before", "inner-kept", "inside-kept", "outer-kept"})
	})

	t.Run("AfterCommit", func(t *testing.T) {
		ctx, s := setup(t, open)
		var ran []string
		var inside int
		inTx(t, s, func(tx store.Tx) error {
			tx.AfterCommit(func() { ran = append(ran, "first") })
			// A failed savepoint drops the hooks it registered, a kept one keeps them.
			_ = tx.Savepoint(ctx, func() error {
				tx.AfterCommit(func() { ran = append(ran, "failed savepoint") })
				_, err := tx.StockSet(ctx, "sku-1", 1)
				return errors.Join(err, errors.New("undo"))
			})
			_ = tx.Savepoint(ctx, func() error {
				tx.AfterCommit(func() { ran = append(ran, "kept savepoint") })
				return nil
			})
			_, err := tx.StockSet(ctx, "sku-2", 1)
			inside = len(ran)
			return err
		})
		err := txErr(t, s, func(tx store.Tx) error {
			tx.AfterCommit(func() { ran = append(ran, "rolled back") })
			return errors.New("roll back")
		})
		if err == nil {
			t.Fatal("InTx of a failing fn returned nil")
		}
		if err := s.Read(ctx, func(tx store.Tx) error {
			tx.AfterCommit(func() { ran = append(ran, "read") })
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if inside != 0 {
			t.Errorf("%d hooks ran before the commit", inside)
		}
		equal(t, "hooks run", ran, []string{"first", "kept savepoint", "read"})
	})

	t.Run("AfterCommitOnceAcrossAttempts", func(t *testing.T) {
		ctx, s := setup(t, open)
		if s.Dialect() == "sqlite" {
			t.Skip("SQLite runs one write transaction at a time: InTx never runs an attempt again")
		}
		setStock(t, s, "sku-1", 10)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		insertOrder(t, s, &orderOpts{ID: "o2"})
		// A holds sku-1's row; B's first attempt meets it, rolls back and runs again once A
		// committed. B's hook must run once, for the attempt that committed.
		holds, release, aDone := make(chan struct{}), make(chan struct{}), make(chan error, 1)
		go func() {
			aDone <- s.InTx(ctx, func(tx store.Tx) error {
				if _, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o1", SKU: "sku-1", Quantity: 1, Now: t0}); err != nil {
					return err
				}
				close(holds)
				<-release
				return nil
			})
		}()
		<-holds
		attempts, hooks := 0, 0
		inTx(t, s, func(tx store.Tx) error {
			attempts++
			tx.AfterCommit(func() { hooks++ })
			_, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o2", SKU: "sku-1", Quantity: 1, Now: t0})
			if attempts == 1 {
				close(release)
			}
			return err
		})
		if err := <-aDone; err != nil {
			t.Fatalf("transaction A: %v", err)
		}
		if attempts < 2 {
			t.Errorf("B ran %d attempt(s); want a second one after meeting A's lock", attempts)
		}
		if hooks != 1 {
			t.Errorf("B's hook ran %d times over %d attempts, want once", hooks, attempts)
		}
		equal(t, "stock", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 8, Held: 2})
	})
}

// insertOrderTx inserts an order inside a test transaction whose outcome is checked by
// wantRolledBack; its error is deliberately ignored (the transaction is rolled back anyway).
func insertOrderTx(ctx context.Context, tx store.Tx, o *orderly.Order) {
	_ = tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o})
}

// wantRolledBack checks that neither "sku-1" (at 7 units) nor order "o1" was committed by a
// rolled-back transaction, and that the store still takes writes.
func wantRolledBack(t *testing.T, s store.Store) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := s.Read(ctx, func(tx store.Tx) error {
		if st, err := tx.StockGet(ctx, "sku-1"); err == nil && st.Available == 7 {
			t.Errorf("stock of sku-1 was committed: %+v", st)
		} else if err != nil && orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		if _, err := tx.OrderGet(ctx, "o1"); err == nil {
			t.Errorf("order o1 was committed")
		} else if orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatalf("read after rollback: %v", err)
	}
	// The writer was released: another write transaction starts and commits in time.
	if err := s.InTx(ctx, func(tx store.Tx) error {
		_, err := tx.StockSet(ctx, "sku-next", 1)
		return err
	}); err != nil {
		t.Fatalf("write after rollback: %v", err)
	}
}
