package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/pressly/goose/v3/lock"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/store/storetest"
)

func TestMain(m *testing.M) {
	// database/sql runs a connection opener goroutine per *sql.DB until Close; every store
	// is closed in t.Cleanup, so none may be left.
	goleak.VerifyTestMain(m)
}

// openSQLite opens a fresh, migrated SQLite store in t's temporary directory (a copy of
// a migrated template unless cfg names a file).
func openSQLite(t *testing.T, cfg sqlstore.Config) *sqlstore.DB {
	t.Helper()
	if cfg.URL == "" {
		cfg.URL = sqlitetest.Path(t)
	}
	db, err := sqlstore.Open(t.Context(), cfg)
	if err != nil {
		t.Fatalf("open %s: %v", cfg.URL, err)
	}
	t.Cleanup(func() {
		if err := db.Close(); err != nil {
			t.Errorf("close %s: %v", cfg.URL, err)
		}
	})
	return db
}

// probed is a store under test that shows its lock waits (storetest.LockWaiter).
type probed struct {
	*sqlstore.DB
	waits func(ctx context.Context) (int64, error)
}

func (p probed) LockWaits(ctx context.Context) (int64, error) { return p.waits(ctx) }

func TestConformance(t *testing.T) {
	t.Run("sqlite", func(t *testing.T) {
		storetest.Run(t, func(t *testing.T) store.Store {
			db := openSQLite(t, sqlstore.Config{})
			// One writer connection: a write transaction waits for it, not for a row lock.
			return probed{db, func(context.Context) (int64, error) { return db.WriterStats().WaitCount, nil }}
		})
	})
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			base := testdb.URL(t, dialect) // skips, or fails with ORDERLY_TEST_REQUIRE_SERVICES=1
			storetest.Run(t, func(t *testing.T) store.Store {
				url := testdb.Fresh(t, base)
				db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 8})
				if err != nil {
					t.Fatalf("open %s: %v", dialect, err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return probed{db, testdb.LockWaits(t, url)}
			})
		})
	}
}

func TestInjectedClock(t *testing.T) {
	t.Parallel()
	at := time.Date(2031, 5, 6, 7, 8, 9, 123_987_654, time.FixedZone("UTC+3", 3*60*60))
	db := openSQLite(t, sqlstore.Config{Now: func() time.Time { return at }})
	want := time.Date(2031, 5, 6, 4, 8, 9, 123_000_000, time.UTC)
	for name, run := range map[string]func(func(store.Tx) error) error{
		"InTx": func(fn func(store.Tx) error) error { return db.InTx(t.Context(), fn) },
		"Read": func(fn func(store.Tx) error) error { return db.Read(t.Context(), fn) },
	} {
		var got time.Time
		if err := run(func(tx store.Tx) error {
			var err error
			got, err = tx.Now(t.Context())
			return err
		}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !got.Equal(want) || got.Location() != time.UTC {
			t.Errorf("%s: Now() = %v, want %v (the injected clock, UTC, truncated to the millisecond)", name, got, want)
		}
	}
}

// TestNowReadAtEveryCall: within one transaction a later call of Now is later by the time
// in between, whether it reads the clock again or advances a reading (PostgreSQL, MySQL:
// TestNowNeverAhead). A clock cached for the transaction (one read per transaction, tried
// for a wallet checkout's eight reads) made a time read before a lock wait decide what
// follows it: a group paid after its deadline succeeded, dated before it, and a lease
// started before the wait.
func TestNowReadAtEveryCall(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := filepath.Join(t.TempDir(), "now.db")
			if dialect != "sqlite" {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			ctx := t.Context()
			const wait = 20 * time.Millisecond
			var first, later time.Time
			if err := db.InTx(ctx, func(tx store.Tx) (err error) {
				if first, err = tx.Now(ctx); err != nil {
					return err
				}
				time.Sleep(wait) // a lock wait
				later, err = tx.Now(ctx)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			// An advanced reading is shortened by 0.1 % and truncated to the millisecond
			// (tx.Now), so it may show 19 ms for a 20 ms wait; a cached clock shows 0.
			if later.Sub(first) < wait-wait/1000-time.Millisecond {
				t.Fatalf("Now() in one transaction: %v, then %v %v later; want the clock read again or advanced", first, later, wait)
			}
		})
	}
}

// TestNowNeverAhead: on PostgreSQL and MySQL a transaction reads the database's clock at
// most once per 100 ms and advances it on this process's monotonic clock in between; the
// time it gives is never ahead of the database's own clock read just after it (an early
// close would need that), and it keeps advancing across the reuse period.
func TestNowNeverAhead(t *testing.T) {
	t.Parallel()
	for dialect, clockSQL := range map[string]string{
		"postgres": `SELECT FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::bigint`,
		"mysql":    `SELECT CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)`,
	} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			var reads atomic.Int64
			db.SetSentHook(func(text string) {
				if text == clockSQL { // the dialect's clock read is this text
					reads.Add(1)
				}
			})
			raw := testdb.Raw(t, url)
			ctx := t.Context()
			const calls = 30
			var last time.Time
			start := time.Now()
			if err := db.InTx(ctx, func(tx store.Tx) error {
				for i := range calls {
					now, err := tx.Now(ctx)
					if err != nil {
						return err
					}
					var v int64
					if err := raw.QueryRowContext(ctx, clockSQL).Scan(&v); err != nil {
						return err
					}
					if dbNow := time.UnixMilli(v).UTC(); now.After(dbNow) {
						return fmt.Errorf("call %d: Now %v is ahead of the database's clock %v", i, now, dbNow)
					}
					if now.Before(last) {
						return fmt.Errorf("call %d: Now %v went back from %v", i, now, last)
					}
					last = now
					if i%10 == 9 {
						time.Sleep(60 * time.Millisecond)
					}
				}
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			// At most one read per 100 ms (and the first), however slow the machine.
			if n, most := reads.Load(), int64(time.Since(start)/(100*time.Millisecond))+2; n < 1 || n > most || n >= calls {
				t.Fatalf("%d reads of the database's clock for %d calls of Now in %v, want 1 to %d", n, calls, time.Since(start), most)
			}
		})
	}
}

