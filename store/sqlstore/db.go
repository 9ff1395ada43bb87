// Package sqlstore implements store.Store on SQL databases through database/sql, with
// explicit, parameterised SQL written once for every dialect (SQLite, PostgreSQL,
// MySQL/MariaDB) and embedded, numbered migrations per dialect run by goose. Every
// statement is prepared once per database handle: id lists travel as one JSON array
// parameter, so statement texts do not depend on how many ids there are.
//
// SQLite (the embedded default, pure-Go driver modernc.org/sqlite) runs in WAL mode with two
// handles: one writer connection, so write transactions queue in-process instead of
// spinning in SQLite's busy handler, and a pool of read-only connections that read
// concurrently. Write transactions start with BEGIN IMMEDIATE. PostgreSQL (pgx) and MySQL
// (go-sql-driver) use one pool, READ COMMITTED, row locks and SKIP LOCKED; a transaction
// that fails on a deadlock is run again.
package sqlstore

import (
	"cmp"
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync/atomic"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/redact"
	"github.com/orderlyhq/orderly/store"
)

//go:embed migrations
var migrations embed.FS

// Config configures Open.
type Config struct {
	// URL selects the database: a file path ("orderly.db"; "" means that one),
	// "sqlite:PATH" or "sqlite://PATH" for SQLite; "postgres://…" or "postgresql://…"
	// (pgx connection string) for PostgreSQL; "mysql://user:pass@host:port/db?param=…" for
	// MySQL 8 or MariaDB 10.6+.
	URL string
	// DB, when set in place of URL, is a PostgreSQL or MySQL pool the caller opened and
	// keeps: with the pgx driver (github.com/jackc/pgx/v5/stdlib) or go-sql-driver/mysql,
	// which tell the dialect. The store runs its migrations and statements on it, leaves its
	// pool settings alone, and does not close it. MaxConns, LockTimeout and
	// IdleInTransactionTimeout do not apply (set the session timeouts in its DSN), and on
	// PostgreSQL no LISTEN connection is opened (Notifies reports false). EINVALID for
	// another driver, or with URL.
	DB *sql.DB
	// Now, when set, replaces the database clock (tests and simulations only).
	Now func() time.Time
	// SkipMigrate skips applying migrations at open, for a deployment that applies them
	// apart (`orderly migrate`): Open then refuses a schema that lacks any migration of this
	// build (EINVALID, naming both versions) and writes nothing to check it.
	SkipMigrate bool
	// MustExist refuses a SQLite file that does not exist yet (EINVALID "database file …
	// does not exist") instead of creating an empty database: for the commands that read
	// a database an engine has written (reconcile), where a mistyped path must not pass
	// for an empty shop in agreement. SkipMigrate implies it.
	MustExist bool
	// MaxConns caps the pool of PostgreSQL and MySQL connections; 20. Mind the server's
	// limit across instances (PostgreSQL's max_connections is 100 by default).
	MaxConns int
	// LockTimeout bounds how long a PostgreSQL or MySQL statement waits for a row lock
	// (PostgreSQL lock_timeout; MySQL innodb_lock_wait_timeout, whole seconds) before it
	// fails; DefaultLockTimeout (10 s); negative leaves the server's setting. See
	// session.go.
	LockTimeout time.Duration
	// IdleInTransactionTimeout is how long the server lets a session sit idle inside a
	// transaction before it ends the session, rolling back and releasing its locks
	// (PostgreSQL idle_in_transaction_session_timeout; MariaDB idle_transaction_timeout,
	// whole seconds; MySQL has none); DefaultIdleInTransactionTimeout (1 s); negative
	// leaves the server's setting. It bounds how long an instance stopped inside a
	// transaction (SIGSTOP, a frozen VM) blocks the others.
	IdleInTransactionTimeout time.Duration
}

