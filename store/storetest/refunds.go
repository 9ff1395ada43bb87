package storetest

import (
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testRefunds checks refunds and the figures they move: round trips, the idempotency key
// unique per order, the guarded requested → succeeded|failed change, the refunded-amount
// guard of orders (alone and under concurrent refunds), the per-SKU refunded and restocked
// counts of sold reservations with their stock moves, and the CHECK constraints.
func testRefunds(t *testing.T, open opener) {
	t.Run("RoundTrip", func(t *testing.T) { testRefundRoundTrip(t, open) })
	t.Run("IdempotencyKey", func(t *testing.T) { testRefundIdempotencyKey(t, open) })
	t.Run("SetState", func(t *testing.T) { testRefundSetState(t, open) })
	t.Run("OrderAddRefunded", func(t *testing.T) { testOrderAddRefunded(t, open) })
	t.Run("ConcurrentRefundsStayWithinAmount", func(t *testing.T) { testConcurrentRefunds(t, open) })
	t.Run("ReservationRefund", func(t *testing.T) { testReservationRefund(t, open) })
	t.Run("RestockFollowsRefund", func(t *testing.T) { testRestockFollowsRefund(t, open) })
	t.Run("RefundOrderIDs", func(t *testing.T) { testRefundOrderIDs(t, open) })
	t.Run("ReconcileRefundsStuck", func(t *testing.T) { testReconcileRefundsStuck(t, open) })
	t.Run("GetByProviderRef", func(t *testing.T) { testRefundGetByProviderRef(t, open) })
	t.Run("SetProvider", func(t *testing.T) { testRefundSetProvider(t, open) })
	t.Run("ReconcileRefundsSucceeded", func(t *testing.T) { testReconcileRefundsSucceeded(t, open) })
	t.Run("Checks", func(t *testing.T) { testRefundChecks(t, open) })
}

// paidOrderWithPayment inserts a paid order of items (default one unit of sku-1 at 1000)
// and its succeeded payment.
func paidOrderWithPayment(t *testing.T, s store.Store, items []orderly.Item) (*orderly.Order, *orderly.Payment) {
	t.Helper()
	opts := paidOpts("", t0)
	opts.ID, opts.Items = nextID("order"), items
	o := insertOrder(t, s, opts)
	p := insertPayment(t, s, &paymentOpts{OrderID: o.ID, Amount: o.Amount, State: orderly.PaymentSucceeded, ChannelTxnID: nextID("txn")})
	return o, p
}

func newRefund(o *orderly.Order, p *orderly.Payment, amount int64) *orderly.Refund {
	return &orderly.Refund{ID: nextID("refund"), OrderID: o.ID, PaymentID: p.ID, Amount: amount, Currency: o.Currency,
		Items: []orderly.RefundItem{}, State: orderly.RefundRequested, CreatedAt: t0}
}

func testRefundRoundTrip(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	zone := time.FixedZone("UTC+8", 8*3600)
	in := &orderly.Refund{ID: "refund-a", OrderID: o.ID, PaymentID: p.ID, Amount: 400, Currency: "EUR",
		Items: []orderly.RefundItem{{SKU: "sku-1", Quantity: 1}}, Restock: true, Reason: "returned: wrong size ✓",
		State: orderly.RefundRequested, CreatedAt: time.Date(2030, 1, 2, 11, 4, 5, 678_901_234, zone)}
	inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: in}) })
	second := newRefund(o, p, 100)
	second.CreatedAt = t0.Add(time.Second)
	inTx(t, s, func(tx store.Tx) error {
		return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: second})
	})
	other, op := paidOrderWithPayment(t, s, nil)
	third := newRefund(other, op, 1000)
	inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: third}) })

	want := *in
	want.CreatedAt = time.Date(2030, 1, 2, 3, 4, 5, 678_000_000, time.UTC)
	got := read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(t.Context(), "refund-a") })
	equal(t, "refund read back", got, &want)
	if got.CreatedAt.Location() != time.UTC {
		t.Errorf("created_at location %v, want UTC", got.CreatedAt.Location())
	}
	list := read(t, s, func(tx store.Tx) ([]*orderly.Refund, error) { return tx.RefundList(t.Context(), o.ID) })
	equal(t, "refunds of the order, oldest first", list, []*orderly.Refund{&want, second})
	all := read(t, s, func(tx store.Tx) ([]*orderly.Refund, error) { return tx.RefundList(t.Context(), "") })
	equal(t, "refunds of every order", len(all), 3)
	err := s.Read(t.Context(), func(tx store.Tx) error { _, err := tx.RefundGet(t.Context(), "missing"); return err })
	wantCode(t, "get a missing refund", err, orderly.ENOTFOUND)
	err = txErr(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: in}) })
	wantCode(t, "insert the same id again", err, orderly.ECONFLICT)
}

