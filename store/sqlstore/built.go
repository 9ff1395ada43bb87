package sqlstore

import (
	"context"
	"database/sql"
	"sync"
)

// builtStmts are statements whose text is built at run time (savepoints by depth,
// multi-row inserts by row count), prepared once per handle and text. SQLite parses a
// statement on every unprepared execution, and its parser was a tenth of a wallet
// checkout's CPU (a savepoint and its release per step, a multi-row insert of the step
// log). The texts are few: savepoint depths, and row counts up to rowsPerInsert per table.
//
// A text is prepared in the background the first time it runs, and runs unprepared until
// then: the transaction that meets it holds SQLite's one writer connection, which
// preparing it on the handle would wait for.
type builtStmts struct {
	mu     sync.Mutex
	stmts  map[builtKey]*sql.Stmt // nil value: being prepared
	closed bool
}

type builtKey struct {
	h    *sql.DB
	text string
}

// get returns text prepared on h; nil when it is not prepared yet, and then it starts
// preparing it.
func (b *builtStmts) get(h *sql.DB, text string) *sql.Stmt {
	b.mu.Lock()
	defer b.mu.Unlock()
	k := builtKey{h, text}
	if st, seen := b.stmts[k]; seen || b.closed {
		return st
	}
	if b.stmts == nil {
		b.stmts = map[builtKey]*sql.Stmt{}
	}
	b.stmts[k] = nil
	go b.prepare(k)
	return nil
}

// prepare prepares k once h has a free connection; a statement that fails to prepare
// stays unprepared (it runs as it is).
func (b *builtStmts) prepare(k builtKey) {
	st, err := k.h.PrepareContext(context.Background(), k.text)
	if err != nil {
		return
	}
	b.mu.Lock()
	closed := b.closed
	if !closed {
		b.stmts[k] = st
	}
	b.mu.Unlock()
	if closed {
		_ = st.Close() //nolint:sqlclosecheck // kept open for the store's life unless the store closed meanwhile
	}
}

// close closes every prepared statement and returns their errors; none is prepared after.
func (b *builtStmts) close() []error {
	b.mu.Lock()
	defer b.mu.Unlock()
	var errs []error
	for _, st := range b.stmts {
		if st != nil {
			errs = append(errs, st.Close())
		}
	}
	b.stmts, b.closed = nil, true
	return errs
}

// execBuilt runs a statement whose text is built at run time: on SQLite prepared once
// (builtStmts), elsewhere sent as it is (pgx caches statements by text itself; MySQL does
// not prepare savepoints).
func (t *tx) execBuilt(ctx context.Context, text string, args ...any) (sql.Result, error) {
	if t.aborted != nil {
		return nil, t.afterAbort()
	}
	if err := t.openSavepoints(ctx); err != nil {
		return nil, err
	}
	return t.sendBuilt(ctx, text, args...)
}

// sendBuilt is execBuilt without opening the pending savepoints (it sends them).
func (t *tx) sendBuilt(ctx context.Context, text string, args ...any) (sql.Result, error) {
	if t.db.sent != nil {
		t.db.sent(text)
	}
	if t.db.d.name == "sqlite" && t.h != nil {
		if st := t.db.built.get(t.h, text); st != nil {
			return t.q.StmtContext(ctx, st).ExecContext(ctx, args...) //nolint:sqlclosecheck // closed with the store (builtStmts.close)
		}
	}
	return t.q.ExecContext(ctx, text, args...)
}
