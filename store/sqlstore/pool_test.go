package sqlstore

import (
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
	db, err := Open(t.Context(), Config{URL: filepath.Join(t.TempDir(), "pool.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
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
