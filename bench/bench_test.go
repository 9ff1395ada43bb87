package bench_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/bench"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/internal/testenv"
)

// TestMain removes the orderly binary the tests built: each run of the package left one
// in the temporary directory.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// orderlyBinary builds cmd/orderly once per test binary; it skips under -short.
func orderlyBinary(t *testing.T) string {
	t.Helper()
	if testing.Short() {
		t.Skip("builds and runs the orderly binary; skipped with -short")
	}
	binOnce.Do(func() {
		dir, err := os.MkdirTemp("", "orderly-bench-test-")
		if err != nil {
			binErr = err
			return
		}
		binDir, binPath = dir, filepath.Join(dir, "orderly")
		out, err := exec.Command("go", "build", "-o", binPath, "../cmd/orderly").CombinedOutput()
		if err != nil {
			binErr = err
			binPath = string(out)
		}
	})
	if binErr != nil {
		t.Fatalf("go build: %v\n%s", binErr, binPath)
	}
	return binPath
}

// TestScenariosSmall runs every scenario at a small scale on SQLite and checks what it
// measured: every unpaid order closed, none early, releases applied, exact stock.
func TestScenariosSmall(t *testing.T) {
	testenv.Long(t)
	bin := orderlyBinary(t)
	cfg := bench.Config{Binary: bin, Rate: 100, Duration: time.Second, PaymentTimeout: time.Second, Burst: 500, BurstLead: 3 * time.Second,
		FlashStock: 50, FlashBuyers: 200, Workers: 8, HistoryOrders: 3000, PendingOrders: 2000, PendingBaseline: 100, NotifyOrders: 200}
	for _, name := range bench.Scenarios {
		t.Run(name, func(t *testing.T) {
			out, err := bench.Run(t.Context(), name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			if len(out.Violations) > 0 {
				t.Fatalf("violations: %v", out.Violations)
			}
			r := out.Result
			if r.Scenario != name || r.Store != "sqlite" {
				t.Fatalf("scenario %q store %q", r.Scenario, r.Store)
			}
			var buf bytes.Buffer
			if err := bench.WriteJSON(&buf, r); err != nil {
				t.Fatal(err)
			}
			var m map[string]any
			if err := json.Unmarshal(buf.Bytes(), &m); err != nil || strings.Count(buf.String(), "\n") != 1 {
				t.Fatalf("not one JSON line: %q %v", buf.String(), err)
			}
			switch name {
			case "steady", "history", "pending":
				// 100 orders, 30 paid: 70 closed for payment timeout, none early.
				if r.Orders != 100 && name != "pending" || r.EarlyCloses == nil || *r.EarlyCloses != 0 || r.LatenessMS == nil {
					t.Fatalf("%s: %+v", name, r)
				}
				wantKeys(t, m, "scenario", "store", "orders", "early_closes", "lateness_ms", "created_per_s", "create_p99_ms", "cpu_s", "peak_rss_mb")
				if name != "steady" && len(r.Peers) != 1 {
					t.Fatalf("%s: want the reference run among the peers, got %d", name, len(r.Peers))
				}
			case "burst":
				if r.Orders != 500 || *r.EarlyCloses != 0 || *r.ClosesPerS <= 0 || *r.TotalS <= 0 {
					t.Fatalf("burst: %+v", r)
				}
				wantKeys(t, m, "scenario", "store", "orders", "early_closes", "lateness_ms", "closes_per_s", "total_s", "cpu_s", "peak_rss_mb")
				if _, ok := m["created_per_s"]; ok {
					t.Fatal("burst prints created_per_s")
				}
			case "flash-sale":
				if r.Orders != 50 || *r.CreatedPerS <= 0 {
					t.Fatalf("flash-sale: %+v", r)
				}
			case "notify":
				if r.Orders != 200 || len(r.Peers) != 1 || r.Peers[0].Orders != 200 {
					t.Fatalf("notify: %+v", r)
				}
			case "ceiling":
				// A second of each: some single-row commits, and whole 1 000-row statements.
				if r.CommitsPerS == nil || *r.CommitsPerS < 10 || r.RowWritesPerS == nil || *r.RowWritesPerS < 1000 {
					t.Fatalf("ceiling: %+v", r)
				}
				wantKeys(t, m, "scenario", "store", "orders", "commits_per_s", "row_writes_per_s")
			}
			if err := bench.WriteTable(&buf, r); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestBurstWorkOnPostgres: a burst on PostgreSQL reports the database's own row writes and
// WAL bytes per close. A close updates the order, writes its audit row and its event
// (outbox row and sequence), releases its reservation and coupon and moves stock, and the
// relay leases and marks its event: about a dozen row writes, a few KiB of WAL.
//
// The lead is long: the server starts after the deadlines are set, and under the race
// detector on a loaded 2-core machine its start took 9.8 s (a CI run refused at 3 s).
func TestBurstWorkOnPostgres(t *testing.T) {
	// The URL first: without a server the test skips before it builds the binary, which
	// took 39 s of a cold `go test ./...` for nothing.
	server := testdb.URL(t, "postgres")
	bin := orderlyBinary(t)
	// A database of its own: the row writes are pg_stat_database's, which counted the other
	// packages' tests running at the same time in a shared database (46.2 a close in CI).
	base := testdb.FreshDatabase(t, server)
	out, err := bench.Run(t.Context(), "burst", bench.Config{Binary: bin, DatabaseURL: base, Burst: 500, BurstLead: 15 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := out.Result
	if len(out.Violations) > 0 || r.Orders != 500 {
		t.Fatalf("burst: %+v, violations %v", r, out.Violations)
	}
	if r.DBRowWritesPerClose == nil || *r.DBRowWritesPerClose < 6 || *r.DBRowWritesPerClose > 40 ||
		r.DBWALBytesPerClose == nil || *r.DBWALBytesPerClose < 500 || *r.DBWALBytesPerClose > 50_000 {
		t.Fatalf("database work per close: %v row writes, %v WAL bytes", deref(r.DBRowWritesPerClose), deref(r.DBWALBytesPerClose))
	}
	t.Logf("database work per close: %v row writes, %v WAL bytes", deref(r.DBRowWritesPerClose), deref(r.DBWALBytesPerClose))
}

func deref(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func wantKeys(t *testing.T, m map[string]any, keys ...string) {
	t.Helper()
	var got []string
	for k := range m {
		got = append(got, k)
	}
	slices.Sort(got)
	slices.Sort(keys)
	withPeers := append(slices.Clone(keys), "peers")
	slices.Sort(withPeers)
	if !slices.Equal(got, keys) && !slices.Equal(got, withPeers) {
		t.Fatalf("JSON keys %v, want %v", got, keys)
	}
}

func TestPercentile(t *testing.T) {
	v := []float64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for _, c := range []struct{ p, want float64 }{{50, 5}, {90, 9}, {99, 10}, {100, 10}, {1, 1}} {
		if got := bench.Percentile(v, c.p); got != c.want {
			t.Errorf("p%v = %v, want %v", c.p, got, c.want)
		}
	}
	if l := bench.NewLateness(nil); l != nil {
		t.Fatalf("no values: %+v", l)
	}
}

func TestTableRatios(t *testing.T) {
	r := &bench.Result{Scenario: "steady", Store: "postgres", Orders: 10, LatenessMS: &bench.Lateness{P50: 2, P90: 4, P99: 10, Max: 20},
		Peers: []*bench.Result{{Name: "River default", Orders: 10, LatenessMS: &bench.Lateness{P50: 500, P90: 550, P99: 600, Max: 700}}}}
	var buf bytes.Buffer
	if err := bench.WriteTable(&buf, r); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"River default", "×2.5e+02", "×60", "×35"} {
		if !strings.Contains(buf.String(), want) {
			t.Fatalf("table lacks %q:\n%s", want, buf.String())
		}
	}
}

var (
	binOnce sync.Once
	binDir  string // holds the built binary (about 58 MB); TestMain removes it
	binPath string
	binErr  error
)
