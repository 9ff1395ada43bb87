package sqlstore

import (
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
