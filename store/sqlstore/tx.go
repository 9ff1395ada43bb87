package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// tx implements store.Tx on one *sql.Tx.
type tx struct {
	q  *sql.Tx
	db *DB
}

var _ store.Tx = (*tx)(nil)

// sqliteNow is SQLite's clock in unix milliseconds. unixepoch('subsec') is the integer
// millisecond clock divided by 1000.0; ROUND only undoes the float error of that division.
const sqliteNow = `SELECT CAST(ROUND(unixepoch('subsec') * 1000) AS INTEGER)`

// Now implements store.Tx.
func (t *tx) Now(ctx context.Context) (time.Time, error) {
	if t.db.now != nil {
		return t.db.now().UTC().Truncate(time.Millisecond), nil
	}
	var v int64
	if err := t.q.QueryRowContext(ctx, sqliteNow).Scan(&v); err != nil {
		return time.Time{}, fmt.Errorf("database now: %w", err)
	}
	return fromMS(v), nil
}

// Savepoint implements store.Tx.
func (t *tx) Savepoint(ctx context.Context, fn func() error) error {
	if _, err := t.q.ExecContext(ctx, "SAVEPOINT sp"); err != nil {
		return fmt.Errorf("savepoint: %w", err)
	}
	if ferr := fn(); ferr != nil {
		if _, err := t.q.ExecContext(ctx, "ROLLBACK TO SAVEPOINT sp"); err != nil {
			return errors.Join(ferr, fmt.Errorf("rollback to savepoint: %w", err))
		}
		if _, err := t.q.ExecContext(ctx, "RELEASE SAVEPOINT sp"); err != nil {
			return errors.Join(ferr, fmt.Errorf("release savepoint: %w", err))
		}
		return ferr
	}
	if _, err := t.q.ExecContext(ctx, "RELEASE SAVEPOINT sp"); err != nil {
		return fmt.Errorf("release savepoint: %w", err)
	}
	return nil
}

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

// placeholders returns "?, ?, …" with n marks.
func placeholders(n int) string {
	return strings.TrimSuffix(strings.Repeat("?, ", n), ", ")
}

// anys converts a slice to []any for query arguments.
func anys[T any](vs []T) []any {
	out := make([]any, len(vs))
	for i, v := range vs {
		out[i] = v
	}
	return out
}

// translate maps driver errors to domain errors: no rows → ENOTFOUND (with what), unique
// violation → ECONFLICT. Other errors are wrapped with what.
func translate(err error, what string) error {
	if err == nil {
		return nil
	}
	if errors.Is(err, sql.ErrNoRows) {
		return orderly.Errorf(orderly.ENOTFOUND, "%s not found", what)
	}
	var se *sqlite.Error
	if errors.As(err, &se) && (se.Code() == sqlite3.SQLITE_CONSTRAINT_UNIQUE || se.Code() == sqlite3.SQLITE_CONSTRAINT_PRIMARYKEY) {
		return orderly.Errorf(orderly.ECONFLICT, "%s already exists", what)
	}
	return fmt.Errorf("%s: %w", what, err)
}

// exec runs a statement and returns the number of rows it changed.
func (t *tx) exec(ctx context.Context, what, query string, args ...any) (int64, error) {
	res, err := t.q.ExecContext(ctx, query, args...)
	if err != nil {
		return 0, translate(err, what)
	}
	n, err := res.RowsAffected()
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return n, nil
}
