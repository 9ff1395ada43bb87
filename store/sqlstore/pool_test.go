package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// TestSQLiteReadConnectionsStayOpen: a SQLite store's read connections stay open between
// reads. database/sql keeps two idle by default, so every read beyond two at once closed
// its connection after it and the next opened one again (the pragmas and every prepared
// statement anew): 14 % of a wallet checkout benchmark's CPU.
func TestSQLiteReadConnectionsStayOpen(t *testing.T) {
	t.Parallel()
	db := openTempSQLite(t)
	ctx := t.Context()
	readers := db.reader.Stats().MaxOpenConnections
	for range 5 {
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				if err := db.Read(ctx, func(tx store.Tx) error {
					time.Sleep(10 * time.Millisecond) // hold the connection: every one is in use at once
					_, err := tx.StockGet(ctx, "none")
					return err
				}); err != nil && orderly.ErrorCode(err) != orderly.ENOTFOUND {
					t.Error(err)
				}
			})
		}
		wg.Wait()
	}
	st := db.reader.Stats()
	if st.MaxIdleClosed != 0 || st.OpenConnections != readers {
		t.Fatalf("after 5 rounds of %d reads at once: %d connections closed for want of idle room, %d open; want 0 and %d",
			readers, st.MaxIdleClosed, st.OpenConnections, readers)
	}
}