// TestSQLiteNowIsItsClock: on SQLite tx.Now, which reads the process's clock without a statement,
// (the database runs in the process): it agrees with SQLite's own clock, read between two
// calls, to the millisecond.
func TestSQLiteNowIsItsClock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "clock.db")
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = raw.Close() })
	ctx := t.Context()
	for range 20 {
		var before, after time.Time
		var v int64
		if err := db.Read(ctx, func(tx store.Tx) (err error) {
			if before, err = tx.Now(ctx); err != nil {
				return err
			}
			if err := raw.QueryRowContext(ctx, `SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`).Scan(&v); err != nil {
				return err
			}
			after, err = tx.Now(ctx)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if sqliteNow := time.UnixMilli(v).UTC(); sqliteNow.Before(before) || sqliteNow.After(after) {
			t.Fatalf("SQLite's clock read %v between tx.Now %v and %v", sqliteNow, before, after)
		}
	}
}

func TestOpenURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		url      func(path string) string
		dir      string // subdirectory of the temporary directory holding the file
		wantCode string // "" for success
	}{
		{"Path", func(p string) string { return p }, "", ""},
		{"SQLiteScheme", func(p string) string { return "sqlite://" + p }, "", ""},
		{"SQLitePrefix", func(p string) string { return "sqlite:" + p }, "", ""},
		{"FilePrefix", func(p string) string { return "file:" + p }, "", ""},
		{"PathWithURIMetacharacters", func(p string) string { return p }, "50% #1 ?x=y&z", ""},
		{"MySQLWithoutDatabase", func(string) string { return "mysql://root@127.0.0.1:1" }, "", orderly.EINVALID},
		{"UnknownScheme", func(string) string { return "redis://localhost" }, "", orderly.EINVALID},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := filepath.Join(t.TempDir(), c.dir)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, "a.db")
			url := c.url(path)
			db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url})
			if c.wantCode != "" {
				if db != nil {
					_ = db.Close()
				}
				if got := orderly.ErrorCode(err); got != c.wantCode {
					t.Fatalf("Open(%q) error %v (code %q), want code %q", url, err, got, c.wantCode)
				}
				return
			}
			if err != nil {
				t.Fatalf("Open(%q): %v", url, err)
			}
			t.Cleanup(func() { _ = db.Close() })
			if err := db.InTx(t.Context(), func(tx store.Tx) error { _, err := tx.StockSet(t.Context(), "sku", 1); return err }); err != nil {
				t.Fatalf("write: %v", err)
			}
			var got *orderly.Stock
			if err := db.Read(t.Context(), func(tx store.Tx) error {
				var err error
				got, err = tx.StockGet(t.Context(), "sku")
				return err
			}); err != nil {
				t.Fatalf("read: %v", err)
			}
			if got.Available != 1 {
				t.Errorf("read back %+v, want 1 available", got)
			}
			// The database is the named file, and the DSN's pragmas applied (WAL mode).
			for _, f := range []string{path, path + "-wal"} {
				if _, err := os.Stat(f); err != nil {
					t.Errorf("Open(%q): %v", url, err)
				}
			}
		})
	}
}

// TestConcurrentMigrations: instances starting at once on a fresh database all open it:
// their migrations take turns.
func TestConcurrentMigrations(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect))
			errs := make(chan error, 4)
			for range 4 {
				go func() {
					db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url, MaxConns: 4})
					if err == nil {
						err = db.Close()
					}
					errs <- err
				}()
			}
			for range 4 {
				if err := <-errs; err != nil {
					t.Errorf("open: %v", err)
				}
			}
		})
	}
}