func testRefundIdempotencyKey(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	first := newRefund(o, p, 300)
	inTx(t, s, func(tx store.Tx) error {
		return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: first, IdempotencyKey: "k1", RequestHash: "h1"})
	})
	type byKey struct {
		Refund *orderly.Refund
		Hash   string
	}
	got := read(t, s, func(tx store.Tx) (byKey, error) {
		f, h, err := tx.RefundGetByIdempotencyKey(t.Context(), o.ID, "k1")
		return byKey{f, h}, err
	})
	equal(t, "refund by key", got, byKey{first, "h1"})
	err := txErr(t, s, func(tx store.Tx) error {
		return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: newRefund(o, p, 1), IdempotencyKey: "k1", RequestHash: "h2"})
	})
	wantCode(t, "same key, same order", err, orderly.ECONFLICT)
	// The key is unique per order: another order may use it, and refunds without a key
	// never collide.
	other, op := paidOrderWithPayment(t, s, nil)
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: newRefund(other, op, 1), IdempotencyKey: "k1"}); err != nil {
			return err
		}
		if err := tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: newRefund(o, p, 1)}); err != nil {
			return err
		}
		return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: newRefund(o, p, 1)})
	})
	err = s.Read(t.Context(), func(tx store.Tx) error {
		_, _, err := tx.RefundGetByIdempotencyKey(t.Context(), o.ID, "k2")
		return err
	})
	wantCode(t, "unknown key", err, orderly.ENOTFOUND)
}

func testRefundSetState(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	f := newRefund(o, p, 300)
	inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: f}) })
	at := t0.Add(time.Minute)
	set := func(to orderly.RefundState, reason string) bool {
		return write(t, s, func(tx store.Tx) (bool, error) {
			return tx.RefundSetState(t.Context(), &store.RefundSetStateParams{ID: f.ID, From: orderly.RefundRequested, To: to,
				FailReason: reason, CompletedAt: at})
		})
	}
	equal(t, "requested → succeeded", set(orderly.RefundSucceeded, ""), true)
	equal(t, "succeeded again", set(orderly.RefundSucceeded, ""), false)
	equal(t, "succeeded → failed", set(orderly.RefundFailed, "late refusal"), false)
	got := read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(t.Context(), f.ID) })
	want := *f
	want.State, want.CompletedAt = orderly.RefundSucceeded, &at
	equal(t, "refund after the changes", got, &want)
}

func testOrderAddRefunded(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, _ := paidOrderWithPayment(t, s, []orderly.Item{{SKU: "sku-1", Quantity: 3, UnitPrice: 1000}})
	refundable := []orderly.State{orderly.StatePaid, orderly.StateShipped, orderly.StateCompleted, orderly.StateRefunding}
	add := func(id string, delta int64, states []orderly.State) bool {
		return write(t, s, func(tx store.Tx) (bool, error) {
			return tx.OrderAddRefunded(t.Context(), &store.OrderAddRefundedParams{ID: id, Delta: delta, States: states})
		})
	}
	for _, step := range []struct {
		delta int64
		ok    bool
		total int64
	}{
		{1000, true, 1000},
		{1500, true, 2500},
		{501, false, 2500}, // beyond the amount
		{500, true, 3000},  // exactly the amount
		{1, false, 3000},
		{-1000, true, 2000}, // a failed refund gives its amount back
		{-2001, false, 2000},
	} {
		if got := add(o.ID, step.delta, refundable); got != step.ok {
			t.Errorf("add %d: changed %v, want %v", step.delta, got, step.ok)
		}
		if got := getOrder(t, s, o.ID); got.RefundedAmount != step.total || got.Version != o.Version {
			t.Errorf("after add %d: refunded_amount %d version %d, want %d and version unchanged %d",
				step.delta, got.RefundedAmount, got.Version, step.total, o.Version)
		}
	}
	pending := insertOrder(t, s, &orderOpts{})
	equal(t, "add to a pending order", add(pending.ID, 1, refundable), false)
	equal(t, "add outside the listed states", add(o.ID, 1, []orderly.State{orderly.StateShipped}), false)
	equal(t, "add to a missing order", add("missing", 1, refundable), false)
}

