package timeout_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/timeout"
)

// seedDue inserts n pending orders with one reservation each, all due at the same
// millisecond (close_at = at), in transactions of 5000.
func seedDue(b *testing.B, e *enginetest.Env, n int, at time.Time, withCoupon bool) {
	b.Helper()
	ctx := context.Background()
	e.SetStock(b, "SKU-1", int64(n))
	for done := 0; done < n; {
		err := e.Store.InTx(ctx, func(tx store.Tx) error {
			for i := 0; i < 5000 && done < n; i, done = i+1, done+1 {
				id := fmt.Sprintf("order-%07d", done)
				o := &orderly.Order{ID: id, UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
					PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: "SKU-1", Quantity: 1, UnitPrice: 100}},
					Amount: 100, Currency: "USD", CreatedAt: at.Add(-time.Minute), ExpiresAt: at, CloseAt: at, Version: 1}
				if withCoupon {
					c := &orderly.Coupon{ID: "c-" + id, UserID: "u", AmountOff: 1, Currency: "USD", State: orderly.CouponFrozen, OrderID: id, CreatedAt: at}
					if err := tx.CouponInsert(ctx, c); err != nil {
						return err
					}
					o.CouponID = c.ID
				}
				if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o}); err != nil {
					return err
				}
				if ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: "SKU-1", Quantity: 1, Now: at}); err != nil || !ok {
					return fmt.Errorf("reserve: %v %w", ok, err)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkBurstClose measures DESIGN.md §8's burst figure on SQLite: orders due at the
// same instant, all closed (guarded update, audit rows, 3 outbox messages each) and their
// stock and coupons released by the relay. One op = the whole burst; the closes/s metric
// is what to compare. Size with ORDERLY_BENCH_BURST (default 10 000; the design's figure is 100 000).
func BenchmarkBurstClose(b *testing.B) {
	n := *burstSize
	for range b.N {
		b.StopTimer()
		e := enginetest.New(b, enginetest.Options{OutboxBatch: 1000})
		at := enginetest.Start.Add(time.Hour)
		seedDue(b, e, n, at, true)
		e.Clock.Set(at)
		ctx := context.Background()
		b.StartTimer()
		start := time.Now()
		res, err := e.Closer.CloseDue(ctx, timeout.TriggerTimer)
		if err != nil || res.Closed != n {
			b.Fatalf("closed %d of %d: %v", res.Closed, n, err)
		}
		closed := time.Since(start)
		if _, err := e.Relay.Drain(ctx); err != nil {
			b.Fatal(err)
		}
		total := time.Since(start)
		b.StopTimer()
		if s := e.StockOf(b, "SKU-1"); s.Available != int64(n) || s.Held != 0 {
			b.Fatalf("stock after burst %+v", s)
		}
		b.ReportMetric(float64(n)/closed.Seconds(), "closes/s")
		b.ReportMetric(float64(n)/total.Seconds(), "closed+released/s")
		b.ReportMetric(total.Seconds(), "s/burst")
	}
}
