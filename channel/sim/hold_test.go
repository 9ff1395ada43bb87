package sim_test

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/store/sqlstore"
)

// simClock is a settable clock for the simulated gateway.
type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *simClock) Set(t time.Time)     { c.mu.Lock(); c.now = t; c.mu.Unlock() }
func newSimClock(t time.Time) *simClock { return &simClock{now: t} }

var holdT0 = time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)

func newHoldGateway(t *testing.T, amount int64, ttl time.Duration) (*sim.Gateway, *simClock) {
	t.Helper()
	g := sim.New()
	useDatabase(t, g, openHoldStore(t))
	clock := newSimClock(holdT0)
	g.SetClock(clock.Now)
	h, err := g.Authorize(t.Context(), "hold-1", amount, ttl)
	if err != nil || h.State != orderly.HoldPending || !h.ExpiresAt.Equal(holdT0.Add(ttl)) {
		t.Fatalf("authorize: %+v, %v", h, err)
	}
	return g, clock
}

// useDatabase gives g db for its holds.
func useDatabase(t *testing.T, g *sim.Gateway, db *sqlstore.DB) {
	t.Helper()
	if err := g.UseDatabase(t.Context(), db); err != nil {
		t.Fatal(err)
	}
}

// openHoldStore opens a fresh SQLite database for the gateway's holds.
func openHoldStore(t *testing.T) *sqlstore.DB {
	t.Helper()
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// TestSimHoldCaptureTimesOutAfterApply: a hold of 5000, a fare of 3820 whose capture reply
// times out after the gateway applied it; the retry with the same key answers the capture
// and captures nothing more: 3820 captured, 1180 released, one capture in the ledger.
func TestSimHoldCaptureTimesOutAfterApply(t *testing.T) {
	t.Parallel()
	g, _ := newHoldGateway(t, 5000, time.Hour)
	if err := g.TimeoutAfterApply(t.Context(), sim.GatewayCaptureHold, 1); err != nil {
		t.Fatal(err)
	}
	_, err := g.CaptureHold(t.Context(), "hold-1", "trip-1:capture", 3820)
	if !errors.Is(err, orderly.ErrGatewayTimeout) {
		t.Fatalf("first capture: %v, want a gateway timeout", err)
	}
	for i := range 2 {
		h, err := g.CaptureHold(t.Context(), "hold-1", "trip-1:capture", 3820)
		if err != nil || h.State != orderly.HoldPosted || h.Captured != 3820 || h.Released != 1180 {
			t.Fatalf("retry %d: %+v, %v", i, h, err)
		}
	}
	if calls := g.Calls(sim.GatewayCaptureHold, "hold-1"); len(calls) != 1 || calls[0].Amount != 3820 {
		t.Errorf("captures that were not replays: %+v, want one of 3820", calls)
	}
	_, err = g.CaptureHold(t.Context(), "hold-1", "trip-1:capture-2", 100)
	if orderly.ErrorCode(err) != orderly.EHOLDNOTPENDING {
		t.Errorf("a second capture under a new key: %v, want %s", err, orderly.EHOLDNOTPENDING)
	}
	_, err = g.CaptureHold(t.Context(), "hold-1", "trip-1:capture", 3000)
	if orderly.ErrorCode(err) != orderly.EIDEMPOTENCY {
		t.Errorf("the key again with another amount: %v, want %s", err, orderly.EIDEMPOTENCY)
	}
}

// TestSimHoldRules: over-capture, expiry (never early), void, and the same key for another
// operation, each case on a fresh hold of 5000 expiring in 10 minutes.
func TestSimHoldRules(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name     string
		at       time.Duration // gateway clock after authorize
		op       sim.GatewayOp
		amount   int64
		code     string
		state    orderly.HoldState
		captured int64
		released int64
	}{
		{"capture 6100 of 5000", 0, sim.GatewayCaptureHold, 6100, orderly.EHOLDEXCEEDED, orderly.HoldPending, 0, 0},
		{"capture all", 0, sim.GatewayCaptureHold, 5000, "", orderly.HoldPosted, 5000, 0},
		{"capture 1 ms before the expiry", 10*time.Minute - time.Millisecond, sim.GatewayCaptureHold, 3820, "", orderly.HoldPosted, 3820, 1180},
		{"capture at the expiry", 10 * time.Minute, sim.GatewayCaptureHold, 3820, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
		{"capture 1 ms after the expiry", 10*time.Minute + time.Millisecond, sim.GatewayCaptureHold, 3820, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
		{"void", time.Minute, sim.GatewayVoidHold, 0, "", orderly.HoldVoided, 0, 5000},
		{"void after the expiry", time.Hour, sim.GatewayVoidHold, 0, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, clock := newHoldGateway(t, 5000, 10*time.Minute)
			clock.Set(holdT0.Add(c.at))
			var err error
			if c.op == sim.GatewayCaptureHold {
				_, err = g.CaptureHold(t.Context(), "hold-1", "k", c.amount)
			} else {
				_, err = g.VoidHold(t.Context(), "hold-1", "k")
			}
			if orderly.ErrorCode(err) != c.code {
				t.Errorf("error %v, want code %q", err, c.code)
			}
			h, _ := g.Hold(t.Context(), "hold-1")
			if h.State != c.state || h.Captured != c.captured || h.Released != c.released {
				t.Errorf("hold %+v, want %s captured %d released %d", h, c.state, c.captured, c.released)
			}
		})
	}
	t.Run("expiry never early", func(t *testing.T) {
		t.Parallel()
		g, clock := newHoldGateway(t, 5000, 10*time.Minute)
		clock.Set(holdT0.Add(10*time.Minute - time.Millisecond))
		if h, _ := g.Hold(t.Context(), "hold-1"); h.State != orderly.HoldPending {
			t.Errorf("1 ms before the expiry: %s", h.State)
		}
		clock.Set(holdT0.Add(10 * time.Minute))
		if h, _ := g.Hold(t.Context(), "hold-1"); h.State != orderly.HoldExpired || h.Released != 5000 {
			t.Errorf("at the expiry: %+v", h)
		}
	})
	t.Run("authorize replay", func(t *testing.T) {
		t.Parallel()
		g, _ := newHoldGateway(t, 5000, 10*time.Minute)
		if _, err := g.Authorize(t.Context(), "hold-1", 5000, time.Minute); err != nil {
			t.Errorf("replay: %v", err)
		}
		if _, err := g.Authorize(t.Context(), "hold-1", 5001, time.Minute); orderly.ErrorCode(err) != orderly.EIDEMPOTENCY {
			t.Errorf("another amount: %v", err)
		}
		if n := len(g.Calls(sim.GatewayAuthorize, "hold-1")); n != 1 {
			t.Errorf("%d authorisations that were not replays, want 1", n)
		}
	})
}

// TestSimHoldSharedByInstances: two gateways on one database stand for two instances. A
// hold placed by one is captured by the other; the fault armed on one (apply, then time
// out) hits a capture on the other; the retry on the first answers the capture and captures
// nothing more; a refund retried across them moves money once; a concurrent capture under
// another key is refused.
func TestSimHoldSharedByInstances(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), openHoldStore(t)
	a, b := sim.New(), sim.New()
	useDatabase(t, a, db)
	useDatabase(t, b, db)
	if _, err := a.Authorize(ctx, "hold-1", 5000, time.Hour); err != nil {
		t.Fatal(err)
	}
	if err := a.TimeoutAfterApply(ctx, sim.GatewayCaptureHold, 1); err != nil {
		t.Fatal(err)
	}
	if _, err := b.CaptureHold(ctx, "hold-1", "trip-1:capture", 3820); !errors.Is(err, orderly.ErrGatewayTimeout) {
		t.Fatalf("capture on b: %v, want a gateway timeout", err)
	}
	h, err := a.CaptureHold(ctx, "hold-1", "trip-1:capture", 3820)
	if err != nil || h.State != orderly.HoldPosted || h.Captured != 3820 || h.Released != 1180 {
		t.Fatalf("retry on a: %+v, %v", h, err)
	}
	if _, err := b.CaptureHold(ctx, "hold-1", "other-key", 100); orderly.ErrorCode(err) != orderly.EHOLDNOTPENDING {
		t.Errorf("a capture under another key: %v, want %s", err, orderly.EHOLDNOTPENDING)
	}
	for i, g := range []*sim.Gateway{a, b, a} {
		if err := g.RefundHold(ctx, "hold-1", "trip-1:refund", 3820); err != nil {
			t.Fatalf("refund %d: %v", i, err)
		}
	}
	if err := b.RefundHold(ctx, "hold-1", "trip-1:refund-2", 1); orderly.ErrorCode(err) != orderly.EREFUNDEXCEEDS {
		t.Errorf("a refund beyond the capture: %v, want %s", err, orderly.EREFUNDEXCEEDS)
	}
	h, err = b.Hold(ctx, "hold-1")
	if err != nil || h.Captured != 3820 || h.Released != 1180 || h.Refunded != 3820 {
		t.Fatalf("hold on b: %+v, %v; want captured 3820, released 1180, refunded 3820", h, err)
	}
	keys, err := a.HoldKeys(ctx, "hold-1")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, k := range keys {
		got = append(got, k.Op+" "+k.Key)
	}
	if want := "capture_hold trip-1:capture, refund trip-1:refund"; strings.Join(got, ", ") != want {
		t.Errorf("keys %q, want %q", strings.Join(got, ", "), want)
	}
	if _, err := b.Hold(ctx, "no-such-hold"); orderly.ErrorCode(err) != orderly.ENOTFOUND {
		t.Errorf("unknown hold: %v, want %s", err, orderly.ENOTFOUND)
	}
}

