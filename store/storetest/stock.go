package storetest

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testStock checks stock and reservations: set, reserve, release and commit exactly once,
// conservation (I4), CHECK constraints, and releases racing in parallel transactions.
func testStock(t *testing.T, open opener) {
	t.Run("SetGetList", func(t *testing.T) {
		ctx, s := setup(t, open)
		equal(t, "StockList of an empty store", len(read(t, s, func(tx store.Tx) ([]*orderly.Stock, error) {
			return tx.StockList(ctx, "", 0)
		})), 0)
		for _, st := range []orderly.Stock{{SKU: "sku-c", Available: 3}, {SKU: "sku-a", Available: 1}, {SKU: "sku-b", Available: 2}, {SKU: "sku-zero"}} {
			got := write(t, s, func(tx store.Tx) (*orderly.Stock, error) { return tx.StockSet(ctx, st.SKU, st.Available) })
			equal(t, "StockSet("+st.SKU+")", got, &st)
		}
		equal(t, "StockGet(sku-b)", getStock(t, s, "sku-b"), &orderly.Stock{SKU: "sku-b", Available: 2})
		equal(t, "StockList, by SKU", read(t, s, func(tx store.Tx) ([]*orderly.Stock, error) { return tx.StockList(ctx, "", 0) }),
			[]*orderly.Stock{{SKU: "sku-a", Available: 1}, {SKU: "sku-b", Available: 2}, {SKU: "sku-c", Available: 3}, {SKU: "sku-zero"}})
		equal(t, "StockList after sku-a, 2", read(t, s, func(tx store.Tx) ([]*orderly.Stock, error) { return tx.StockList(ctx, "sku-a", 2) }),
			[]*orderly.Stock{{SKU: "sku-b", Available: 2}, {SKU: "sku-c", Available: 3}})
		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.StockGet(ctx, "missing"); return err })
		wantCode(t, "StockGet(missing)", err, orderly.ENOTFOUND)
	})

	t.Run("Adjust", func(t *testing.T) {
		ctx, s := setup(t, open)
		setStock(t, s, "sku-1", 10)
		adjust := func(delta, most int64) bool {
			return write(t, s, func(tx store.Tx) (bool, error) { return tx.StockAdjust(ctx, "sku-1", delta, most) })
		}
		for _, c := range []struct {
			delta, most int64
			ok          bool
			want        int64
		}{{-4, 100, true, 6}, {-7, 100, false, 6}, {-6, 100, true, 0}, {5, 100, true, 5}, {96, 100, false, 5}, {95, 100, true, 100}} {
			if ok := adjust(c.delta, c.most); ok != c.ok {
				t.Errorf("StockAdjust(%+d, most %d) = %v, want %v", c.delta, c.most, ok, c.ok)
			}
			equal(t, fmt.Sprintf("available after %+d", c.delta), getStock(t, s, "sku-1").Available, c.want)
		}
		if write(t, s, func(tx store.Tx) (bool, error) { return tx.StockAdjust(ctx, "missing", 1, 100) }) {
			t.Error("StockAdjust of a SKU without stock = true, want false")
		}
	})

	t.Run("SetKeepsHeldAndSold", func(t *testing.T) {
		ctx, s := setup(t, open)
		setStock(t, s, "sku-1", 10)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		insertOrder(t, s, &orderOpts{ID: "o2"})
		reserve(t, s, "o1", "sku-1", 3)
		reserve(t, s, "o2", "sku-1", 2)
		write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsCommit(ctx, "o2", t0) })
		equal(t, "before StockSet", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 5, Held: 3, Sold: 2})
		got := write(t, s, func(tx store.Tx) (*orderly.Stock, error) { return tx.StockSet(ctx, "sku-1", 7) })
		want := &orderly.Stock{SKU: "sku-1", Available: 7, Held: 3, Sold: 2}
		equal(t, "StockSet result", got, want)
		equal(t, "after StockSet", getStock(t, s, "sku-1"), want)
		equal(t, "reservations after StockSet", reservations(t, s, ""), []*orderly.Reservation{
			{OrderID: "o1", SKU: "sku-1", Quantity: 3, State: orderly.ReservationHeld},
			{OrderID: "o2", SKU: "sku-1", Quantity: 2, State: orderly.ReservationCommitted},
		})
	})

	t.Run("CommitSeveralSKUs", func(t *testing.T) {
		// An order holding units of several SKUs moves each SKU's own units to sold (one
		// set-based statement), and leaves the other orders' units held.
		ctx, s := setup(t, open)
		setStock(t, s, "sku-a", 10)
		setStock(t, s, "sku-b", 10)
		setStock(t, s, "sku-c", 10)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		insertOrder(t, s, &orderOpts{ID: "o2"})
		reserve(t, s, "o1", "sku-a", 3)
		reserve(t, s, "o1", "sku-b", 2)
		reserve(t, s, "o2", "sku-b", 4)
		moved := write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsCommit(ctx, "o1", t0) })
		equal(t, "committed", moved, []*orderly.Reservation{
			{OrderID: "o1", SKU: "sku-a", Quantity: 3, State: orderly.ReservationCommitted},
			{OrderID: "o1", SKU: "sku-b", Quantity: 2, State: orderly.ReservationCommitted}})
		equal(t, "stock", read(t, s, func(tx store.Tx) ([]*orderly.Stock, error) { return tx.StockList(ctx, "", 0) }), []*orderly.Stock{
			{SKU: "sku-a", Available: 7, Sold: 3}, {SKU: "sku-b", Available: 4, Held: 4, Sold: 2}, {SKU: "sku-c", Available: 10}})
	})

	t.Run("NegativeRejected", func(t *testing.T) { testStockNegative(t, open) })
	t.Run("Reserve", func(t *testing.T) { testStockReserve(t, open) })
	t.Run("InsertMany", func(t *testing.T) { testInsertMany(t, open) })
	t.Run("ReserveTwiceForOneOrder", func(t *testing.T) {
		ctx, s := setup(t, open)
		setStock(t, s, "sku-1", 10)
		insertOrder(t, s, &orderOpts{ID: "o1"})
		reserve(t, s, "o1", "sku-1", 3)
		err := txErr(t, s, func(tx store.Tx) error {
			_, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o1", SKU: "sku-1", Quantity: 2, Now: t0})
			return err
		})
		wantCode(t, "second reservation of sku-1 for o1", err, orderly.ECONFLICT)
		equal(t, "stock", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 7, Held: 3})
		equal(t, "reservations", reservations(t, s, "o1"), []*orderly.Reservation{
			{OrderID: "o1", SKU: "sku-1", Quantity: 3, State: orderly.ReservationHeld}})
	})
	t.Run("ReleaseExactlyOnce", func(t *testing.T) { testReservationsMove(t, open, false) })
	t.Run("CommitExactlyOnce", func(t *testing.T) { testReservationsMove(t, open, true) })
	t.Run("Conservation", func(t *testing.T) { testStockConservation(t, open) })
	t.Run("ConcurrentRelease", func(t *testing.T) { testConcurrentMoves(t, open, false) })
	t.Run("ConcurrentReleaseAndCommit", func(t *testing.T) { testConcurrentMoves(t, open, true) })
	t.Run("MovesOfSharedSKUsDoNotDeadlock", func(t *testing.T) { testSharedSKUMoves(t, open) })
}

