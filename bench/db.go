package bench

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver
	_ "modernc.org/sqlite"             // "sqlite" driver

	"github.com/orderlyhq/orderly/store/sqlstore"
)

// DB is the database of one run, opened beside the server under test: the bench writes
// its bulk data (burst, history, pending) and reads its figures (lateness, stock) here,
// never through the API. A run gets an empty database: on SQLite a new file in a
// temporary directory, on PostgreSQL a new schema of the database the URL names, dropped
// by Close (the schema's name is in URL's search_path).
type DB struct {
	// URL is what the server under test opens (--database-url).
	URL string
	// Dialect is "sqlite" or "postgres".
	Dialect string
	// SQL is a handle on the run's database (SQLite: one connection, WAL).
	SQL *sql.DB

	base   string // the PostgreSQL URL given, without the schema
	schema string // PostgreSQL: the run's schema
}

// OpenDB makes an empty database for a run, applies orderly's migrations to it and opens
// it. base is "" (SQLite in dir) or a postgres:// URL; dir is where a SQLite file goes.
// Errors: the database cannot be reached or created.
func OpenDB(ctx context.Context, base, dir string) (*DB, error) {
	db := &DB{base: base}
	switch {
	case base == "" || strings.HasPrefix(base, "sqlite:"):
		db.Dialect = "sqlite"
		db.URL = filepath.Join(dir, "bench.db")
	case strings.HasPrefix(base, "postgres://") || strings.HasPrefix(base, "postgresql://"):
		db.Dialect = "postgres"
		db.schema = "orderly_bench_" + randomHex(6)
		admin, err := sql.Open("pgx", base)
		if err != nil {
			return nil, err
		}
		_, err = admin.ExecContext(ctx, `CREATE SCHEMA `+db.schema)
		_ = admin.Close()
		if err != nil {
			return nil, fmt.Errorf("bench: create schema: %w", err)
		}
		u, err := url.Parse(base)
		if err != nil {
			return nil, err
		}
		q := u.Query()
		q.Set("search_path", db.schema)
		u.RawQuery = q.Encode()
		db.URL = u.String()
	default:
		return nil, fmt.Errorf("bench: --database-url must be empty (SQLite) or postgres://…, got %q", base)
	}
	// The server would migrate too; doing it here lets the bench load data first.
	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: db.URL})
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	_ = s.Close()
	if db.Dialect == "sqlite" {
		db.SQL, err = sql.Open("sqlite", "file:"+db.URL+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(30000)&_pragma=synchronous(NORMAL)&_txlock=immediate")
		if err == nil {
			db.SQL.SetMaxOpenConns(1)
		}
	} else {
		db.SQL, err = sql.Open("pgx", db.URL)
		if err == nil {
			db.SQL.SetMaxOpenConns(4)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	return db, nil
}

// Schema returns the PostgreSQL schema of the run ("" on SQLite).
func (db *DB) Schema() string { return db.schema }

// NowSQL is the SQL expression of the database clock in unix milliseconds.
func (db *DB) NowSQL() string {
	if db.Dialect == "postgres" {
		return `(extract(epoch FROM clock_timestamp()) * 1000)::bigint`
	}
	return `CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)`
}

// Close closes the handle and drops a PostgreSQL run's schema.
func (db *DB) Close() error {
	var errs []error
	if db.SQL != nil {
		errs = append(errs, db.SQL.Close())
	}
	if db.schema != "" {
		admin, err := sql.Open("pgx", db.base)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			_, err = admin.ExecContext(ctx, `DROP SCHEMA `+db.schema+` CASCADE`)
			cancel()
			_ = admin.Close()
		}
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// Now returns the database clock in unix milliseconds.
func (db *DB) Now(ctx context.Context) (int64, error) {
	var ms int64
	err := db.SQL.QueryRowContext(ctx, `SELECT `+db.NowSQL()).Scan(&ms)
	return ms, err
}

// Analyze refreshes the planner's statistics (PostgreSQL: VACUUM ANALYZE, as autovacuum
// would after a bulk load; SQLite: ANALYZE).
func (db *DB) Analyze(ctx context.Context) error {
	q := `ANALYZE`
	if db.Dialect == "postgres" {
		q = `VACUUM ANALYZE`
	}
	_, err := db.SQL.ExecContext(ctx, q)
	return err
}

// Placeholder returns the n-th (1-based) bind parameter of the dialect.
func (db *DB) Placeholder(n int) string {
	if db.Dialect == "postgres" {
		return fmt.Sprintf("$%d", n)
	}
	return "?"
}

// bulkInsert writes n rows into table: row(i, dst) fills dst with the values of row i, in
// cols order. PostgreSQL uses COPY; SQLite multi-row INSERTs, in transactions of 50 000
// rows.
func (db *DB) bulkInsert(ctx context.Context, table string, cols []string, n int, row func(i int, dst []any)) error {
	if n == 0 {
		return nil
	}
	if db.Dialect == "postgres" {
		conn, err := pgx.Connect(ctx, db.URL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		// The seeded rows reference each other correctly by construction (an order is
		// seeded before its reservation and audit rows): the copy skips the foreign-key
		// triggers, a per-row look-up that kept 10 000 000 history reservations copying
		// for more than 12 minutes. It needs a superuser; for another role the SET fails and
		// the copy checks them.
		_, _ = conn.Exec(ctx, "SET session_replication_role = replica")
		src := &copySource{n: n, row: row, vals: make([]any, len(cols))}
		if _, err := conn.CopyFrom(ctx, pgx.Identifier{table}, cols, src); err != nil {
			return fmt.Errorf("bench: copy into %s: %w", table, err)
		}
		return nil
	}
	const perStmt, perTx = 500, 50_000
	tuple := "(" + strings.TrimSuffix(strings.Repeat("?,", len(cols)), ",") + ")"
	stmtSQL := func(rows int) string {
		return "INSERT INTO " + table + " (" + strings.Join(cols, ",") + ") VALUES " +
			strings.TrimSuffix(strings.Repeat(tuple+",", rows), ",")
	}
	args := make([]any, 0, perStmt*len(cols))
	vals := make([]any, len(cols))
	for start := 0; start < n; start += perTx {
		end := min(start+perTx, n)
		err := func() error {
			tx, err := db.SQL.BeginTx(ctx, nil)
			if err != nil {
				return err
			}
			defer func() { _ = tx.Rollback() }() // a no-op after Commit
			full, err := tx.PrepareContext(ctx, stmtSQL(perStmt))
			if err != nil {
				return err
			}
			defer full.Close()
			for i := start; i < end; i += perStmt {
				rows := min(perStmt, end-i)
				args = args[:0]
				for k := range rows {
					row(i+k, vals)
					args = append(args, vals...)
				}
				if rows == perStmt {
					_, err = full.ExecContext(ctx, args...)
				} else {
					_, err = tx.ExecContext(ctx, stmtSQL(rows), args...)
				}
				if err != nil {
					return fmt.Errorf("bench: insert into %s: %w", table, err)
				}
			}
			return tx.Commit()
		}()
		if err != nil {
			return err
		}
	}
	return nil
}

// copySource feeds bulkInsert's rows to pgx's COPY.
type copySource struct {
	n, i int
	row  func(i int, dst []any)
	vals []any
}

func (s *copySource) Next() bool {
	if s.i >= s.n {
		return false
	}
	s.row(s.i, s.vals)
	s.i++
	return true
}

func (s *copySource) Values() ([]any, error) { return slices.Clone(s.vals), nil }
func (s *copySource) Err() error             { return nil }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
