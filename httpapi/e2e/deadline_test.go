package e2e_test

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// lockSecret signs the callbacks of the lock-wait tests.
var lockSecret = []byte("lock-wait-secret")

// lockWaitDeadline is the request deadline of the lock-wait tests: short, so that the test
// is quick, and long enough for a callback on an idle database.
const lockWaitDeadline = time.Second

// blocker holds a lock on the payments of a database from another connection, the way an
// operator's migration, a long report or a stopped instance would.
type blocker struct {
	// hold takes the lock; it returns when the lock is held.
	hold func(t *testing.T, paymentID string)
	// waiting reports whether a statement is queued behind the lock (nil when the
	// database does not show it, as SQLite's busy handler).
	waiting func(t *testing.T) bool
	// release ends the blocking transaction.
	release func(t *testing.T)
}

// TestLockWaitAnswers503 holds a lock on the payments table (or the database) from another
// connection while a correctly signed success callback arrives. The callback must answer 503
// unavailable with Retry-After within its deadline, change nothing, and once the lock is
// released the provider's retry must apply the payment (200, applied=true). Before the
// request deadline existed, PostgreSQL hung for as long as the lock was held and SQLite
// answered 500 "database is locked" after its busy timeout.
func TestLockWaitAnswers503(t *testing.T) {
	t.Parallel()
	t.Run("sqlite", func(t *testing.T) {
		t.Parallel()
		path := sqlitetest.Path(t)
		other := openDB(t, "sqlite", "file:"+path+"?_pragma=busy_timeout(0)")
		var conn *sql.Conn
		testLockWait(t, path, &blocker{
			hold: func(t *testing.T, _ string) {
				var err error
				if conn, err = other.Conn(context.Background()); err != nil {
					t.Fatal(err)
				}
				// BEGIN IMMEDIATE takes the database's write lock at once.
				mustExec(t, conn, "BEGIN IMMEDIATE")
			},
			release: func(t *testing.T) {
				mustExec(t, conn, "ROLLBACK")
				_ = conn.Close()
			},
		})
	})
	t.Run("postgres", func(t *testing.T) {
		t.Parallel()
		u := testdb.Fresh(t, testdb.URL(t, "postgres"))
		other := openDB(t, "pgx", u)
		var conn *sql.Conn
		testLockWait(t, u, &blocker{
			hold: func(t *testing.T, _ string) {
				var err error
				if conn, err = other.Conn(context.Background()); err != nil {
					t.Fatal(err)
				}
				mustExec(t, conn, "BEGIN")
				mustExec(t, conn, "LOCK TABLE payments IN ACCESS EXCLUSIVE MODE")
			},
			waiting: func(t *testing.T) bool {
				var n int
				err := other.QueryRowContext(context.Background(),
					`SELECT count(*) FROM pg_locks WHERE relation = to_regclass('payments') AND NOT granted`).Scan(&n)
				if err != nil {
					t.Errorf("read pg_locks: %v", err)
				}
				return n > 0
			},
			release: func(t *testing.T) {
				mustExec(t, conn, "ROLLBACK")
				_ = conn.Close()
			},
		})
	})
	t.Run("mysql", func(t *testing.T) {
		t.Parallel()
		u := testdb.Fresh(t, testdb.URL(t, "mysql"))
		other := openDB(t, "mysql", mysqlDSN(t, u))
		var (
			conn   *sql.Conn
			schema = strings.TrimPrefix(mustParseURL(t, u).Path, "/")
		)
		testLockWait(t, u, &blocker{
			hold: func(t *testing.T, paymentID string) {
				var err error
				if conn, err = other.Conn(context.Background()); err != nil {
					t.Fatal(err)
				}
				mustExec(t, conn, "BEGIN")
				var id string
				if err := conn.QueryRowContext(context.Background(),
					"SELECT id FROM payments WHERE id = ? FOR UPDATE", paymentID).Scan(&id); err != nil {
					t.Fatalf("lock payment %s: %v", paymentID, err)
				}
			},
			waiting: func(t *testing.T) bool {
				var n int
				err := other.QueryRowContext(context.Background(),
					// Nothing else writes this database: an UPDATE of payments still running
					// is waiting for the row lock.
					`SELECT count(*) FROM information_schema.PROCESSLIST
					 WHERE DB = ? AND STATE = 'Updating' AND INFO LIKE 'UPDATE payments%'`, schema).Scan(&n)
				if err != nil {
					t.Errorf("read lock waits: %v", err)
				}
				return n > 0
			},
			release: func(t *testing.T) {
				mustExec(t, conn, "ROLLBACK")
				_ = conn.Close()
			},
		})
	})
}

