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

	"github.com/orderlyhq/orderly/simulate"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestEndToEnd starts the real program as main wires it (OpenServer) on port 0 with a
// temporary database and drives a small simulation against it over HTTP.
func TestEndToEnd(t *testing.T) {
	ctx := context.Background()
	srv, err := OpenServer(ctx, ServerConfig{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "orderly.db"), CallbackSecret: []byte("e2e-secret"),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := srv.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	}()
	res, err := simulate.Run(ctx, simulate.Config{
		Target: srv.URL(), CallbackSecret: []byte("e2e-secret"), Orders: 120, Rate: 60,
		PaymentTimeout: time.Second, Seed: 7, Store: srv.Store,
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
	if res.Paid == 0 || res.Closed == 0 || res.Cancelled == 0 || res.Refunded == 0 || res.DuplicateCallbacks == 0 {
		t.Fatalf("a behaviour did not happen: %+v", res)
	}
	t.Logf("lateness ms: %+v; orders %d paid %d closed %d cancelled %d refunded %d", res.Lateness, res.Orders, res.Paid, res.Closed, res.Cancelled, res.Refunded)
	// Liveness (I5): every order closes within one sweep interval of its close_at, even
	// under the race detector on a loaded machine. Lateness figures are for benchmarks.
	if res.Lateness.Max > float64(defaults.SweepInterval/time.Millisecond) {
		t.Fatalf("max lateness %.0f ms exceeds the sweep interval", res.Lateness.Max)
	}
}

// TestSimulateCommand runs `orderly simulate --json` through the CLI and checks the shape
// of its output: exactly the documented keys.
func TestSimulateCommand(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{
		"orderly", "simulate", "--orders", "60", "--rate", "100", "--payment-timeout", "1s", "--json",
	})
	if err != nil {
		t.Fatalf("simulate: %v\nstderr: %s", err, stderr.String())
	}
	var out map[string]json.RawMessage
	if err := json.Unmarshal(stdout.Bytes(), &out); err != nil {
		t.Fatalf("stdout is not one JSON object: %v\n%s", err, stdout.String())
	}
	want := []string{"cancelled", "closed", "created", "duplicate_callbacks", "duration_s", "early_closes", "errors",
		"late_payments", "lateness_ms", "orders", "orders_per_s", "paid", "refunded", "rejected", "send_s", "sent", "violations"}
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

func TestServeConfigErrors(t *testing.T) {
	var stdout, stderr bytes.Buffer
	err := newApp(&stdout, &stderr).Run(context.Background(), []string{"orderly", "--log-level", "loud", "serve"})
	if err == nil || !strings.Contains(err.Error(), "log-level") {
		t.Fatalf("bad --log-level: %v", err)
	}
	_, err = OpenServer(context.Background(), ServerConfig{Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "x.db")})
	if err == nil {
		t.Fatal("OpenServer without a callback secret succeeded")
	}
	_, err = OpenServer(context.Background(), ServerConfig{Addr: "127.0.0.1:0", DatabaseURL: "redis://localhost/x", CallbackSecret: []byte("s")})
	if err == nil || !strings.Contains(err.Error(), "unsupported database URL") {
		t.Fatalf("redis URL as a database: %v", err)
	}
}
