package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/simulate"
)

// TestSimulateWithKey: against a server that has an API key, simulate with a key of scopes
// buyer and merchant (--api-key) runs clean; without it, the server refuses its first
// request and no order is created.
func TestSimulateWithKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gw := sim.New()
	srv, err := engine.Open(ctx, engine.Config{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "orderly.db"), CallbackSecret: []byte("e2e-secret"), Gateway: gw,
	}, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = srv.Close(ctx) }()
	_, key, err := srv.Keys().Create(ctx, "simulate", []string{"buyer", "merchant"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	cfg := simulate.Config{
		Target: srv.URL(), CallbackSecret: []byte("e2e-secret"), Orders: 30, Rate: 60,
		PaymentTimeout: time.Second, Seed: 3, Store: srv.Store(), GatewayLedger: gw.Ledger,
		MaxLateness: e2eMaxLateness, Drain: 10 * time.Second,
	}
	res, err := simulate.Run(ctx, cfg)
	if err == nil && res.Created > 0 {
		t.Fatalf("without a key: created %d orders, want the server to refuse", res.Created)
	}
	cfg.APIKey = key
	res, err = simulate.Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Violations) != 0 || res.Created == 0 || res.Errors != 0 {
		t.Fatalf("with a key: violations %v, created %d, errors %d", res.Violations, res.Created, res.Errors)
	}
}
