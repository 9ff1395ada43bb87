package closer_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/redisq"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/wakeup"
)

// waitClosed waits (polling the database, bounded by limit) until none of ids is open
// and returns the orders.
func waitClosed(t *testing.T, s store.Store, ids []string, limit time.Duration) []*orderly.Order {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(limit)
	for {
		var orders []*orderly.Order
		err := s.Read(ctx, func(tx store.Tx) error {
			orders = orders[:0]
			for _, id := range ids {
				o, err := tx.OrderGet(ctx, id)
				if err != nil {
					return err
				}
				orders = append(orders, o)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		open := 0
		for _, o := range orders {
			if o.State == orderly.StatePendingPayment {
				open++
			}
		}
		if open == 0 {
			return orders
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d orders still open after %s", open, len(ids), limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func createOrders(t *testing.T, svc *order.Service, n int) []string {
	t.Helper()
	if _, err := svc.SetStock(context.Background(), "sku", int64(n)); err != nil {
		t.Fatal(err)
	}
	ids := make([]string, n)
	for i := range n {
		o, _, err := svc.CreateOrder(context.Background(), &orderly.CreateOrderParams{UserID: "u", Currency: "USD",
			PaymentTimeoutSeconds: 1, Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}})
		if err != nil {
			t.Fatal(err)
		}
		ids[i] = o.ID
	}
	return ids
}

// TestClockSkew runs the timer of an instance whose clock is off the database's by ±10 s,
// jumps by ±1 h while orders wait, or steps by ±1 h at every reading (an NTP step landing
// between the offset measurement and the sleep that uses it, every time): no order closes
// early (the database clock decides) and none is missed or left waiting for the sweep or
// a whole MaxSleep (the timer sleeps on the monotonic clock, anchored to a reading of the
// database clock, so the local wall clock never times a sleep).
func TestClockSkew(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		skew, jump time.Duration
		// step is added to the clock at every reading.
		step time.Duration
	}{
		{name: "ahead 10s", skew: 10 * time.Second},
		{name: "behind 10s", skew: -10 * time.Second},
		{name: "jumps ahead 1h", jump: time.Hour},
		{name: "jumps back 1h", jump: -time.Hour},
		{name: "steps ahead 1h at every reading", step: time.Hour},
		{name: "steps back 1h at every reading", step: -time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			// Half the 10 s skew (an offset left out shows) and far below MaxSleep (a sleep
			// timed by a stepped clock shows: ≥ 29 s late), yet far above the scheduling
			// noise of -race on a machine running 8 test suites (up to ~2 s seen).
			const maxSleep, maxLateness = 30 * time.Second, 5 * time.Second
			ctx := context.Background()
			s, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlitetest.Path(t)})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			var skew, step atomic.Int64
			skew.Store(int64(tc.skew))
			clock := func() time.Time {
				// Round(0) drops the monotonic reading: this is a wall clock, as time.Now's
				// would be after a step.
				return time.Now().Round(0).Add(time.Duration(skew.Add(step.Load())))
			}
			cl, err := closer.New(closer.Config{Store: s, ClockCheckInterval: 50 * time.Millisecond, Clock: clock, MaxSleep: maxSleep})
			if err != nil {
				t.Fatal(err)
			}
			svc, err := order.NewService(order.Config{Store: s, Signals: signalsTo(cl)})
			if err != nil {
				t.Fatal(err)
			}
			if err := cl.Start(ctx); err != nil {
				t.Fatal(err)
			}
			defer cl.Stop()
			ids := createOrders(t, svc, 20)
			skew.Add(int64(tc.jump))
			step.Store(int64(tc.step))
			for _, o := range waitClosed(t, s, ids, 20*time.Second) {
				lateness := o.ClosedAt.Sub(o.CloseAt)
				if lateness < 0 || lateness > maxLateness {
					t.Errorf("order %s closed %d ms after close_at, want 0–%d", o.ID, lateness.Milliseconds(), maxLateness.Milliseconds())
				}
			}
			if tc.skew != 0 {
				// The offset is measured (database − local) for the metric, to ± half a
				// read's round trip.
				if off := cl.ClockOffset(); (off + tc.skew).Abs() > time.Second {
					t.Errorf("clock offset %s, want %s ± 1s", off, -tc.skew)
				}
			}
		})
	}
}

// TestRedisDataLoss: with the Redis delay queue driving the timer, losing Redis's data
// (the queue's key deleted, as by FLUSHALL or a restart without persistence) loses
// nothing and barely delays closes; the deep check puts the missing orders back into the
// queue.
func TestRedisDataLoss(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	redisURL := testdb.URL(t, "redis")
	s, err := sqlstore.Open(ctx, sqlstore.Config{URL: sqlitetest.Path(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	prefix := "orderlytest-timeout-" + time.Now().Format("150405.000000")
	q, err := redisq.New(ctx, redisq.Config{URL: redisURL, Prefix: prefix})
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	cl, err := closer.New(closer.Config{Store: s, DelayQueue: q, MaxSleep: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	svc, err := order.NewService(order.Config{Store: s, Signals: signalsTo(cl)})
	if err != nil {
		t.Fatal(err)
	}
	if err := cl.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()

	// With the queue intact, the queue closes the orders.
	kept := createOrders(t, svc, 10)
	for _, o := range waitClosed(t, s, kept, 5*time.Second) {
		if l := o.ClosedAt.Sub(o.CloseAt); l < 0 || l > time.Second {
			t.Errorf("queued order closed %s after close_at", l)
		}
	}
	// Lose the data: the queue no longer knows these orders (FLUSHALL, a restart without
	// persistence, an instance killed between its claim and its close, an instance on the
	// database timer). The timer also watches the database's earliest deadline, so they
	// still close promptly, without waiting for a sweep.
	lost := createOrders(t, svc, 10)
	if n, _ := q.Len(ctx); n != 10 {
		t.Fatalf("queue holds %d, want 10", n)
	}
	if err := q.Remove(ctx, lost); err != nil {
		t.Fatal(err)
	}
	for _, o := range waitClosed(t, s, lost, 5*time.Second) {
		if l := o.ClosedAt.Sub(o.CloseAt); l < 0 || l > 500*time.Millisecond {
			t.Errorf("order lost from the queue closed %s after close_at, want within 500 ms", l)
		}
	}

	// The deep check repairs the queue: open orders missing from it are added back.
	if _, err := svc.SetStock(ctx, "sku", 1); err != nil {
		t.Fatal(err)
	}
	later, _, err := svc.CreateOrder(ctx, &orderly.CreateOrderParams{UserID: "u", Currency: "USD", PaymentTimeoutSeconds: 3600,
		Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.Remove(ctx, []string{later.ID}); err != nil {
		t.Fatal(err)
	}
	scanned, repaired, err := cl.DeepCheck(ctx, nil)
	if err != nil || repaired != 1 || scanned < 1 {
		t.Fatalf("deep check: scanned %d repaired %d, %v; want the one missing order repaired", scanned, repaired, err)
	}
	scores, err := q.Scores(ctx, []string{later.ID})
	if err != nil || !scores[later.ID].Equal(later.CloseAt) {
		t.Fatalf("queue score of the repaired order %v (%v), want %s", scores[later.ID], err, later.CloseAt)
	}
}

// signalsTo returns the signals of a service that wake closer.
func signalsTo(cl *closer.Closer) *wakeup.Hub {
	h := &wakeup.Hub{}
	h.Connect(cl, nil)
	return h
}