// DB is a store.Store on a SQL database.
type DB struct {
	d      *dialect
	dsn    string // the driver's data source name (for LISTEN connections)
	writer *sql.DB
	reader *sql.DB // == writer except on SQLite
	// borrowed: writer is the caller's (Config.DB), left open by Close.
	borrowed bool
	now      func() time.Time
	// wstmts and rstmts are every registered query, prepared on the writer and the reader.
	wstmts, rstmts []*sql.Stmt
	// gates admit this process's transactions one at a time to a hot row (gate.go);
	// lockTimeout bounds the wait for a gate (0: only the context does).
	gates       rowGates
	lockTimeout time.Duration
	// aborts counts write transactions the database aborted for a deadlock or a
	// serialization failure (each is run again, up to maxAttempts).
	aborts atomic.Int64
	// built holds, on SQLite, the statements whose text is built at run time (savepoints,
	// multi-row inserts), prepared once per handle and text (tx.execBuilt).
	built builtStmts
	// sent, when set (tests only, before the store is used), is called with the text of
	// every statement a transaction sends.
	sent func(text string)
}

// Aborts returns how many write transactions the database has aborted for a deadlock or a
// serialization failure since Open (each was run again). Lock-order tests assert it stays 0.
func (db *DB) Aborts() int64 { return db.aborts.Load() }

var _ store.Store = (*DB)(nil)

// Open opens (creating if needed) the database named by cfg.URL and applies pending
// migrations. Errors: an unsupported URL (EINVALID), an unreachable database, a failed
// migration.
//
// No error holds a credential of cfg.URL (drivers that quote the URL they were given are
// redacted).
func Open(ctx context.Context, cfg Config) (*DB, error) {
	db, err := open(ctx, cfg)
	return db, redact.Error(err, cfg.URL)
}

