package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/go-sql-driver/mysql"
)

// Defaults of the session timeouts (Config.LockTimeout, Config.IdleInTransactionTimeout).
//
// Every transaction of orderly is short (milliseconds): it never waits for a gateway, a
// broker or Redis while open. A transaction idle for seconds belongs to a client that
// stopped (SIGSTOP, a long GC pause, a frozen VM) while holding row locks, among them the
// lock a job's fence takes on its lease row; without a bound, the instance taking over the
// lease, and every writer of the rows it locked, waits until that client resumes. The
// server ends such a session after DefaultIdleInTransactionTimeout (its locks go, its
// transaction rolls back), and a statement waits at most DefaultLockTimeout for a row lock.
// The lock timeout is the longer one, so that writers queued behind a stopped client
// outlast it rather than fail first. The idle timeout is short because it adds up: the
// stopped client's other sessions that were waiting in the same row's lock queue get the
// lock in turn, and each holds it for the idle timeout before the server ends it (in
// `simulate --faults sigstop`, hot SKUs: convoys of 10–14 s with 5 s, up to the 10 s lock
// timeout with 2 s).
const (
	DefaultLockTimeout              = 10 * time.Second
	DefaultIdleInTransactionTimeout = time.Second
)

// sessionTimeouts are the session settings that bound lock waits and idle transactions.
// Zero means the default; negative turns the setting off (the server's own value stays).
type sessionTimeouts struct {
	lock, idleInTx time.Duration
}

func (s sessionTimeouts) withDefaults() sessionTimeouts {
	if s.lock == 0 {
		s.lock = DefaultLockTimeout
	}
	if s.idleInTx == 0 {
		s.idleInTx = DefaultIdleInTransactionTimeout
	}
	return s
}

// postgresSessionDSN adds the timeouts to a PostgreSQL URL as run-time parameters, which
// pgx sends in the startup message of every connection: lock_timeout and
// idle_in_transaction_session_timeout, in milliseconds. A parameter already in the URL
// wins. A URL that does not parse is returned as it is, for the driver to report.
func postgresSessionDSN(dsn string, s sessionTimeouts) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return dsn, nil //nolint:nilerr // pgx names the error, and Open redacts it
	}
	q := u.Query()
	set := func(name string, d time.Duration) {
		if d > 0 && !q.Has(name) {
			q.Set(name, strconv.FormatInt(max(d.Milliseconds(), 1), 10))
		}
	}
	set("lock_timeout", s.lock)
	set("idle_in_transaction_session_timeout", s.idleInTx)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

// mysqlSessionDSN adds the timeouts to a go-sql-driver DSN as session variables, which the
// driver sets (SET …) on every new connection: innodb_lock_wait_timeout, and on MariaDB
// idle_transaction_timeout (MariaDB 10.3+; MySQL has no such variable), in whole seconds,
// rounded up. A variable already in the DSN wins.
func mysqlSessionDSN(dsn string, mariaDB bool, s sessionTimeouts) (string, error) {
	c, err := mysql.ParseDSN(dsn)
	if err != nil {
		return "", fmt.Errorf("database DSN: %w", err)
	}
	if c.Params == nil {
		c.Params = map[string]string{}
	}
	set := func(name string, d time.Duration) {
		if _, ok := c.Params[name]; d > 0 && !ok {
			c.Params[name] = strconv.FormatInt(int64((d+time.Second-1)/time.Second), 10)
		}
	}
	set("innodb_lock_wait_timeout", s.lock)
	if mariaDB {
		set("idle_transaction_timeout", s.idleInTx)
	}
	return c.FormatDSN(), nil
}

// isMariaDB reports whether the MySQL server behind h is MariaDB.
func isMariaDB(ctx context.Context, h *sql.DB) (bool, error) {
	var version string
	if err := h.QueryRowContext(ctx, `SELECT VERSION()`).Scan(&version); err != nil {
		return false, fmt.Errorf("server version: %w", err)
	}
	return strings.Contains(strings.ToLower(version), "mariadb"), nil
}