func testStockNegative(t *testing.T, open opener) {
	t.Parallel()
	cases := []struct {
		name string
		fn   func(t *testing.T, tx store.Tx) error // must fail (or report no change)
	}{
		{"SetNegative", func(t *testing.T, tx store.Tx) error {
			_, err := tx.StockSet(t.Context(), "sku-1", -1)
			return err
		}},
		{"SetNegativeNewSKU", func(t *testing.T, tx store.Tx) error {
			_, err := tx.StockSet(t.Context(), "sku-new", -1)
			return err
		}},
		{"ReserveZero", func(t *testing.T, tx store.Tx) error {
			return reserveOrErr(t, tx, "o1", "sku-1", 0)
		}},
		{"ReserveNegative", func(t *testing.T, tx store.Tx) error {
			return reserveOrErr(t, tx, "o1", "sku-1", -3)
		}},
		{"ReserveNegativeMoreThanHeld", func(t *testing.T, tx store.Tx) error {
			return reserveOrErr(t, tx, "o1", "sku-1", -5)
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			setStock(t, s, "sku-1", 5)
			insertOrder(t, s, &orderOpts{ID: "o0"})
			insertOrder(t, s, &orderOpts{ID: "o1"})
			reserve(t, s, "o0", "sku-1", 4)
			err := txErr(t, s, func(tx store.Tx) error { return c.fn(t, tx) })
			if err == nil {
				t.Errorf("%s: no error", c.name)
			}
			equal(t, "stock", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 1, Held: 4})
			equal(t, "reservations", reservations(t, s, ""), []*orderly.Reservation{
				{OrderID: "o0", SKU: "sku-1", Quantity: 4, State: orderly.ReservationHeld}})
			err = s.Read(ctx, func(tx store.Tx) error { _, err := tx.StockGet(ctx, "sku-new"); return err })
			wantCode(t, "sku-new", err, orderly.ENOTFOUND)
		})
	}
}