func open(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.DB != nil {
		return openHandle(ctx, cfg)
	}
	d, dsn, err := parseURL(cfg.URL)
	if err != nil {
		return nil, err
	}
	db := &DB{d: d, dsn: dsn, now: cfg.Now, lockTimeout: max(sessionTimeouts{lock: cfg.LockTimeout}.withDefaults().lock, 0)}
	if d == sqliteDialect {
		err = db.openSQLite(ctx, dsn, cfg.SkipMigrate, cfg.MustExist)
	} else {
		err = db.openPool(ctx, dsn, cfg)
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// openHandle opens a store on the caller's pool cfg.DB (see Config.DB).
func openHandle(ctx context.Context, cfg Config) (*DB, error) {
	if cfg.URL != "" {
		return nil, orderly.Errorf(orderly.EINVALID, "a database URL and a *sql.DB (Config.DB) do not go together: give one database")
	}
	var d *dialect
	switch cfg.DB.Driver().(type) {
	case *stdlib.Driver:
		d = postgresDialect
	case *mysql.MySQLDriver:
		d = mysqlDialect
	default:
		return nil, orderly.Errorf(orderly.EINVALID,
			"the *sql.DB (Config.DB) has driver %T; use pgx (github.com/jackc/pgx/v5/stdlib) for PostgreSQL or go-sql-driver/mysql for MySQL", cfg.DB.Driver())
	}
	db := &DB{d: d, writer: cfg.DB, reader: cfg.DB, borrowed: true, now: cfg.Now,
		lockTimeout: max(sessionTimeouts{lock: cfg.LockTimeout}.withDefaults().lock, 0)}
	err := cfg.DB.PingContext(ctx)
	if err != nil {
		err = fmt.Errorf("open %s: %w", d.name, err)
	} else if err = db.migrateOrCheck(ctx, cfg.SkipMigrate); err == nil {
		db.wstmts, err = prepareAll(ctx, d, cfg.DB)
		db.rstmts = db.wstmts
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// parseURL returns the dialect of a database URL and the driver's data source name (for
// SQLite, the file path).
func parseURL(raw string) (*dialect, string, error) {
	switch {
	case raw == "":
		return sqliteDialect, "orderly.db", nil
	case strings.HasPrefix(raw, "postgres://"), strings.HasPrefix(raw, "postgresql://"):
		return postgresDialect, raw, nil
	case strings.HasPrefix(raw, "mysql://"):
		dsn, err := mysqlDSN(raw)
		return mysqlDialect, dsn, err
	case strings.HasPrefix(raw, "sqlite://"):
		return sqliteDialect, strings.TrimPrefix(raw, "sqlite://"), nil
	case strings.HasPrefix(raw, "sqlite:"):
		return sqliteDialect, strings.TrimPrefix(raw, "sqlite:"), nil
	case strings.HasPrefix(raw, "file:"):
		return sqliteDialect, strings.TrimPrefix(raw, "file:"), nil
	case strings.Contains(raw, "://"):
		return nil, "", orderly.Errorf(orderly.EINVALID, "unsupported database URL %q: use a file path, sqlite:, postgres:// or mysql://", redact.URL(raw))
	}
	return sqliteDialect, raw, nil
}

// mysqlDSN turns mysql://user:pass@host:port/db?params into go-sql-driver's DSN.
func mysqlDSN(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil {
		// A *url.Error quotes the whole URL, password included: keep only its cause.
		if uerr := (*url.Error)(nil); errors.As(err, &uerr) {
			err = uerr.Err
		}
		return "", orderly.Errorf(orderly.EINVALID, "database URL %s: %v", redact.URL(raw), err)
	}
	c := mysql.NewConfig()
	c.Net, c.Addr, c.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.Port() == "" {
		c.Addr = u.Host + ":3306"
	}
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	if c.DBName == "" {
		return "", orderly.Errorf(orderly.EINVALID, "database URL %q names no database", u.Redacted())
	}
	for k, vs := range u.Query() {
		if c.Params == nil {
			c.Params = map[string]string{}
		}
		c.Params[k] = vs[0]
	}
	return c.FormatDSN(), nil
}

func (db *DB) openSQLite(ctx context.Context, path string, skipMigrate, mustExist bool) error {
	if skipMigrate || mustExist {
		// Reading an existing database (verify, simulate --target): don't create one.
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return orderly.Errorf(orderly.EINVALID, "database file %s does not exist", path)
		} else if err != nil {
			return orderly.Errorf(orderly.EINVALID, "database file %s: %v", path, err)
		}
	}
	if err := checkDir(path); err != nil {
		return err
	}
	const pragmas = "_pragma=journal_mode(WAL)&_pragma=busy_timeout(10000)&_pragma=synchronous(NORMAL)&_pragma=foreign_keys(1)"
	// The DSN is a SQLite URI filename: escape the characters it gives a meaning to, or a
	// path with '?', '#' or '%' names another file and loses the pragmas.
	dsnPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(path)
	writer, err := sql.Open("sqlite", "file:"+dsnPath+"?"+pragmas+"&_txlock=immediate")
	if err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	db.writer = writer
	writer.SetMaxOpenConns(1)
	writer.SetMaxIdleConns(1)
	writer.SetConnMaxLifetime(0)
	if err := writer.PingContext(ctx); err != nil {
		if strings.Contains(err.Error(), "(14)") { // SQLITE_CANTOPEN
			return fmt.Errorf("open sqlite %s: cannot create or open the file: check that directory %s is writable and the file readable (%w)", path, filepath.Dir(path), err)
		}
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	if err := db.migrateOrCheck(ctx, skipMigrate); err != nil {
		return err
	}
	// The writer keeps its temporary files in memory once migrated: a savepoint's
	// sub-journal (each page's content before its first change inside one) was written to
	// a temporary file, 9 % of a wallet checkout's CPU (five savepoints each). Not before the
	// migrations, whose index builds on a large file sort through temporary files, and not
	// on the readers, whose scans (verify, reconciliation) may sort many rows.
	if _, err := writer.ExecContext(ctx, "PRAGMA temp_store = MEMORY"); err != nil {
		return fmt.Errorf("open sqlite %s: temp_store: %w", path, err)
	}
	if db.reader, err = sql.Open("sqlite", "file:"+dsnPath+"?"+pragmas+"&_pragma=query_only(1)"); err != nil {
		return fmt.Errorf("open sqlite %s: %w", path, err)
	}
	// Every read connection stays open: database/sql keeps 2 idle by default, so under more
	// concurrent reads each extra one was closed after its read and opened again for the
	// next (the pragmas applied and every statement prepared anew): 14 % of the CPU of a
	// SQLite wallet checkout benchmark.
	readers := max(4, runtime.GOMAXPROCS(0))
	db.reader.SetMaxOpenConns(readers)
	db.reader.SetMaxIdleConns(readers)
	db.reader.SetConnMaxLifetime(0)
	if db.wstmts, err = prepareAll(ctx, db.d, db.writer); err != nil {
		return err
	}
	db.rstmts, err = prepareAll(ctx, db.d, db.reader)
	return err
}

// checkDir returns an EINVALID error naming the directory of a SQLite database file when it
// does not exist or is not a directory: SQLite itself only says "unable to open database
// file (14)".
func checkDir(path string) error {
	if path == ":memory:" {
		return nil
	}
	dir := filepath.Dir(path)
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return orderly.Errorf(orderly.EINVALID, "database file %s: directory %s does not exist; create it or give another path", path, dir)
	case err != nil:
		return orderly.Errorf(orderly.EINVALID, "database file %s: directory %s: %v", path, dir, err)
	case !fi.IsDir():
		return orderly.Errorf(orderly.EINVALID, "database file %s: %s is not a directory", path, dir)
	}
	return nil
}

func (db *DB) openPool(ctx context.Context, dsn string, cfg Config) error {
	h, err := db.openSession(ctx, dsn, cfg)
	if err != nil {
		return err
	}
	db.writer, db.reader = h, h
	h.SetMaxOpenConns(cmp.Or(cfg.MaxConns, 20))
	h.SetMaxIdleConns(cmp.Or(cfg.MaxConns, 20))
	h.SetConnMaxIdleTime(5 * time.Minute)
	if err := h.PingContext(ctx); err != nil {
		return fmt.Errorf("open %s: %w", db.d.name, err)
	}
	if err := db.migrateOrCheck(ctx, cfg.SkipMigrate); err != nil {
		return err
	}
	if db.wstmts, err = prepareAll(ctx, db.d, h); err != nil {
		return err
	}
	db.rstmts = db.wstmts
	return nil
}

// openSession opens the pool with the session timeouts of cfg in its DSN (session.go). On
// MySQL it asks the server which variables it has first.
func (db *DB) openSession(ctx context.Context, dsn string, cfg Config) (*sql.DB, error) {
	timeouts := sessionTimeouts{lock: cfg.LockTimeout, idleInTx: cfg.IdleInTransactionTimeout}.withDefaults()
	var err error
	switch db.d {
	case postgresDialect:
		dsn, err = postgresSessionDSN(dsn, timeouts)
	case mysqlDialect:
		var probe *sql.DB
		if probe, err = sql.Open(db.d.driver, dsn); err != nil {
			return nil, fmt.Errorf("open %s: %w", db.d.name, err)
		}
		mariaDB, perr := isMariaDB(ctx, probe)
		_ = probe.Close()
		if perr != nil {
			return nil, fmt.Errorf("open %s: %w", db.d.name, perr)
		}
		dsn, err = mysqlSessionDSN(dsn, mariaDB, timeouts)
	}
	if err != nil {
		return nil, orderly.Errorf(orderly.EINVALID, "%v", err)
	}
	db.dsn = dsn
	h, err := sql.Open(db.d.driver, dsn)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", db.d.name, err)
	}
	return h, nil
}

// prepareAll prepares every registered query on h. database/sql re-prepares a statement
// on each pooled connection the first time a transaction on that connection uses it.
func prepareAll(ctx context.Context, d *dialect, h *sql.DB) ([]*sql.Stmt, error) {
	stmts := make([]*sql.Stmt, len(queries))
	for _, q := range queries {
		text := d.rebind(q.build(d))
		s, err := h.PrepareContext(ctx, text) //nolint:sqlclosecheck // kept for the DB's life, closed by DB.Close
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

// VersionTable is the table recording the applied migrations of orderly's schema. Named for
// orderly, so that it never meets a host's own migrations in a shared schema; databases
// migrated before it was named keep their versions (migrate renames goose_db_version).
const VersionTable = "orderly_schema_version"

// Migrations returns orderly's schema migrations for dialect "sqlite", "postgres" or
// "mysql": goose SQL files (00001_init.sql, …) at the root of the FS, for a deployment that
// applies them with its own tooling. Applied versions must be recorded in VersionTable
// (goose: -table orderly_schema_version), which Open checks under SkipMigrate. Errors: an
// unknown dialect.
func Migrations(dialect string) (fs.FS, error) {
	switch dialect {
	case sqliteDialect.name, postgresDialect.name, mysqlDialect.name:
		return fs.Sub(migrations, "migrations/"+dialect)
	}
	return nil, fmt.Errorf("sqlstore: no migrations for dialect %q (sqlite, postgres or mysql)", dialect)
}

// Migrate applies every pending migration of the dialect.
func (db *DB) Migrate(ctx context.Context) error {
	return db.migrate(ctx, migrations, "migrations", VersionTable, goose.DefaultTablename)
}

// migrateOrCheck applies the pending migrations, or with skip checks that there are none.
func (db *DB) migrateOrCheck(ctx context.Context, skip bool) error {
	if !skip {
		return db.Migrate(ctx)
	}
	// Read, not goose's GetVersions, which creates its version table on a fresh database.
	ms, err := schemaStatus(ctx, db.writer, db.d)
	if err != nil {
		return err
	}
	const apply = "apply the migrations first (`orderly migrate`, or start without --migrate=false)"
	var have int64
	pending := false
	for _, m := range ms {
		if m.Applied {
			have = m.Version
		} else {
			pending = true
		}
	}
	switch {
	case have == 0:
		return orderly.Errorf(orderly.EINVALID, "the database has no orderly schema: %s", apply)
	case pending:
		return orderly.Errorf(orderly.EINVALID, "the database schema is at migration %d, this build needs %d: %s", have, ms[len(ms)-1].Version, apply)
	}
	return nil
}

// migrate applies the pending goose migrations of folder dir/<dialect> of fsys, recorded in
// version table table (renamed from legacy first, where only that one exists).
func (db *DB) migrate(ctx context.Context, fsys fs.FS, dir, table, legacy string) error {
	fsys, err := fs.Sub(fsys, dir+"/"+db.d.name)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", db.d.name, err)
	}
	if err := db.renameTable(ctx, legacy, table); err != nil {
		return err
	}
	// Instances starting at once on a fresh database take turns: an advisory lock
	// serializes their migrations (goose's session locker on PostgreSQL, GET_LOCK on MySQL).
	// The lock is named after the schema (PostgreSQL) or database (MySQL) being migrated, so
	// that orderly databases sharing a server never wait for each other's migrations.
	opts := []goose.ProviderOption{goose.WithTableName(table)}
	switch db.d {
	case postgresDialect:
		var schema sql.NullString // NULL when search_path names no existing schema: goose then says so
		if err := db.writer.QueryRowContext(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
			return fmt.Errorf("migrate %s: %w", db.d.name, err)
		}
		// Polled every second for up to 5 minutes (goose's default polls every 5 s).
		l, err := lock.NewPostgresSessionLocker(lock.WithLockID(migrateLockID(schema.String)), lock.WithLockTimeout(1, 300))
		if err != nil {
			return err
		}
		opts = append(opts, goose.WithSessionLocker(l))
	case mysqlDialect:
		var database sql.NullString // NULL when the URL names no database: goose then says so
		if err := db.writer.QueryRowContext(ctx, `SELECT DATABASE()`).Scan(&database); err != nil {
			return fmt.Errorf("migrate %s: %w", db.d.name, err)
		}
		release, err := db.mysqlLock(ctx, migrateLockName(database.String))
		if err != nil {
			return err
		}
		defer release()
	}
	provider, err := goose.NewProvider(db.d.goose, db.writer, fsys, opts...)
	if err != nil {
		return fmt.Errorf("migrations for %s: %w", db.d.name, err)
	}
	if _, err := provider.Up(ctx); err != nil {
		return fmt.Errorf("migrate %s: %w", db.d.name, err)
	}
	return nil
}

// migrateLockID is the PostgreSQL advisory lock id of the migrations of schema.
func migrateLockID(schema string) int64 {
	h := fnv.New64a()
	_, _ = io.WriteString(h, "orderly_migrate:"+schema)
	return int64(h.Sum64()) //nolint:gosec // an id, any 64 bits
}

// migrateLockName is the MySQL lock name (GET_LOCK) of the migrations of database: 32 bytes,
// under GET_LOCK's 64 whatever the database's name.
func migrateLockName(database string) string {
	return fmt.Sprintf("orderly_migrate:%016x", uint64(migrateLockID(database))) //nolint:gosec // the same 64 bits
}

// renameTable renames table from to to when from exists and to does not. Instances starting
// at once may race: the loser's rename fails, and it goes on if to exists by then.
func (db *DB) renameTable(ctx context.Context, from, to string) error {
	exists := func(table string) bool {
		ok, err := probeTable(ctx, db.writer, db.d, table)
		return err == nil && ok
	}
	if exists(to) || !exists(from) {
		return nil
	}
	if _, err := db.writer.ExecContext(ctx, "ALTER TABLE "+from+" RENAME TO "+to); err != nil && !exists(to) {
		return fmt.Errorf("migrate %s: rename version table %s to %s: %w", db.d.name, from, to, err)
	}
	return nil
}

// mysqlLock takes a MySQL advisory lock on a connection of its own (waiting up to
// 2 minutes) and returns its release.
func (db *DB) mysqlLock(ctx context.Context, name string) (func(), error) {
	conn, err := db.writer.Conn(ctx)
	if err != nil {
		return nil, fmt.Errorf("lock %s: %w", name, err)
	}
	var got sql.NullInt64
	if err := conn.QueryRowContext(ctx, `SELECT GET_LOCK(?, 120)`, name).Scan(&got); err != nil {
		_ = conn.Close()
		return nil, fmt.Errorf("lock %s: %w", name, err)
	} else if got.Int64 != 1 {
		_ = conn.Close()
		return nil, fmt.Errorf("lock %s: not granted within 2 minutes", name)
	}
	return func() {
		_, _ = conn.ExecContext(context.WithoutCancel(ctx), `SELECT RELEASE_LOCK(?)`, name)
		_ = conn.Close()
	}, nil
}

// Dialect implements store.Store.
func (db *DB) Dialect() string { return db.d.name }

// WriterStats returns the statistics of the pool that runs write transactions: on SQLite
// its one writer connection, so WaitCount counts write transactions that queued behind
// another; on PostgreSQL and MySQL the one pool of the database.
func (db *DB) WriterStats() sql.DBStats { return db.writer.Stats() }

// Pools returns the connection pools by name, for their statistics (the Prometheus
// collector of database/sql pools): "writer" always, and "reader" on SQLite, where reads
// have a pool of their own. The caller must not close them.
func (db *DB) Pools() map[string]*sql.DB {
	if db.reader == db.writer {
		return map[string]*sql.DB{"writer": db.writer}
	}
	return map[string]*sql.DB{"writer": db.writer, "reader": db.reader}
}

// Close implements store.Store.
func (db *DB) Close() error {
	errs := db.built.close()
	for _, s := range db.wstmts {
		errs = append(errs, s.Close())
	}
	if db.reader != db.writer {
		for _, s := range db.rstmts {
			errs = append(errs, s.Close())
		}
		if db.reader != nil {
			errs = append(errs, db.reader.Close())
		}
	}
	if db.writer != nil && !db.borrowed {
		errs = append(errs, db.writer.Close())
	}
	return errors.Join(errs...)
}

// maxAttempts is how many times a write transaction runs when the database aborts it for
// a deadlock or a serialization failure.
const maxAttempts = 4

// InTx implements store.Store. A transaction that ended on a lock wait, a busy database or
// its context's deadline returns EUNAVAILABLE (see unavailable).
func (db *DB) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	gates := heldGates{} // held across attempts (gate.go)
	defer gates.release()
	var err error
	for attempt := 1; attempt <= maxAttempts; {
		err = db.run(ctx, db.writer, db.wstmts, &sql.TxOptions{Isolation: db.d.isolation}, gates, fn)
		if busy := (*gateBusyError)(nil); errors.As(err, &busy) {
			// Wait for the gate with the transaction closed, then run it again holding it.
			// Each wait adds a gate, so this ends.
			if err := gates.wait(ctx, &db.gates, busy.key, db.lockTimeout); err != nil {
				return db.unavailable(connectionUnavailable(err))
			}
			continue
		}
		if err == nil || !db.d.retry(err) {
			break
		}
		db.aborts.Add(1)
		if ctx.Err() != nil {
			break
		}
		attempt++
	}
	return db.unavailable(err)
}

// Read implements store.Store. Errors as InTx.
func (db *DB) Read(ctx context.Context, fn func(tx store.Tx) error) error {
	return db.unavailable(db.run(ctx, db.reader, db.rstmts, &sql.TxOptions{ReadOnly: true, Isolation: db.d.isolation}, nil, fn))
}

// unavailableMessage is the message of EUNAVAILABLE errors, shown to API clients.
const unavailableMessage = "the database is busy (a lock wait or its deadline expired); nothing was changed, retry later"

// unavailable translates an error that carries no domain error and comes from a lock wait,
// a busy database (dialect.busy) or an expired context deadline into EUNAVAILABLE, keeping
// the driver error in the chain for logs. The transaction was rolled back, so the caller
// may run it again. Other errors are returned as they are; so is context.Canceled, which
// means the caller went away rather than that the database was slow.
func (db *DB) unavailable(err error) error {
	if err == nil || orderly.ErrorCode(err) != orderly.EINTERNAL {
		return err
	}
	if errors.Is(err, context.DeadlineExceeded) || db.d.busy(err) {
		return fmt.Errorf("%w: %w", orderly.Errorf(orderly.EUNAVAILABLE, unavailableMessage), err)
	}
	return err
}

func (db *DB) run(ctx context.Context, h *sql.DB, stmts []*sql.Stmt, opts *sql.TxOptions, gates heldGates, fn func(tx store.Tx) error) (err error) {
	defer func() { err = connectionUnavailable(err) }() // connlost.go
	defer func() {
		// When ctx ends (the request deadline) database/sql rolls the transaction back on
		// its own, and the next statement or the Commit says only sql.ErrTxDone: name the
		// cause, so that an expired deadline is EUNAVAILABLE (unavailable), not a 500.
		// Nothing was committed.
		if errors.Is(err, sql.ErrTxDone) && ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w (%w)", err, ctx.Err())
		}
	}()
	sqlTx, err := h.BeginTx(ctx, opts)
	if err != nil && badConnNoWrite(err) {
		sqlTx, err = h.BeginTx(ctx, opts) // on a fresh connection: nothing was sent (connlost.go)
	}
	if err != nil {
		return fmt.Errorf("begin: %w", err)
	}
	// Roll back on every way out but a commit: an error, a panic (which goes on with its
	// stack intact) and runtime.Goexit (t.Fatal in a test), which would otherwise keep the
	// only writer connection in an open transaction. After Commit this is a no-op.
	defer func() { _ = sqlTx.Rollback() }()
	if opts.ReadOnly && db.d.name == "postgres" {
		// A read takes no row locks, so the idle-in-transaction timeout, which exists to free
		// the row locks of a stopped instance, has nothing to protect here, and a long read
		// (verify, a reconciliation) whose client pauses between statements must not lose
		// its session for it.
		if _, err := sqlTx.ExecContext(ctx, "SET LOCAL idle_in_transaction_session_timeout = 0"); err != nil {
			return fmt.Errorf("begin read: %w", err)
		}
	}
	t := &tx{q: sqlTx, h: h, db: db, stmts: stmts, gates: gates}
	err = fn(t)
	if t.busy != nil { // whatever fn made of it: the attempt rolls back (gate.go)
		return t.busy
	}
	if t.aborted != nil { // whatever fn made of it: the database rolled it all back (tx.go)
		return t.aborted
	}
	if err != nil {
		return err
	}
	if err := sqlTx.Commit(); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	for _, f := range t.afterCommit {
		f()
	}
	return nil
}
