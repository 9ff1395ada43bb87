package main

import (
	"database/sql"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// TestReconcileCommand: a SKU whose held counter drifted is found by `orderly reconcile
// --json` (exit 1, nothing changed), repaired by --repair (exit 0), and a third run finds
// nothing; the JSON is {"findings":[{"kind","sku","detail","repaired"}],…} with no other
// member in a finding, and "findings":[] when all agree.
func TestReconcileCommand(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "shop.db")
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.InTx(t.Context(), func(tx store.Tx) error { _, err := tx.StockSet(t.Context(), "SKU-X", 10); return err }); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	raw, err := sql.Open("sqlite", path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE stock SET held = 3, available = 7 WHERE sku = 'SKU-X'`); err != nil {
		t.Fatal(err)
	}
	_ = raw.Close()

	type report struct {
		Findings []map[string]any `json:"findings"`
		Repaired int64            `json:"repaired"`
	}
	runJSON := func(wantCode int, args ...string) report {
		t.Helper()
		code, out, errOut := runCLI(t, append([]string{"reconcile", "--database-url", path, "--json"}, args...)...)
		if code != wantCode {
			t.Fatalf("reconcile %v: exit %d, want %d; stderr %s", args, code, wantCode, errOut)
		}
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil || r.Findings == nil {
			t.Fatalf("reconcile %v: %q is not a report: %v", args, out, err)
		}
		return r
	}
	wantFinding := func(r report, repaired bool) {
		t.Helper()
		if len(r.Findings) != 1 {
			t.Fatalf("findings = %v, want one", r.Findings)
		}
		f := r.Findings[0]
		var keys []string
		for k := range f {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		if !slices.Equal(keys, []string{"detail", "kind", "repaired", "sku"}) || f["kind"] != "stock_mismatch" ||
			f["sku"] != "SKU-X" || f["repaired"] != repaired || f["detail"] == "" {
			t.Errorf("finding = %v, want stock_mismatch of SKU-X with repaired %t and exactly kind, sku, detail, repaired", f, repaired)
		}
	}
	wantFinding(runJSON(exitFailure), false)
	wantFinding(runJSON(exitFailure), false) // a report changes nothing
	r := runJSON(exitOK, "--repair")
	wantFinding(r, true)
	if r.Repaired != 1 {
		t.Errorf("repaired = %d, want 1", r.Repaired)
	}
	if r := runJSON(exitOK, "--repair"); len(r.Findings) != 0 {
		t.Errorf("after the repair: %v, want no findings", r.Findings)
	}

	// reconcile takes no payments: it never creates the simulated channel's tables in the
	// database it checks (it served the simulator, and created them, before).
	if raw, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	var simTables int
	if err := raw.QueryRow(`SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name LIKE 'sim\_%' ESCAPE '\'`).Scan(&simTables); err != nil || simTables != 0 {
		t.Errorf("simulator tables after reconcile: %d (%v), want none", simTables, err)
	}
	_ = raw.Close()

	// The statement: a transaction nobody recorded. The statement adds to the checks of the
	// database, which still run: a drift injected again is reported beside it.
	if raw, err = sql.Open("sqlite", path); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec(`UPDATE stock SET held = 3, available = 7 WHERE sku = 'SKU-X'`); err != nil {
		t.Fatal(err)
	}
	_ = raw.Close()
	csv := filepath.Join(t.TempDir(), "statement.csv")
	if err := os.WriteFile(csv, []byte("channel_txn_id,amount,currency,status,time\ntxn-9,500,USD,succeeded,"+
		time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runJSON(exitFailure, "--statement", csv, "--channel", "sim")
	if len(r.Findings) != 2 || r.Findings[0]["kind"] != "stock_mismatch" || r.Findings[1]["kind"] != "statement_missing_ours" {
		t.Errorf("statement findings = %v, want stock_mismatch and statement_missing_ours", r.Findings)
	}
	// A line listed twice is one finding besides its comparison.
	if err := os.WriteFile(csv, []byte("channel_txn_id,amount,currency,status,time\ntxn-9,500,USD,succeeded,"+
		time.Now().UTC().Format(time.RFC3339)+"\ntxn-9,500,USD,succeeded,"+time.Now().UTC().Format(time.RFC3339)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	r = runJSON(exitFailure, "--statement", csv, "--channel", "sim")
	if len(r.Findings) != 3 || r.Findings[1]["kind"] != "statement_duplicate" || r.Findings[2]["kind"] != "statement_missing_ours" {
		t.Errorf("statement findings = %v, want stock_mismatch, one statement_duplicate and statement_missing_ours", r.Findings)
	}
	// Every run's report is kept where the admin page reads them, newest first.
	db, err = sqlstore.Open(t.Context(), sqlstore.Config{URL: path})
	if err != nil {
		t.Fatal(err)
	}
	var reports []*store.ReconcileReport
	err = db.Read(t.Context(), func(tx store.Tx) error {
		reports, err = tx.ReconcileReportList(t.Context(), 100)
		return err
	})
	_ = db.Close()
	if err != nil || len(reports) != 6 || reports[0].Findings != 3 || !strings.HasPrefix(reports[0].Instance, "orderly reconcile on ") ||
		!strings.Contains(string(reports[0].Report), `"kind":"statement_duplicate"`) || reports[2].Repaired != 0 || reports[3].Repaired != 1 {
		t.Errorf("saved reports: %d, %v; want the 6 runs, the newest with the statement's 3 findings", len(reports), err)
	}
	for _, args := range [][]string{{"--statement", csv}, {"--channel", "sim"}, {"--statement", csv, "--channel", "stripe@v2"},
		{"--statement", csv, "--channel", "wallet"}, {"--refund-stuck-after", "0s"}} {
		if code, _, errOut := runCLI(t, append([]string{"reconcile", "--database-url", path}, args...)...); code != exitUsage {
			t.Errorf("reconcile %v: exit %d (%s), want %d", args, code, errOut, exitUsage)
		}
	}
	if code, _, errOut := runCLI(t, "reconcile", "--database-url", path, "--since", "yesterday"); code != exitUsage {
		t.Errorf("--since yesterday: exit %d (%s), want %d", code, errOut, exitUsage)
	}
}

// TestParseSince: --since takes an RFC 3339 time or a positive duration back from now.
func TestParseSince(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		in   string
		want time.Time
		ok   bool
	}{
		{"", time.Time{}, true},
		{"24h", now.Add(-24 * time.Hour), true},
		{"2026-11-29T08:00:00+01:00", time.Date(2026, 11, 29, 7, 0, 0, 0, time.UTC), true},
		{"-1h", time.Time{}, false},
		{"0s", time.Time{}, false},
		{"yesterday", time.Time{}, false},
	} {
		got, err := parseSince(c.in, now)
		if (err == nil) != c.ok || !got.Equal(c.want) {
			t.Errorf("parseSince(%q) = %v, %v; want %v (ok %t)", c.in, got, err, c.want, c.ok)
		}
	}
}
