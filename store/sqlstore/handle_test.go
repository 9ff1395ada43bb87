package sqlstore

import (
	"database/sql"
	"path/filepath"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
)

// TestOpenOnCallersDB: a store opened on the caller's *sql.DB (Config.DB) migrates it,
// serves transactions, tells its dialect from the driver, opens no LISTEN connection, and
// leaves the pool open when it closes; a pool of another driver, or one given with a URL,
// is refused with EINVALID.
func TestOpenOnCallersDB(t *testing.T) {
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			driver, dsn := "pgx", url
			if dialect == "mysql" {
				var err error
				if dsn, err = mysqlDSN(url); err != nil {
					t.Fatal(err)
				}
				driver = "mysql"
			}
			h, err := sql.Open(driver, dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer h.Close()
			ctx := t.Context()
			db, err := Open(ctx, Config{DB: h})
			if err != nil {
				t.Fatal(err)
			}
			if db.Dialect() != dialect || db.Notifies() {
				t.Errorf("Dialect() = %q, Notifies() = %v; want %q, false", db.Dialect(), db.Notifies(), dialect)
			}
			err = db.InTx(ctx, func(tx store.Tx) error { _, err := tx.StockSet(ctx, "sku-1", 7); return err })
			if err != nil {
				t.Fatal(err)
			}
			if err := db.Close(); err != nil {
				t.Fatal(err)
			}
			var n int64
			if err := h.QueryRowContext(ctx, `SELECT available FROM stock WHERE sku = 'sku-1'`).Scan(&n); err != nil || n != 7 {
				t.Errorf("the caller's pool after Close: available %d, %v; want 7 and an open pool", n, err)
			}
			// Opened again on the migrated database: nothing to apply, the row is there.
			db, err = Open(ctx, Config{DB: h, SkipMigrate: true})
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			if _, err := Open(ctx, Config{DB: h, URL: url}); orderly.ErrorCode(err) != orderly.EINVALID {
				t.Errorf("Open with DB and URL: %v, want EINVALID", err)
			}
		})
	}
	t.Run("sqlite", func(t *testing.T) {
		h, err := sql.Open("sqlite", filepath.Join(t.TempDir(), "x.db"))
		if err != nil {
			t.Fatal(err)
		}
		defer h.Close()
		if _, err := Open(t.Context(), Config{DB: h}); orderly.ErrorCode(err) != orderly.EINVALID {
			t.Errorf("Open on a SQLite pool: %v, want EINVALID naming the drivers", err)
		}
	})
}
