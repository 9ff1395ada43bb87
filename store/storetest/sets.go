package storetest

import (
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// testSets checks the set statements of a batch of wallet checkouts run as sets
// (saga.LocalTxSet): stock locks and reservations of many SKUs, the commit of many orders'
// reservations, payments, transfers and sagas in multi-row inserts, account locks and
// moves of several accounts, per-order audit causes, and outbox batches of every size
// between the prepared statements' row counts.
func testSets(t *testing.T, open opener) {
	t.Run("StockLockAvailableMany", func(t *testing.T) { testStockLockAvailableMany(t, open) })
	t.Run("StockReserveSet", func(t *testing.T) { testStockReserveSet(t, open) })
	t.Run("StockReserveSetRefused", func(t *testing.T) { testStockReserveSetRefused(t, open) })
	t.Run("ReservationsCommitMany", func(t *testing.T) { testReservationsCommitMany(t, open) })
	t.Run("PaymentsInsertMany", func(t *testing.T) { testPaymentsInsertMany(t, open) })
	t.Run("WalletAccountsLock", func(t *testing.T) { testWalletAccountsLock(t, open) })
	t.Run("WalletAccountsMove", func(t *testing.T) { testWalletAccountsMove(t, open) })
	t.Run("WalletTransfersInsertMany", func(t *testing.T) { testWalletTransfersInsertMany(t, open) })
	t.Run("SagaInsertMany", func(t *testing.T) { testSagaInsertMany(t, open) })
	t.Run("OrdersTransitionCauses", func(t *testing.T) { testOrdersTransitionCauses(t, open) })
	t.Run("OutboxInsertSizes", func(t *testing.T) { testOutboxInsertSizes(t, open) })
}

// lockAvailable runs StockLockAvailableMany in a write transaction.
func lockAvailable(t *testing.T, s store.Store, skus []string) map[string]int64 {
	t.Helper()
	return write(t, s, func(tx store.Tx) (map[string]int64, error) { return tx.StockLockAvailableMany(t.Context(), skus) })
}

// odd is a SKU with characters that JSON escapes (Go escapes & < > too): the set statements
// pass their SKUs as JSON lists.
const odd = `sku-ü&<>"\`

// testStockLockAvailableMany: the available units of each SKU with a stock row, whatever
// the order and repetitions of the input; missing SKUs are left out; an empty input gives
// an empty map; within a transaction the lock sees the transaction's own changes.
func testStockLockAvailableMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	setStock(t, s, "sku-a", 5)
	setStock(t, s, "sku-b", 0)
	setStock(t, s, "42", 3)
	setStock(t, s, odd, 7)
	setStock(t, s, "sku-c", 9)
	reserve(t, s, insertOrder(t, s, &orderOpts{}).ID, "sku-c", 4) // available 5, held 4

	equal(t, "available of five SKUs, unsorted, repeated, one missing",
		lockAvailable(t, s, []string{"sku-b", "missing", "sku-c", "sku-a", odd, "sku-a", "42", "sku-b"}),
		map[string]int64{"sku-a": 5, "sku-b": 0, "sku-c": 5, "42": 3, odd: 7})
	equal(t, "available of one SKU", lockAvailable(t, s, []string{"sku-a"}), map[string]int64{"sku-a": 5})
	for name, skus := range map[string][]string{"nil": nil, "empty": {}, "only missing SKUs": {"missing", "nope", "missing"}} {
		if got := lockAvailable(t, s, skus); len(got) != 0 {
			t.Errorf("available of %s: %v, want an empty map", name, got)
		}
	}
	// The lock reads the transaction's own writes.
	var got map[string]int64
	inTx(t, s, func(tx store.Tx) error {
		if _, err := tx.StockSet(ctx, "sku-a", 8); err != nil {
			return err
		}
		var err error
		got, err = tx.StockLockAvailableMany(ctx, []string{"sku-a", "sku-b"})
		return err
	})
	equal(t, "available after a change in the same transaction", got, map[string]int64{"sku-a": 8, "sku-b": 0})
	// It only reads.
	equal(t, "stock of sku-c", getStock(t, s, "sku-c"), &orderly.Stock{SKU: "sku-c", Available: 5, Held: 4})
	equal(t, "stock of "+odd, getStock(t, s, odd), &orderly.Stock{SKU: odd, Available: 7})
}

// testStockReserveSet: several orders over several SKUs (an order with two SKUs, two
// orders sharing a SKU, a SKU reserved down to zero) in one call: each SKU's available and
// held move by its total, other SKUs do not move, and every reservation is held with its
// quantity.
func testStockReserveSet(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	for _, id := range []string{"o1", "o2", "o3", "o4"} {
		insertOrder(t, s, &orderOpts{ID: id})
	}
	setStock(t, s, "sku-a", 10)
	setStock(t, s, "sku-b", 5)
	setStock(t, s, "sku-c", 3)
	setStock(t, s, odd, 2)
	ps := []*store.StockReserveParams{
		{OrderID: "o3", SKU: "sku-b", Quantity: 4, Now: t0},
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, Now: t0},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, Now: t0},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, Now: t0},
		{OrderID: "o2", SKU: odd, Quantity: 2, Now: t0},
	}
	var after map[string]int64
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.StockReserveSet(ctx, ps); err != nil {
			return err
		}
		var err error
		after, err = tx.StockLockAvailableMany(ctx, []string{"sku-a", "sku-b", "sku-c", odd})
		return err
	})
	equal(t, "available read back in the reserving transaction", after, map[string]int64{"sku-a": 5, "sku-b": 0, "sku-c": 3, odd: 0})
	equal(t, "stock of sku-a", getStock(t, s, "sku-a"), &orderly.Stock{SKU: "sku-a", Available: 5, Held: 5})
	equal(t, "stock of sku-b", getStock(t, s, "sku-b"), &orderly.Stock{SKU: "sku-b", Available: 0, Held: 5})
	equal(t, "stock of sku-c", getStock(t, s, "sku-c"), &orderly.Stock{SKU: "sku-c", Available: 3})
	equal(t, "stock of "+odd, getStock(t, s, odd), &orderly.Stock{SKU: odd, Held: 2})
	// ReservationList orders by order and SKU in the database's collation: compare sorted.
	got := sortReservations(reservations(t, s, ""))
	want := sortReservations([]*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, State: orderly.ReservationHeld},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, State: orderly.ReservationHeld},
		{OrderID: "o2", SKU: odd, Quantity: 2, State: orderly.ReservationHeld},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, State: orderly.ReservationHeld},
		{OrderID: "o3", SKU: "sku-b", Quantity: 4, State: orderly.ReservationHeld},
	})
	equal(t, "reservations (sorted)", got, want)

	// A later set of one reservation, and an empty one.
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.StockReserveSet(ctx, nil); err != nil {
			return err
		}
		return tx.StockReserveSet(ctx, []*store.StockReserveParams{{OrderID: "o4", SKU: "sku-a", Quantity: 5, Now: t0}})
	})
	equal(t, "stock of sku-a after a set of one", getStock(t, s, "sku-a"), &orderly.Stock{SKU: "sku-a", Held: 10})
	equal(t, "reservations of o4", reservations(t, s, "o4"), []*orderly.Reservation{
		{OrderID: "o4", SKU: "sku-a", Quantity: 5, State: orderly.ReservationHeld}})
}

// testStockReserveSetRefused: a SKU whose total is beyond its available units (though each
// of its reservations alone fits), a SKU without a stock row, a quantity below one and an
// (order, SKU) named twice fail the call; after the rollback nothing changed.
func testStockReserveSetRefused(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	for _, id := range []string{"o1", "o2", "o3"} {
		insertOrder(t, s, &orderOpts{ID: id})
	}
	setStock(t, s, "sku-a", 5)
	setStock(t, s, "sku-b", 4)
	reserve(t, s, "o3", "sku-b", 1) // sku-b: available 3, held 1
	stockBefore := []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}
	resBefore := reservations(t, s, "")

	cases := []struct {
		name string
		ps   []*store.StockReserveParams
	}{
		{"total beyond available", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 3, Now: t0},
			{OrderID: "o2", SKU: "sku-a", Quantity: 3, Now: t0},
		}},
		{"one SKU short, another available", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
			{OrderID: "o1", SKU: "sku-b", Quantity: 2, Now: t0},
			{OrderID: "o2", SKU: "sku-b", Quantity: 2, Now: t0},
		}},
		{"a SKU without stock", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
			{OrderID: "o2", SKU: "missing", Quantity: 1, Now: t0},
		}},
		{"quantity 0", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
			{OrderID: "o2", SKU: "sku-a", Quantity: 0, Now: t0},
		}},
		{"negative quantity", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 3, Now: t0},
			{OrderID: "o2", SKU: "sku-a", Quantity: -1, Now: t0},
		}},
		{"an order's SKU twice", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
		}},
		{"an order's reservation held already", []*store.StockReserveParams{
			{OrderID: "o1", SKU: "sku-a", Quantity: 1, Now: t0},
			{OrderID: "o3", SKU: "sku-b", Quantity: 1, Now: t0},
		}},
	}
	for _, c := range cases {
		if err := txErr(t, s, func(tx store.Tx) error { return tx.StockReserveSet(ctx, c.ps) }); err == nil {
			t.Errorf("%s: StockReserveSet succeeded", c.name)
		}
		equal(t, c.name+": stock", []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}, stockBefore)
		equal(t, c.name+": reservations", reservations(t, s, ""), resBefore)
	}
}

// testReservationsCommitMany: the held reservations of several orders (over several SKUs,
// two orders sharing one) become committed and their units move from held to sold; a
// reservation released already, an order without reservations, an unknown order and an
// order not named are left alone; a second call changes nothing.
func testReservationsCommitMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	for _, id := range []string{"o1", "o2", "o3", "o4", "o5"} {
		insertOrder(t, s, &orderOpts{ID: id})
	}
	setStock(t, s, "sku-a", 10)
	setStock(t, s, "sku-b", 10)
	reserve(t, s, "o1", "sku-a", 2)
	reserve(t, s, "o1", "sku-b", 1)
	reserve(t, s, "o2", "sku-a", 3)
	reserve(t, s, "o4", "sku-b", 2)
	reserve(t, s, "o5", "sku-a", 1)
	inTx(t, s, func(tx store.Tx) error { _, err := tx.ReservationsRelease(ctx, "o4", t0); return err })
	// sku-a: available 4, held 6; sku-b: available 9, held 1.

	commit := func(ids ...string) []*orderly.Reservation {
		return write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsCommitMany(ctx, ids, t0.Add(time.Minute))
		})
	}
	ids := []string{"o4", "o2", "missing", "o3", "o1"}
	equal(t, "committed", commit(ids...), []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, State: orderly.ReservationCommitted},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, State: orderly.ReservationCommitted},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, State: orderly.ReservationCommitted},
	})
	wantStock := []*orderly.Stock{{SKU: "sku-a", Available: 4, Held: 1, Sold: 5}, {SKU: "sku-b", Available: 9, Sold: 1}}
	wantRes := []*orderly.Reservation{
		{OrderID: "o1", SKU: "sku-a", Quantity: 2, State: orderly.ReservationCommitted},
		{OrderID: "o1", SKU: "sku-b", Quantity: 1, State: orderly.ReservationCommitted},
		{OrderID: "o2", SKU: "sku-a", Quantity: 3, State: orderly.ReservationCommitted},
		{OrderID: "o4", SKU: "sku-b", Quantity: 2, State: orderly.ReservationReleased},
		{OrderID: "o5", SKU: "sku-a", Quantity: 1, State: orderly.ReservationHeld},
	}
	equal(t, "stock", []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}, wantStock)
	equal(t, "reservations", reservations(t, s, ""), wantRes)

	equal(t, "committed by a second call", commit(ids...), []*orderly.Reservation(nil))
	equal(t, "committed without orders", commit(), []*orderly.Reservation(nil))
	equal(t, "committed of orders without reservations", commit("o3", "missing"), []*orderly.Reservation(nil))
	equal(t, "stock after the calls that change nothing", []*orderly.Stock{getStock(t, s, "sku-a"), getStock(t, s, "sku-b")}, wantStock)
	equal(t, "reservations after the calls that change nothing", reservations(t, s, ""), wantRes)

	// One order of one SKU, among orders done already.
	equal(t, "committed o5", commit("o1", "o5"), []*orderly.Reservation{
		{OrderID: "o5", SKU: "sku-a", Quantity: 1, State: orderly.ReservationCommitted}})
	equal(t, "stock of sku-a at last", getStock(t, s, "sku-a"), &orderly.Stock{SKU: "sku-a", Available: 4, Sold: 6})
}

// testPaymentsInsertMany: payments written in multi-row statements (more than one
// statement's rows) read back as given, attempt numbers included; PaymentInsert numbers the
// next attempt after them; a taken id (in the table or twice in the call), a taken
// channel_txn_id or (order, attempt), and an attempt below one fail the call, which writes
// nothing.
func testPaymentsInsertMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	for _, id := range []string{"o1", "o2", "o3", "o4"} {
		insertOrder(t, s, &orderOpts{ID: id})
	}
	at := t0.Add(time.Second)
	first := []*orderly.Payment{
		{ID: "p1", OrderID: "o1", Attempt: 1, Channel: "stripe", Variant: "v2", ChannelTxnID: "txn-1", Amount: 1000, Currency: "EUR",
			State: orderly.PaymentSucceeded, CreatedAt: t0, SucceededAt: &at},
		{ID: "p2", OrderID: "o2", Attempt: 1, Channel: "wallet", Amount: 0, Currency: "USD", State: orderly.PaymentInitiated, CreatedAt: t0},
		{ID: "p3", OrderID: "o3", Attempt: 3, Channel: "sim", ChannelTxnID: "txn-3", Amount: 2500, Currency: "EUR",
			State: orderly.PaymentRefunded, FailReason: "reason", CreatedAt: t0.Add(time.Millisecond), SucceededAt: &at,
			RefundedAt: ptr(at.Add(time.Hour)), DuplicateOf: "p1"},
	}
	for i := range 70 {
		first = append(first, &orderly.Payment{ID: fmt.Sprintf("p4-%02d", i), OrderID: "o4", Attempt: int64(i + 1), Channel: "sim",
			ChannelTxnID: fmt.Sprintf("txn-4-%02d", i), Amount: int64(100 + i), Currency: "EUR", State: orderly.PaymentFailed,
			FailReason: fmt.Sprintf("declined %d", i), CreatedAt: t0.Add(time.Duration(i) * time.Millisecond)})
	}
	inTx(t, s, func(tx store.Tx) error { return tx.PaymentsInsertMany(ctx, first) })
	for _, p := range first {
		equal(t, "payment "+p.ID, getPayment(t, s, p.ID), p)
	}
	inTx(t, s, func(tx store.Tx) error { return tx.PaymentsInsertMany(ctx, nil) })
	next := insertPayment(t, s, &paymentOpts{ID: "p4-next", OrderID: "o4"})
	if next.Attempt != 71 {
		t.Errorf("PaymentInsert after 70 attempts of o4: attempt %d, want 71", next.Attempt)
	}

	fresh := func(id string) *orderly.Payment {
		return &orderly.Payment{ID: id, OrderID: "o2", Attempt: 2, Channel: "sim", Amount: 1, Currency: "EUR",
			State: orderly.PaymentInitiated, CreatedAt: t0}
	}
	conflicts := []struct {
		name string
		ps   []*orderly.Payment
	}{
		{"an id taken", []*orderly.Payment{fresh("new-1"), {ID: "p2", OrderID: "o3", Attempt: 5, Channel: "sim", Amount: 1,
			Currency: "EUR", State: orderly.PaymentInitiated, CreatedAt: t0}}},
		{"an id twice in the call", []*orderly.Payment{fresh("new-1"), {ID: "new-1", OrderID: "o3", Attempt: 5, Channel: "sim",
			Amount: 1, Currency: "EUR", State: orderly.PaymentInitiated, CreatedAt: t0}}},
		{"a channel_txn_id taken", []*orderly.Payment{fresh("new-1"), {ID: "new-2", OrderID: "o3", Attempt: 5, Channel: "sim",
			ChannelTxnID: "txn-1", Amount: 1, Currency: "EUR", State: orderly.PaymentInitiated, CreatedAt: t0}}},
		{"an attempt taken", []*orderly.Payment{fresh("new-1"), {ID: "new-2", OrderID: "o1", Attempt: 1, Channel: "sim",
			Amount: 1, Currency: "EUR", State: orderly.PaymentInitiated, CreatedAt: t0}}},
	}
	for _, c := range conflicts {
		err := txErr(t, s, func(tx store.Tx) error { return tx.PaymentsInsertMany(ctx, c.ps) })
		wantCode(t, c.name, err, orderly.ECONFLICT)
	}
	for _, attempt := range []int64{0, -1} {
		bad := fresh("new-2")
		bad.Attempt = attempt
		if err := txErr(t, s, func(tx store.Tx) error { return tx.PaymentsInsertMany(ctx, []*orderly.Payment{fresh("new-1"), bad}) }); err == nil {
			t.Errorf("PaymentsInsertMany of attempt %d succeeded", attempt)
		}
	}
	for _, id := range []string{"new-1", "new-2"} {
		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.PaymentGet(ctx, id); return err })
		wantCode(t, "payment "+id+" of a failed call", err, orderly.ENOTFOUND)
	}
	equal(t, "payment p2 after the conflicts", getPayment(t, s, "p2"), first[1])
}

// ensureAccounts creates accounts and applies an initial move to each (ids in id order).
func ensureAccounts(t *testing.T, s store.Store, refs []orderly.AccountRef, available, held []int64) {
	t.Helper()
	inTx(t, s, func(tx store.Tx) error {
		for i, ref := range refs {
			if err := tx.WalletAccountEnsure(t.Context(), ref, t0); err != nil {
				return err
			}
			if available[i] == 0 && held[i] == 0 {
				continue
			}
			ok, err := tx.WalletAccountMove(t.Context(), &store.WalletAccountMoveParams{ID: ref.ID(), Available: available[i], Held: held[i], Now: t0})
			if err != nil {
				return err
			} else if !ok {
				return fmt.Errorf("initial move of %s refused", ref.ID())
			}
		}
		return nil
	})
}

// getAccounts reads accounts by id with WalletAccountGet.
func getAccounts(t *testing.T, s store.Store, ids ...string) []*orderly.WalletAccount {
	t.Helper()
	return read(t, s, func(tx store.Tx) ([]*orderly.WalletAccount, error) {
		out := make([]*orderly.WalletAccount, len(ids))
		for i, id := range ids {
			a, err := tx.WalletAccountGet(t.Context(), id)
			if err != nil {
				return nil, err
			}
			out[i] = a
		}
		return out, nil
	})
}

// testWalletAccountsLock: the accounts that exist among the ids (unsorted, repeated), by
// id, as WalletAccountGet reads them; nothing for no ids or only unknown ones.
func testWalletAccountsLock(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	u1, u2 := orderly.UserAccount("u1", "EUR"), orderly.UserAccount("u2", "EUR")
	ext, usd := orderly.SystemAccount(orderly.SystemExternal, "EUR"), orderly.UserAccount("u1", "USD")
	ensureAccounts(t, s, []orderly.AccountRef{ext, u1, u2, usd}, []int64{-700, 500, 200, 0}, []int64{0, 0, 100, 0})
	lock := func(ids ...string) []*orderly.WalletAccount {
		return write(t, s, func(tx store.Tx) ([]*orderly.WalletAccount, error) { return tx.WalletAccountsLock(ctx, ids) })
	}
	want := getAccounts(t, s, ext.ID(), u1.ID(), u2.ID())
	if want[0].Available != -700 || want[1].Available != 500 || want[2].Held != 100 {
		t.Fatalf("accounts before the locks: %+v %+v %+v", want[0], want[1], want[2])
	}
	equal(t, "locked accounts", lock(u2.ID(), "user:EUR:nobody", ext.ID(), u1.ID(), u2.ID()), want)
	equal(t, "one locked account", lock(usd.ID()), getAccounts(t, s, usd.ID()))
	equal(t, "no ids", lock(), []*orderly.WalletAccount(nil))
	equal(t, "unknown ids", lock("user:EUR:nobody", "system:EUR:nobody"), []*orderly.WalletAccount(nil))
	// The locks change nothing.
	equal(t, "accounts after the locks", getAccounts(t, s, ext.ID(), u1.ID(), u2.ID()), want)
}

// testWalletAccountsMove: several accounts moved by one call, each guarded as
// WalletAccountMove: a user account that would go below zero (available or held) is left
// alone and not counted, a system account may go below zero, an unknown account is not
// counted; an id twice is an error.
func testWalletAccountsMove(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	u1, u2, u3 := orderly.UserAccount("u1", "EUR"), orderly.UserAccount("u2", "EUR"), orderly.UserAccount("u3", "EUR")
	ext, platform := orderly.SystemAccount(orderly.SystemExternal, "EUR"), orderly.SystemAccount(orderly.SystemPlatform, "EUR")
	refs := []orderly.AccountRef{ext, platform, u1, u2, u3}
	ensureAccounts(t, s, refs, []int64{0, 0, 100, 50, 10}, []int64{0, 0, 0, 0, 0})
	ids := func() []string {
		out := make([]string, len(refs))
		for i, r := range refs {
			out[i] = r.ID()
		}
		return out
	}()
	before := getAccounts(t, s, ids...)
	move := func(ps ...*store.WalletAccountMoveParams) int64 {
		return write(t, s, func(tx store.Tx) (int64, error) {
			if _, err := tx.WalletAccountsLock(ctx, ids); err != nil {
				return 0, err
			}
			return tx.WalletAccountsMove(ctx, ps)
		})
	}
	// expect returns the accounts as they must read after moves of (available, held) at
	// now; a zero move leaves the account as it was.
	type delta struct{ a, h int64 }
	expect := func(prev []*orderly.WalletAccount, now time.Time, deltas map[string]delta) []*orderly.WalletAccount {
		out := make([]*orderly.WalletAccount, len(prev))
		for i, p := range prev {
			a := *p
			if d, ok := deltas[a.ID]; ok {
				a.Available, a.Held, a.Version, a.UpdatedAt = a.Available+d.a, a.Held+d.h, a.Version+1, now
			}
			out[i] = &a
		}
		return out
	}

	t1 := t0.Add(time.Minute)
	n := move(
		&store.WalletAccountMoveParams{ID: u2.ID(), Available: 20, Now: t1},
		&store.WalletAccountMoveParams{ID: u1.ID(), Available: -30, Held: 30, Now: t1},
		&store.WalletAccountMoveParams{ID: ext.ID(), Available: -50, Now: t1},
		&store.WalletAccountMoveParams{ID: platform.ID(), Available: 60, Now: t1},
		&store.WalletAccountMoveParams{ID: u3.ID(), Available: -10, Now: t1}, // to zero exactly
	)
	if n != 5 {
		t.Errorf("moves of 5 accounts: %d changed, want 5", n)
	}
	after := expect(before, t1, map[string]delta{u2.ID(): {20, 0}, u1.ID(): {-30, 30}, ext.ID(): {-50, 0},
		platform.ID(): {60, 0}, u3.ID(): {-10, 0}})
	equal(t, "accounts after 5 moves", getAccounts(t, s, ids...), after)
	if a := after[0]; a.Available != -50 {
		t.Errorf("system account %s: available %d, want -50", a.ID, a.Available)
	}

	// Refused guards: u1's available (70) and u2's held (0) would go below zero, and an
	// unknown account; the others move.
	t2 := t1.Add(time.Minute)
	n = move(
		&store.WalletAccountMoveParams{ID: u1.ID(), Available: -71, Now: t2},
		&store.WalletAccountMoveParams{ID: ext.ID(), Available: -1000, Now: t2},
		&store.WalletAccountMoveParams{ID: u2.ID(), Available: 1, Held: -1, Now: t2},
		&store.WalletAccountMoveParams{ID: "user:EUR:nobody", Available: 5, Now: t2},
		&store.WalletAccountMoveParams{ID: u3.ID(), Available: 5, Now: t2},
	)
	if n != 2 {
		t.Errorf("moves of 5 accounts, 2 refused by a guard, 1 unknown: %d changed, want 2", n)
	}
	after = expect(after, t2, map[string]delta{ext.ID(): {-1000, 0}, u3.ID(): {5, 0}})
	equal(t, "accounts after the refused moves", getAccounts(t, s, ids...), after)

	// Held: u1 holds 30; releasing 31 is refused, releasing 30 is not.
	t3 := t2.Add(time.Minute)
	if n := move(&store.WalletAccountMoveParams{ID: u1.ID(), Available: 31, Held: -31, Now: t3}); n != 0 {
		t.Errorf("release of 31 held out of 30: %d changed, want 0", n)
	}
	if n := move(&store.WalletAccountMoveParams{ID: u1.ID(), Available: 30, Held: -30, Now: t3},
		&store.WalletAccountMoveParams{ID: platform.ID(), Available: -60, Now: t3}); n != 2 {
		t.Errorf("release of 30 held and a system account to zero: %d changed, want 2", n)
	}
	after = expect(after, t3, map[string]delta{u1.ID(): {30, -30}, platform.ID(): {-60, 0}})
	equal(t, "accounts after the release", getAccounts(t, s, ids...), after)

	if n := move(); n != 0 {
		t.Errorf("no moves: %d changed", n)
	}
	err := txErr(t, s, func(tx store.Tx) error {
		_, err := tx.WalletAccountsMove(ctx, []*store.WalletAccountMoveParams{
			{ID: u2.ID(), Available: 1, Now: t3}, {ID: u3.ID(), Available: 1, Now: t3}, {ID: u2.ID(), Available: 1, Now: t3}})
		return err
	})
	if err == nil {
		t.Error("WalletAccountsMove with an account twice succeeded")
	}
	equal(t, "accounts after the refused call", getAccounts(t, s, ids...), after)
}

// testWalletTransfersInsertMany: transfers of every kind written in multi-row statements
// (more than one statement's rows) read back as given, by id and by key; several without a
// key coexist; a taken idempotency key (in the table or twice in the call) or id fails the
// call, which writes nothing.
func testWalletTransfersInsertMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user, platform := orderly.UserAccount("u1", "EUR").ID(), orderly.SystemAccount(orderly.SystemPlatform, "EUR").ID()
	trs := []*orderly.WalletTransfer{
		{ID: "tr-debit", Kind: orderly.TransferDebit, IdempotencyKey: "key-debit", AccountID: user, CounterpartyID: platform,
			Currency: "EUR", Amount: 300, Refunded: 100, CreatedAt: t0},
		{ID: "tr-hold", Kind: orderly.TransferHold, IdempotencyKey: "key-hold", AccountID: user, Currency: "EUR", Amount: 50,
			HoldID: "hold-1", CreatedAt: t0.Add(time.Millisecond)},
		{ID: "tr-refund", Kind: orderly.TransferRefund, IdempotencyKey: "key-refund", AccountID: user, CounterpartyID: platform,
			Currency: "EUR", Amount: 100, RefundOf: "tr-debit", CreatedAt: t0.Add(2 * time.Millisecond)},
		{ID: "tr-expire-1", Kind: orderly.TransferExpire, AccountID: user, Currency: "EUR", Amount: 7, HoldID: "hold-2", CreatedAt: t0},
		{ID: "tr-expire-2", Kind: orderly.TransferExpire, AccountID: user, Currency: "EUR", Amount: 8, HoldID: "hold-3", CreatedAt: t0},
	}
	for i := range 70 {
		trs = append(trs, &orderly.WalletTransfer{ID: fmt.Sprintf("tr-credit-%02d", i), Kind: orderly.TransferCredit,
			IdempotencyKey: fmt.Sprintf("key-credit-%02d", i), AccountID: orderly.UserAccount(fmt.Sprintf("u%d", i), "USD").ID(),
			CounterpartyID: orderly.SystemAccount(orderly.SystemExternal, "USD").ID(), Currency: "USD", Amount: int64(i + 1),
			CreatedAt: t0.Add(time.Duration(i) * time.Second)})
	}
	inTx(t, s, func(tx store.Tx) error { return tx.WalletTransfersInsertMany(ctx, trs) })
	inTx(t, s, func(tx store.Tx) error { return tx.WalletTransfersInsertMany(ctx, nil) })
	for _, tr := range trs {
		got := read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) { return tx.WalletTransferGet(ctx, tr.ID) })
		equal(t, "transfer "+tr.ID, got, tr)
		if tr.IdempotencyKey != "" {
			got = read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) {
				return tx.WalletTransferByKey(ctx, tr.IdempotencyKey)
			})
			equal(t, "transfer by key "+tr.IdempotencyKey, got, tr)
		}
	}

	fresh := func(id, key string) *orderly.WalletTransfer {
		return &orderly.WalletTransfer{ID: id, Kind: orderly.TransferCredit, IdempotencyKey: key, AccountID: user,
			Currency: "EUR", Amount: 1, CreatedAt: t0}
	}
	conflicts := []struct {
		name string
		trs  []*orderly.WalletTransfer
	}{
		{"a key taken", []*orderly.WalletTransfer{fresh("new-1", "key-new-1"), fresh("new-2", "key-hold")}},
		{"a key twice in the call", []*orderly.WalletTransfer{fresh("new-1", "key-new-1"), fresh("new-2", "key-new-1")}},
		{"an id taken", []*orderly.WalletTransfer{fresh("new-1", "key-new-1"), fresh("tr-expire-1", "key-new-2")}},
	}
	for _, c := range conflicts {
		err := txErr(t, s, func(tx store.Tx) error { return tx.WalletTransfersInsertMany(ctx, c.trs) })
		wantCode(t, c.name, err, orderly.ECONFLICT)
	}
	for _, id := range []string{"new-1", "new-2"} {
		err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.WalletTransferGet(ctx, id); return err })
		wantCode(t, "transfer "+id+" of a failed call", err, orderly.ENOTFOUND)
	}
	got := read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) { return tx.WalletTransferByKey(ctx, "key-hold") })
	equal(t, "transfer of key-hold after the conflicts", got, trs[1])
}

// testSagaInsertMany: instances of every state written in multi-row statements (more than
// one statement's rows) read back as given with Version 1; a taken id (in the table or
// twice in the call) fails the call with ECONFLICT, which writes nothing.
func testSagaInsertMany(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	wake, deadline, ended := t0.Add(1500*time.Millisecond), t0.Add(time.Minute), t0.Add(time.Hour)
	ss := []*store.SagaInstance{
		{ID: "saga-running", Definition: "checkout", State: "running", Input: []byte(`{"order_id":"o-1","n":[1,2]}`),
			WakeAt: &wake, StepDeadline: &deadline, Attempts: 1, AttemptStartedAt: &t0, CreatedAt: t0, UpdatedAt: t0},
		{ID: "saga-compensating", Definition: "wallet-checkout", State: "compensating", CurrentStep: 2, Input: []byte(`{}`),
			WakeAt: &wake, Attempts: 3, LastError: "gateway: timeout", CreatedAt: t0, UpdatedAt: t0.Add(time.Second)},
		{ID: "saga-succeeded", Definition: "checkout", State: "succeeded", CurrentStep: 4, Input: []byte(`{"order_id":"o-2"}`),
			Attempts: 1, CreatedAt: t0, UpdatedAt: ended, EndedAt: &ended},
		{ID: "saga-compensated", Definition: "checkout", State: "compensated", CurrentStep: -1, Input: []byte(`{"order_id":"o-3"}`),
			LastError: "declined", CreatedAt: t0, UpdatedAt: ended, EndedAt: &ended},
		{ID: "saga-stuck", Definition: "checkout", State: "stuck", CurrentStep: 1, Input: []byte(`{"order_id":"o-4"}`),
			Attempts: 9, LastError: "compensation failed", CreatedAt: t0, UpdatedAt: ended},
	}
	for i := range 70 {
		w := t0.Add(time.Duration(i) * time.Millisecond)
		ss = append(ss, &store.SagaInstance{ID: fmt.Sprintf("saga-%02d", i), Definition: "checkout", State: "running",
			CurrentStep: i % 3, Input: fmt.Appendf(nil, `{"i":%d}`, i), WakeAt: &w, Attempts: i % 4, CreatedAt: t0, UpdatedAt: w})
	}
	inTx(t, s, func(tx store.Tx) error { return tx.SagaInsertMany(ctx, ss) })
	inTx(t, s, func(tx store.Tx) error { return tx.SagaInsertMany(ctx, nil) })
	for _, in := range ss {
		if in.Version != 1 {
			t.Errorf("saga %s: Version %d after SagaInsertMany, want 1", in.ID, in.Version)
		}
		equal(t, "saga "+in.ID, getSaga(t, s, in.ID), in)
	}

	fresh := func(id string) *store.SagaInstance {
		return &store.SagaInstance{ID: id, Definition: "checkout", State: "running", Input: []byte(`{}`), WakeAt: &wake,
			CreatedAt: t0, UpdatedAt: t0}
	}
	for name, batch := range map[string][]*store.SagaInstance{
		"an id taken":             {fresh("new-1"), fresh("saga-stuck")},
		"an id twice in the call": {fresh("new-1"), fresh("new-1")},
	} {
		err := txErr(t, s, func(tx store.Tx) error { return tx.SagaInsertMany(ctx, batch) })
		wantCode(t, name, err, orderly.ECONFLICT)
	}
	err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.SagaGet(ctx, "new-1"); return err })
	wantCode(t, "saga new-1 of a failed call", err, orderly.ENOTFOUND)
	equal(t, "saga-stuck after the conflicts", getSaga(t, s, "saga-stuck"), ss[4])
}

// testOrdersTransitionCauses: with Causes each changed order's audit row has its own cause
// (Cause for the orders Causes does not name, or names with ""); orders that a guard
// keeps get no row whatever Causes says; an empty Causes gives every row Cause.
func testOrdersTransitionCauses(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	paying := func(id string) *orderOpts {
		return &orderOpts{ID: id, PayStatus: orderly.PayPaying, CurrentPaymentID: "pay-" + id}
	}
	before := map[string]*orderly.Order{}
	for _, o := range []*orderOpts{paying("a"), paying("b"), {ID: "c"}, paying("d"), paying("e"), paidOpts("f", t0), paying("g"), paying("h")} {
		before[o.ID] = insertOrder(t, s, o)
	}
	now := t0.Add(time.Minute)
	pay := func(ids []string, causes map[string]string) store.OrdersTransitionParams {
		return store.OrdersTransitionParams{IDs: ids, From: orderly.StatePendingPayment, To: orderly.StatePaid, Event: orderly.EventPay,
			PayStatusIn: []orderly.PayStatus{orderly.PayPaying, orderly.PayUnpaid}, Now: now, SetPayStatus: orderly.PayPaid,
			SetPaidAt: true, Cause: "batch", Causes: causes, Actor: "payment", TraceID: "trace-set"}
	}
	check := func(p store.OrdersTransitionParams, wantChanged []string, wantCause map[string]string) {
		t.Helper()
		changed := write(t, s, func(tx store.Tx) ([]string, error) { return tx.OrdersTransition(ctx, &p) })
		slices.Sort(changed)
		equal(t, "changed", changed, wantChanged)
		for _, id := range p.IDs {
			b, ok := before[id]
			if !ok {
				continue
			}
			var wantTrail []*orderly.Transition
			want := *b
			if slices.Contains(wantChanged, id) {
				want.State, want.PayStatus, want.PaidAt, want.Version = orderly.StatePaid, orderly.PayPaid, &now, b.Version+1
				wantTrail = []*orderly.Transition{{OrderID: id, From: p.From, To: p.To, Event: p.Event, PayStatusFrom: b.PayStatus,
					PayStatusTo: orderly.PayPaid, Cause: wantCause[id], Actor: p.Actor, At: now, TraceID: p.TraceID}}
			}
			equal(t, "order "+id, getOrder(t, s, id), &want)
			gotTrail := trail(t, s, id)
			for i, tr := range gotTrail {
				if tr.ID <= 0 {
					t.Errorf("order %s: audit row id %d, want > 0", id, tr.ID)
				}
				if i < len(wantTrail) {
					wantTrail[i].ID = tr.ID
				}
			}
			equal(t, "audit trail of "+id, gotTrail, wantTrail)
		}
	}
	// a, b: their own causes; c (unpaid) and d: not named; e: named with ""; f: paid
	// already, named; "missing": no such order, named.
	check(pay([]string{"f", "e", "d", "c", "b", "a", "missing"},
		map[string]string{"a": "pay-a", "b": "pay-b", "e": "", "f": "pay-f", "missing": "pay-missing", "zz": "pay-zz"}),
		[]string{"a", "b", "c", "d", "e"},
		map[string]string{"a": "pay-a", "b": "pay-b", "c": "batch", "d": "batch", "e": "batch"})
	// An empty Causes, not nil: every row gets Cause.
	check(pay([]string{"g", "h"}, map[string]string{}), []string{"g", "h"}, map[string]string{"g": "batch", "h": "batch"})

	// Every audit row has an id of its own.
	seen := map[int64]string{}
	for _, id := range slices.Sorted(maps.Keys(before)) {
		for _, tr := range trail(t, s, id) {
			if other, ok := seen[tr.ID]; ok {
				t.Errorf("audit row id %d of %s and of %s", tr.ID, id, other)
			}
			seen[tr.ID] = id
		}
	}
}

// testOutboxInsertSizes: OutboxInsert of batches of every size around the prepared
// statements' row counts (128, 16, 1) and the multi-row statement of the rest (2 to 15
// messages): every message is written once, in order, with its own topic, key, sequence,
// payload, times and trace parent; an order event without a sequence fails the call,
// which writes nothing.
func testOutboxInsertSizes(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	var want []*orderly.Message
	for _, n := range []int{1, 2, 5, 15, 16, 17, 31, 130, 145} {
		batch := make([]*store.OutboxInsertParams, n)
		for i := range batch {
			p := &store.OutboxInsertParams{Topic: orderly.TopicReservationRelease, Key: fmt.Sprintf("b%d-%d", n, i%3),
				Payload: fmt.Appendf(nil, `{"batch":%d,"i":%d}`, n, i), Now: t0.Add(time.Duration(n*1000+i) * time.Millisecond)}
			if i%2 == 1 {
				p.Topic, p.Sequence = orderly.TopicOrderPaid, int64(i+1)
			}
			if i%4 == 3 {
				p.TraceParent = fmt.Sprintf("00-%032x-%016x-01", n*1000+i, i+1)
			}
			batch[i] = p
			want = append(want, &orderly.Message{Topic: p.Topic, Key: p.Key, Sequence: p.Sequence, Payload: p.Payload,
				State: orderly.MessagePending, NextAttemptAt: p.Now, CreatedAt: p.Now, TraceParent: p.TraceParent})
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, batch) })
		got := listMessages(t, s, orderly.MessagePending, 10_000)
		equalMessages(t, fmt.Sprintf("messages after a batch of %d", n), got, want)
		if t.Failed() {
			return
		}
		ids := map[string]bool{}
		for i, m := range got {
			if ids[m.MessageID] {
				t.Errorf("message id %s given twice", m.MessageID)
			}
			ids[m.MessageID] = true
			if i > 0 && m.ID <= got[i-1].ID {
				t.Errorf("message ids not increasing in insert order: %d after %d", m.ID, got[i-1].ID)
			}
		}
	}

	bad := make([]*store.OutboxInsertParams, 5)
	for i := range bad {
		bad[i] = &store.OutboxInsertParams{Topic: orderly.TopicOrderPaid, Key: "bad", Payload: []byte(`{}`), Sequence: int64(i + 1), Now: t0}
	}
	bad[3].Sequence = 0
	if err := txErr(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, bad) }); err == nil {
		t.Error("OutboxInsert of an order event without a sequence succeeded")
	}
	equal(t, "pending messages after the refused batch", len(listMessages(t, s, orderly.MessagePending, 10_000)), len(want))
}