// reserveOrErr reserves and returns an error unless the store reported a failure: either
// an error or ok=false is a rejection.
func reserveOrErr(t *testing.T, tx store.Tx, orderID, sku string, q int64) error {
	ok, err := tx.StockReserve(t.Context(), &store.StockReserveParams{OrderID: orderID, SKU: sku, Quantity: q, Now: t0})
	if err != nil {
		return err
	}
	if !ok {
		return errRollback
	}
	return nil
}

func testStockReserve(t *testing.T, open opener) {
	t.Parallel()
	cases := []struct {
		name      string
		sku       string
		quantity  int64
		heldByO0  int64 // units another order holds first
		want      bool
		wantStock orderly.Stock
	}{
		{"AllAvailable", "sku-1", 5, 0, true, orderly.Stock{Available: 0, Held: 5}},
		{"SomeAvailable", "sku-1", 2, 0, true, orderly.Stock{Available: 3, Held: 2}},
		{"NotEnough", "sku-1", 6, 0, false, orderly.Stock{Available: 5}},
		{"HeldUnitsAreNotAvailable", "sku-1", 3, 3, false, orderly.Stock{Available: 2, Held: 3}},
		{"RestAfterOtherOrder", "sku-1", 2, 3, true, orderly.Stock{Available: 0, Held: 5}},
		{"UnknownSKU", "missing", 1, 0, false, orderly.Stock{Available: 5}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ctx, s := setup(t, open)
			setStock(t, s, "sku-1", 5)
			insertOrder(t, s, &orderOpts{ID: "o0"})
			insertOrder(t, s, &orderOpts{ID: "o1"})
			var want []*orderly.Reservation
			if c.heldByO0 > 0 {
				reserve(t, s, "o0", "sku-1", c.heldByO0)
				want = append(want, &orderly.Reservation{OrderID: "o0", SKU: "sku-1", Quantity: c.heldByO0, State: orderly.ReservationHeld})
			}
			got := write(t, s, func(tx store.Tx) (bool, error) {
				return tx.StockReserve(ctx, &store.StockReserveParams{OrderID: "o1", SKU: c.sku, Quantity: c.quantity, Now: t0})
			})
			if got != c.want {
				t.Errorf("StockReserve = %v, want %v", got, c.want)
			}
			if c.want {
				want = append(want, &orderly.Reservation{OrderID: "o1", SKU: c.sku, Quantity: c.quantity, State: orderly.ReservationHeld})
			}
			ws := c.wantStock
			ws.SKU = "sku-1"
			equal(t, "stock", getStock(t, s, "sku-1"), &ws)
			equal(t, "reservations", reservations(t, s, ""), want)
		})
	}
}

