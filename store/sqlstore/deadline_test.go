package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// TestDeadlineDuringTransaction is a request deadline that expires while its transaction
// runs (an instance resumed after SIGSTOP finds every request past its deadline):
// database/sql rolls the transaction back on its own, and Commit reports only
// sql.ErrTxDone. The store must answer EUNAVAILABLE (nothing committed; retry), not an
// internal error (it reached clients as a 500 in `simulate --faults sigstop` on MariaDB).
func TestDeadlineDuringTransaction(t *testing.T) {
	t.Parallel()
	db, err := Open(t.Context(), Config{URL: t.TempDir() + "/test.db"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	ctx, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	err = db.InTx(ctx, func(stx store.Tx) error {
		if _, err := stx.StockSet(ctx, "sku", 1); err != nil {
			return err
		}
		<-ctx.Done()
		// Wait until database/sql has rolled the transaction back.
		deadline := time.Now().Add(5 * time.Second)
		for {
			_, err := stx.(*tx).q.ExecContext(context.Background(), "SELECT 1")
			if errors.Is(err, sql.ErrTxDone) {
				return nil // as a handler that did not look at ctx would: Commit follows
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the transaction was not rolled back 5 s after its deadline: %w", err)
			}
			time.Sleep(time.Millisecond)
		}
	})
	if code := orderly.ErrorCode(err); code != orderly.EUNAVAILABLE {
		t.Fatalf("InTx past its deadline: %v (code %s), want %s", err, code, orderly.EUNAVAILABLE)
	}
	var n int
	if err := db.Read(t.Context(), func(stx store.Tx) error {
		_, err := stx.StockGet(t.Context(), "sku")
		if orderly.ErrorCode(err) == orderly.ENOTFOUND {
			return nil
		}
		n++
		return err
	}); err != nil || n != 0 {
		t.Errorf("the stock row of the rolled-back transaction: err %v, found %d", err, n)
	}
}
