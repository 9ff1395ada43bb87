package closer_test

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// BenchmarkBurstClose measures the burst figure of BENCHMARKS.md: orders due at the same instant,
// all closed (guarded update, one audit row and three outbox messages each) and their
// stock and coupons released by the relay. One op is the whole burst; compare the
// closes/s and closed+released/s metrics. ORDERLY_BENCH_BURST sets the size (default
// 10 000; the design's figure is 100 000) and ORDERLY_BENCH_DIALECT the database: sqlite
// (default), postgres or mysql (from ORDERLY_TEST_POSTGRES_URL / ORDERLY_TEST_MYSQL_URL).
func BenchmarkBurstClose(b *testing.B) {
	n := 10_000
	if v, err := strconv.Atoi(os.Getenv("ORDERLY_BENCH_BURST")); err == nil && v > 0 {
		n = v
	}
	dialect := os.Getenv("ORDERLY_BENCH_DIALECT")
	if dialect == "" {
		dialect = "sqlite"
	}
	ctx := context.Background()
	for range b.N {
		b.StopTimer()
		url := filepath.Join(b.TempDir(), "orderly.db")
		if dialect != "sqlite" {
			url = testdb.Fresh(b, testdb.URL(b, dialect))
		}
		s, err := sqlstore.Open(ctx, sqlstore.Config{URL: url})
		if err != nil {
			b.Fatal(err)
		}
		var now time.Time
		if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
			b.Fatal(err)
		}
		seed(b, s, n, now.Add(-time.Second))
		if dialect == "postgres" {
			// A production table has statistics (autovacuum); a table filled a moment ago
			// has none, and the planner then joins the id list by scanning the table once
			// per id. Measure the steady state.
			analyze(b, url)
		}
		cl, err := closer.New(closer.Config{Store: s})
		if err != nil {
			b.Fatal(err)
		}
		relay, err := outbox.NewRelay(outbox.Config{Store: s, BatchSize: 1000,
			Default: &outbox.Handler{Call: func(context.Context, *orderly.Message) error { return nil }}})
		if err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		start := time.Now()
		res, err := cl.CloseDue(ctx, closer.TriggerTimer)
		if err != nil || res.Closed != n {
			b.Fatalf("closed %d of %d: %v", res.Closed, n, err)
		}
		closed := time.Since(start)
		if _, err := relay.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		total := time.Since(start)
		b.StopTimer()
		var st *orderly.Stock
		if err := s.Read(ctx, func(tx store.Tx) (err error) { st, err = tx.StockGet(ctx, "sku"); return err }); err != nil || st.Available != int64(n) {
			b.Fatalf("stock after burst %+v, %v", st, err)
		}
		_ = s.Close()
		b.ReportMetric(float64(n)/closed.Seconds(), "closes/s")
		b.ReportMetric(float64(n)/total.Seconds(), "closed+released/s")
		b.ReportMetric(total.Seconds(), "s/burst")
	}
}

// analyze runs ANALYZE on the PostgreSQL database at url.
func analyze(b *testing.B, url string) {
	b.Helper()
	db, err := sql.Open("pgx", url)
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(context.Background(), "ANALYZE"); err != nil {
		b.Fatal(err)
	}
}
