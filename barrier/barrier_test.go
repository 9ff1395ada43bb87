package barrier_test

import (
	"context"
	"database/sql"
	"errors"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" driver
	"go.uber.org/goleak"
	_ "modernc.org/sqlite" // the "sqlite" driver

	"github.com/orderlyhq/orderly/barrier"
	"github.com/orderlyhq/orderly/internal/testdb"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// open returns a fresh database of dialect with saga_barrier and a table effects(k) that
// the participants of the tests write to; it skips for a server whose variable is unset.
func open(t *testing.T, dialect string) *sql.DB {
	t.Helper()
	var (
		driver, dsn string
	)
	switch dialect {
	case barrier.SQLite:
		driver, dsn = "sqlite", "file:"+filepath.Join(t.TempDir(), "p.db")+"?_pragma=busy_timeout(10000)&_pragma=journal_mode(WAL)"
	case barrier.Postgres:
		driver, dsn = "pgx", testdb.Fresh(t, testdb.URL(t, "postgres"))
	case barrier.MySQL:
		u, err := url.Parse(testdb.Fresh(t, testdb.URL(t, "mysql")))
		if err != nil {
			t.Fatal(err)
		}
		c := mysql.NewConfig()
		c.Net, c.Addr, c.DBName = "tcp", u.Host, u.Path[1:]
		if u.User != nil {
			c.User = u.User.Username()
			c.Passwd, _ = u.User.Password()
		}
		driver, dsn = "mysql", c.FormatDSN()
	}
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if err := barrier.CreateTable(t.Context(), db, dialect); err != nil {
		t.Fatal(err)
	}
	if _, err := db.ExecContext(t.Context(), `CREATE TABLE effects (k VARCHAR(200) NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	return db
}

var dialects = []string{barrier.SQLite, barrier.Postgres, barrier.MySQL}

func count(t *testing.T, db *sql.DB, query string) int {
	t.Helper()
	var n int
	if err := db.QueryRowContext(t.Context(), query).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// effect is a participant's work: one row in effects.
func effect(k string) func(tx *sql.Tx) error {
	return func(tx *sql.Tx) error {
		_, err := tx.Exec(`INSERT INTO effects (k) VALUES ('` + k + `')`)
		return err
	}
}

// TestNullCompensationThenLateAction: a compensation that overtakes its action writes the
// marker and succeeds once without running; a repeat is a duplicate; the late action is
// refused (hanging) and does nothing.
func TestNullCompensationThenLateAction(t *testing.T) {
	for _, dialect := range dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			db := open(t, dialect)
			b, err := barrier.New(db, dialect)
			if err != nil {
				t.Fatal(err)
			}
			ctx := t.Context()
			comp := barrier.Key{SagaID: "s1", Step: "debit", Phase: barrier.PhaseCompensation}
			act := barrier.Key{SagaID: "s1", Step: "debit", Phase: barrier.PhaseAction}
			steps := []struct {
				key     barrier.Key
				want    barrier.Result
				wantErr error
			}{
				{comp, barrier.NullCompensation, nil},
				{comp, barrier.Duplicate, nil},
				{act, barrier.Refused, barrier.ErrHanging},
				{act, barrier.Refused, barrier.ErrHanging},
			}
			for i, s := range steps {
				got, err := b.Call(ctx, s.key, effect(s.key.Phase))
				if got != s.want || !errors.Is(err, s.wantErr) {
					t.Fatalf("call %d (%s): %s, %v; want %s, %v", i, s.key.Phase, got, err, s.want, s.wantErr)
				}
			}
			if n := count(t, db, `SELECT COUNT(*) FROM effects`); n != 0 {
				t.Fatalf("%d effects, want 0: neither the null compensation nor the hanging action may run", n)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM saga_barrier WHERE saga_id = 's1' AND reason = 'compensation'`); n != 2 {
				t.Fatalf("%d barrier rows, want 2 (the action's marker and the compensation)", n)
			}
		})
	}
}