// testReservationsMove releases (or commits) an order's reservations, then repeats and
// tries the other move: only the first call changes anything.
func testReservationsMove(t *testing.T, open opener, commit bool) {
	ctx, s := setup(t, open)
	setStock(t, s, "sku-a", 10)
	setStock(t, s, "sku-b", 5)
	setStock(t, s, "sku-c", 4)
	insertOrder(t, s, &orderOpts{ID: "o1"})
	insertOrder(t, s, &orderOpts{ID: "o2"})
	insertOrder(t, s, &orderOpts{ID: "o3"}) // no reservations
	reserve(t, s, "o1", "sku-b", 2)
	reserve(t, s, "o1", "sku-a", 3)
	reserve(t, s, "o2", "sku-a", 4)
	reserve(t, s, "o2", "sku-c", 1)

	release := func(orderID string) []*orderly.Reservation {
		t.Helper()
		return sortReservations(write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsRelease(ctx, orderID, t0.Add(time.Minute))
		}))
	}
	commitRes := func(orderID string) []*orderly.Reservation {
		t.Helper()
		return sortReservations(write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsCommit(ctx, orderID, t0.Add(time.Minute))
		}))
	}
	first, again, other := release, release, commitRes
	state := orderly.ReservationReleased
	wantA, wantB := orderly.Stock{SKU: "sku-a", Available: 6, Held: 4}, orderly.Stock{SKU: "sku-b", Available: 5}
	if commit {
		first, again, other = commitRes, commitRes, release
		state = orderly.ReservationCommitted
		wantA, wantB = orderly.Stock{SKU: "sku-a", Available: 3, Held: 4, Sold: 3}, orderly.Stock{SKU: "sku-b", Available: 3, Sold: 2}
	}
	wantC := orderly.Stock{SKU: "sku-c", Available: 3, Held: 1}
	wantMoved := []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 3, State: state},
		{OrderID: "o1", SKU: "sku-b", Quantity: 2, State: state},
	}
	wantStock := func(what string) {
		t.Helper()
		equal(t, what+": sku-a", getStock(t, s, "sku-a"), &wantA)
		equal(t, what+": sku-b", getStock(t, s, "sku-b"), &wantB)
		equal(t, what+": sku-c", getStock(t, s, "sku-c"), &wantC)
		equal(t, what+": reservations", reservations(t, s, ""), []*orderly.Reservation{
			wantMoved[0], wantMoved[1],
			{OrderID: "o2", SKU: "sku-a", Quantity: 4, State: orderly.ReservationHeld},
			{OrderID: "o2", SKU: "sku-c", Quantity: 1, State: orderly.ReservationHeld},
		})
	}

	equal(t, "first move", first("o1"), wantMoved)
	wantStock("after the first move")
	equal(t, "o1's reservations", reservations(t, s, "o1"), wantMoved)
	equal(t, "repeated move", len(again("o1")), 0)
	wantStock("after the repeated move")
	equal(t, "the other move after the first", len(other("o1")), 0)
	wantStock("after the other move")
	equal(t, "move of an order without reservations", len(first("o3")), 0)
	equal(t, "move of a missing order", len(first("missing")), 0)
	wantStock("after moves of other orders")
}

// sortReservations sorts by order and SKU (a RETURNING clause has no defined order).
func sortReservations(rs []*orderly.Reservation) []*orderly.Reservation {
	slices.SortFunc(rs, func(a, b *orderly.Reservation) int {
		return cmp.Or(strings.Compare(a.OrderID, b.OrderID), strings.Compare(a.SKU, b.SKU))
	})
	return rs
}

