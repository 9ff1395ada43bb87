package sqlstore

import (
	"context"
	"errors"
	"testing"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
)

// TestSavepointOnALostConnectionIsUnavailable: the database ends the session (a restart,
// a KILL) between two statements of a transaction, and the next statement is the first
// one inside a savepoint, a single-row read. The SAVEPOINT fails; the read is not sent,
// and its error must be the lost connection, so that the caller is told EUNAVAILABLE
// (retry), never a 500. The read used to fail with a bare "context canceled"
// (database/sql drops a context's cause): a payment callback in `simulate --faults
// db-restart` was answered 500.
func TestSavepointOnALostConnectionIsUnavailable(t *testing.T) {
	t.Parallel()
	for _, dialect := range []struct{ name, session, kill string }{
		{"postgres", "SELECT pg_backend_pid()", "SELECT pg_terminate_backend($1)"},
		{"mysql", "SELECT CONNECTION_ID()", "KILL ?"},
	} {
		t.Run(dialect.name, func(t *testing.T) {
			t.Parallel()
			url := testdb.Fresh(t, testdb.URL(t, dialect.name))
			db, err := Open(t.Context(), Config{URL: url, MaxConns: 2})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			raw := testdb.Raw(t, url)
			ctx := t.Context()

			var readErr error
			err = db.InTx(ctx, func(st store.Tx) error {
				var session int64
				if err := st.(*tx).q.QueryRowContext(ctx, dialect.session).Scan(&session); err != nil {
					return err
				}
				if _, err := raw.ExecContext(ctx, dialect.kill, session); err != nil {
					return err
				}
				return st.Savepoint(ctx, func() error {
					_, readErr = st.PaymentGet(ctx, "01a23eb0-186c-74fa-b97a-abd33f7540ca")
					return readErr
				})
			})
			if errors.Is(readErr, context.Canceled) || orderly.ErrorCode(readErr) == orderly.ENOTFOUND {
				t.Errorf("the read inside the savepoint failed with %v, want the lost connection", readErr)
			}
			if code := orderly.ErrorCode(err); code != orderly.EUNAVAILABLE {
				t.Errorf("InTx: code %q (%v), want %q", code, err, orderly.EUNAVAILABLE)
			}
		})
	}
}
