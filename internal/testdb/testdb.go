// Package testdb gives tests the PostgreSQL and MySQL/MariaDB servers of the machine
// (docs/development.md): URL reads the address from ORDERLY_TEST_POSTGRES_URL or
// ORDERLY_TEST_MYSQL_URL and skips the test when it is unset (fails instead when
// ORDERLY_TEST_REQUIRE_SERVICES=1); Fresh makes an empty schema (PostgreSQL) or database
// (MySQL) for one test and drops it when the test ends; LockWaits shows the sessions of such
// a database that wait for a lock, so that a lock-wait test moves on only once the database
// shows its waiter blocked.
package testdb

import (
	"context"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"net/url"
	"os"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
	_ "github.com/jackc/pgx/v5/stdlib" // "pgx" driver
)

var envByDialect = map[string]string{
	"postgres": "ORDERLY_TEST_POSTGRES_URL",
	"mysql":    "ORDERLY_TEST_MYSQL_URL",
	"redis":    "ORDERLY_TEST_REDIS_URL",
	"nats":     "ORDERLY_TEST_NATS_URL",
}

// URL returns the test server URL of a service ("postgres", "mysql", "redis", "nats"), or
// skips t (fails it when ORDERLY_TEST_REQUIRE_SERVICES=1) when its variable is unset.
func URL(t testing.TB, service string) string {
	t.Helper()
	name := envByDialect[service]
	u := os.Getenv(name)
	if u == "" {
		if os.Getenv("ORDERLY_TEST_REQUIRE_SERVICES") == "1" {
			t.Fatalf("%s is not set and ORDERLY_TEST_REQUIRE_SERVICES=1", name)
		}
		t.Skipf("set %s to run this test against %s", name, service)
	}
	return u
}

// Fresh creates an empty schema (PostgreSQL) or database (MySQL) on the server of base, a
// postgres:// or mysql:// URL, and returns the URL that selects it. It is dropped when t ends.
func Fresh(t testing.TB, base string) string {
	t.Helper()
	name := "orderly_t_" + randomSuffix()
	ctx := context.Background()
	switch {
	case strings.HasPrefix(base, "postgres"):
		db := open(t, "pgx", base)
		defer db.Close()
		exec(t, db, `CREATE SCHEMA `+name)
		t.Cleanup(func() {
			db := open(t, "pgx", base)
			defer db.Close()
			_, _ = db.ExecContext(ctx, `DROP SCHEMA `+name+` CASCADE`)
		})
		// The application name tags the schema's sessions, so that LockWaits counts only them.
		return withQuery(t, withQuery(t, base, "search_path", name), "application_name", name)
	case strings.HasPrefix(base, "mysql"):
		db := open(t, "mysql", mysqlServerDSN(t, base))
		defer db.Close()
		exec(t, db, `CREATE DATABASE `+name)
		t.Cleanup(func() {
			db := open(t, "mysql", mysqlServerDSN(t, base))
			defer db.Close()
			_, _ = db.ExecContext(ctx, `DROP DATABASE `+name)
		})
		u, err := url.Parse(base)
		if err != nil {
			t.Fatal(err)
		}
		u.Path = "/" + name
		return u.String()
	}
	t.Fatalf("testdb: no fresh databases for %q", base)
	return ""
}

// FreshDatabase creates an empty PostgreSQL database on the server of base, a postgres://
// URL, and returns the URL that selects it; it is dropped when t ends. For a test that
// reads the database's own statistics (pg_stat_database), which the schemas of Fresh share
// with every other test of the run.
func FreshDatabase(t testing.TB, base string) string {
	t.Helper()
	name := "orderly_t_" + randomSuffix()
	db := open(t, "pgx", base)
	defer db.Close()
	exec(t, db, `CREATE DATABASE `+name)
	t.Cleanup(func() {
		db := open(t, "pgx", base)
		defer db.Close()
		_, _ = db.ExecContext(context.Background(), `DROP DATABASE `+name+` WITH (FORCE)`)
	})
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.Path = "/" + name
	return u.String()
}

func randomSuffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func open(t testing.TB, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatalf("testdb: open: %v", err)
	}
	return db
}

func exec(t testing.TB, db *sql.DB, query string) {
	t.Helper()
	if _, err := db.ExecContext(context.Background(), query); err != nil {
		t.Fatalf("testdb: %s: %v", query, err)
	}
}

func withQuery(t testing.TB, base, key, value string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	q := u.Query()
	q.Set(key, value)
	u.RawQuery = q.Encode()
	return u.String()
}

// mysqlServerDSN is the go-sql-driver DSN of base's server, without a database.
func mysqlServerDSN(t testing.TB, base string) string {
	t.Helper()
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	c := mysql.NewConfig()
	c.Net, c.Addr = "tcp", u.Host
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	return c.FormatDSN()
}

