package outbox_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/outbox"
)

// TestSlowCallHoldsBackOnlyItsKey: in the main lane (Concurrency 1, as the engine runs it),
// the call of key "slow" takes 3 s (a slow gateway or broker). The other key of its batch,
// and a message of another key written during that call, are delivered within 1 s (about 60 ms on an idle machine); the
// later message of key "slow" after it; every message exactly once, none left pending.
// The old relay waited for the slowest call of a batch: the other keys came after ~3 s.
func TestSlowCallHoldsBackOnlyItsKey(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := enginetest.New(t, enginetest.Options{Dialect: dialect})
			const slowFor, bound = 3 * time.Second, time.Second // bound leaves room for a loaded CI machine
			started := make(chan struct{}, 1)
			var mu sync.Mutex
			var blocked atomic.Bool
			var order []string
			var slowIDs []int64
			at := map[string]time.Time{} // key → when its first message was delivered
			relay, err := outbox.NewRelay(outbox.Config{Store: e.Store, PollInterval: 50 * time.Millisecond,
				Handlers: map[string]outbox.Handler{"test.main": {Call: func(ctx context.Context, m *orderly.Message) error {
					if m.Key == "slow" && blocked.CompareAndSwap(false, true) {
						started <- struct{}{}
						select {
						case <-time.After(slowFor):
						case <-ctx.Done():
							return ctx.Err()
						}
					}
					mu.Lock()
					defer mu.Unlock()
					order = append(order, m.Key)
					if m.Key == "slow" {
						slowIDs = append(slowIDs, m.ID)
					}
					if _, ok := at[m.Key]; !ok {
						at[m.Key] = time.Now()
					}
					return nil
				}}},
			})
			if err != nil {
				t.Fatal(err)
			}
			// One batch: key slow (two messages), then key mate.
			insertKeys(t, e, "test.main", 3, func(i int) string { return []string{"slow", "slow", "mate"}[i] })
			if err := relay.Start(ctx); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(relay.Stop)
			callStart := time.Now()
			select {
			case <-started:
			case <-time.After(5 * time.Second):
				t.Fatal("the slow call never started")
			}
			written := time.Now()
			insertKeys(t, e, "test.main", 1, func(int) string { return "other" })
			relay.Notify()

			deadline := time.Now().Add(10 * time.Second)
			for len(list(t, e, orderly.MessageDelivered)) < 4 {
				if time.Now().After(deadline) {
					t.Fatalf("delivered %d of 4 messages", len(list(t, e, orderly.MessageDelivered)))
				}
				time.Sleep(20 * time.Millisecond)
			}
			mu.Lock()
			defer mu.Unlock()
			other, mate := at["other"].Sub(written), at["mate"].Sub(callStart)
			t.Logf("%s: other delivered %v after it was written, mate %v after the slow call started", dialect, other, mate)
			if other > bound {
				t.Errorf("other key's message delivered %v after it was written during a %v call, want ≤ %v", other, slowFor, bound)
			}
			if mate > bound {
				t.Errorf("batch-mate key delivered %v after the slow call started, want ≤ %v", mate, bound)
			}
			if len(order) != 4 || len(slowIDs) != 2 || slowIDs[0] > slowIDs[1] {
				t.Fatalf("calls %v, key slow's messages %v: want each of the 4 messages once, key slow's in id order", order, slowIDs)
			}
			if n := len(list(t, e, orderly.MessagePending)); n != 0 {
				t.Errorf("%d messages left pending", n)
			}
		})
	}
}
