package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// tx implements store.Tx on one *sql.Tx, running the statements prepared for its handle.
type tx struct {
	q          *sql.Tx
	h          *sql.DB // the handle q was begun on
	db         *DB
	stmts      []*sql.Stmt
	savepoints int // nesting depth: each level has its own name (MySQL replaces a same-named one)
	opened     int // the levels sent (the first opened of savepoints); openSavepoints sends the rest
	// clock is the database's clock as last read by Now, clockAt this process's time
	// (with its monotonic reading) when the reading arrived; zero before the first.
	clock, clockAt time.Time
	gates          heldGates      // the row gates of the call of InTx (gate.go); nil in Read
	busy           *gateBusyError // a gate this attempt needed was taken: it must roll back
	// aborted is the first deadlock or serialization failure a statement met. MySQL and
	// MariaDB roll the whole transaction back on a deadlock, savepoints included, and run
	// what follows in autocommit; PostgreSQL refuses every later statement. Either way the
	// attempt must not commit, even if fn caught the error (a per-message fallback inside a
	// savepoint does): run returns it, and InTx runs the transaction again. A savepoint
	// statement that failed (SAVEPOINT, ROLLBACK TO SAVEPOINT) is recorded here too, and
	// run returns it; InTx runs again only a deadlock or a serialization failure.
	aborted error
	// afterCommit are the functions of AfterCommit, run by run after the commit.
	afterCommit []func()
}

// check records err in t.aborted when it aborted the whole transaction, and returns it.
func (t *tx) check(err error) error {
	if err != nil && t.aborted == nil && t.db.d.retry(err) {
		t.aborted = err
	}
	return err
}

var _ store.Tx = (*tx)(nil)

// afterAbort is the error of a statement sent after the transaction was aborted: none is
// sent. SQLite (an interrupted or failed write) and MySQL (a deadlock) roll the whole
// transaction back and run what follows in autocommit, where a write would commit at once,
// outside the transaction that the caller then sees fail: a saga's instance written that
// way was run by the timer while its caller was told its start failed.
func (t *tx) afterAbort() error {
	return fmt.Errorf("statement not sent: the transaction was aborted: %w", t.aborted)
}

var (
	qNow = newQuery(func(d *dialect) string { return d.now })
)

// Now implements store.Tx: the database clock, never a time read before the caller's
// lock waits. Callers read it after a lock wait to decide a deadline with the row held (a
// group's success, a hold's expiry) and to start a lease, so it is not a value cached for
// the transaction: a time read before the wait would be stale by the wait (a group
// succeeding after its deadline, a lease already over at its commit).
//
// On SQLite it is this process's clock, read without a statement (dialect.hostClock). On
// PostgreSQL and MySQL a statement reads the database's clock, at most once per clockReuse
// within a transaction; in between Now is that reading plus the time elapsed since on this
// process's monotonic clock, which advances through lock waits as the database's does. That
// is never ahead of the database's clock: the reading was taken before it arrived here, and
// truncated to the millisecond, so it lags by the reply's trip as a fresh read does when
// its caller uses it; the elapsed time is shortened by more than the two clocks' rates can
// differ, and a suspend that the monotonic clock did not count (the wall clock did) makes
// the next call read the clock again.
func (t *tx) Now(ctx context.Context) (time.Time, error) {
	if t.db.now != nil {
		return t.db.now().UTC().Truncate(time.Millisecond), nil
	}
	if t.aborted != nil {
		return time.Time{}, fmt.Errorf("database now: %w", t.afterAbort())
	}
	if t.db.d.hostClock {
		return time.Now().UTC().Truncate(time.Millisecond), nil
	}
	if !t.clockAt.IsZero() {
		// The monotonic clock may not count a host's suspend or a paused VM, which the
		// wall clock does: the reading is reused only while the two agree. The elapsed
		// time is shortened by 0.1 % (the clocks' rates may differ by a few hundred parts
		// per million), so that the sum stays behind the database's clock.
		since := time.Since(t.clockAt)
		wall := time.Now().Round(0).Sub(t.clockAt.Round(0))
		if since < clockReuse && (wall-since).Abs() < time.Millisecond {
			return t.clock.Add(since - since/1000).Truncate(time.Millisecond), nil
		}
	}
	var v int64
	if err := t.queryRow(ctx, qNow).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("database now: %w", err)
	}
	t.clock, t.clockAt = fromMS(v), time.Now()
	return t.clock, nil
}

