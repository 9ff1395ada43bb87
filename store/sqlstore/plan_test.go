package sqlstore

import (
	"context"
	"database/sql"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
)

// fullScan matches a query-plan line that reads a whole table: "SCAN t" or "SCAN t AS x"
// without an index (SQLite says "SCAN t USING INDEX …" when it walks an index in order).
var fullScan = regexp.MustCompile(`^SCAN (\w+)(?: AS \w+)?$`)

// scanAllowed are the statements that read a whole table by design, by a fragment of
// their text, with the reason. Every other statement must reach its rows through an index.
var scanAllowed = map[string]string{
	"FROM operator_actions WHERE (? = 0 OR id < ?)":     "walks the rowid backwards from the keyset and stops at LIMIT",
	"FROM reconcile_reports ORDER BY id DESC":           "walks the rowid backwards and stops at LIMIT",
	"FROM job_runs WHERE ? = '' OR job = ?":             "walks the rowid backwards and stops at LIMIT; one row per job run",
	"FROM outbox WHERE state = ? ORDER BY id":           "admin listing by id; retention keeps delivered messages few",
	"SELECT state, COUNT(*) FROM outbox GROUP BY":       "the backlog gauge; retention bounds the table",
	"SELECT hold_id, COUNT(*) FROM wallet_transfers":    "verify's full check of the ledger reads every transfer by design",
	"SELECT flow, state, COUNT(*) FROM orders GROUP BY": "the admin page's real counts by flow and state (store.OverviewTx); no (flow, state) index or counter table yet",
}

// TestQueryPlansUseIndexes explains every registered statement on SQLite and fails on a
// full table scan outside scanAllowed. A scan inside a correlated subquery runs once per
// outer row: the reconciliation's closed-order check looked up a frozen coupon by
// coupons.order_id, which has no index, so each closed order read the whole coupon table
// (30 000 closed orders with coupons took minutes on SQLite).
func TestQueryPlansUseIndexes(t *testing.T) {
	t.Parallel()
	db, err := Open(t.Context(), Config{URL: filepath.Join(t.TempDir(), "plan.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	for _, q := range queries {
		text := q.build(sqliteDialect)
		if !strings.HasPrefix(strings.TrimSpace(strings.ToUpper(text)), "SELECT") &&
			!strings.HasPrefix(strings.TrimSpace(strings.ToUpper(text)), "UPDATE") &&
			!strings.HasPrefix(strings.TrimSpace(strings.ToUpper(text)), "DELETE") &&
			!strings.HasPrefix(strings.TrimSpace(strings.ToUpper(text)), "WITH") {
			continue
		}
		scans, err := fullScans(t, db, text)
		if err != nil {
			t.Errorf("explain %q: %v", oneLine(text), err)
			continue
		}
		if len(scans) == 0 {
			continue
		}
		allowed := false
		for frag := range scanAllowed {
			if strings.Contains(oneLine(text), frag) {
				allowed = true
			}
		}
		if !allowed {
			t.Errorf("full scan of %v in %s", scans, oneLine(text))
		}
	}
}

// fullScans explains text on db's reader (every placeholder NULL) and returns the tables
// its plan reads whole.
func fullScans(t *testing.T, db *DB, text string) ([]string, error) {
	args := make([]any, strings.Count(text, "?"))
	rows, err := db.reader.QueryContext(t.Context(), "EXPLAIN QUERY PLAN "+text, args...)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var scans []string
	for rows.Next() {
		var id, parent, notUsed int
		var detail string
		if err := rows.Scan(&id, &parent, &notUsed, &detail); err != nil {
			return nil, err
		}
		if m := fullScan.FindStringSubmatch(detail); m != nil {
			scans = append(scans, m[1])
		}
	}
	return scans, rows.Err()
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// TestLaneClaimReadsItsTopicOnly: a lane's claim (the webhook lane's) reaches its topic's
// messages through the (topic, next_attempt_at, id) index, whatever else is pending. It
// read every other pending message first: woken after each batch of the main lane, the
// webhook lane read the whole backlog of a 100 000-order burst on each claim (on
// PostgreSQL the cached generic plan chose the next_attempt_at index for "topic = $1"),
// and took most of the database's time.
func TestLaneClaimReadsItsTopicOnly(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := filepath.Join(t.TempDir(), "lane.db")
			if dialect != "sqlite" {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			db, err := Open(t.Context(), Config{URL: url})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = db.Close() })
			ctx, now := t.Context(), time.Now().UTC().Truncate(time.Millisecond)
			const others = 5000
			msgs := make([]*store.OutboxInsertParams, 0, others+2)
			for i := range others {
				msgs = append(msgs, &store.OutboxInsertParams{Topic: orderly.TopicRefundExecute, Key: fmt.Sprintf("o%d", i),
					Payload: []byte(`{}`), Now: now.Add(time.Duration(i-others) * time.Millisecond)})
			}
			for i := range 2 {
				msgs = append(msgs, &store.OutboxInsertParams{Topic: orderly.TopicWebhookDeliver, Key: fmt.Sprintf("webhook:%d", i),
					Payload: []byte(`{}`), Now: now})
			}
			if err := db.InTx(ctx, func(tx store.Tx) error { return tx.OutboxInsert(ctx, msgs) }); err != nil {
				t.Fatal(err)
			}
			var claimed []*orderly.Message
			if err := db.InTx(ctx, func(tx store.Tx) (err error) {
				claimed, err = tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 8,
					Topics: []string{orderly.TopicWebhookDeliver}})
				return err
			}); err != nil {
				t.Fatal(err)
			}
			if len(claimed) != 2 || claimed[0].Topic != orderly.TopicWebhookDeliver || claimed[1].Topic != orderly.TopicWebhookDeliver {
				t.Fatalf("webhook lane claimed %d messages (%v), want the 2 webhook deliveries", len(claimed), claimed)
			}
			text := qOutboxDueOfTopic.build(db.d)
			args := []any{orderly.TopicWebhookDeliver, orderly.TopicWebhookDeliver, ms(now), `["whk_full"]`, 8}
			raw := testdb.Raw(t, url)
			var plan string
			switch dialect {
			case "sqlite":
				plan = explainRows(t, raw, "EXPLAIN QUERY PLAN "+text, args...)
			case "mysql":
				plan = explainRows(t, raw, "EXPLAIN "+text, args[1:]...)
			case "postgres":
				conn, err := raw.Conn(ctx)
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				// The plan a prepared statement keeps after its first executions.
				for _, q := range []string{"ANALYZE outbox", "SET plan_cache_mode = force_generic_plan",
					"PREPARE lane_claim AS " + db.d.rebind(text)} {
					if _, err := conn.ExecContext(ctx, q); err != nil {
						t.Fatalf("%s: %v", q, err)
					}
				}
				plan = explainRows(t, conn, fmt.Sprintf("EXPLAIN (ANALYZE, COSTS OFF) EXECUTE lane_claim('%s', '%s', %d, '%s', 8)",
					args[0], args[1], args[2], args[3]))
			}
			index := "outbox_pending_topic"
			if dialect == "mysql" {
				index = "outbox_state_topic_next_attempt_at"
			}
			if !strings.Contains(plan, index) {
				t.Errorf("the webhook lane's claim does not use index %s:\n%s", index, plan)
			}
			for _, m := range rowsRemoved.FindAllStringSubmatch(plan, -1) {
				if n, _ := strconv.Atoi(m[1]); n > 10 {
					t.Errorf("the webhook lane's claim read %d rows of other topics:\n%s", n, plan)
				}
			}
		})
	}
}