// LockWaits returns a function counting the sessions of dbURL's database, a URL that Fresh
// returned, that wait now for a lock another transaction holds: on PostgreSQL the sessions
// of the schema (tagged with its application_name) whose wait_event_type is Lock; on
// MySQL/MariaDB the InnoDB transactions in LOCK WAIT whose connection uses the database.
// It holds one connection of its own, closed when t ends. Poll it every few milliseconds
// at most: it asks the server each time.
func LockWaits(t testing.TB, dbURL string) func(ctx context.Context) (int64, error) {
	t.Helper()
	switch {
	case strings.HasPrefix(dbURL, "postgres"):
		u := parseURL(t, dbURL)
		arg := u.Query().Get("application_name")
		if arg == "" {
			t.Fatalf("testdb: LockWaits: %s has no application_name (use a URL from Fresh)", u.Redacted())
		}
		q := u.Query()
		q.Set("application_name", arg+"_probe") // not one of the sessions it counts
		u.RawQuery = q.Encode()
		db := open(t, "pgx", u.String())
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		return func(ctx context.Context) (int64, error) {
			var n int64
			err := db.QueryRowContext(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE application_name = $1 AND wait_event_type = 'Lock'`, arg).Scan(&n)
			return n, err
		}
	case strings.HasPrefix(dbURL, "mysql"):
		name := strings.TrimPrefix(parseURL(t, dbURL).Path, "/")
		db := open(t, "mysql", mysqlServerDSN(t, dbURL))
		db.SetMaxOpenConns(1)
		t.Cleanup(func() { _ = db.Close() })
		return func(ctx context.Context) (int64, error) { return innodbLockWaits(ctx, db, name) }
	}
	t.Fatalf("testdb: LockWaits: no lock view for %q", dbURL)
	return nil
}

// innodbLockWaits counts the InnoDB transactions in LOCK WAIT whose connection uses the
// database name. It reads SHOW ENGINE INNODB STATUS, which is made afresh on each call:
// information_schema.INNODB_TRX is a cache that is not refreshed while anyone reads it more
// often than every 100 ms, so a poll of it keeps showing the moment before the wait.
func innodbLockWaits(ctx context.Context, db *sql.DB, name string) (int64, error) {
	ours, err := mysqlSessions(ctx, db, name)
	if err != nil {
		return 0, err
	}
	var typ, status, text string
	if err := db.QueryRowContext(ctx, `SHOW ENGINE INNODB STATUS`).Scan(&typ, &status, &text); err != nil {
		return 0, err
	}
	// One block per transaction: "---TRANSACTION 50133, ACTIVE 4 sec …\nLOCK WAIT 2 lock
	// struct(s) …\nMariaDB thread id 1910, …" (MySQL: "MySQL thread id").
	var n int64
	for _, block := range strings.Split(text, "---TRANSACTION ")[1:] {
		if !strings.Contains(block, "\nLOCK WAIT ") {
			continue
		}
		_, rest, ok := strings.Cut(block, " thread id ")
		if !ok {
			continue
		}
		id, _, _ := strings.Cut(rest, ",")
		if ours[id] {
			n++
		}
	}
	return n, nil
}

func parseURL(t testing.TB, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatalf("testdb: %v", err)
	}
	return u
}

// mysqlSessions returns the ids of the connections that use the database name.
func mysqlSessions(ctx context.Context, db *sql.DB, name string) (map[string]bool, error) {
	rows, err := db.QueryContext(ctx, `SELECT ID FROM information_schema.PROCESSLIST WHERE DB = ?`, name)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	ours := map[string]bool{}
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			return nil, err
		}
		ours[id] = true
	}
	return ours, rows.Err()
}

// Raw opens a database/sql handle on dbURL — a SQLite file path, or a postgres:// or
// mysql:// URL that Fresh returned — for tests that write SQL of their own (faults
// injected behind the store's back). It is closed when t ends.
func Raw(t testing.TB, dbURL string) *sql.DB {
	t.Helper()
	var db *sql.DB
	switch {
	case strings.HasPrefix(dbURL, "postgres"):
		db = open(t, "pgx", dbURL)
	case strings.HasPrefix(dbURL, "mysql"):
		c, err := mysql.ParseDSN(mysqlServerDSN(t, dbURL))
		if err != nil {
			t.Fatal(err)
		}
		c.DBName = strings.TrimPrefix(parseURL(t, dbURL).Path, "/")
		db = open(t, "mysql", c.FormatDSN())
	default:
		db = open(t, "sqlite", "file:"+strings.TrimPrefix(dbURL, "sqlite:")+"?_pragma=busy_timeout(5000)")
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}