// testConcurrentRefunds: while one transaction holds a refund of 600 of an order of 1000,
// five refunds of 300 run in parallel transactions. The guard must judge each on the row
// as committed before it: exactly one passes, and the total is 900, never 1200 or more.
func testConcurrentRefunds(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, _ := paidOrderWithPayment(t, s, nil)
	refundable := []orderly.State{orderly.StatePaid}
	held, release := make(chan struct{}), make(chan struct{})
	first := make(chan error, 1)
	go func() {
		first <- s.InTx(t.Context(), func(tx store.Tx) error {
			ok, err := tx.OrderAddRefunded(t.Context(), &store.OrderAddRefundedParams{ID: o.ID, Delta: 600, States: refundable})
			if err == nil && !ok {
				err = errRollback
			}
			close(held)
			if err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	<-held
	const racers = 5
	var (
		wg     sync.WaitGroup
		passed = make([]bool, racers)
		errs   = make([]error, racers)
	)
	for i := range racers {
		wg.Go(func() {
			errs[i] = s.InTx(t.Context(), func(tx store.Tx) error {
				var err error
				passed[i], err = tx.OrderAddRefunded(t.Context(), &store.OrderAddRefundedParams{ID: o.ID, Delta: 300, States: refundable})
				return err
			})
		})
	}
	close(release)
	wg.Wait()
	if err := <-first; err != nil {
		t.Fatalf("first refund: %v", err)
	}
	n := 0
	for i := range racers {
		if errs[i] != nil {
			t.Errorf("racer %d: %v", i, errs[i])
		}
		if passed[i] {
			n++
		}
	}
	equal(t, "refunds of 300 that passed", n, 1)
	equal(t, "refunded_amount", getOrder(t, s, o.ID).RefundedAmount, int64(900))
}

func testReservationRefund(t *testing.T, open opener) {
	_, s := setup(t, open)
	setStock(t, s, "sku-r", 10)
	setStock(t, s, "sku-q", 10)
	o, _ := paidOrderWithPayment(t, s, []orderly.Item{{SKU: "sku-r", Quantity: 3, UnitPrice: 100}, {SKU: "sku-q", Quantity: 2, UnitPrice: 100}})
	reserve(t, s, o.ID, "sku-r", 3)
	reserve(t, s, o.ID, "sku-q", 2)
	refund := func(sku string, refunded, restock int64) bool {
		return write(t, s, func(tx store.Tx) (bool, error) {
			return tx.ReservationRefund(t.Context(), &store.ReservationRefundParams{OrderID: o.ID, SKU: sku, Refunded: refunded, Restock: restock})
		})
	}
	equal(t, "refund units of a held reservation", refund("sku-r", 1, 1), false)
	write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsCommit(t.Context(), o.ID, t0) })
	equal(t, "sold", getStock(t, s, "sku-r"), &orderly.Stock{SKU: "sku-r", Available: 7, Sold: 3})

	equal(t, "refund and restock 2 of 3", refund("sku-r", 2, 2), true)
	equal(t, "stock after restocking 2", getStock(t, s, "sku-r"), &orderly.Stock{SKU: "sku-r", Available: 9, Sold: 1})
	equal(t, "refund 2 more of the 1 left", refund("sku-r", 2, 0), false)
	equal(t, "refund the last one without restock", refund("sku-r", 1, 0), true)
	equal(t, "stock unchanged by a refund without restock", getStock(t, s, "sku-r"), &orderly.Stock{SKU: "sku-r", Available: 9, Sold: 1})
	equal(t, "give back 1 refunded unit (failed refund)", refund("sku-r", -1, 0), true)
	equal(t, "restock beyond the quantity bought", refund("sku-r", 1, 2), false)
	equal(t, "refund a SKU the order did not buy", refund("sku-x", 1, 0), false)
	equal(t, "give back more than refunded", refund("sku-q", -1, 0), false)
	equal(t, "sku-q untouched", getStock(t, s, "sku-q"), &orderly.Stock{SKU: "sku-q", Available: 8, Sold: 2})
	equal(t, "reservations", reservations(t, s, o.ID), []*orderly.Reservation{
		{OrderID: o.ID, SKU: "sku-q", Quantity: 2, State: orderly.ReservationCommitted},
		{OrderID: o.ID, SKU: "sku-r", Quantity: 3, State: orderly.ReservationCommitted, Refunded: 2, Restocked: 2},
	})
	st := getStock(t, s, "sku-r")
	equal(t, "conservation of sku-r", st.Available+st.Held+st.Sold, int64(10))
}

// testRestockFollowsRefund: a unit goes back to stock only while a refund counts it
// (restocked <= refunded), and a negative restock takes units back from available to sold
// only while they are available; a refused change moves neither the reservation nor the
// stock. The restock of a refused refund that was never given back put phantom units in
// stock (8/0/2 → 9/0/1 → 10/0/0 with refunded 0, restocked 2).
func testRestockFollowsRefund(t *testing.T, open opener) {
	_, s := setup(t, open)
	setStock(t, s, "sku-f", 4)
	o, _ := paidOrderWithPayment(t, s, []orderly.Item{{SKU: "sku-f", Quantity: 2, UnitPrice: 100}})
	reserve(t, s, o.ID, "sku-f", 2)
	write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) { return tx.ReservationsCommit(t.Context(), o.ID, t0) })
	refund := func(refunded, restock int64) bool {
		return write(t, s, func(tx store.Tx) (bool, error) {
			return tx.ReservationRefund(t.Context(), &store.ReservationRefundParams{OrderID: o.ID, SKU: "sku-f", Refunded: refunded, Restock: restock})
		})
	}
	want := func(name string, refunded, restocked, available, sold int64) {
		t.Helper()
		equal(t, name+": reservation", reservations(t, s, o.ID), []*orderly.Reservation{
			{OrderID: o.ID, SKU: "sku-f", Quantity: 2, State: orderly.ReservationCommitted, Refunded: refunded, Restocked: restocked}})
		equal(t, name+": stock", getStock(t, s, "sku-f"), &orderly.Stock{SKU: "sku-f", Available: available, Sold: sold})
	}
	want("sold", 0, 0, 2, 2)
	equal(t, "restock a unit no refund counts", refund(0, 1), false)
	want("refused restock", 0, 0, 2, 2)
	equal(t, "count 1 refunded", refund(1, 0), true)
	equal(t, "restock 2 with 1 refunded", refund(0, 2), false)
	equal(t, "restock the refunded one", refund(0, 1), true)
	want("one refunded and restocked", 1, 1, 3, 1)
	equal(t, "give back the refunded unit while it is restocked", refund(-1, 0), false)
	want("refused give-back", 1, 1, 3, 1)
	equal(t, "take back more than restocked", refund(-1, -2), false)
	want("refused take-back", 1, 1, 3, 1)
	equal(t, "give back and take back the unit", refund(-1, -1), true)
	want("taken back", 0, 0, 2, 2)

	// The restocked unit was sold again: nothing is left to take back, nothing changes.
	equal(t, "refund and restock both", refund(2, 2), true)
	want("both restocked", 2, 2, 4, 0)
	setStock(t, s, "sku-f", 1)
	equal(t, "take back 2 with 1 available", refund(-2, -2), false)
	equal(t, "after a refused take-back", reservations(t, s, o.ID)[0].Restocked, int64(2))
	equal(t, "stock after a refused take-back", getStock(t, s, "sku-f").Available, int64(1))
}

