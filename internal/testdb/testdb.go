// Package testdb gives tests the PostgreSQL and MySQL/MariaDB servers of the machine
// (DESIGN.md §9): URL reads the address from ORDERLY_TEST_POSTGRES_URL or
// ORDERLY_TEST_MYSQL_URL and skips the test when it is unset (fails instead when
// ORDERLY_TEST_REQUIRE_SERVICES=1); Fresh makes an empty schema (PostgreSQL) or database
// (MySQL) for one test and drops it when the test ends.
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
		return withQuery(t, base, "search_path", name)
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