func testLockWait(t *testing.T, dbURL string, b *blocker) {
	ctx := context.Background()
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: dbURL, MaxConns: 4})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	t.Cleanup(func() { _ = db.Close() })
	orders, err := order.NewService(order.Config{Store: db})
	if err != nil {
		t.Fatal(err)
	}
	payments, err := payment.NewService(payment.Config{Store: db, Gateway: sim.New()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.New(httpapi.Config{
		Orders: orders, Payments: payments, Catalog: orders, CallbackSecret: lockSecret, RequestTimeout: lockWaitDeadline,
	}).Handler())
	t.Cleanup(srv.Close)

	if _, err := orders.SetStock(ctx, "SKU-LOCK", 10); err != nil {
		t.Fatal(err)
	}
	o, _, err := orders.CreateOrder(ctx, &orderly.CreateOrderParams{
		UserID: "u-lock", Currency: "EUR", Items: []orderly.Item{{SKU: "SKU-LOCK", Quantity: 2, UnitPrice: 1250}},
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	body := fmt.Sprintf(`{"payment_id":%q,"order_id":%q,"channel_txn_id":"txn-lock-1","amount":2500,"currency":"EUR",`+
		`"status":"succeeded","occurred_at":"2026-11-30T08:00:00.000Z"}`, p.ID, o.ID)

	b.hold(t, p.ID)
	type answer struct {
		status     int
		retryAfter string
		problem    httpapi.Problem
		took       time.Duration
		err        error
	}
	answers := make(chan answer, 1)
	go func() {
		start := time.Now()
		res, err := postCallback(srv.URL, body)
		a := answer{took: time.Since(start), err: err}
		if err == nil {
			a.status, a.retryAfter = res.StatusCode, res.Header.Get("Retry-After")
			a.err = json.NewDecoder(res.Body).Decode(&a.problem)
			_ = res.Body.Close()
		}
		answers <- a
	}()
	if b.waiting != nil {
		// The callback must really queue behind the lock, not fail for another reason.
		deadline := time.Now().Add(lockWaitDeadline)
		for !b.waiting(t) {
			if time.Now().After(deadline) {
				t.Errorf("the callback never waited for the lock")
				break
			}
			time.Sleep(10 * time.Millisecond) // polling the database for the waiter
		}
	}
	var a answer
	select {
	case a = <-answers:
	case <-time.After(lockWaitDeadline + 5*time.Second):
		b.release(t)
		t.Fatalf("no answer %s after the request deadline", 5*time.Second)
	}
	b.release(t)
	if a.err != nil {
		t.Fatalf("callback while locked: %v", a.err)
	}
	if a.status != http.StatusServiceUnavailable || a.retryAfter != "1" ||
		a.problem.Type != httpapi.ProblemTypeBase+orderly.EUNAVAILABLE || a.problem.Status != 503 {
		t.Fatalf("callback while locked: status %d, Retry-After %q, problem %+v; want 503, 1, %s",
			a.status, a.retryAfter, a.problem, orderly.EUNAVAILABLE)
	}
	if a.took < lockWaitDeadline-50*time.Millisecond || a.took > lockWaitDeadline+2*time.Second {
		t.Errorf("callback while locked answered after %s, want about the deadline %s", a.took, lockWaitDeadline)
	}
	if got, err := payments.Payment(ctx, p.ID); err != nil || got.State != orderly.PaymentInitiated {
		t.Fatalf("after the 503 the payment is %+v (%v), want still initiated", got, err)
	}

	// The provider retries until it is answered 200 (a loaded machine may answer the first retry 503
	// again, its request deadline being one second): the callback applies once.
	var res *http.Response
	for attempt := 0; ; attempt++ {
		res, err = postCallback(srv.URL, body)
		if err != nil {
			t.Fatal(err)
		}
		if res.StatusCode != http.StatusServiceUnavailable || attempt == 4 {
			break
		}
		_ = res.Body.Close()
	}
	defer res.Body.Close()
	var got struct{ Received, Applied, Refund bool }
	if err := json.NewDecoder(res.Body).Decode(&got); err != nil || res.StatusCode != 200 || !got.Applied || got.Refund {
		t.Fatalf("retry: status %d, body %+v (%v); want 200 applied", res.StatusCode, got, err)
	}
	if o, err := orders.Order(ctx, o.ID); err != nil || o.PayStatus != orderly.PayPaid {
		t.Fatalf("after the retry the order is %+v (%v), want paid", o, err)
	}
}

func postCallback(base, body string) (*http.Response, error) {
	req, err := http.NewRequest(http.MethodPost, base+"/v1/payments/callback", strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set(payment.SignatureHeader, payment.Sign(lockSecret, time.Now(), []byte(body)))
	return http.DefaultClient.Do(req)
}

func openDB(t *testing.T, driver, dsn string) *sql.DB {
	t.Helper()
	db, err := sql.Open(driver, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

func mustExec(t *testing.T, conn *sql.Conn, query string) {
	t.Helper()
	if _, err := conn.ExecContext(context.Background(), query); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

func mustParseURL(t *testing.T, raw string) *url.URL {
	t.Helper()
	u, err := url.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return u
}

// mysqlDSN is the go-sql-driver DSN of a mysql:// URL.
func mysqlDSN(t *testing.T, raw string) string {
	u := mustParseURL(t, raw)
	c := mysql.NewConfig()
	c.Net, c.Addr, c.DBName = "tcp", u.Host, strings.TrimPrefix(u.Path, "/")
	if u.User != nil {
		c.User = u.User.Username()
		c.Passwd, _ = u.User.Password()
	}
	return c.FormatDSN()
}