// testRefundOrderIDs: the ids of orders with refunds, once each, by id, after a keyset.
func testRefundOrderIDs(t *testing.T, open opener) {
	_, s := setup(t, open)
	a, pa := paidOrderWithPayment(t, s, nil)
	b, _ := paidOrderWithPayment(t, s, nil)
	c, pc := paidOrderWithPayment(t, s, nil)
	for _, f := range []*orderly.Refund{newRefund(a, pa, 100), newRefund(a, pa, 200), newRefund(c, pc, 300)} {
		inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: f}) })
	}
	ids := func(after string, limit int) []string {
		return write(t, s, func(tx store.Tx) ([]string, error) { return tx.RefundOrderIDs(t.Context(), after, limit) })
	}
	_ = b // an order without refunds is not listed
	equal(t, "all", ids("", 10), []string{a.ID, c.ID})
	equal(t, "first page", ids("", 1), []string{a.ID})
	equal(t, "after the first", ids(a.ID, 10), []string{c.ID})
	equal(t, "after the last", ids(c.ID, 10), []string(nil))
}

func testRefundChecks(t *testing.T, open opener) {
	_, s := setup(t, open)
	o, _ := paidOrderWithPayment(t, s, nil)
	// A confirmed partial refund: the order keeps its state, its pay_status and the audit
	// row's pay_status_to become partially_refunded.
	changed := write(t, s, func(tx store.Tx) ([]string, error) {
		return tx.OrdersTransition(t.Context(), &store.OrdersTransitionParams{IDs: []string{o.ID}, From: orderly.StatePaid,
			To: orderly.StatePaid, Event: orderly.EventPartialRefund, SetPayStatus: orderly.PayPartiallyRefunded, Now: t0, Actor: "gateway"})
	})
	equal(t, "partial refund transition", changed, []string{o.ID})
	tr := trail(t, s, o.ID)
	if len(tr) != 1 || tr[0].PayStatusFrom != orderly.PayPaid || tr[0].PayStatusTo != orderly.PayPartiallyRefunded {
		t.Fatalf("audit trail %+v, want one row paid → partially_refunded", tr)
	}
	equal(t, "pay_status after the partial refund", getOrder(t, s, o.ID).PayStatus, orderly.PayPartiallyRefunded)
	o, p := paidOrderWithPayment(t, s, nil)
	ok := write(t, s, func(tx store.Tx) (bool, error) {
		return tx.OrderSetPayStatus(t.Context(), &store.OrderSetPayStatusParams{ID: o.ID, State: orderly.StatePaid,
			From: []orderly.PayStatus{orderly.PayPaid}, To: orderly.PayPartiallyRefunded})
	})
	equal(t, "pay_status partially_refunded is allowed", ok, true)
	err := txErr(t, s, func(tx store.Tx) error {
		_, err := tx.OrderSetPayStatus(t.Context(), &store.OrderSetPayStatusParams{ID: o.ID, State: orderly.StatePaid,
			From: []orderly.PayStatus{orderly.PayPartiallyRefunded}, To: "refund_requested"})
		return err
	})
	if err == nil {
		t.Error("pay_status refund_requested was stored, want a CHECK violation")
	}
	for _, bad := range []*orderly.Refund{
		{Amount: 0, State: orderly.RefundRequested},
		{Amount: 1, State: "pending"},
		{Amount: 1, State: orderly.RefundSucceeded}, // completed_at missing
	} {
		f := newRefund(o, p, bad.Amount)
		f.State = bad.State
		if err := txErr(t, s, func(tx store.Tx) error { return tx.RefundInsert(t.Context(), &store.RefundInsertParams{Refund: f}) }); err == nil {
			t.Errorf("refund of %d in state %s was stored, want a CHECK violation", bad.Amount, bad.State)
		}
	}
}

