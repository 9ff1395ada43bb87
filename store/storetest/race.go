package storetest

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// Races: every round starts racers transactions at once (see race) on rows of its own, so
// rounds in one store do not disturb each other, and checks the round's invariants before
// the next one starts. Fixtures of every round are written up front in one transaction.
const (
	raceRounds = 200
	racers     = 8 // at most the connections of the store under test (sqlstore_test: 8)
)

var (
	errOutOfStock  = errors.New("storetest: out of stock")
	errCouponTaken = errors.New("storetest: coupon unavailable")
)

// race runs fn(0) … fn(n−1) in n goroutines that start together: each reports ready and
// waits on one barrier, opened once all are ready. It returns their errors by index.
func race(n int, fn func(i int) error) []error {
	var (
		ready, done sync.WaitGroup
		start       = make(chan struct{})
		errs        = make([]error, n)
	)
	ready.Add(n)
	for i := range n {
		done.Go(func() {
			ready.Done()
			<-start
			errs[i] = fn(i)
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
	return errs
}

// testRaces: concurrent creates for the last unit of a SKU and for one coupon, and
// concurrent releases (and commits) of one order's reservations and coupon, each for
// raceRounds rounds of racers transactions: exactly one wins every round and stock and
// coupons stay consistent (I3, I4).
func testRaces(t *testing.T, open opener) {
	t.Run("LastUnit", func(t *testing.T) { testRaceLastUnit(t, open) })
	t.Run("OneCoupon", func(t *testing.T) { testRaceOneCoupon(t, open) })
	t.Run("ReleaseTwice", func(t *testing.T) { testRaceMoves(t, open, false) })
	t.Run("ReleaseOrCommit", func(t *testing.T) { testRaceMoves(t, open, true) })
}

// createRacers runs one round of racers transactions, each inserting order "<prefix>-i"
// and calling take for it; a transaction whose take reports false rolls back with lost.
// It returns the index of the one winner, failing the test unless there is exactly one and
// every other racer lost cleanly.
func createRacers(t *testing.T, s store.Store, round int, prefix string, lost error,
	take func(ctx context.Context, tx store.Tx, orderID string) (bool, error)) int {
	t.Helper()
	ctx := t.Context()
	errs := race(racers, func(i int) error {
		return s.InTx(ctx, func(tx store.Tx) error {
			id := fmt.Sprintf("%s-%d", prefix, i)
			if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: newOrder(&orderOpts{ID: id})}); err != nil {
				return err
			}
			ok, err := take(ctx, tx, id)
			if err != nil {
				return err
			} else if !ok {
				return lost
			}
			return nil
		})
	})
	winner := -1
	for i, err := range errs {
		switch {
		case err == nil && winner >= 0:
			t.Fatalf("round %d: racers %d and %d both won", round, winner, i)
		case err == nil:
			winner = i
		case !errors.Is(err, lost):
			t.Fatalf("round %d: racer %d: %v", round, i, err)
		}
	}
	if winner < 0 {
		t.Fatalf("round %d: no racer won", round)
	}
	// Only the winner's order was committed.
	errs = make([]error, racers)
	if err := s.Read(ctx, func(tx store.Tx) error {
		for i := range racers {
			_, errs[i] = tx.OrderGet(ctx, fmt.Sprintf("%s-%d", prefix, i))
			if errs[i] != nil && orderly.ErrorCode(errs[i]) != orderly.ENOTFOUND {
				return errs[i]
			}
		}
		return nil
	}); err != nil {
		t.Fatalf("round %d: read orders: %v", round, err)
	}
	for i, err := range errs {
		if i == winner && err != nil {
			t.Fatalf("round %d: winner's order: %v", round, err)
		} else if i != winner && err == nil {
			t.Fatalf("round %d: loser %d's order was committed, want it rolled back", round, i)
		}
	}
	return winner
}

// testRaceLastUnit: racers creates reserve the one unit of a SKU: one reserves it, the
// others find it out of stock, and the SKU ends with 1 unit held by the winner's order.
func testRaceLastUnit(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	inTx(t, s, func(tx store.Tx) error {
		for r := range raceRounds {
			if _, err := tx.StockSet(ctx, fmt.Sprintf("last-%03d", r), 1); err != nil {
				return err
			}
		}
		return nil
	})
	wins := make([]int, racers)
	for r := range raceRounds {
		sku, prefix := fmt.Sprintf("last-%03d", r), fmt.Sprintf("last-%03d", r)
		w := createRacers(t, s, r, prefix, errOutOfStock, func(ctx context.Context, tx store.Tx, orderID string) (bool, error) {
			return tx.StockReserve(ctx, &store.StockReserveParams{OrderID: orderID, SKU: sku, Quantity: 1, Now: t0})
		})
		wins[w]++
		winner := fmt.Sprintf("%s-%d", prefix, w)
		var (
			stock *orderly.Stock
			held  []*orderly.Reservation
		)
		if err := s.Read(ctx, func(tx store.Tx) (err error) {
			if stock, err = tx.StockGet(ctx, sku); err != nil {
				return err
			}
			held, err = tx.ReservationList(ctx, winner)
			return err
		}); err != nil {
			t.Fatalf("round %d: %v", r, err)
		}
		equal(t, fmt.Sprintf("round %d: stock", r), stock, &orderly.Stock{SKU: sku, Held: 1})
		equal(t, fmt.Sprintf("round %d: reservations of the winner", r), held,
			[]*orderly.Reservation{{OrderID: winner, SKU: sku, Quantity: 1, State: orderly.ReservationHeld}})
		if t.Failed() {
			t.FailNow()
		}
	}
	equal(t, "reservations of every round", len(reservations(t, s, "")), raceRounds)
	t.Logf("wins by racer over %d rounds: %v", raceRounds, wins)
}

// testRaceOneCoupon: racers creates of one user freeze the same coupon: one freezes it,
// the others find it unavailable, and the coupon ends frozen by the winner's order.
func testRaceOneCoupon(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	coupons := make([]*orderly.Coupon, raceRounds)
	inTx(t, s, func(tx store.Tx) error {
		for r := range raceRounds {
			coupons[r] = &orderly.Coupon{ID: fmt.Sprintf("coupon-%03d", r), UserID: "user-1", AmountOff: 100, Currency: "EUR",
				State: orderly.CouponAvailable, CreatedAt: t0}
			if err := tx.CouponInsert(ctx, coupons[r]); err != nil {
				return err
			}
		}
		return nil
	})
	wins := make([]int, racers)
	for r, c := range coupons {
		prefix := fmt.Sprintf("freeze-%03d", r)
		w := createRacers(t, s, r, prefix, errCouponTaken, func(ctx context.Context, tx store.Tx, orderID string) (bool, error) {
			return tx.CouponFreeze(ctx, &store.CouponFreezeParams{ID: c.ID, UserID: c.UserID, OrderID: orderID, Currency: c.Currency, Now: t0})
		})
		wins[w]++
		want := *c
		want.State, want.OrderID = orderly.CouponFrozen, fmt.Sprintf("%s-%d", prefix, w)
		equal(t, fmt.Sprintf("round %d: coupon", r), getCoupon(t, s, c.ID), &want)
		if t.Failed() {
			t.FailNow()
		}
	}
	t.Logf("wins by racer over %d rounds: %v", raceRounds, wins)
}

// testRaceMoves: racers transactions release one order's reservations (two SKUs) and its
// frozen coupon at once; with mixed, a random half commit them and use the coupon instead
// (what a close and a payment do). Every round exactly one transaction moves the
// reservations, the same one moves the coupon, stock moves once, and over the rounds both
// kinds of winner occur.
func testRaceMoves(t *testing.T, open opener, mixed bool) {
	ctx, s := setup(t, open)
	type fixture struct{ order, skuA, skuB, coupon string }
	fx := make([]fixture, raceRounds)
	inTx(t, s, func(tx store.Tx) error {
		for r := range raceRounds {
			f := fixture{fmt.Sprintf("move-%03d", r), fmt.Sprintf("move-%03d-a", r), fmt.Sprintf("move-%03d-b", r), fmt.Sprintf("move-%03d-c", r)}
			fx[r] = f
			if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: newOrder(&orderOpts{ID: f.order, CouponID: f.coupon})}); err != nil {
				return err
			}
			for _, st := range []struct {
				sku   string
				avail int64
				q     int64
			}{{f.skuA, 5, 3}, {f.skuB, 2, 2}} {
				if _, err := tx.StockSet(ctx, st.sku, st.avail); err != nil {
					return err
				}
				if ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: f.order, SKU: st.sku, Quantity: st.q, Now: t0}); err != nil || !ok {
					return fmt.Errorf("reserve %s: %v, %w", st.sku, ok, err)
				}
			}
			if err := tx.CouponInsert(ctx, &orderly.Coupon{ID: f.coupon, UserID: "user-1", AmountOff: 100, Currency: "EUR",
				State: orderly.CouponFrozen, OrderID: f.order, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})
	rng := rand.New(rand.NewPCG(7, 11))
	outcomes := map[string]int{}
	for r, f := range fx {
		commits := make([]bool, racers)
		if mixed {
			for _, i := range rng.Perm(racers)[:racers/2] {
				commits[i] = true
			}
		}
		var (
			moved   = make([][]*orderly.Reservation, racers)
			coupons = make([]bool, racers)
		)
		errs := race(racers, func(i int) error {
			return s.InTx(ctx, func(tx store.Tx) error {
				var err error
				if commits[i] {
					if moved[i], err = tx.ReservationsCommit(ctx, f.order, t0); err != nil {
						return err
					}
					coupons[i], err = tx.CouponUse(ctx, f.coupon, f.order)
					return err
				}
				if moved[i], err = tx.ReservationsRelease(ctx, f.order, t0); err != nil {
					return err
				}
				coupons[i], err = tx.CouponRelease(ctx, f.coupon, f.order, t0)
				return err
			})
		})
		winner := -1
		for i := range racers {
			if errs[i] != nil {
				t.Fatalf("round %d: racer %d: %v", r, i, errs[i])
			}
			if len(moved[i]) == 0 && !coupons[i] {
				continue
			}
			if winner >= 0 {
				t.Fatalf("round %d: racers %d and %d both moved something: %v/%v and %v/%v", r, winner, i,
					moved[winner], coupons[winner], moved[i], coupons[i])
			}
			winner = i
		}
		if winner < 0 {
			t.Fatalf("round %d: nothing moved", r)
		}
		if !coupons[winner] {
			t.Fatalf("round %d: racer %d moved the reservations but not the coupon", r, winner)
		}
		state := orderly.ReservationReleased
		wantA, wantB := orderly.Stock{SKU: f.skuA, Available: 5}, orderly.Stock{SKU: f.skuB, Available: 2}
		wantCoupon := &orderly.Coupon{ID: f.coupon, UserID: "user-1", AmountOff: 100, Currency: "EUR", State: orderly.CouponAvailable, CreatedAt: t0}
		if commits[winner] {
			state = orderly.ReservationCommitted
			wantA, wantB = orderly.Stock{SKU: f.skuA, Available: 2, Sold: 3}, orderly.Stock{SKU: f.skuB, Sold: 2}
			wantCoupon.State, wantCoupon.OrderID = orderly.CouponUsed, f.order
		}
		outcomes[state]++
		want := []*orderly.Reservation{
			{OrderID: f.order, SKU: f.skuA, Quantity: 3, State: state},
			{OrderID: f.order, SKU: f.skuB, Quantity: 2, State: state},
		}
		what := fmt.Sprintf("round %d (%s won)", r, state)
		var (
			res            []*orderly.Reservation
			stockA, stockB *orderly.Stock
			coupon         *orderly.Coupon
		)
		if err := s.Read(ctx, func(tx store.Tx) (err error) {
			if res, err = tx.ReservationList(ctx, f.order); err != nil {
				return err
			}
			if stockA, err = tx.StockGet(ctx, f.skuA); err != nil {
				return err
			}
			if stockB, err = tx.StockGet(ctx, f.skuB); err != nil {
				return err
			}
			coupon, err = tx.CouponGet(ctx, f.coupon)
			return err
		}); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		equal(t, what+": moved", sortReservations(moved[winner]), want)
		equal(t, what+": reservations", res, want)
		equal(t, what+": "+f.skuA, stockA, &wantA)
		equal(t, what+": "+f.skuB, stockB, &wantB)
		equal(t, what+": coupon", coupon, wantCoupon)
		if t.Failed() {
			t.FailNow()
		}
	}
	if mixed && (outcomes[orderly.ReservationReleased] == 0 || outcomes[orderly.ReservationCommitted] == 0) {
		t.Errorf("outcomes over %d rounds %v: want both a release and a commit to win some", raceRounds, outcomes)
	}
	t.Logf("outcomes over %d rounds: %v", raceRounds, outcomes)
}

// lockWaits returns the store's count of transactions that waited for a lock (see
// LockWaiter); it fails the test when the store cannot tell.
func lockWaits(t *testing.T, s store.Store) int64 {
	t.Helper()
	w, ok := s.(LockWaiter)
	if !ok {
		t.Fatalf("the store under test (%T) does not implement storetest.LockWaiter", s)
	}
	n, err := w.LockWaits(t.Context())
	if err != nil {
		t.Fatalf("LockWaits: %v", err)
	}
	return n
}

// waitBlocked waits until the store shows more transactions waiting for a lock than base
// (a count from lockWaits taken before the waiter started), polling the database. It
// returns false, without waiting longer, when done is closed first: the would-be waiter
// finished without waiting. It fails the test after a minute.
func waitBlocked(t *testing.T, s store.Store, base int64, done <-chan struct{}) bool {
	t.Helper()
	deadline := time.NewTimer(time.Minute)
	defer deadline.Stop()
	tick := time.NewTicker(5 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return false
		default:
		}
		if lockWaits(t, s) > base {
			return true
		}
		select {
		case <-done:
			return false
		case <-deadline.C:
			t.Fatalf("no transaction waited for a lock within a minute (count stayed at %d)", base)
		case <-tick.C:
		}
	}
}
