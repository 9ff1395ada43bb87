package sqlstore

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

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
	d, dsn, err := parseURL(url)
	if err != nil {
		return 0, err
	}
	if d == sqliteDialect {
		if _, err := os.Stat(dsn); errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		dsnPath := strings.NewReplacer("%", "%25", "?", "%3F", "#", "%23").Replace(dsn)
		dsn = "file:" + dsnPath + "?mode=ro&_pragma=busy_timeout(10000)"
	}
	h, err := sql.Open(d.driver, dsn)
	if err != nil {
		return 0, fmt.Errorf("open %s: %w", d.name, err)
	}
	defer h.Close()
	var exists int
	if err := h.QueryRowContext(ctx, tableExists[d], "orders").Scan(&exists); err != nil {
		return 0, fmt.Errorf("open %s: %w", d.name, err)
	}
	if exists == 0 {
		return 0, nil
	}
	var n int64
	if err := h.QueryRowContext(ctx, `SELECT COUNT(*) FROM orders`).Scan(&n); err != nil {
		return 0, fmt.Errorf("count orders: %w", err)
	}
	return n, nil
}