// testStockConservation runs a deterministic random mix of reserves, releases and commits
// and checks I4 after every step: available+held+sold is constant per SKU, held is the sum
// of held reservations and sold the sum of committed ones.
func testStockConservation(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	initial := map[string]int64{"sku-a": 20, "sku-b": 7, "sku-c": 1}
	for sku, n := range initial {
		setStock(t, s, sku, n)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	skus := []string{"sku-a", "sku-b", "sku-c"}
	var orders []string
	for i := range 60 {
		switch op := rng.IntN(4); {
		case op <= 1 || len(orders) == 0:
			id := fmt.Sprintf("o%03d", i)
			insertOrder(t, s, &orderOpts{ID: id})
			orders = append(orders, id)
			for _, sku := range skus {
				if rng.IntN(2) == 0 {
					continue
				}
				inTx(t, s, func(tx store.Tx) error {
					_, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: sku,
						Quantity: 1 + rng.Int64N(4), Now: t0})
					return err
				})
			}
		case op == 2:
			id := orders[rng.IntN(len(orders))]
			write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsRelease(ctx, id, t0) })
		default:
			id := orders[rng.IntN(len(orders))]
			write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsCommit(ctx, id, t0) })
		}
		held, sold := map[string]int64{}, map[string]int64{}
		for _, r := range reservations(t, s, "") {
			switch r.State {
			case orderly.ReservationHeld:
				held[r.SKU] += r.Quantity
			case orderly.ReservationCommitted:
				sold[r.SKU] += r.Quantity
			}
		}
		for _, sku := range skus {
			st := getStock(t, s, sku)
			if st.Available+st.Held+st.Sold != initial[sku] || st.Held != held[sku] || st.Sold != sold[sku] ||
				st.Available < 0 {
				t.Fatalf("step %d: %s = %+v; want available+held+sold = %d, held = %d, sold = %d",
					i, sku, st, initial[sku], held[sku], sold[sku])
			}
		}
	}
}

// testConcurrentMoves races parallel transactions on one order's reservations: all
// releases, or (mixed) releases against commits. Exactly one transaction moves the
// reservations and the stock moves exactly once.
func testConcurrentMoves(t *testing.T, open opener, mixed bool) {
	ctx, s := setup(t, open)
	setStock(t, s, "sku-a", 10)
	setStock(t, s, "sku-b", 5)
	insertOrder(t, s, &orderOpts{ID: "o1"})
	reserve(t, s, "o1", "sku-a", 3)
	reserve(t, s, "o1", "sku-b", 2)

	const n = 4
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		moved   [n][]*orderly.Reservation
		errs    [n]error
		commits [n]bool
	)
	for i := range n {
		commits[i] = mixed && i%2 == 1
		wg.Go(func() {
			<-start
			errs[i] = s.InTx(ctx, func(tx store.Tx) error {
				var err error
				if commits[i] {
					moved[i], err = tx.ReservationsCommit(ctx, "o1", t0)
				} else {
					moved[i], err = tx.ReservationsRelease(ctx, "o1", t0)
				}
				return err
			})
		})
	}
	close(start)
	wg.Wait()

	winner := -1
	for i := range n {
		if errs[i] != nil {
			t.Fatalf("transaction %d: %v", i, errs[i])
		}
		if len(moved[i]) == 0 {
			continue
		}
		if winner >= 0 {
			t.Fatalf("transactions %d and %d both moved o1's reservations: %v and %v", winner, i, moved[winner], moved[i])
		}
		winner = i
	}
	if winner < 0 {
		t.Fatal("no transaction moved o1's reservations")
	}
	state := orderly.ReservationReleased
	wantA, wantB := orderly.Stock{SKU: "sku-a", Available: 10}, orderly.Stock{SKU: "sku-b", Available: 5}
	if commits[winner] {
		state = orderly.ReservationCommitted
		wantA, wantB = orderly.Stock{SKU: "sku-a", Available: 7, Sold: 3}, orderly.Stock{SKU: "sku-b", Available: 3, Sold: 2}
	}
	want := []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 3, State: state},
		{OrderID: "o1", SKU: "sku-b", Quantity: 2, State: state},
	}
	equal(t, "moved", sortReservations(moved[winner]), want)
	equal(t, "reservations", reservations(t, s, "o1"), want)
	equal(t, "sku-a", getStock(t, s, "sku-a"), &wantA)
	equal(t, "sku-b", getStock(t, s, "sku-b"), &wantB)
}

