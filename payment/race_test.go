package payment_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

const (
	raceRounds = 200
	duplicates = 8 // identical success callbacks per round
)

// TestDuplicateCallbacksRace: each round, duplicates identical success callbacks for one
// attempt start together behind a barrier, for raceRounds rounds on every dialect. Every
// callback is acknowledged without error, exactly one applies, the order is paid once (one
// transition, 3 units sold once, its coupon used) and nothing is refunded (I3); verify
// finds nothing wrong at the end.
func TestDuplicateCallbacksRace(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testDuplicateCallbacksRace(t, dialect)
		})
	}
}

func testDuplicateCallbacksRace(t *testing.T, dialect string) {
	ctx := context.Background()
	began := time.Now()
	e := enginetest.New(t, enginetest.Options{Dialect: dialect})
	const sku, initial = "SKU-1", 1000
	e.SetStock(t, sku, initial)
	coupons := make([]*orderly.Coupon, raceRounds)
	e.InTx(t, func(tx store.Tx) error {
		for r := range coupons {
			coupons[r] = &orderly.Coupon{ID: fmt.Sprintf("coupon-%03d", r), UserID: "user-1", AmountOff: 50, Currency: "USD",
				State: orderly.CouponAvailable, CreatedAt: enginetest.Start}
			if err := tx.CouponInsert(ctx, coupons[r]); err != nil {
				return err
			}
		}
		return nil
	})
	winners := make([]int, duplicates)
	for r, c := range coupons {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: sku, Quantity: 3, UnitPrice: 250, CouponID: c.ID})
		p := start(t, e, o)
		cb := success(o, p, "txn-"+p.ID)

		var (
			ready, done sync.WaitGroup
			barrier     = make(chan struct{})
			results     = make([]*orderly.CallbackResult, duplicates)
			errs        = make([]error, duplicates)
		)
		ready.Add(duplicates)
		for i := range duplicates {
			done.Go(func() {
				ready.Done()
				<-barrier
				results[i], errs[i] = e.Payments.HandleCallback(ctx, cb)
			})
		}
		ready.Wait()
		close(barrier)
		done.Wait()

		applied := -1
		for i := range duplicates {
			if errs[i] != nil {
				t.Fatalf("round %d: callback %d: %v", r, i, errs[i])
			}
			if res := results[i]; res.Refund || res.Payment == nil || res.Payment.State != orderly.PaymentSucceeded {
				t.Fatalf("round %d: callback %d: refund %v, payment %+v; want the succeeded payment, no refund", r, i, res.Refund, res.Payment)
			}
			if !results[i].Applied {
				continue
			}
			if applied >= 0 {
				t.Fatalf("round %d: callbacks %d and %d both applied", r, applied, i)
			}
			applied = i
		}
		if applied < 0 {
			t.Fatalf("round %d: no callback applied", r)
		}
		winners[applied]++
		e.Drain(t)

		snap := e.Snapshot(t, o.ID, sku, c.ID, p.ID)
		trail, got, stock, coupon, pay := snap.Trail, snap.Order, snap.Stock, snap.Coupon, snap.Payment
		if len(trail) != 1 || trail[0].Event != orderly.EventPay {
			t.Fatalf("round %d: trail %+v, want one pay transition", r, trail)
		}
		type state struct {
			Order       orderly.State
			PayStatus   orderly.PayStatus
			Amount      int64
			Stock       orderly.Stock
			Coupon      string
			CouponOrder string
			Payment     orderly.PaymentState
			TxnID       string
			Refunded    int64
		}
		sold := int64(3 * (r + 1))
		have := state{got.State, got.PayStatus, got.Amount, *stock, coupon.State, coupon.OrderID, pay.State, pay.ChannelTxnID, e.Gateway.Refunded(p.ID)}
		want := state{orderly.StatePaid, orderly.PayPaid, 3*250 - 50, orderly.Stock{SKU: sku, Available: initial - sold, Sold: sold},
			orderly.CouponUsed, o.ID, orderly.PaymentSucceeded, "txn-" + p.ID, 0}
		if have != want {
			t.Fatalf("round %d:\nhave %+v\nwant %+v", r, have, want)
		}
	}
	// One order.paid event per order, no refund.
	paidEvents := map[string]int{}
	e.Read(t, func(tx store.Tx) error {
		msgs, err := tx.OutboxList(ctx, orderly.MessageDelivered, 1_000_000)
		for _, m := range msgs {
			if m.Topic == orderly.TopicPaymentRefund {
				t.Errorf("refund message %+v", m)
			}
			if m.Topic == orderly.TopicOrderPaid {
				paidEvents[m.Key]++
			}
		}
		return err
	})
	for key, n := range paidEvents {
		if n != 1 {
			t.Errorf("%d order.paid events for order %s, want 1", n, key)
		}
	}
	if len(paidEvents) != raceRounds {
		t.Errorf("order.paid events for %d orders, want %d", len(paidEvents), raceRounds)
	}
	rep, err := verify.Check(ctx, e.Store, verify.Options{RequireDrained: true, InitialStock: map[string]int64{sku: initial}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Violations)
	}
	t.Logf("%s: %d rounds of %d duplicates in %s; applied by callback %v", dialect, raceRounds, duplicates,
		time.Since(began).Round(time.Millisecond), winners)
}
