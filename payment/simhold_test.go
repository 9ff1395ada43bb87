package payment_test

import (
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
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

func newHoldGateway(t *testing.T, amount int64, ttl time.Duration) (*payment.SimGateway, *simClock) {
	t.Helper()
	g := payment.NewSimGateway()
	clock := newSimClock(holdT0)
	g.SetClock(clock.Now)
	h, err := g.Authorize(t.Context(), "hold-1", amount, ttl)
	if err != nil || h.State != orderly.HoldPending || !h.ExpiresAt.Equal(holdT0.Add(ttl)) {
		t.Fatalf("authorize: %+v, %v", h, err)
	}
	return g, clock
}

// TestSimHoldCaptureTimesOutAfterApply: a hold of 5000, a fare of 3820 whose capture reply
// times out after the gateway applied it; the retry with the same key answers the capture
// and captures nothing more: 3820 captured, 1180 released, one capture in the ledger.
func TestSimHoldCaptureTimesOutAfterApply(t *testing.T) {
	t.Parallel()
	g, _ := newHoldGateway(t, 5000, time.Hour)
	g.TimeoutAfterApply(payment.GatewayCaptureHold, 1)
	_, err := g.CaptureHold(t.Context(), "hold-1", "trip-1:capture", 3820)
	if !payment.IsGatewayTimeout(err) {
		t.Fatalf("first capture: %v, want a gateway timeout", err)
	}
	for i := range 2 {
		h, err := g.CaptureHold(t.Context(), "hold-1", "trip-1:capture", 3820)
		if err != nil || h.State != orderly.HoldPosted || h.Captured != 3820 || h.Released != 1180 {
			t.Fatalf("retry %d: %+v, %v", i, h, err)
		}
	}
	if calls := g.Calls(payment.GatewayCaptureHold, "hold-1"); len(calls) != 1 || calls[0].Amount != 3820 {
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
		op       payment.GatewayOp
		amount   int64
		code     string
		state    orderly.HoldState
		captured int64
		released int64
	}{
		{"capture 6100 of 5000", 0, payment.GatewayCaptureHold, 6100, orderly.EHOLDEXCEEDED, orderly.HoldPending, 0, 0},
		{"capture all", 0, payment.GatewayCaptureHold, 5000, "", orderly.HoldPosted, 5000, 0},
		{"capture 1 ms before the expiry", 10*time.Minute - time.Millisecond, payment.GatewayCaptureHold, 3820, "", orderly.HoldPosted, 3820, 1180},
		{"capture at the expiry", 10 * time.Minute, payment.GatewayCaptureHold, 3820, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
		{"capture 1 ms after the expiry", 10*time.Minute + time.Millisecond, payment.GatewayCaptureHold, 3820, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
		{"void", time.Minute, payment.GatewayVoidHold, 0, "", orderly.HoldVoided, 0, 5000},
		{"void after the expiry", time.Hour, payment.GatewayVoidHold, 0, orderly.EHOLDEXPIRED, orderly.HoldExpired, 0, 5000},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			g, clock := newHoldGateway(t, 5000, 10*time.Minute)
			clock.Set(holdT0.Add(c.at))
			var err error
			if c.op == payment.GatewayCaptureHold {
				_, err = g.CaptureHold(t.Context(), "hold-1", "k", c.amount)
			} else {
				_, err = g.VoidHold(t.Context(), "hold-1", "k")
			}
			if orderly.ErrorCode(err) != c.code {
				t.Errorf("error %v, want code %q", err, c.code)
			}
			h, _ := g.Hold("hold-1")
			if h.State != c.state || h.Captured != c.captured || h.Released != c.released {
				t.Errorf("hold %+v, want %s captured %d released %d", h, c.state, c.captured, c.released)
			}
		})
	}
	t.Run("expiry never early", func(t *testing.T) {
		t.Parallel()
		g, clock := newHoldGateway(t, 5000, 10*time.Minute)
		clock.Set(holdT0.Add(10*time.Minute - time.Millisecond))
		if h, _ := g.Hold("hold-1"); h.State != orderly.HoldPending {
			t.Errorf("1 ms before the expiry: %s", h.State)
		}
		clock.Set(holdT0.Add(10 * time.Minute))
		if h, _ := g.Hold("hold-1"); h.State != orderly.HoldExpired || h.Released != 5000 {
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
		if n := len(g.Calls(payment.GatewayAuthorize, "hold-1")); n != 1 {
			t.Errorf("%d authorisations that were not replays, want 1", n)
		}
	})
}
