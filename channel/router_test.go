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

// TestRouterSplit: 10 000 payments of distinct users on a 90/10 split between two variants
// of one channel land within ±1.5 % of the weights, and each user always lands on the same
// variant.
func TestRouterSplit(t *testing.T) {
	t.Parallel()
	r, err := channel.NewRouter(channel.RouterConfig{Routes: []channel.Route{{Channel: "stripe@v1", Weight: 90}, {Channel: "stripe@v2", Weight: 10}}})
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
	for c, want := range map[string]float64{"stripe@v1": 0.90, "stripe@v2": 0.10} {
		share := float64(got[c]) / n
		if math.Abs(share-want) > 0.015 {
			t.Errorf("%s took %.2f %% of %d payments, want %.0f %% ± 1.5", c, 100*share, n, 100*want)
		}
	}
	if len(got) != 2 {
		t.Errorf("channels picked: %v", got)
	}
	want := []channel.Stat{{Route: "stripe@v1", Channel: "stripe", Variant: "v1", Weight: 90, InRotation: true},
		{Route: "stripe@v2", Channel: "stripe", Variant: "v2", Weight: 10, InRotation: true}}
	if got := r.Stats(); fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("Stats() = %+v, want %+v", got, want)
	}
}

// TestDeviations: the overall deviation spans every route in rotation with outcomes; the
// per-channel one only channels with two or more such variants.
func TestDeviations(t *testing.T) {
	t.Parallel()
	stats := []channel.Stat{
		{Route: "stripe@v1", Channel: "stripe", Variant: "v1", InRotation: true, Outcomes: 50, SuccessRate: 0.96},
		{Route: "stripe@v2", Channel: "stripe", Variant: "v2", InRotation: true, Outcomes: 10, SuccessRate: 0.90},
		{Route: "stripe@v3", Channel: "stripe", Variant: "v3", InRotation: false, Outcomes: 10, SuccessRate: 0.10},
		{Route: "alipay", Channel: "alipay", InRotation: true, Outcomes: 5, SuccessRate: 0.80},
		{Route: "wechat@a", Channel: "wechat", Variant: "a", InRotation: true, Outcomes: 5, SuccessRate: 0.5},
		{Route: "wechat@b", Channel: "wechat", Variant: "b", InRotation: true, Outcomes: 0},
	}
	overall, by := channel.Deviations(stats)
	if math.Abs(overall-0.46) > 1e-9 {
		t.Errorf("overall deviation %v, want 0.46 (0.96 − 0.50; out of rotation and no outcomes left out)", overall)
	}
	if len(by) != 1 || math.Abs(by["stripe"]-0.06) > 1e-9 {
		t.Errorf("per-channel deviations %v, want only stripe: 0.06", by)
	}
	if overall, by := channel.Deviations(nil); overall != 0 || len(by) != 0 {
		t.Errorf("Deviations(nil) = %v, %v; want 0 and none", overall, by)
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
		Routes: []channel.Route{{Channel: "stripe@v1", Weight: 90}, {Channel: "stripe@v2", Weight: 10}},
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
			if s.Route == c {
				return s.InRotation
			}
		}
		return false
	}
	// 3 minutes of traffic, one outcome per channel every 5 s: v2 always fails, v1 mostly succeeds.
	for i := range 36 {
		r.Record("stripe@v1", i%10 != 0)
		r.Record("stripe@v2", false)
		if i == 20 && !inRotation("stripe@v2") {
			t.Fatalf("stripe_v2 left rotation after %s below the floor, want %s", time.Duration(i-9)*5*time.Second, 2*time.Minute)
		}
		now = now.Add(5 * time.Second)
	}
	if inRotation("stripe@v2") || !inRotation("stripe@v1") {
		t.Fatalf("stats %+v: want stripe_v2 out of rotation, stripe in", r.Stats())
	}
	if len(removed) != 1 || removed[0] != "stripe@v2@0.00" {
		t.Errorf("removals reported %v, want [stripe@v2@0.00]", removed)
	}
	for i := range 1000 {
		if c := r.Pick(fmt.Sprintf("user-%d", i)); c != "stripe@v1" {
			t.Fatalf("user-%d picked %s with stripe_v2 out of rotation", i, c)
		}
	}
	r.Restore("stripe@v2")
	if !inRotation("stripe@v2") {
		t.Error("Restore did not put stripe_v2 back")
	}
}