// testReconcileRefundsStuck: the refunds still requested with a provider status, created
// before the bound, by id after a keyset; not those the provider never answered, those
// created since, nor final ones (RefundSetState clears the status).
func testReconcileRefundsStuck(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	insert := func(id string, created time.Time, status string) {
		f := newRefund(o, p, 10)
		f.ID, f.CreatedAt = id, created
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}); err != nil || status == "" {
				return err
			}
			_, err := tx.RefundSetProvider(ctx, id, "re_"+id, status)
			return err
		})
	}
	insert("stuck-a", t0, "pending")
	insert("stuck-b", t0.Add(time.Minute), "PROCESSING")
	insert("stuck-unanswered", t0, "")
	insert("stuck-recent", t0.Add(2*time.Hour), "pending")
	insert("stuck-done", t0, "pending")
	inTx(t, s, func(tx store.Tx) error {
		_, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{ID: "stuck-done", From: orderly.RefundRequested,
			To: orderly.RefundSucceeded, CompletedAt: t0.Add(time.Hour)})
		return err
	})
	ids := func(after string, limit int) []string {
		fs := read(t, s, func(tx store.Tx) ([]*orderly.Refund, error) {
			return tx.ReconcileRefundsStuck(ctx, t0.Add(time.Hour), after, limit)
		})
		var out []string
		for _, f := range fs {
			out = append(out, f.ID+":"+f.ProviderStatus+":"+f.ProviderRef)
		}
		return out
	}
	equal(t, "stuck refunds", ids("", 10), []string{"stuck-a:pending:re_stuck-a", "stuck-b:PROCESSING:re_stuck-b"})
	equal(t, "stuck refunds, first page", ids("", 1), []string{"stuck-a:pending:re_stuck-a"})
	equal(t, "stuck refunds, keyset", ids("stuck-a", 10), []string{"stuck-b:PROCESSING:re_stuck-b"})
}

