package channel_test

import (
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/orderlyhq/orderly/channel"
)

// TestRouterSplit: 10 000 payments of distinct users on a 90/10 split land within ±1.5 %
// of the weights, and each user always lands on the same channel.
func TestRouterSplit(t *testing.T) {
	t.Parallel()
	r, err := channel.NewRouter(channel.RouterConfig{Routes: []channel.Route{{Channel: "stripe", Weight: 90}, {Channel: "stripe_v2", Weight: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	const n = 10_000
	got := map[string]int{}
	for i := range n {
		user := fmt.Sprintf("user-%d", i)
		c := r.Pick(user)
		got[c]++
		if again := r.Pick(user); again != c {
			t.Fatalf("user %s landed on %s, then on %s", user, c, again)
		}
	}
	for c, want := range map[string]float64{"stripe": 0.90, "stripe_v2": 0.10} {
		share := float64(got[c]) / n
		if math.Abs(share-want) > 0.015 {
			t.Errorf("%s took %.2f %% of %d payments, want %.0f %% ± 1.5", c, 100*share, n, 100*want)
		}
	}
	if len(got) != 2 {
		t.Errorf("channels picked: %v", got)
	}
}

// TestRouterOutOfRotation: a variant forced to fail stays below the floor for the
// configured time and is taken out of rotation (reported once); the other is untouched
// and takes all the traffic.
func TestRouterOutOfRotation(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	var removed []string
	r, err := channel.NewRouter(channel.RouterConfig{
		Routes: []channel.Route{{Channel: "stripe", Weight: 90}, {Channel: "stripe_v2", Weight: 10}},
		Floor:  0.5, For: 2 * time.Minute, Window: 5 * time.Minute, MinSamples: 10,
		Now:       func() time.Time { return now },
		OnRemoved: func(c string, rate float64) { removed = append(removed, fmt.Sprintf("%s@%.2f", c, rate)) },
		Logger:    slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	inRotation := func(c string) bool {
		for _, s := range r.Stats() {
			if s.Channel == c {
				return s.InRotation
			}
		}
		return false
	}
	// 3 minutes of traffic, one outcome per channel every 5 s: v2 always fails, v1 mostly succeeds.
	for i := range 36 {
		r.Record("stripe", i%10 != 0)
		r.Record("stripe_v2", false)
		if i == 20 && !inRotation("stripe_v2") {
			t.Fatalf("stripe_v2 left rotation after %s below the floor, want %s", time.Duration(i-9)*5*time.Second, 2*time.Minute)
		}
		now = now.Add(5 * time.Second)
	}
	if inRotation("stripe_v2") || !inRotation("stripe") {
		t.Fatalf("stats %+v: want stripe_v2 out of rotation, stripe in", r.Stats())
	}
	if len(removed) != 1 || removed[0] != "stripe_v2@0.00" {
		t.Errorf("removals reported %v, want [stripe_v2@0.00]", removed)
	}
	for i := range 1000 {
		if c := r.Pick(fmt.Sprintf("user-%d", i)); c != "stripe" {
			t.Fatalf("user-%d picked %s with stripe_v2 out of rotation", i, c)
		}
	}
	r.Restore("stripe_v2")
	if !inRotation("stripe_v2") {
		t.Error("Restore did not put stripe_v2 back")
	}
}