// TestSQLiteBuiltStatementsPrepared: on SQLite a savepoint's statements and a multi-row
// insert are prepared once (in the background, after their first run) and then run
// prepared, with the same effects: a savepoint's rollback undoes only its own writes.
func TestSQLiteBuiltStatementsPrepared(t *testing.T) {
	t.Parallel()
	db := openTempSQLite(t)
	ctx := t.Context()
	errInner := errors.New("inner refused")
	round := func(i int) {
		t.Helper()
		err := db.InTx(ctx, func(tx store.Tx) error {
			if _, err := tx.StockSet(ctx, fmt.Sprintf("kept-%d", i), 1); err != nil {
				return err
			}
			serr := tx.Savepoint(ctx, func() error {
				if _, err := tx.StockSet(ctx, fmt.Sprintf("undone-%d", i), 1); err != nil {
					return err
				}
				return errInner
			})
			if !errors.Is(serr, errInner) {
				return fmt.Errorf("savepoint: %w, want the inner error", serr)
			}
			steps := []*store.SagaStep{{SagaID: "s", StepName: "a", Phase: "action", Attempt: 2*i + 1, Outcome: "succeeded", IdempotencyKey: "k"},
				{SagaID: "s", StepName: "a", Phase: "action", Attempt: 2*i + 2, Outcome: "succeeded", IdempotencyKey: "k"}}
			return tx.SagaStepInsert(ctx, steps...)
		})
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
	}
	if err := db.InTx(ctx, func(tx store.Tx) error {
		return tx.SagaInsert(ctx, &store.SagaInstance{ID: "s", Definition: "d", State: "succeeded", CurrentStep: 1, Input: []byte("null"),
			EndedAt: ptrTime(time.Unix(0, 0).UTC())})
	}); err != nil {
		t.Fatal(err)
	}
	round(0)
	want := []string{"SAVEPOINT sp1", "ROLLBACK TO SAVEPOINT sp1", "RELEASE SAVEPOINT sp1",
		qSagaStepInsertHead + " VALUES " + qSagaStepInsertRow + ", " + qSagaStepInsertRow} // the two-row log insert
	deadline := time.Now().Add(10 * time.Second)
	for !db.builtPrepared(want...) {
		if time.Now().After(deadline) {
			t.Fatalf("%v not prepared 10 s after their first run", want)
		}
		time.Sleep(time.Millisecond)
	}
	round(1)
	if err := db.Read(ctx, func(tx store.Tx) error {
		for i := range 2 {
			if _, err := tx.StockGet(ctx, fmt.Sprintf("kept-%d", i)); err != nil {
				return fmt.Errorf("round %d's write before the savepoint: %w", i, err)
			}
			if _, err := tx.StockGet(ctx, fmt.Sprintf("undone-%d", i)); orderly.ErrorCode(err) != orderly.ENOTFOUND {
				return fmt.Errorf("round %d's write in the rolled-back savepoint: %w, want ENOTFOUND", i, err)
			}
		}
		steps, err := tx.SagaSteps(ctx, "s")
		if err != nil || len(steps) != 4 || steps[3].Attempt != 4 {
			return fmt.Errorf("step log %d rows (%w), want 4 in order", len(steps), err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

func ptrTime(t time.Time) *time.Time { return &t }

// builtPrepared reports whether every text is prepared on the writer (tests).
func (db *DB) builtPrepared(texts ...string) bool {
	db.built.mu.Lock()
	defer db.built.mu.Unlock()
	for _, text := range texts {
		if db.built.stmts[builtKey{db.writer, text}] == nil {
			return false
		}
	}
	return true
}

// TestSQLiteTempStoreInMemory: the SQLite writer keeps its temporary files (a savepoint's
// sub-journal) in memory, PRAGMA temp_store 2 (MEMORY); the readers, whose scans may sort
// many rows, keep the default, 0.
func TestSQLiteTempStoreInMemory(t *testing.T) {
	t.Parallel()
	db := openTempSQLite(t)
	for _, c := range []struct {
		name string
		h    interface {
			QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
		}
		want int
	}{{"writer", db.writer, 2}, {"reader", db.reader, 0}} {
		var mode int
		if err := c.h.QueryRowContext(t.Context(), "PRAGMA temp_store").Scan(&mode); err != nil {
			t.Fatal(err)
		}
		if mode != c.want {
			t.Errorf("%s: temp_store %d, want %d", c.name, mode, c.want)
		}
	}
}

// TestNoStatementAfterAbort: once SQLite has rolled a transaction back on its own (a write
// interrupted by its context), the transaction's later statements are not sent: in
// autocommit a write would commit at once, outside the transaction its caller sees fail.
// Here the caller ignores the failed savepoint (as a per-member fallback does) and writes
// on; nothing of it may be in the database.
func TestNoStatementAfterAbort(t *testing.T) {
	t.Parallel()
	db := openTempSQLite(t)
	ctx := t.Context()
	const bulk = `INSERT INTO stock (sku, available) WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000)
		SELECT 'bulk-' || x, 1 FROM c`
	var afterAbort error
	err := db.InTx(ctx, func(stx store.Tx) error {
		tt := stx.(*tx)
		serr := tt.Savepoint(ctx, func() error {
			short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
			defer cancel()
			_, err := tt.execBuilt(short, bulk) // interrupted: SQLite rolls the whole transaction back
			return err
		})
		if serr == nil {
			return errors.New("the bulk insert finished within 50 ms; the test needs it interrupted")
		}
		_, afterAbort = stx.StockSet(ctx, "after-abort", 5)
		return nil
	})
	if err == nil {
		t.Fatal("the transaction committed after SQLite rolled it back")
	}
	if afterAbort == nil {
		t.Fatal("a write after the abort was sent and succeeded")
	}
	if err := db.Read(ctx, func(tx store.Tx) error {
		if _, err := tx.StockGet(ctx, "after-abort"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
			return fmt.Errorf("the write after the abort: %w, want ENOTFOUND (not committed)", err)
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// openTempSQLite opens a migrated SQLite store in a temporary directory, closed when t ends.
func openTempSQLite(t *testing.T) *DB {
	t.Helper()
	db, err := Open(t.Context(), Config{URL: filepath.Join(t.TempDir(), "test.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestStatementsNotSent: on SQLite the clock is read without a statement, and a savepoint
// is sent only with the first statement inside it: one with none sends nothing, not even
// its release; nested ones are sent outermost first, each once, and released.
func TestStatementsNotSent(t *testing.T) {
	t.Parallel()
	db := openTempSQLite(t)
	var (
		mu   sync.Mutex
		sent []string
	)
	db.sent = func(text string) {
		mu.Lock()
		sent = append(sent, text)
		mu.Unlock()
	}
	ctx := t.Context()
	var inside []string
	if err := db.InTx(ctx, func(stx store.Tx) error {
		if _, err := stx.Now(ctx); err != nil {
			return err
		}
		if err := stx.Savepoint(ctx, func() error {
			_, err := stx.Now(ctx)
			return err
		}); err != nil {
			return err
		}
		mu.Lock()
		inside = append(inside, sent...)
		mu.Unlock()
		return stx.Savepoint(ctx, func() error {
			return stx.Savepoint(ctx, func() error {
				_, err := stx.StockSet(ctx, "sku-1", 3)
				return err
			})
		})
	}); err != nil {
		t.Fatal(err)
	}
	if len(inside) != 0 {
		t.Fatalf("clock reads and an empty savepoint sent %q, want nothing", inside)
	}
	mu.Lock()
	defer mu.Unlock()
	n := len(sent) // StockSet is a write and its read-back
	if n != 6 || sent[0] != "SAVEPOINT sp1" || sent[1] != "SAVEPOINT sp2" || sent[n-2] != "RELEASE SAVEPOINT sp2" || sent[n-1] != "RELEASE SAVEPOINT sp1" {
		t.Fatalf("nested savepoints around a write sent %q, want sp1, sp2, the write and its read, their releases", sent)
	}
}
