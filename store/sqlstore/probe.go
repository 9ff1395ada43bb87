package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/pressly/goose/v3"

	"github.com/orderlyhq/orderly/internal/redact"
)

// tableExists is, per dialect, a query answering 1 when the table named by its parameter
// exists where the connection looks for it (PostgreSQL: the search_path; MySQL: the
// connection's database), 0 otherwise.
var tableExists = map[*dialect]string{
	sqliteDialect:   `SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?`,
	postgresDialect: `SELECT CASE WHEN to_regclass($1) IS NULL THEN 0 ELSE 1 END`,
	mysqlDialect:    `SELECT COUNT(*) FROM information_schema.tables WHERE table_schema = DATABASE() AND table_name = ?`,
}

// CountOrders returns the number of orders in the database named by url (as Config.URL)
// without changing it: no migration, no file created. A database without orderly's schema
// (a SQLite file that does not exist, an empty PostgreSQL schema or MySQL database) has 0.
// `orderly simulate` uses it to refuse a database that holds somebody's orders. Errors: an
// unsupported URL (EINVALID), an unreachable database; none holds a credential of url.
func CountOrders(ctx context.Context, url string) (int64, error) {
	n, err := countOrders(ctx, url)
	return n, redact.Error(err, url)
}

func countOrders(ctx context.Context, url string) (int64, error) {
	h, d, err := openProbe(ctx, url)
	if err != nil || h == nil {
		return 0, err
	}
	defer h.Close()
	if ok, err := probeTable(ctx, h, d, "orders"); err != nil || !ok {
		return 0, err
	}
	var n int64
	if err := h.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count orders: %w", err)
	}
	return n, nil
}

// openProbe opens the database named by url read-only where the driver can (SQLite), with
// no migration and no prepared statement; nil, nil for a SQLite file that does not exist.
func openProbe(ctx context.Context, url string) (*sql.DB, *dialect, error) {
	d, dsn, err := parseURL(url)
	if err != nil {
		return nil, nil, err
	}
	if d == sqliteDialect {
		if _, err := os.Stat(dsn); errors.Is(err, fs.ErrNotExist) {
			return nil, d, nil
		}
		dsnPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(dsn)
		dsn = "file:" + dsnPath + "?mode=ro&_pragma=busy_timeout(10000)"
	}
	h, err := sql.Open(d.driver, dsn)
	if err != nil {
		return nil, nil, fmt.Errorf("open %s: %w", d.name, err)
	}
	if err := h.PingContext(ctx); err != nil {
		_ = h.Close()
		return nil, nil, fmt.Errorf("open %s: %w", d.name, err)
	}
	return h, d, nil
}

// probeTable reports whether table exists where h looks for it (tableExists).
func probeTable(ctx context.Context, h *sql.DB, d *dialect, table string) (bool, error) {
	var exists int
	if err := h.QueryRowContext(ctx, tableExists[d], table).Scan(&exists); err != nil {
		return false, fmt.Errorf("open %s: %w", d.name, err)
	}
	return exists > 0, nil
}

// Migration is one migration of orderly's schema in this build, and whether a database has
// it (MigrationStatus).
type Migration struct {
	Version int64  `json:"version"`
	Name    string `json:"name"` // its file, e.g. 00001_init.sql
	Applied bool   `json:"applied"`
}

// MigrationStatus returns every migration of this build, in version order, each marked
// applied when the database named by url (as Config.URL) records it in VersionTable (or in
// the legacy goose_db_version, which the next migration renames). It changes nothing: no
// migration, no file created; a database without orderly's schema has none applied.
// Errors: an unsupported URL (EINVALID), an unreachable database; none holds a credential
// of url.
func MigrationStatus(ctx context.Context, url string) ([]Migration, error) {
	m, err := migrationStatus(ctx, url)
	return m, redact.Error(err, url)
}

func migrationStatus(ctx context.Context, url string) ([]Migration, error) {
	h, d, err := openProbe(ctx, url)
	if err != nil {
		return nil, err
	}
	if h != nil {
		defer h.Close()
	}
	return schemaStatus(ctx, h, d)
}

// schemaStatus returns this build's migrations of dialect d in version order, each marked
// applied when h (nil: no database) records it in VersionTable, or else in the legacy
// goose_db_version.
func schemaStatus(ctx context.Context, h *sql.DB, d *dialect) ([]Migration, error) {
	fsys, err := Migrations(d.name)
	if err != nil {
		return nil, err
	}
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations for %s: %w", d.name, err)
	}
	out := make([]Migration, len(names))
	for i, name := range names { // in version order: the names start with zero-padded versions
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migrations for %s: %w", d.name, err)
		}
		out[i] = Migration{Version: v, Name: name}
	}
	if h == nil {
		return out, nil
	}
	for _, table := range []string{VersionTable, goose.DefaultTablename} {
		if ok, err := probeTable(ctx, h, d, table); err != nil {
			return nil, err
		} else if !ok {
			continue
		}
		applied, err := appliedVersions(ctx, h, table)
		if err != nil {
			return nil, err
		}
		for i := range out {
			out[i].Applied = applied[out[i].Version]
		}
		break
	}
	return out, nil
}

// appliedVersions returns the versions that goose version table table records as applied.
func appliedVersions(ctx context.Context, h *sql.DB, table string) (map[int64]bool, error) {
	rows, err := h.QueryContext(ctx, "SELECT version_id FROM "+table+" WHERE is_applied")
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	defer rows.Close()
	applied := map[int64]bool{}
	for rows.Next() {
		var v int64
		if err := rows.Scan(&v); err != nil {
			return nil, fmt.Errorf("read %s: %w", table, err)
		}
		applied[v] = true
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", table, err)
	}
	return applied, nil
}
