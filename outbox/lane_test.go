package outbox_test

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
)

// TestLaneRunsApart: with a lane for topic "test.slow" (CommitPerKey, 2 slots), a call of
// that lane that hangs delays neither the main lane's messages nor the lane's other keys;
// the later message of the hanging key waits for it (key order), and is delivered once
// it is released.
func TestLaneRunsApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := enginetest.New(t, enginetest.Options{})
	release := make(chan struct{})
	var mu sync.Mutex
	var delivered []string
	record := func(m *orderly.Message) {
		mu.Lock()
		defer mu.Unlock()
		delivered = append(delivered, m.Topic+" "+m.Key)
	}
	var hanging atomic.Int64
	relay, err := outbox.NewRelay(outbox.Config{Store: e.Store, PollInterval: 10 * time.Millisecond,
		Handlers: map[string]outbox.Handler{
			"test.fast": {Call: func(_ context.Context, m *orderly.Message) error { record(m); return nil }},
			"test.slow": {Call: func(ctx context.Context, m *orderly.Message) error {
				if m.Key == "hang" {
					hanging.Add(1)
					select {
					case <-release:
					case <-ctx.Done():
						return ctx.Err()
					}
				}
				record(m)
				return nil
			}},
		},
		Lanes: []outbox.Lane{{Name: "slow", Topics: []string{"test.slow"}, Concurrency: 2, CommitPerKey: true}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := relay.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(relay.Stop)
	insertKeys(t, e, "test.slow", 2, func(int) string { return "hang" })
	insertKeys(t, e, "test.slow", 1, func(int) string { return "other-1" })
	insertKeys(t, e, "test.fast", 1, func(int) string { return "f" })
	insertKeys(t, e, "test.slow", 1, func(int) string { return "other-2" }) // claimed while "hang" holds a slot
	relay.Notify()

	got := func() string {
		mu.Lock()
		defer mu.Unlock()
		return strings.Join(delivered, ",")
	}
	wait := func(what string, cond func(string) bool) {
		t.Helper()
		deadline := time.Now().Add(3 * time.Second)
		for tick := time.NewTicker(5 * time.Millisecond); !cond(got()); <-tick.C {
			if time.Now().After(deadline) {
				t.Fatalf("%s: delivered %q", what, got())
			}
		}
	}
	// The hanging call may start after the others were delivered on a loaded machine: wait
	// for both.
	wait("the others while one call hangs", func(s string) bool {
		return strings.Contains(s, "test.fast f") && strings.Contains(s, "test.slow other-1") &&
			strings.Contains(s, "test.slow other-2") && hanging.Load() >= 1
	})
	if hanging.Load() != 1 || strings.Contains(got(), "hang") {
		t.Fatalf("hanging calls %d, delivered %q: want the first of key hang in flight, the second waiting", hanging.Load(), got())
	}
	close(release)
	wait("the hanging key once released", func(s string) bool { return strings.Count(s, "test.slow hang") == 2 })
	if hanging.Load() != 2 {
		t.Errorf("calls of key hang = %d, want 2, one after the other", hanging.Load())
	}
}

// TestLaneConfigRefused: a lane without topics or name, or a topic in two lanes, is refused.
func TestLaneConfigRefused(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	for _, lanes := range [][]outbox.Lane{
		{{Name: "a"}},
		{{Topics: []string{"t"}}},
		{{Name: "a", Topics: []string{"t"}}, {Name: "b", Topics: []string{"u", "t"}}},
		{{Name: "a", Topics: []string{"t"}, Concurrency: -1}},
	} {
		if _, err := outbox.NewRelay(outbox.Config{Store: e.Store, Lanes: lanes}); err == nil {
			t.Errorf("NewRelay with lanes %+v: no error", lanes)
		}
	}
}
