package order_test

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
	creators   = 8 // concurrent creates per round
)

// TestCreateRace: each round, creators orders are created at once behind a barrier, for
// raceRounds rounds of each kind on every dialect: for the last unit of a SKU (one is
// created, the others are refused out-of-stock) and with one coupon of a well-stocked SKU
// (one is created with it, the others are refused coupon-unavailable). The winner holds
// the unit or the coupon, the losers left nothing behind, and verify finds nothing wrong
// at the end (I3, I4).
func TestCreateRace(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testCreateRace(t, dialect)
		})
	}
}

func testCreateRace(t *testing.T, dialect string) {
	ctx := context.Background()
	began := time.Now()
	e := enginetest.New(t, enginetest.Options{Dialect: dialect})
	const plenty = raceRounds + creators // every create of a coupon round gets a unit
	initial := map[string]int64{"plenty": plenty}
	e.InTx(t, func(tx store.Tx) error {
		if _, err := tx.StockSet(ctx, "plenty", plenty); err != nil {
			return err
		}
		for r := range raceRounds {
			sku := fmt.Sprintf("last-%03d", r)
			initial[sku] = 1
			if _, err := tx.StockSet(ctx, sku, 1); err != nil {
				return err
			}
			if err := tx.CouponInsert(ctx, &orderly.Coupon{ID: fmt.Sprintf("coupon-%03d", r), UserID: "user-1", AmountOff: 100,
				Currency: "USD", State: orderly.CouponAvailable, CreatedAt: enginetest.Start}); err != nil {
				return err
			}
		}
		return nil
	})
	created := 0
	for r := range 2 * raceRounds {
		lastUnit := r%2 == 0
		p := orderly.CreateOrderParams{UserID: "user-1", Currency: "USD", PaymentTimeoutSeconds: 60,
			Items: []orderly.Item{{SKU: "plenty", Quantity: 1, UnitPrice: 1000}}, CouponID: fmt.Sprintf("coupon-%03d", r/2)}
		wantLost := orderly.ECOUPONUNAVAIL
		if lastUnit {
			p.Items[0].SKU, p.CouponID, wantLost = fmt.Sprintf("last-%03d", r/2), "", orderly.EOUTOFSTOCK
		}
		var (
			ready, done sync.WaitGroup
			barrier     = make(chan struct{})
			orders      = make([]*orderly.Order, creators)
			errs        = make([]error, creators)
		)
		ready.Add(creators)
		for i := range creators {
			done.Go(func() {
				params := p // each request its own copy
				ready.Done()
				<-barrier
				orders[i], _, errs[i] = e.Orders.CreateOrder(ctx, &params)
			})
		}
		ready.Wait()
		close(barrier)
		done.Wait()

		var winner *orderly.Order
		for i, err := range errs {
			switch {
			case err == nil && winner != nil:
				t.Fatalf("round %d: orders %s and %s both created", r, winner.ID, orders[i].ID)
			case err == nil:
				winner = orders[i]
			case orderly.ErrorCode(err) != wantLost:
				t.Fatalf("round %d: create %d: %v, want %s", r, i, err, wantLost)
			}
		}
		if winner == nil {
			t.Fatalf("round %d: no order created", r)
		}
		created++
		var (
			stock  *orderly.Stock
			coupon *orderly.Coupon
		)
		e.Read(t, func(tx store.Tx) (err error) {
			if stock, err = tx.StockGet(ctx, p.Items[0].SKU); err != nil {
				return err
			}
			if p.CouponID != "" {
				coupon, err = tx.CouponGet(ctx, p.CouponID)
			}
			return err
		})
		if lastUnit {
			if *stock != (orderly.Stock{SKU: p.Items[0].SKU, Held: 1}) {
				t.Fatalf("round %d: stock %+v, want the one unit held", r, stock)
			}
			continue
		}
		if coupon.State != orderly.CouponFrozen || coupon.OrderID != winner.ID || winner.Amount != 900 {
			t.Fatalf("round %d: coupon %s by %q, order %s amount %d; want frozen by the order, 900", r, coupon.State, coupon.OrderID, winner.ID, winner.Amount)
		}
		if held := int64(r/2 + 1); *stock != (orderly.Stock{SKU: "plenty", Available: plenty - held, Held: held}) {
			t.Fatalf("round %d: stock %+v, want %d held", r, stock, held)
		}
	}
	// The losers left nothing behind: one order per round.
	var list []*orderly.Order
	e.Read(t, func(tx store.Tx) (err error) {
		list, err = tx.OrderList(ctx, &store.ListParams{Limit: 10 * raceRounds})
		return err
	})
	if len(list) != created {
		t.Errorf("%d orders in the store, want %d (one per round)", len(list), created)
	}
	rep, err := verify.Check(ctx, e.Store, verify.Options{InitialStock: initial})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Violations)
	}
	t.Logf("%s: %d rounds of %d creates in %s", dialect, 2*raceRounds, creators, time.Since(began).Round(time.Millisecond))
}