// testSharedSKUMoves: transactions releasing and committing different orders of the same
// SKUs (closes and payments of a hot product) wait for each other's stock rows but never
// deadlock. On MySQL, marking the reservations before taking the stock rows took each
// stock row shared first (the foreign key check of the rewritten (sku, state) index
// entry) and exclusive next: two such transactions deadlocked, about 1000 times in a
// minute of simulate on MariaDB. A store that counts aborted transactions must count none.
func testSharedSKUMoves(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	const workers, rounds = 8, 10
	setStock(t, s, "sku-a", workers*rounds*2)
	setStock(t, s, "sku-b", workers*rounds*2)
	orders := make([][]string, workers)
	for w := range workers {
		for r := range rounds {
			id := nextID("shared")
			insertOrder(t, s, &orderOpts{ID: id})
			reserve(t, s, id, "sku-a", 1)
			if (w+r)%3 != 0 { // most hold both SKUs (one locking statement), some one
				reserve(t, s, id, "sku-b", 1)
			}
			orders[w] = append(orders[w], id)
		}
	}
	before := abortCount(s)
	var (
		wg          sync.WaitGroup
		start       = make(chan struct{})
		mu          sync.Mutex
		sold, freed int64
	)
	for w := range workers {
		wg.Go(func() {
			<-start
			for r, id := range orders[w] {
				var moved []*orderly.Reservation
				err := s.InTx(ctx, func(tx store.Tx) (err error) {
					if (w+r)%2 == 0 {
						moved, err = tx.ReservationsCommit(ctx, id, t0)
					} else {
						moved, err = tx.ReservationsReleaseMany(ctx, []string{id}, t0)
					}
					return err
				})
				if err != nil {
					t.Errorf("worker %d, order %s: %v", w, id, err)
					return
				}
				mu.Lock()
				for _, m := range moved {
					if m.State == orderly.ReservationCommitted {
						sold += m.Quantity
					} else {
						freed += m.Quantity
					}
				}
				mu.Unlock()
			}
		})
	}
	close(start)
	wg.Wait()
	if n := abortCount(s) - before; n != 0 {
		t.Errorf("the database aborted %d transactions for a deadlock on the stock rows, want none", n)
	}
	a, b := getStock(t, s, "sku-a"), getStock(t, s, "sku-b")
	if a.Held != 0 || b.Held != 0 || a.Sold+b.Sold != sold || a.Available+b.Available != 2*workers*rounds*2-sold {
		t.Errorf("stock after the moves: %+v and %+v; want nothing held, %d sold, %d released", a, b, sold, freed)
	}
}