// TestSimHoldConcurrentCaptures: eight captures of one hold under eight keys, from two
// gateways on one database: exactly one captures, the others are refused, one key recorded.
func TestSimHoldConcurrentCaptures(t *testing.T) {
	t.Parallel()
	ctx, db := t.Context(), openHoldStore(t)
	gws := []*sim.Gateway{sim.New(), sim.New()}
	for _, g := range gws {
		useDatabase(t, g, db)
	}
	if _, err := gws[0].Authorize(ctx, "hold-1", 5000, time.Hour); err != nil {
		t.Fatal(err)
	}
	var (
		wg       sync.WaitGroup
		mu       sync.Mutex
		captured int
	)
	for i := range 8 {
		wg.Go(func() {
			_, err := gws[i%2].CaptureHold(ctx, "hold-1", fmt.Sprintf("k%d", i), int64(1000+i))
			mu.Lock()
			defer mu.Unlock()
			switch orderly.ErrorCode(err) {
			case "":
				captured++
			case orderly.EHOLDNOTPENDING:
			default:
				t.Errorf("capture %d: %v", i, err)
			}
		})
	}
	wg.Wait()
	keys, err := gws[1].HoldKeys(ctx, "hold-1")
	if captured != 1 || err != nil || len(keys) != 1 {
		t.Fatalf("%d captures succeeded, %d keys (%v); want 1 and 1", captured, len(keys), err)
	}
	h, _ := gws[0].Hold(ctx, "hold-1")
	if h.Captured != keys[0].Amount || h.Captured+h.Released != 5000 {
		t.Errorf("hold %+v, key %+v", h, keys[0])
	}
}

// TestSimHoldNeedsStore: without UseDatabase a hold call fails and changes nothing.
func TestSimHoldNeedsStore(t *testing.T) {
	t.Parallel()
	if _, err := sim.New().Authorize(t.Context(), "hold-1", 5000, time.Hour); err == nil {
		t.Fatal("a hold without a store was placed")
	}
}