// clockReuse is how long a reading of the database's clock serves a transaction's Now
// (advanced by the monotonic time since) before the clock is read again.
const clockReuse = 100 * time.Millisecond

// Savepoint implements store.Tx. A savepoint is sent when the first statement inside it
// is (openSavepoints): fn sending none (a step with nothing to do, a hostClock read) costs
// nothing, and then nothing is rolled back or released. The savepoint statements are
// prepared on SQLite only (sendBuilt): MySQL does not prepare them.
func (t *tx) Savepoint(ctx context.Context, fn func() error) error {
	t.savepoints++
	level := t.savepoints
	defer func() { t.savepoints-- }()
	name := fmt.Sprintf("sp%d", level)
	if t.aborted != nil {
		return fmt.Errorf("savepoint: the transaction was aborted: %w", t.aborted)
	}
	hooks := len(t.afterCommit)
	ferr := fn()
	if ferr != nil {
		t.afterCommit = t.afterCommit[:hooks] // fn's changes are undone: so are its hooks
	}
	if t.opened < level {
		return ferr // nothing was sent inside: nothing to undo or release
	}
	t.opened = level - 1
	if ferr != nil {
		if t.aborted != nil {
			return errors.Join(ferr, fmt.Errorf("rollback to savepoint: the transaction was aborted: %w", t.aborted))
		}
		if _, err := t.sendBuilt(ctx, "ROLLBACK TO SAVEPOINT "+name); err != nil {
			if t.aborted == nil {
				t.aborted = fmt.Errorf("rollback to savepoint %s: %w", name, err)
			}
			return errors.Join(ferr, fmt.Errorf("rollback to savepoint: %w", err))
		}
		if _, err := t.sendBuilt(ctx, "RELEASE SAVEPOINT "+name); err != nil {
			return errors.Join(ferr, fmt.Errorf("release savepoint: %w", err))
		}
		return ferr
	}
	if t.aborted != nil {
		return fmt.Errorf("release savepoint: the transaction was aborted: %w", t.aborted)
	}
	if _, err := t.sendBuilt(ctx, "RELEASE SAVEPOINT "+name); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

// AfterCommit implements store.Tx. Each attempt of InTx has its own tx, so the hooks of an
// attempt that rolled back are dropped with it.
func (t *tx) AfterCommit(fn func()) { t.afterCommit = append(t.afterCommit, fn) }

// openSavepoints sends the savepoints entered and not sent yet, outermost first, before a
// statement inside them.
func (t *tx) openSavepoints(ctx context.Context) error {
	for t.opened < t.savepoints {
		if _, err := t.sendBuilt(ctx, fmt.Sprintf("SAVEPOINT sp%d", t.opened+1)); err != nil {
			// A savepoint that could not be set leaves the transaction unusable (PostgreSQL
			// refuses every later statement; a lost connection is gone): like a failed
			// ROLLBACK TO SAVEPOINT it ends the attempt, whatever fn makes of its error.
			if _ = t.check(err); t.aborted == nil {
				t.aborted = fmt.Errorf("savepoint sp%d: %w", t.opened+1, err)
			}
			return fmt.Errorf("savepoint: %w", err)
		}
		t.opened++
	}
	return nil
}

// stmt returns q's prepared statement bound to this transaction.
func (t *tx) stmt(ctx context.Context, q *query) *sql.Stmt {
	if t.db.sent != nil {
		t.db.sent(q.build(t.db.d))
	}
	return t.q.StmtContext(ctx, t.stmts[q.id])
}

// exec runs a statement and returns the number of rows it changed; errors are translated
// with what (see translate).
func (t *tx) exec(ctx context.Context, what string, q *query, args ...any) (int64, error) {
	if t.aborted != nil {
		return 0, fmt.Errorf("%s: %w", what, t.afterAbort())
	}
	if err := t.openSavepoints(ctx); err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	res, err := t.stmt(ctx, q).ExecContext(ctx, args...) //nolint:sqlclosecheck // a transaction's statements close with it
	if err != nil {
		return 0, t.translate(t.check(err), what)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}

func (t *tx) query(ctx context.Context, q *query, args ...any) (*sql.Rows, error) {
	if t.aborted != nil {
		return nil, t.afterAbort()
	}
	if err := t.openSavepoints(ctx); err != nil {
		return nil, err
	}
	rows, err := t.stmt(ctx, q).QueryContext(ctx, args...) //nolint:sqlclosecheck // the caller closes the rows; the statement closes with the transaction
	return rows, t.check(err)
}

// queryRow runs a statement that returns at most one row: its Scan returns sql.ErrNoRows
// for none. When nothing could be sent (the transaction was aborted, or a savepoint could
// not be opened) Scan returns that error, whole, for its kind to be recognised (a lost
// connection is EUNAVAILABLE, connlost.go).
func (t *tx) queryRow(ctx context.Context, q *query, args ...any) rowScanner {
	if t.aborted != nil {
		return errRow{t.afterAbort()}
	}
	if err := t.openSavepoints(ctx); err != nil {
		return errRow{err}
	}
	row := t.stmt(ctx, q).QueryRowContext(ctx, args...) //nolint:sqlclosecheck // the statement closes with the transaction
	_ = t.check(row.Err())
	return row
}

// errRow is a row of a statement that was not sent: its Scan returns err. (It replaced a
// *sql.Row queried with a context cancelled with err as its cause, whose Scan said only
// "context canceled": database/sql returns ctx.Err(), not the cause, and a connection lost
// while opening a savepoint reached a payment callback as a 500.)
type errRow struct{ err error }

func (r errRow) Scan(...any) error { return r.err }

// ms converts a time to unix milliseconds, the stored form.
func ms(t time.Time) int64 { return t.UnixMilli() }

// fromMS converts stored unix milliseconds to a UTC time.
func fromMS(v int64) time.Time { return time.UnixMilli(v).UTC() }

func nullMS(t *time.Time) sql.NullInt64 {
	if t == nil {
		return sql.NullInt64{}
	}
	return sql.NullInt64{Int64: ms(*t), Valid: true}
}

func timePtr(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := fromMS(v.Int64)
	return &t
}

func nullString(s string) sql.NullString { return sql.NullString{String: s, Valid: s != ""} }

// stateSlots is the number of placeholders of a guard on a state column ("state IN (…)"):
// every state list of the domain fits. Guards are plain IN lists, not id-list subqueries,
// so that PostgreSQL re-checks them on the new row version when a concurrent transaction
// changed the row first (an UPDATE that waited for a lock must see the committed state).
const stateSlots = 6

// stateIn is the placeholder list of a state guard.
var stateIn = "?" + strings.Repeat(", ?", stateSlots-1)

// stateArgs pads a list of states to stateSlots arguments by repeating its last element.
func stateArgs[T ~string](states []T) []any {
	args := make([]any, stateSlots)
	for i := range args {
		args[i] = string(states[min(i, len(states)-1)])
	}
	return args
}

// jsonList encodes a list as the JSON array parameter of dialect.ids.
func jsonList[T any](vs []T) string {
	b, _ := json.Marshal(vs) // strings, integers and flat structs always marshal
	return string(b)
}

// idList is jsonList of the ids in ascending order: the list of a statement that locks the
// rows it names. On MySQL such a statement is a join driven by the list (updateByIDs), so
// it locks the rows in the list's order; two of them over overlapping rows (two relays
// marking messages after a stale claim) deadlocked when their lists were in different
// orders.
func idList[T cmp.Ordered](ids []T) string {
	return jsonList(slices.Sorted(slices.Values(ids)))
}

// translate maps sql.ErrNoRows to ENOTFOUND (with what) and wraps other errors with what.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return orderly.Errorf(orderly.ENOTFOUND, "%s not found", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// translate maps driver errors to domain errors: no rows → ENOTFOUND (with what), unique
// violation → ECONFLICT. Other errors are wrapped with what.
func (t *tx) translate(err error, what string) error {
	if err != nil && t.db.d.unique(err) {
		return orderly.Errorf(orderly.ECONFLICT, "%s already exists", what)
	}
	return translate(err, what)
}