// TestMigrationLockPerSchema checks that the lock serializing migrations is taken per
// schema (PostgreSQL) or database (MySQL): while an instance migrates one orderly database,
// another database on the same server (or another goose user of it) migrates at once, and
// a second instance of the first still waits.
func TestMigrationLockPerSchema(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			base := testdb.URL(t, dialect)
			busy, other := testdb.Fresh(t, base), testdb.Fresh(t, base)
			// A session of its own holds the migration lock of busy, as a migrating instance would.
			var name string
			conn, err := testdb.Raw(t, busy).Conn(t.Context())
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			if err := conn.QueryRowContext(t.Context(), map[string]string{"postgres": `SELECT current_schema()`, "mysql": `SELECT DATABASE()`}[dialect]).Scan(&name); err != nil {
				t.Fatal(err)
			}
			if dialect == "postgres" {
				_, err = conn.ExecContext(t.Context(), `SELECT pg_advisory_lock($1), pg_advisory_lock($2)`, sqlstore.MigrateLockID(name), lock.DefaultLockID)
			} else {
				_, err = conn.ExecContext(t.Context(), `SELECT GET_LOCK(?, 0)`, sqlstore.MigrateLockName(name))
			}
			if err != nil {
				t.Fatalf("hold the lock: %v", err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
			defer cancel()
			start := time.Now()
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: other, MaxConns: 2})
			if err != nil {
				t.Fatalf("open another database while the first migrates: %v", err)
			}
			_ = db.Close()
			if waited := time.Since(start); waited > 3*time.Second {
				t.Errorf("another database's migrations waited %v for the first's lock", waited)
			}
			ctx, cancel = context.WithTimeout(t.Context(), 2500*time.Millisecond)
			defer cancel()
			if db, err := sqlstore.Open(ctx, sqlstore.Config{URL: busy, MaxConns: 2}); err == nil {
				_ = db.Close()
				t.Fatal("a second instance of the migrating database did not wait for its lock")
			}
		})
	}
}

// TestCountOrders: CountOrders sees 0 in a database without the schema (and creates
// nothing: no SQLite file), 0 in a migrated empty one, and the orders of one that has some,
// on every dialect.
func TestCountOrders(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			var url string
			if dialect == "sqlite" {
				url = filepath.Join(t.TempDir(), "count.db")
			} else {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			count := func(when string, want int64) {
				t.Helper()
				if n, err := sqlstore.CountOrders(ctx, url); err != nil || n != want {
					t.Fatalf("%s: CountOrders = %d, %v; want %d", when, n, err, want)
				}
			}
			count("before the schema", 0)
			if dialect == "sqlite" {
				if _, err := os.Stat(url); !errors.Is(err, fs.ErrNotExist) {
					t.Fatalf("CountOrders created %s (stat: %v)", url, err)
				}
			}
			db, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			count("migrated", 0)
			now := time.Now().UTC().Truncate(time.Millisecond)
			err = db.InTx(ctx, func(tx store.Tx) error {
				return tx.OrderInsert(ctx, &store.OrderInsertParams{Order: &orderly.Order{
					ID: "o-count", UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
					PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: "s", Quantity: 1, UnitPrice: 100}},
					Amount: 100, Currency: "EUR", CreatedAt: now, ExpiresAt: now.Add(time.Minute), CloseAt: now.Add(time.Minute),
					Version: 1,
				}})
			})
			if err != nil {
				t.Fatal(err)
			}
			count("with one order", 1)
		})
	}
	if _, err := sqlstore.CountOrders(t.Context(), "redis://:secret@localhost"); orderly.ErrorCode(err) != orderly.EINVALID || strings.Contains(err.Error(), "secret") {
		t.Fatalf("CountOrders(redis URL with a password) = %v, want EINVALID without the password", err)
	}
}

// TestOpenErrors: errors of Open name what to fix (the missing directory of a SQLite file)
// and never hold the password of the URL, whatever the driver quotes.
func TestOpenErrors(t *testing.T) {
	t.Parallel()
	missing := filepath.Join(t.TempDir(), "no", "such", "dir")
	for _, tc := range []struct {
		url      string
		skip     bool // with SkipMigrate
		wantCode string
		want     string
	}{
		{filepath.Join(missing, "o.db"), false, orderly.EINVALID, "directory " + missing + " does not exist"},
		{filepath.Join(missing, "o.db"), true, orderly.EINVALID, "database file " + filepath.Join(missing, "o.db") + " does not exist"},
		{"postgres://u:secret@127.0.0.1:badport/x", false, orderly.EINTERNAL, "postgres://u:xxxxx@127.0.0.1:badport/x"},
		{"mysql://u:secret@127.0.0.1:badport/x", false, orderly.EINVALID, "mysql://xxxxx@127.0.0.1:badport/x"},
		{"mysql://u:secret@127.0.0.1:1/x", false, orderly.EINTERNAL, "connection refused"},
		{"postgres://u:secret@127.0.0.1:1/x?connect_timeout=5", false, orderly.EINTERNAL, "connect"},
		{"nats://u:secret@127.0.0.1:1", false, orderly.EINVALID, "nats://u:xxxxx@127.0.0.1:1"},
	} {
		db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: tc.url, SkipMigrate: tc.skip})
		if err == nil {
			_ = db.Close()
			t.Errorf("Open(%q) succeeded", tc.url)
			continue
		}
		if got := orderly.ErrorCode(err); got != tc.wantCode || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "secret") {
			t.Errorf("Open(%q) = %v (code %s), want code %s and %q, no password", tc.url, err, got, tc.wantCode, tc.want)
		}
	}
}
