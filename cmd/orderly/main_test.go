package main

import (
	"bytes"
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/simulate"
)

// go-redis retries a failed dial in the background once a second until it succeeds or
// the pool is closed, and notices the close only when it wakes up: a client closed while
// Redis was unreachable (TestServeWithoutRedis, TestLazy) leaves it for up to a second.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// e2eMaxLateness bounds the lateness of the end-to-end runs by the precise timer: its poll
// cap (5 s by default; a live timer re-reads the earliest deadline at least that often),
// with the sweep an hour away, so a dead timer fails (its orders stay open). A timer armed
// in process closes within milliseconds on a quiet machine (CI's simulate run, alone, bounds
// it at 1 s); under the race detector on a machine loaded by other tests, the closes queue
// behind request transactions on SQLite's one writer for seconds (3.5 s seen).
const e2eMaxLateness = 5 * time.Second

// TestEndToEnd starts the engine as serve composes it (engine.Open, Start) on port 0 with a
// temporary database and drives a small simulation against it over HTTP, with every check
// of the simulator on: the database, the gateway's ledger of refunds, the lateness bound
// and the share of orders created.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	gw := sim.New()
	srv, err := engine.Open(ctx, engine.Config{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "orderly.db"), CallbackSecret: []byte("e2e-secret"), Gateway: gw,
		SweepInterval: time.Hour,
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(ctx); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	res, err := simulate.Run(ctx, simulate.Config{
		Target: srv.URL(), CallbackSecret: []byte("e2e-secret"), Orders: 120, Rate: 60,
		PaymentTimeout: time.Second, Seed: 7, Store: srv.Store(), GatewayLedger: gw.Ledger,
		MaxLateness: e2eMaxLateness, MinCreatedShare: 0.8, Drain: 10 * time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 0 || res.EarlyCloses != 0 {
		t.Fatalf("violations %v, early closes %d", res.Violations, res.EarlyCloses)
	}
	// Every order ended somewhere, and every kind of ending happened.
	if res.Orders == 0 || res.Paid+res.Closed+res.Cancelled != res.Orders {
		t.Fatalf("orders %d != paid %d + closed %d + cancelled %d", res.Orders, res.Paid, res.Closed, res.Cancelled)
	}
	if res.Paid == 0 || res.Closed == 0 || res.Cancelled == 0 || res.Refunded == 0 || res.DuplicateCallbacks == 0 || res.PartialRefunds == 0 {
		t.Fatalf("a behaviour did not happen: %+v", res)
	}
	t.Logf("lateness ms: %+v; orders %d paid %d closed %d cancelled %d refunded %d; clock %+v; near deadline %+v",
		res.Lateness, res.Orders, res.Paid, res.Closed, res.Cancelled, res.Refunded, res.Clock, res.NearDeadline)
	// Liveness (I5) by the timer: the run's bound made any later close a violation above;
	// the figure must also be there.
	if res.Lateness.Max > float64(e2eMaxLateness/time.Millisecond) {
		t.Fatalf("max lateness %.0f ms exceeds %s", res.Lateness.Max, e2eMaxLateness)
	}
	if res.Clock.Source != simulate.ClockSourceDatabase || res.Clock.MarginMS > 50 {
		t.Fatalf("clock %+v, want the database's, measured to a few ms in process", res.Clock)
	}
}

// TestSimulateCommand runs `orderly simulate --json` through the CLI and checks the shape
// of its output: exactly the documented keys.
func TestSimulateCommand(t *testing.T) {
	t.Parallel()
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{
		"orderly", "simulate", "--orders", "60", "--rate", "100", "--payment-timeout", "1s", "--json",
		"--sweep-interval", "1h", "--max-lateness", "5s", "--min-created-share", "0.8",
	})
	if err != nil {
		t.Fatalf("simulate: %v\nstderr: %s", err, stderr.String())
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	want := []string{"cancelled", "clock", "closed", "created", "duplicate_callbacks", "duration_s", "early_closes", "errors", "gateway",
		"late_payments", "lateness_ms", "missed_deadline", "near_deadline", "orders", "orders_per_s", "paid", "paid_share",
		"payers", "payers_paid", "planned_paid_share", "queue_wait_ms", "refunded", "rejected", "send_s", "sent", "violations"}
	got := make([]string, 0, len(out))
	for k := range out {
		got = append(got, k)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	if string(out["violations"]) != "[]" || string(out["early_closes"]) != "0" {
		t.Fatalf("violations %s, early_closes %s", out["violations"], out["early_closes"])
	}
	var lateness map[string]float64
	if err := json.Unmarshal(out["lateness_ms"], &lateness); err != nil || len(lateness) != 4 {
		t.Fatalf("lateness_ms %s: %v", out["lateness_ms"], err)
	}
	// The order requests reconcile: sent = created + Σ rejected + errors.
	var res struct {
		Sent, Created, Orders, Errors int
		Rejected                      map[string]int
	}
	if err := json.Unmarshal(stdout.Bytes(), &res); err != nil {
		t.Fatal(err)
	}
	rejected := res.Rejected["out-of-stock"] + res.Rejected["coupon-unavailable"]
	if res.Sent != 60 || res.Created != res.Orders || len(res.Rejected) != 2 || res.Created+rejected+res.Errors != res.Sent {
		t.Fatalf("sent %d, created %d (orders %d), rejected %v, errors %d: want 60 = created + rejected + errors",
			res.Sent, res.Created, res.Orders, res.Rejected, res.Errors)
	}
}

// TestServeConfigErrors: a bad --log-level is refused before anything opens.
func TestServeConfigErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{"orderly", "--log-level", "loud", "serve"})
	if err == nil || !strings.Contains(err.Error(), "log-level") {
		t.Fatalf("bad --log-level: %v", err)
	}
}