// TestActionThenCompensation: the normal order; each runs once, repeats are duplicates.
func TestActionThenCompensation(t *testing.T) {
	for _, dialect := range dialects {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			db := open(t, dialect)
			b, _ := barrier.New(db, dialect)
			ctx := t.Context()
			act := barrier.Key{SagaID: "s2", Step: "debit", Phase: barrier.PhaseAction}
			comp := barrier.Key{SagaID: "s2", Step: "debit", Phase: barrier.PhaseCompensation}
			for i, c := range []struct {
				key  barrier.Key
				want barrier.Result
			}{{act, barrier.Applied}, {act, barrier.Duplicate}, {comp, barrier.Applied}, {comp, barrier.Duplicate}, {act, barrier.Duplicate}} {
				got, err := b.Call(ctx, c.key, effect(c.key.Phase))
				if err != nil || got != c.want {
					t.Fatalf("call %d (%s): %s, %v; want %s", i, c.key.Phase, got, err, c.want)
				}
			}
			if n := count(t, db, `SELECT COUNT(*) FROM effects WHERE k = 'action'`); n != 1 {
				t.Fatalf("%d action effects, want 1", n)
			}
			if n := count(t, db, `SELECT COUNT(*) FROM effects WHERE k = 'compensation'`); n != 1 {
				t.Fatalf("%d compensation effects, want 1", n)
			}
		})
	}
}

// TestFailedFnRecordsNothing: fn's error rolls back the key, so the retry runs fn again.
func TestFailedFnRecordsNothing(t *testing.T) {
	db := open(t, barrier.SQLite)
	b, _ := barrier.New(db, barrier.SQLite)
	key := barrier.Key{SagaID: "s3", Step: "x", Phase: barrier.PhaseAction}
	boom := errors.New("boom")
	if _, err := b.Call(t.Context(), key, func(*sql.Tx) error { return boom }); !errors.Is(err, boom) {
		t.Fatalf("err %v, want boom", err)
	}
	if got, err := b.Call(t.Context(), key, effect("x")); err != nil || got != barrier.Applied {
		t.Fatalf("retry: %s, %v; want applied", got, err)
	}
	if _, err := b.Call(t.Context(), barrier.Key{SagaID: "s", Step: "x", Phase: "undo"}, effect("x")); err == nil {
		t.Fatal("an unknown phase was accepted")
	}
}

// TestConcurrentDuplicateCompensations: ten duplicates of one compensation at once, after
// the action ran and when it never did: one compensation is applied (or one null
// compensation marker written), every caller is answered success, none meets a deadlock.
func TestConcurrentDuplicateCompensations(t *testing.T) {
	for _, dialect := range dialects {
		for _, actionRan := range []bool{false, true} {
			name := dialect + "/null"
			if actionRan {
				name = dialect + "/after-action"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				db := open(t, dialect)
				b, _ := barrier.New(db, dialect)
				ctx := context.Background()
				saga := "s-" + name
				if actionRan {
					if got, err := b.Call(ctx, barrier.Key{SagaID: saga, Step: "debit", Phase: barrier.PhaseAction}, effect("action")); err != nil || got != barrier.Applied {
						t.Fatalf("action: %s, %v", got, err)
					}
				}
				const n = 10
				var (
					wg      sync.WaitGroup
					start   = make(chan struct{})
					ran     atomic.Int64
					mu      sync.Mutex
					results = map[barrier.Result]int{}
					errs    []error
				)
				for range n {
					wg.Go(func() {
						<-start
						got, err := b.Call(ctx, barrier.Key{SagaID: saga, Step: "debit", Phase: barrier.PhaseCompensation}, func(tx *sql.Tx) error {
							ran.Add(1)
							return effect("compensation")(tx)
						})
						mu.Lock()
						defer mu.Unlock()
						results[got]++
						if err != nil {
							errs = append(errs, err)
						}
					})
				}
				close(start)
				wg.Wait()
				if len(errs) > 0 {
					t.Fatalf("%d of %d callers got an error, first: %v", len(errs), n, errs[0])
				}
				first := barrier.NullCompensation
				if actionRan {
					first = barrier.Applied
				}
				if results[first] != 1 || results[barrier.Duplicate] != n-1 {
					t.Fatalf("results %v, want 1 %s and %d duplicate", results, first, n-1)
				}
				wantRan := int64(0)
				if actionRan {
					wantRan = 1
				}
				if ran.Load() != wantRan {
					t.Fatalf("the compensation ran %d times, want %d", ran.Load(), wantRan)
				}
				if got := count(t, db, `SELECT COUNT(*) FROM saga_barrier WHERE saga_id = '`+saga+`' AND op = 'compensation'`); got != 1 {
					t.Fatalf("%d compensation markers, want 1", got)
				}
				if got := count(t, db, `SELECT COUNT(*) FROM effects WHERE k = 'compensation'`); int64(got) != wantRan {
					t.Fatalf("%d compensation effects, want %d", got, wantRan)
				}
			})
		}
	}
}