// testRefundGetByProviderRef: a refund is found by the provider's refund id once recorded;
// an unknown id and the empty id (every refund the provider never answered) are ENOTFOUND.
func testRefundGetByProviderRef(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	answered, unanswered := newRefund(o, p, 300), newRefund(o, p, 200)
	inTx(t, s, func(tx store.Tx) error {
		for _, f := range []*orderly.Refund{answered, unanswered} {
			if err := tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}); err != nil {
				return err
			}
		}
		_, err := tx.RefundSetProvider(ctx, answered.ID, "re_byref", "pending")
		return err
	})
	got := read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGetByProviderRef(ctx, "re_byref") })
	if got.ID != answered.ID || got.Amount != 300 || got.PaymentID != p.ID || got.ProviderRef != "re_byref" {
		t.Errorf("by provider ref: %s %d of %s ref %q, want %s 300 of %s ref re_byref", got.ID, got.Amount, got.PaymentID,
			got.ProviderRef, answered.ID, p.ID)
	}
	for _, ref := range []string{"re_unknown", ""} {
		err := txErr(t, s, func(tx store.Tx) error { _, err := tx.RefundGetByProviderRef(ctx, ref); return err })
		wantCode(t, "refund of provider ref "+ref, err, orderly.ENOTFOUND)
	}
}