// testInsertMany: the multi-row writes of a batch of creates. 70 orders (more than one
// statement's rows) written by OrdersInsertMany read back as the same orders written one
// by one (deadline, idempotency key and fingerprint included); TransitionsInsertMany writes
// their audit rows; StockLockAvailable reads a SKU's units (ok=false without a row); and
// StockReserveMany reserves the total once with a held reservation per order, or changes
// nothing and fails when the total is not available.
func testInsertMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	setStock(t, s, "sku-1", 5)
	const n = 70
	var many, single []*store.OrderInsertParams
	for i := range n {
		for _, set := range []*[]*store.OrderInsertParams{&many, &single} {
			id := fmt.Sprintf("m%03d", i)
			if set == &single {
				id = fmt.Sprintf("s%03d", i)
			}
			o := &orderOpts{ID: id, UserID: fmt.Sprintf("user-%d", i%3), CreatedAt: t0.Add(time.Duration(i) * time.Millisecond),
				NoDeadline: i%7 == 0}
			if i%2 == 0 {
				o.IdempotencyKey, o.RequestHash = id+"-key", fmt.Sprintf("hash-%d", i)
			}
			*set = append(*set, &store.OrderInsertParams{Order: newOrder(o), IdempotencyKey: o.IdempotencyKey,
				RequestHash: o.RequestHash, NoDeadline: o.NoDeadline})
		}
	}
	inTx(t, s, func(tx store.Tx) error { return tx.OrdersInsertMany(ctx, many) })
	inTx(t, s, func(tx store.Tx) error {
		for _, p := range single {
			if err := tx.OrderInsert(ctx, p); err != nil {
				return err
			}
		}
		return nil
	})
	for i := range n {
		got, want := getOrder(t, s, many[i].Order.ID), getOrder(t, s, single[i].Order.ID)
		want.ID = got.ID
		equal(t, "order "+got.ID, got, want)
		if many[i].IdempotencyKey != "" {
			o, hash := read2(t, s, func(tx store.Tx) (*orderly.Order, string, error) {
				return tx.OrderGetByIdempotencyKey(ctx, many[i].Order.UserID, many[i].IdempotencyKey)
			})
			if o.ID != got.ID || hash != many[i].RequestHash {
				t.Errorf("key %s: order %s hash %q, want %s %q", many[i].IdempotencyKey, o.ID, hash, got.ID, many[i].RequestHash)
			}
		}
	}
	audits := make([]*orderly.Transition, n)
	for i := range audits {
		audits[i] = &orderly.Transition{OrderID: many[i].Order.ID, To: orderly.StatePendingPayment, Event: orderly.EventCreate,
			PayStatusTo: orderly.PayUnpaid, Actor: "buyer", At: t0, TraceID: fmt.Sprintf("trace-%d", i)}
	}
	inTx(t, s, func(tx store.Tx) error { return tx.TransitionsInsertMany(ctx, audits) })
	for _, i := range []int{0, 63, 64, n - 1} {
		trs := read(t, s, func(tx store.Tx) ([]*orderly.Transition, error) { return tx.TransitionList(ctx, many[i].Order.ID) })
		if len(trs) != 1 || trs[0].Event != orderly.EventCreate || trs[0].TraceID != audits[i].TraceID || !trs[0].At.Equal(t0) {
			t.Errorf("audit rows of %s: %+v, want the one creation row", many[i].Order.ID, trs)
		}
	}

	type avail struct {
		n  int64
		ok bool
	}
	lock := func(sku string) avail {
		var a avail
		inTx(t, s, func(tx store.Tx) (err error) {
			a.n, a.ok, err = tx.StockLockAvailable(ctx, sku)
			return err
		})
		return a
	}
	equal(t, "available of sku-1", lock("sku-1"), avail{5, true})
	equal(t, "available of a SKU without stock", lock("missing"), avail{0, false})
	reserveMany := func(qty ...int64) error {
		return s.InTx(ctx, func(tx store.Tx) error {
			ps := make([]*store.StockReserveParams, len(qty))
			for i, q := range qty {
				ps[i] = &store.StockReserveParams{OrderID: many[i].Order.ID, SKU: "sku-1", Quantity: q, Now: t0}
			}
			return tx.StockReserveMany(ctx, "sku-1", ps)
		})
	}
	if err := reserveMany(2, 1, 3); err == nil {
		t.Error("StockReserveMany of 6 units out of 5 succeeded")
	}
	equal(t, "stock after a refused StockReserveMany", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Available: 5})
	if err := reserveMany(2, 1, 2); err != nil {
		t.Fatal(err)
	}
	equal(t, "stock", getStock(t, s, "sku-1"), &orderly.Stock{SKU: "sku-1", Held: 5})
	equal(t, "reservations", reservations(t, s, ""), []*orderly.Reservation{
		{OrderID: "m000", SKU: "sku-1", Quantity: 2, State: orderly.ReservationHeld},
		{OrderID: "m001", SKU: "sku-1", Quantity: 1, State: orderly.ReservationHeld},
		{OrderID: "m002", SKU: "sku-1", Quantity: 2, State: orderly.ReservationHeld},
	})
}
