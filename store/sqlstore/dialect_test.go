package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/orderlyhq/orderly"
)

// TestUnavailable checks the translation of lock waits, busy databases and expired
// deadlines into EUNAVAILABLE (503 with Retry-After over HTTP), and that other errors keep
// their code.
func TestUnavailable(t *testing.T) {
	t.Parallel()
	sqliteBusy := sqliteBusyError(t)
	for _, tc := range []struct {
		name string
		d    *dialect
		err  error
		want string
	}{
		{"sqlite busy", sqliteDialect, fmt.Errorf("begin: %w", sqliteBusy), orderly.EUNAVAILABLE},
		{"sqlite deadline", sqliteDialect, fmt.Errorf("begin: %w", context.DeadlineExceeded), orderly.EUNAVAILABLE},
		{"sqlite caller gone", sqliteDialect, fmt.Errorf("begin: %w", context.Canceled), orderly.EINTERNAL},
		{"postgres lock_not_available", postgresDialect, fmt.Errorf("payment p: %w", &pgconn.PgError{Code: "55P03"}), orderly.EUNAVAILABLE},
		{"postgres query_canceled", postgresDialect, &pgconn.PgError{Code: "57014"}, orderly.EUNAVAILABLE},
		{"postgres deadlock after the retries", postgresDialect, &pgconn.PgError{Code: "40P01"}, orderly.EUNAVAILABLE},
		{"postgres deadline", postgresDialect, fmt.Errorf("payment p: %w", context.DeadlineExceeded), orderly.EUNAVAILABLE},
		{"postgres check violation", postgresDialect, &pgconn.PgError{Code: "23514"}, orderly.EINTERNAL},
		{"mysql lock wait timeout", mysqlDialect, fmt.Errorf("payment p: %w", &mysql.MySQLError{Number: 1205}), orderly.EUNAVAILABLE},
		{"mysql deadlock after the retries", mysqlDialect, &mysql.MySQLError{Number: 1213}, orderly.EUNAVAILABLE},
		{"mysql deadline", mysqlDialect, fmt.Errorf("commit: %w", context.DeadlineExceeded), orderly.EUNAVAILABLE},
		{"mysql duplicate key", mysqlDialect, &mysql.MySQLError{Number: 1062}, orderly.EINTERNAL},
		{"domain error kept", postgresDialect, orderly.Errorf(orderly.ENOTFOUND, "payment p not found"), orderly.ENOTFOUND},
	} {
		got := (&DB{d: tc.d}).unavailable(tc.err)
		if code := orderly.ErrorCode(got); code != tc.want {
			t.Errorf("%s: code %s (%v), want %s", tc.name, code, got, tc.want)
		}
		if !errors.Is(got, tc.err) {
			t.Errorf("%s: %v lost the driver error %v", tc.name, got, tc.err)
		}
	}
	if (&DB{d: sqliteDialect}).unavailable(nil) != nil {
		t.Error("nil became an error")
	}
}

// sqliteBusyError returns the error of BEGIN IMMEDIATE while another connection holds the
// write lock, with no busy timeout.
func sqliteBusyError(t *testing.T) error {
	t.Helper()
	ctx := context.Background()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "busy.db")+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(0)")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	waiter, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer waiter.Close()
	if _, err := holder.ExecContext(ctx, "BEGIN IMMEDIATE"); err != nil {
		t.Fatal(err)
	}
	defer func() { _, _ = holder.ExecContext(ctx, "ROLLBACK") }()
	_, err = waiter.ExecContext(ctx, "BEGIN IMMEDIATE")
	if err == nil {
		t.Fatal("a second BEGIN IMMEDIATE succeeded while the first held the write lock")
	}
	return err
}

// TestMySQLStatementsPortable: every registered statement is prepared at Open, and the
// tests' MySQL server is MariaDB, which accepts syntax MySQL 8 refuses (RETURNING): a
// statement for the MySQL dialect must not use it, whatever path runs it.
func TestMySQLStatementsPortable(t *testing.T) {
	t.Parallel()
	for _, q := range queries {
		if text := q.build(mysqlDialect); strings.Contains(strings.ToUpper(text), "RETURNING") {
			t.Errorf("statement %d for MySQL uses RETURNING, which MySQL 8 does not have:\n%s", q.id, text)
		}
	}
}