// testReconcileRefundsSucceeded: the succeeded refunds of one channel's payments (its
// variants included), completed within the bounds (both included), by id after a keyset;
// not those requested or failed, those of other channels, nor those completed outside.
func testReconcileRefundsSucceeded(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	pay := func(channel, variant string) (*orderly.Order, *orderly.Payment) {
		opts := paidOpts("", t0)
		opts.ID = nextID("order")
		o := insertOrder(t, s, opts)
		return o, insertPayment(t, s, &paymentOpts{OrderID: o.ID, Amount: o.Amount, State: orderly.PaymentSucceeded,
			Channel: channel, Variant: variant, ChannelTxnID: nextID("txn"), SucceededAt: ptr(t0)})
	}
	so, sp := pay("stripe", "")
	vo, vp := pay("stripe", "v2")
	ao, ap := pay("alipay", "")
	insert := func(id string, o *orderly.Order, p *orderly.Payment, state orderly.RefundState, completed time.Time) {
		f := newRefund(o, p, 10)
		f.ID, f.State = id, state
		if state != orderly.RefundRequested {
			f.CompletedAt = &completed
		}
		inTx(t, s, func(tx store.Tx) error { return tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}) })
	}
	from, to := t0.Add(time.Hour), t0.Add(2*time.Hour)
	insert("rs-ok-a", so, sp, orderly.RefundSucceeded, from)
	insert("rs-ok-b", vo, vp, orderly.RefundSucceeded, to)
	insert("rs-ok-c", so, sp, orderly.RefundSucceeded, from.Add(time.Minute))
	insert("rs-early", so, sp, orderly.RefundSucceeded, from.Add(-time.Millisecond))
	insert("rs-late", so, sp, orderly.RefundSucceeded, to.Add(time.Millisecond))
	insert("rs-failed", so, sp, orderly.RefundFailed, from.Add(time.Minute))
	insert("rs-requested", so, sp, orderly.RefundRequested, time.Time{})
	insert("rs-alipay", ao, ap, orderly.RefundSucceeded, from.Add(time.Minute))
	ids := func(channel, after string, limit int) []string {
		fs := read(t, s, func(tx store.Tx) ([]*orderly.Refund, error) {
			return tx.ReconcileRefundsSucceeded(ctx, channel, from, to, after, limit)
		})
		out := []string{}
		for _, f := range fs {
			out = append(out, f.ID)
		}
		return out
	}
	equal(t, "succeeded refunds on stripe", ids("stripe", "", 10), []string{"rs-ok-a", "rs-ok-b", "rs-ok-c"})
	equal(t, "succeeded refunds on stripe, first page", ids("stripe", "", 2), []string{"rs-ok-a", "rs-ok-b"})
	equal(t, "succeeded refunds on stripe, keyset", ids("stripe", "rs-ok-b", 10), []string{"rs-ok-c"})
	equal(t, "succeeded refunds on alipay", ids("alipay", "", 10), []string{"rs-alipay"})
	equal(t, "succeeded refunds of every channel", ids("", "", 10), []string{"rs-alipay", "rs-ok-a", "rs-ok-b", "rs-ok-c"})
}

// testRefundSetProvider: the provider's refund id is recorded whatever the refund's state
// (a notification may have confirmed it first); its non-final status only while requested.
func testRefundSetProvider(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	o, p := paidOrderWithPayment(t, s, nil)
	requested, done := newRefund(o, p, 300), newRefund(o, p, 200)
	inTx(t, s, func(tx store.Tx) error {
		for _, f := range []*orderly.Refund{requested, done} {
			if err := tx.RefundInsert(ctx, &store.RefundInsertParams{Refund: f}); err != nil {
				return err
			}
		}
		_, err := tx.RefundSetState(ctx, &store.RefundSetStateParams{ID: done.ID, From: orderly.RefundRequested,
			To: orderly.RefundSucceeded, CompletedAt: t0})
		return err
	})
	for _, c := range []struct{ id, ref, status, wantStatus string }{
		{requested.ID, "re_1", "pending", "pending"},
		{done.ID, "re_2", "pending", ""},
	} {
		ok := write(t, s, func(tx store.Tx) (bool, error) { return tx.RefundSetProvider(ctx, c.id, c.ref, c.status) })
		got := read(t, s, func(tx store.Tx) (*orderly.Refund, error) { return tx.RefundGet(ctx, c.id) })
		if !ok || got.ProviderRef != c.ref || got.ProviderStatus != c.wantStatus {
			t.Errorf("refund %s (%s): set %v, provider_ref %q status %q; want true, %q %q", c.id, got.State, ok,
				got.ProviderRef, got.ProviderStatus, c.ref, c.wantStatus)
		}
	}
	if ok := write(t, s, func(tx store.Tx) (bool, error) { return tx.RefundSetProvider(ctx, "nope", "re_3", "pending") }); ok {
		t.Error("RefundSetProvider of an unknown refund = true, want false")
	}
}
