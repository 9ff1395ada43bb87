package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"io/fs"

	"github.com/orderlyhq/orderly/store"
)

// A module is a package with tables of its own that only some databases have (channel/sim:
// the simulated gateway's holds). Its migrations are its own sequence, in a version table
// of their own, and its statements run in the store's transactions.

// MigrateModule applies the pending migrations of module name: fsys holds folder dir with
// one folder of goose files per dialect (sqlite, postgres, mysql); applied versions are
// recorded in orderly_<name>_schema_version (was goose_<name>_version), apart from the store's.
func (db *DB) MigrateModule(ctx context.Context, name string, fsys fs.FS, dir string) error {
	if err := db.migrate(ctx, fsys, dir, "orderly_"+name+"_schema_version", "goose_"+name+"_version"); err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	return nil
}

// moduleTx returns the transaction of this package behind tx.
func moduleTx(st store.Tx) (*tx, error) {
	if t, ok := st.(*tx); ok {
		return t, nil
	}
	return nil, fmt.Errorf("sqlstore: %T is not a transaction of a sqlstore.DB", st)
}

// Exec runs a module's statement (with ? placeholders) in tx, a transaction of a DB, and
// returns the number of rows it changed. Errors name what; a unique violation is ECONFLICT.
func Exec(ctx context.Context, tx store.Tx, what, text string, args ...any) (int64, error) {
	t, err := moduleTx(tx)
	if err != nil {
		return 0, err
	}
	res, err := t.execBuilt(ctx, t.db.d.rebind(text), args...)
	if err != nil {
		return 0, t.translate(t.check(err), what)
	}
	return res.RowsAffected()
}

// Query runs a module's query (with ? placeholders) in tx, a transaction of a DB; the
// caller closes the rows.
func Query(ctx context.Context, tx store.Tx, text string, args ...any) (*sql.Rows, error) {
	t, err := moduleTx(tx)
	if err != nil {
		return nil, err
	}
	if t.aborted != nil {
		return nil, t.afterAbort()
	}
	if err := t.openSavepoints(ctx); err != nil {
		return nil, err
	}
	rows, err := t.q.QueryContext(ctx, t.db.d.rebind(text), args...) //nolint:sqlclosecheck // the caller closes the rows
	return rows, t.check(err)
}

// HasTable reports whether the database of tx has a table of that name (in the current
// schema), so that a reader of a module's tables can tell a database without them.
func HasTable(ctx context.Context, tx store.Tx, name string) (bool, error) {
	t, err := moduleTx(tx)
	if err != nil {
		return false, err
	}
	q := map[string]string{
		"sqlite":   `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`,
		"postgres": `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = current_schema() AND table_name = ?`,
		"mysql":    `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
	}[t.db.d.name]
	var n int
	err = t.q.QueryRowContext(ctx, t.db.d.rebind(q), name).Scan(&n)
	return n > 0, t.check(err)
}