var rowsRemoved = regexp.MustCompile(`Rows Removed by Filter: (\d+)`)

// explainRows runs an EXPLAIN statement and returns its rows, every column of a row
// separated by spaces, a row a line.
func explainRows(t *testing.T, q interface {
	QueryContext(context.Context, string, ...any) (*sql.Rows, error)
}, text string, args ...any) string {
	t.Helper()
	rows, err := q.QueryContext(t.Context(), text, args...)
	if err != nil {
		t.Fatalf("%s: %v", oneLine(text), err)
	}
	defer rows.Close()
	cols, err := rows.Columns()
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for rows.Next() {
		vals := make([]sql.NullString, len(cols))
		ptrs := make([]any, len(cols))
		for i := range vals {
			ptrs[i] = &vals[i]
		}
		if err := rows.Scan(ptrs...); err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			b.WriteString(v.String + " ")
		}
		b.WriteString("\n")
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestClaimPlanAfterEmptyStatistics: the relay's claim on PostgreSQL is planned for the
// outbox as it is, not as it was when its prepared statement first ran. The statistics of
// an empty outbox (a new database, or one analyzed before its first burst) made a cached
// generic plan that joined the pending messages with themselves by two sequential scans:
// with 30 000 pending a claim took minutes, and a burst's events stalled in the outbox
// until autovacuum analyzed it. The claim's statement never runs a generic plan.
func TestClaimPlanAfterEmptyStatistics(t *testing.T) {
	t.Parallel()
	url := testdb.Fresh(t, testdb.URL(t, "postgres"))
	db, err := Open(t.Context(), Config{URL: url, MaxConns: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	if _, err := testdb.Raw(t, url).ExecContext(t.Context(), "VACUUM ANALYZE outbox"); err != nil {
		t.Fatal(err)
	}
	ctx, now := t.Context(), time.Now().UTC().Truncate(time.Millisecond)
	claim := func() int {
		var n int
		if err := db.InTx(ctx, func(tx store.Tx) error {
			msgs, err := tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: now, LeaseUntil: now.Add(time.Minute), Limit: 200,
				ExcludeTopics: []string{orderly.TopicWebhookDeliver}})
			n = len(msgs)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for range 8 { // past the five runs after which PostgreSQL may keep a generic plan
		if n := claim(); n != 0 {
			t.Fatalf("claimed %d messages of an empty outbox", n)
		}
	}
	msgs := make([]*store.OutboxInsertParams, 3000)
	for i := range msgs {
		msgs[i] = &store.OutboxInsertParams{Topic: orderly.TopicRefundExecute, Key: fmt.Sprintf("o%d", i), Payload: []byte(`{}`),
			Now: now.Add(-time.Minute)}
	}
	if err := db.InTx(ctx, func(tx store.Tx) error { return tx.OutboxInsert(ctx, msgs) }); err != nil {
		t.Fatal(err)
	}
	if n := claim(); n != 200 {
		t.Fatalf("claimed %d of 3000 pending messages, want 200", n)
	}
	conn, err := db.writer.Conn(ctx) // the pool's one connection: the one that claimed
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	var generic, custom int64
	if err := conn.QueryRowContext(ctx, `SELECT generic_plans, custom_plans FROM pg_prepared_statements
		WHERE statement LIKE '%NOT EXISTS%' AND statement LIKE '%topic NOT IN%' AND statement NOT LIKE '%pg_prepared_statements%'`).Scan(&generic, &custom); err != nil {
		t.Fatal(err)
	}
	if generic != 0 || custom != 9 {
		t.Errorf("the claim ran %d generic and %d custom plans, want 0 and 9", generic, custom)
	}
}
