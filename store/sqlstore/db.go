// Package sqlstore implements store.Store on SQL databases through database/sql, with
// explicit, parameterised SQL and embedded, numbered migrations per dialect run by goose.
//
// SQLite (the embedded default, pure-Go driver modernc.org/sqlite) runs in WAL mode with two
// handles: one writer connection, so write transactions queue in-process instead of
// spinning in SQLite's busy handler, and a pool of read-only connections that read
// concurrently. Write transactions start with BEGIN IMMEDIATE.
package sqlstore

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/pressly/goose/v3"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

//go:embed migrations
var migrations embed.FS

// Config configures Open.
type Config struct {
	// URL selects the database: "" or "orderly.db" (a file path), "sqlite:path" or
	// "sqlite://path" for SQLite. postgres:// and mysql:// are not implemented yet.
	URL string
	// Now, when set, replaces the database clock (tests and simulations only).
	Now func() time.Time
	// SkipMigrate skips applying migrations at open.
	SkipMigrate bool
}

// DB is a store.Store on a SQL database.
type DB struct {
	d      *dialect
	writer *sql.DB
	reader *sql.DB
	now    func() time.Time
	// wstmts and rstmts are every registered query, prepared on the writer and the reader.
	wstmts, rstmts []*sql.Stmt
}

var _ store.Store = (*DB)(nil)

// Open opens (creating if needed) the database named by cfg.URL and applies pending
// migrations. Errors: an unsupported URL scheme, an unreachable database, a failed migration.
func Open(ctx context.Context, cfg Config) (*DB, error) {
	path, err := sqlitePath(cfg.URL)
	if err != nil {
		return nil, err
	}
	const pragmas = "_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
	// The DSN is a SQLite URI filename: escape the characters it gives a meaning to, or a
	// path with '?', '#' or '%' names another file and loses the pragmas.
	dsnPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	writer, err := sql.Open("sqlite", "file:"+dsnPath+"?"+pragmas+"&_txlock=immediate")
	if err != nil {
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	db := &DB{d: sqliteDialect, writer: writer, now: cfg.Now}
	if err := writer.PingContext(ctx); err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if !cfg.SkipMigrate {
		if err := db.Migrate(ctx); err != nil {
			_ = writer.Close()
			return nil, err
		}
	}
	reader, err := sql.Open("sqlite", "file:"+dsnPath+"?"+pragmas+"&_pragma=query_only(1)")
	if err != nil {
		_ = writer.Close()
		return nil, fmt.Errorf("open sqlite %s: %w", path, err)
	}
	reader.SetMaxOpenConns(max(4, runtime.GOMAXPROCS(0)))
	db.reader = reader
	if db.wstmts, err = prepareAll(ctx, db.d, writer); err == nil {
		db.rstmts, err = prepareAll(ctx, db.d, reader)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// sqlitePath returns the file path of a SQLite URL.
func sqlitePath(raw string) (string, error) {
	switch {
	case raw == "":
		return "orderly.db", nil
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"), strings.HasPrefix(raw, "mysql://"):
		u, _ := url.Parse(raw)
		scheme := "database"
		if u != nil {
			scheme = u.Scheme
		}
		return "", orderly.Errorf(orderly.EINVALID, "%s databases are not supported yet; use a SQLite file", scheme)
	case strings.HasPrefix(raw, "sqlite://"):
		return strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.HasPrefix(raw, "file:"):
		return strings.TrimPrefix(raw, "file:"), nil
	case strings.Contains(raw, "://"):
		return "", orderly.Errorf(orderly.EINVALID, "unsupported database URL %q", raw)
	}
	return raw, nil
}

// prepareAll prepares every registered query on h. database/sql re-prepares a statement
// on each pooled connection the first time a transaction on that connection uses it.
func prepareAll(ctx context.Context, d *dialect, h *sql.DB) ([]*sql.Stmt, error) {
	stmts := make([]*sql.Stmt, len(queries))
	for _, q := range queries {
		text := d.rebind(q.build(d))
		s, err := h.PrepareContext(ctx, text)
		if err != nil {
			for _, p := range stmts[:q.id] {
				_ = p.Close()
			}
			return nil, fmt.Errorf("prepare %q: %w", text, err)
		}
		stmts[q.id] = s
	}
	return stmts, nil
}

// Migrate applies every pending migration of the dialect.
func (db *DB) Migrate(ctx context.Context) error {
	fsys, err := fs.Sub(migrations, "migrations/"+db.d.name)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", db.d.name, err)
	}
	provider, err := goose.NewProvider(db.d.goose, db.writer, fsys)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", db.d.name, err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", db.d.name, err)
	}
	return nil
}

// Dialect implements store.Store.
func (db *DB) Dialect() string { return db.d.name }

// Close implements store.Store.
func (db *DB) Close() error {
	var errs []error
	for _, s := range append(db.wstmts, db.rstmts...) {
		errs = append(errs, s.Close())
	}
	if db.reader != nil {
		errs = append(errs, db.reader.Close())
	}
	errs = append(errs, db.writer.Close())
	return errors.Join(errs...)
}

// InTx implements store.Store.
func (db *DB) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return db.run(ctx, db.writer, db.wstmts, nil, fn)
}

// Read implements store.Store.
func (db *DB) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	return db.run(ctx, db.reader, db.rstmts, &sql.TxOptions{ReadOnly: true}, fn)
}

func (db *DB) run(ctx context.Context, h *sql.DB, stmts []*sql.Stmt, opts *sql.TxOptions, fn func(tx store.Tx) error) error {
	sqlTx, err := h.BeginTx(ctx, opts)
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Roll back on every way out but a commit: an error, a panic (which goes on with its
	// stack intact) and runtime.Goexit (t.Fatal in a test), which would otherwise keep the
	// only writer connection in an open transaction. After Commit this is a no-op.
	defer func() { _ = sqlTx.Rollback() }()
	if err := fn(&tx{q: sqlTx, db: db, stmts: stmts}); err != nil {
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}
