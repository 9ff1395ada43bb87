package sqlstore

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestAbortedTransactionNeverCommits: MySQL and MariaDB roll a whole transaction back on a
// deadlock (savepoints too) and run what follows in autocommit, so a caller that catches the
// deadlock inside a savepoint (the relay's per-message fallback does) and goes on would
// commit the rest piece by piece. After such an error the transaction refuses savepoints,
// and run returns the deadlock so that InTx runs the whole transaction again.
func TestAbortedTransactionNeverCommits(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		d       *dialect
		err     error
		aborted bool
	}{
		{"mysql deadlock", mysqlDialect, &mysql.MySQLError{Number: 1213, Message: "Deadlock found"}, true},
		{"postgres deadlock", postgresDialect, &pgconn.PgError{Code: "40P01"}, true},
		{"postgres serialization failure", postgresDialect, &pgconn.PgError{Code: "40001"}, true},
		{"mysql duplicate key", mysqlDialect, &mysql.MySQLError{Number: 1062, Message: "Duplicate entry"}, false},
		{"no error", mysqlDialect, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tx := &tx{db: &DB{d: tc.d}}
			wrapped := fmt.Errorf("claim outbox: %w", tc.err)
			if tc.err == nil {
				wrapped = nil
			}
			if got := tx.check(wrapped); !errors.Is(got, tc.err) {
				t.Fatalf("check returned %v, want the error itself", got)
			}
			if (tx.aborted != nil) != tc.aborted {
				t.Fatalf("aborted = %v, want aborted %v", tx.aborted, tc.aborted)
			}
			if !tc.aborted {
				return
			}
			// A later, different error does not replace the first.
			_ = tx.check(&mysql.MySQLError{Number: 1213, Message: "second"})
			if !errors.Is(tx.aborted, tc.err) {
				t.Errorf("aborted = %v, want the first error", tx.aborted)
			}
			// No savepoint on an aborted transaction: fn does not run and the deadlock is
			// what the caller sees (tx.q is nil: a statement sent would panic).
			ran := false
			err := tx.Savepoint(context.Background(), func() error { ran = true; return nil })
			if ran || !errors.Is(err, tc.err) {
				t.Errorf("Savepoint after an abort: ran %v, error %v; want not run and the deadlock", ran, err)
			}
			if !tc.d.retry(tx.aborted) {
				t.Errorf("the recorded error %v is not one InTx retries", tx.aborted)
			}
		})
	}
}
