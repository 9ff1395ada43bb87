package storetest

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func testWallets(t *testing.T, open opener) {
	t.Run("Accounts", func(t *testing.T) { testWalletAccounts(t, open) })
	t.Run("Transfers", func(t *testing.T) { testWalletTransfers(t, open) })
	t.Run("Entries", func(t *testing.T) { testWalletEntries(t, open) })
	t.Run("Holds", func(t *testing.T) { testWalletHolds(t, open) })
	t.Run("ConcurrentMoves", func(t *testing.T) { testWalletConcurrentMoves(t, open) })
}

var errInsufficient = errors.New("storetest: insufficient funds")

// walletTransfer inserts a transfer of kind with its entries, moving the balances as a
// service does (accounts in id order); amounts are of user's and cp's available buckets.
func walletTransfer(t *testing.T, s store.Store, kind orderly.TransferKind, key string, user, cp orderly.AccountRef, userDelta int64) *orderly.WalletTransfer {
	t.Helper()
	tr := &orderly.WalletTransfer{ID: nextID("tr"), Kind: kind, IdempotencyKey: key, AccountID: user.ID(), CounterpartyID: cp.ID(),
		Currency: user.Currency, Amount: max(userDelta, -userDelta), CreatedAt: t0}
	inTx(t, s, func(tx store.Tx) error {
		if err := tx.WalletTransferInsert(t.Context(), tr); err != nil {
			return err
		}
		for _, ref := range []orderly.AccountRef{user, cp} {
			if err := tx.WalletAccountEnsure(t.Context(), ref, t0); err != nil {
				return err
			}
		}
		for _, m := range []struct {
			id    string
			delta int64
		}{{cp.ID(), -userDelta}, {user.ID(), userDelta}} {
			ok, err := tx.WalletAccountMove(t.Context(), &store.WalletAccountMoveParams{ID: m.id, Available: m.delta, Now: t0})
			if err != nil {
				return err
			} else if !ok {
				return errInsufficient
			}
		}
		return tx.WalletEntriesInsert(t.Context(), []*orderly.WalletEntry{
			{TransferID: tr.ID, AccountID: cp.ID(), Bucket: orderly.BucketAvailable, Amount: -userDelta, CreatedAt: t0},
			{TransferID: tr.ID, AccountID: user.ID(), Bucket: orderly.BucketAvailable, Amount: userDelta, CreatedAt: t0},
		})
	})
	return tr
}

func testWalletAccounts(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user := orderly.UserAccount("user-1", "USD")
	ext := orderly.SystemAccount(orderly.SystemExternal, "USD")
	inTx(t, s, func(tx store.Tx) error {
		for range 2 { // the second ensure leaves the account as it is
			if err := tx.WalletAccountEnsure(ctx, user, t0); err != nil {
				return err
			}
		}
		return tx.WalletAccountEnsure(ctx, ext, t0)
	})
	moves := []struct {
		name      string
		id        string
		available int64
		held      int64
		want      bool
	}{
		{"user below zero", user.ID(), -1, 0, false},
		{"system below zero", ext.ID(), -500, 0, true},
		{"user credited", user.ID(), 500, 0, true},
		{"user holds", user.ID(), -300, 300, true},
		{"held below zero", user.ID(), 301, -301, false},
		{"available below zero by one", user.ID(), -201, 0, false},
		{"available to zero", user.ID(), -200, 0, true},
		{"unknown account", "user:USD:nobody", 1, 0, false},
	}
	for _, m := range moves {
		ok := write(t, s, func(tx store.Tx) (bool, error) {
			return tx.WalletAccountMove(ctx, &store.WalletAccountMoveParams{ID: m.id, Available: m.available, Held: m.held, Now: t0.Add(time.Second)})
		})
		if ok != m.want {
			t.Errorf("%s: changed %v, want %v", m.name, ok, m.want)
		}
	}
	got := read(t, s, func(tx store.Tx) (*orderly.WalletAccount, error) { return tx.WalletAccountGet(ctx, user.ID()) })
	equal(t, "user account", got, &orderly.WalletAccount{ID: user.ID(), Kind: orderly.AccountUser, Owner: "user-1", Currency: "USD",
		Available: 0, Held: 300, Version: 4, CreatedAt: t0, UpdatedAt: t0.Add(time.Second)})
	list := read(t, s, func(tx store.Tx) ([]*orderly.WalletAccount, error) {
		return tx.WalletAccountList(ctx, &store.WalletAccountListParams{Limit: 10})
	})
	if len(list) != 2 || list[0].ID != ext.ID() || list[0].Available != -500 || list[1].ID != user.ID() {
		t.Errorf("list: %+v", list)
	}
	mine := read(t, s, func(tx store.Tx) ([]*orderly.WalletAccount, error) {
		return tx.WalletAccountList(ctx, &store.WalletAccountListParams{Owner: "user-1", Limit: 10})
	})
	if len(mine) != 1 || mine[0].ID != user.ID() {
		t.Errorf("list of user-1: %+v", mine)
	}
	err := s.Read(ctx, func(tx store.Tx) error { _, err := tx.WalletAccountGet(ctx, "user:USD:nobody"); return err })
	wantCode(t, "get unknown account", err, orderly.ENOTFOUND)
}

func testWalletTransfers(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user := orderly.UserAccount("user-1", "EUR")
	ext := orderly.SystemAccount(orderly.SystemExternal, "EUR")
	platform := orderly.SystemAccount(orderly.SystemPlatform, "EUR")
	credit := walletTransfer(t, s, orderly.TransferCredit, "credit-1", user, ext, 1000)
	debit := walletTransfer(t, s, orderly.TransferDebit, "debit-1", user, platform, -400)
	got := read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) { return tx.WalletTransferByKey(ctx, "debit-1") })
	equal(t, "debit by key", got, debit)
	got = read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) { return tx.WalletTransferGet(ctx, credit.ID) })
	equal(t, "credit", got, credit)

	err := txErr(t, s, func(tx store.Tx) error {
		return tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: nextID("tr"), Kind: orderly.TransferDebit, IdempotencyKey: "debit-1",
			AccountID: user.ID(), Currency: "EUR", Amount: 1, CreatedAt: t0})
	})
	wantCode(t, "insert with a used key", err, orderly.ECONFLICT)
	// Expiries carry no key: many of them coexist.
	inTx(t, s, func(tx store.Tx) error {
		for range 2 {
			if err := tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: nextID("tr"), Kind: orderly.TransferExpire,
				AccountID: user.ID(), Currency: "EUR", Amount: 1, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return nil
	})

	refunds := []struct {
		id     string
		amount int64
		want   bool
	}{
		{debit.ID, 300, true},
		{debit.ID, 101, false},
		{debit.ID, 100, true},
		{debit.ID, 1, false},
		{credit.ID, 1, false}, // only debits and posts
	}
	for _, r := range refunds {
		ok := write(t, s, func(tx store.Tx) (bool, error) { return tx.WalletTransferAddRefunded(ctx, r.id, r.amount) })
		if ok != r.want {
			t.Errorf("refund %d of %s: changed %v, want %v", r.amount, r.id, ok, r.want)
		}
	}
	got = read(t, s, func(tx store.Tx) (*orderly.WalletTransfer, error) { return tx.WalletTransferGet(ctx, debit.ID) })
	if got.Refunded != 400 {
		t.Errorf("debit refunded %d, want 400", got.Refunded)
	}
}

func testWalletEntries(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user := orderly.UserAccount("user-2", "USD")
	ext := orderly.SystemAccount(orderly.SystemExternal, "USD")
	for i := range 5 {
		walletTransfer(t, s, orderly.TransferCredit, fmt.Sprintf("c-%d", i), user, ext, int64(100+i))
	}
	page := read(t, s, func(tx store.Tx) ([]*orderly.WalletEntry, error) {
		return tx.WalletEntryList(ctx, &store.WalletEntryListParams{AccountID: user.ID(), Limit: 2})
	})
	if len(page) != 2 || page[0].Amount != 104 || page[1].Amount != 103 || page[0].Kind != orderly.TransferCredit ||
		page[0].Bucket != orderly.BucketAvailable || !page[0].CreatedAt.Equal(t0) {
		t.Fatalf("first page: %+v", page)
	}
	next := read(t, s, func(tx store.Tx) ([]*orderly.WalletEntry, error) {
		return tx.WalletEntryList(ctx, &store.WalletEntryListParams{AccountID: user.ID(), BeforeID: page[1].ID, Limit: 10})
	})
	if len(next) != 3 || next[0].Amount != 102 || next[2].Amount != 100 {
		t.Errorf("second page: %+v", next)
	}
	sums := read(t, s, func(tx store.Tx) ([]*store.WalletEntrySum, error) {
		return tx.WalletEntrySums(ctx, &store.ListParams{Limit: 10})
	})
	equal(t, "sums", sums, []*store.WalletEntrySum{{AccountID: ext.ID(), Available: -510}, {AccountID: user.ID(), Available: 510}})
	ledgers := func() map[string][4]int64 {
		ls := read(t, s, func(tx store.Tx) ([]*store.WalletLedger, error) {
			return tx.WalletLedgers(ctx, &store.ListParams{Limit: 10})
		})
		out := map[string][4]int64{}
		for i, l := range ls {
			if i > 0 && ls[i-1].Account.ID >= l.Account.ID {
				t.Errorf("wallet ledgers not in id order: %s then %s", ls[i-1].Account.ID, l.Account.ID)
			}
			out[l.Account.ID] = [4]int64{l.Account.Available, l.Account.Held, l.LedgerAvailable, l.LedgerHeld}
		}
		return out
	}
	equal(t, "ledgers", ledgers(), map[string][4]int64{ext.ID(): {-510, 0, -510, 0}, user.ID(): {510, 0, 510, 0}})
	if after := read(t, s, func(tx store.Tx) ([]*store.WalletLedger, error) {
		return tx.WalletLedgers(ctx, &store.ListParams{AfterID: min(ext.ID(), user.ID()), Limit: 10})
	}); len(after) != 1 || after[0].Account.ID != max(ext.ID(), user.ID()) || !after[0].Agrees() {
		t.Errorf("ledgers after %s: %+v", min(ext.ID(), user.ID()), after)
	}
	none := read(t, s, func(tx store.Tx) ([]string, error) { return tx.WalletTransfersUnbalanced(ctx, 10) })
	if len(none) != 0 {
		t.Errorf("unbalanced transfers in a balanced ledger: %v", none)
	}
	// A transfer of one entry, and one whose entries do not sum to zero.
	lone, skew := nextID("tr"), nextID("tr")
	inTx(t, s, func(tx store.Tx) error {
		for _, id := range []string{lone, skew} {
			if err := tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: id, Kind: orderly.TransferCredit, IdempotencyKey: id,
				AccountID: user.ID(), Currency: "USD", Amount: 1, CreatedAt: t0}); err != nil {
				return err
			}
		}
		return tx.WalletEntriesInsert(ctx, []*orderly.WalletEntry{
			{TransferID: lone, AccountID: user.ID(), Bucket: orderly.BucketAvailable, Amount: 1, CreatedAt: t0},
			{TransferID: skew, AccountID: user.ID(), Bucket: orderly.BucketAvailable, Amount: 1, CreatedAt: t0},
			{TransferID: skew, AccountID: ext.ID(), Bucket: orderly.BucketAvailable, Amount: -2, CreatedAt: t0},
		})
	})
	bad := read(t, s, func(tx store.Tx) ([]string, error) { return tx.WalletTransfersUnbalanced(ctx, 10) })
	want := []string{lone, skew}
	if lone > skew {
		want = []string{skew, lone}
	}
	equal(t, "unbalanced", bad, want)
	// Entries written without moving the balances: the ledger disagrees with both accounts.
	equal(t, "ledgers after stray entries", ledgers(), map[string][4]int64{ext.ID(): {-510, 0, -512, 0}, user.ID(): {510, 0, 512, 0}})
}

func testWalletHolds(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user := orderly.UserAccount("user-3", "USD")
	ext := orderly.SystemAccount(orderly.SystemExternal, "USD")
	walletTransfer(t, s, orderly.TransferCredit, "c", user, ext, 10000)
	var holds []*orderly.WalletHold
	for i, expires := range []time.Time{t0.Add(2 * time.Minute), t0.Add(time.Minute), t0.Add(3 * time.Minute)} {
		h := &orderly.WalletHold{ID: nextID("hold"), AccountID: user.ID(), Currency: "USD", Amount: int64(1000 * (i + 1)),
			State: orderly.HoldPending, ExpiresAt: expires, CreatedAt: t0}
		inTx(t, s, func(tx store.Tx) error {
			if err := tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: h.ID, Kind: orderly.TransferHold, IdempotencyKey: h.ID,
				AccountID: user.ID(), Currency: "USD", Amount: h.Amount, HoldID: h.ID, CreatedAt: t0}); err != nil {
				return err
			}
			return tx.WalletHoldInsert(ctx, h)
		})
		holds = append(holds, h)
	}
	got := read(t, s, func(tx store.Tx) (*orderly.WalletHold, error) { return tx.WalletHoldGet(ctx, holds[0].ID) })
	equal(t, "hold", got, holds[0])
	locked := write(t, s, func(tx store.Tx) (*orderly.WalletHold, error) { return tx.WalletHoldLock(ctx, holds[1].ID) })
	equal(t, "locked hold", locked, holds[1])
	next := read(t, s, func(tx store.Tx) (time.Time, error) {
		at, ok, err := tx.WalletHoldNextWakeAt(ctx)
		if !ok && err == nil {
			err = errors.New("no next wake_at")
		}
		return at, err
	})
	if !next.Equal(t0.Add(time.Minute)) {
		t.Errorf("next wake_at %s, want %s", next, t0.Add(time.Minute))
	}
	overdue := read(t, s, func(tx store.Tx) (int64, error) { return tx.WalletHoldsOverdueCount(ctx, t0.Add(150*time.Second)) })
	if overdue != 2 {
		t.Errorf("overdue before t0+150s: %d, want 2", overdue)
	}
	overdueIDs := func(after string, limit int) []string {
		hs := read(t, s, func(tx store.Tx) ([]*orderly.WalletHold, error) {
			return tx.WalletHoldsOverdue(ctx, &store.WalletHoldsOverdueParams{Before: t0.Add(150 * time.Second), AfterID: after, Limit: limit})
		})
		var ids []string
		for _, h := range hs {
			ids = append(ids, h.ID)
		}
		return ids
	}
	first, second := min(holds[0].ID, holds[1].ID), max(holds[0].ID, holds[1].ID) // the two expiring before t0+150s, by id
	equal(t, "overdue holds", overdueIDs("", 10), []string{first, second})
	equal(t, "overdue holds, one per page", overdueIDs("", 1), []string{first})
	equal(t, "overdue holds after the first", overdueIDs(first, 10), []string{second})
	// Due: those with wake_at <= now, earliest first; 1 ms before a deadline it is not due.
	due := write(t, s, func(tx store.Tx) ([]*orderly.WalletHold, error) {
		return tx.WalletHoldsDue(ctx, t0.Add(2*time.Minute-time.Millisecond), 10)
	})
	if len(due) != 1 || due[0].ID != holds[1].ID {
		t.Errorf("due at t0+2m-1ms: %+v, want %s only", due, holds[1].ID)
	}
	// Resolve: the expiry guard refuses before expires_at; posted once.
	early := t0.Add(time.Minute - time.Millisecond)
	steps := []struct {
		name string
		p    store.WalletHoldResolveParams
		want bool
	}{
		{"expire 1 ms early", store.WalletHoldResolveParams{ID: holds[1].ID, To: orderly.HoldExpired, At: early, ExpiredBy: &early}, false},
		{"expire at expires_at", store.WalletHoldResolveParams{ID: holds[1].ID, To: orderly.HoldExpired, At: t0.Add(time.Minute), ExpiredBy: ptr(t0.Add(time.Minute))}, true},
		{"post after the expiry", store.WalletHoldResolveParams{ID: holds[1].ID, To: orderly.HoldPosted, Captured: 1, At: t0.Add(time.Minute)}, false},
		{"post", store.WalletHoldResolveParams{ID: holds[0].ID, To: orderly.HoldPosted, Captured: 700, At: t0.Add(time.Second)}, true},
		{"void after the post", store.WalletHoldResolveParams{ID: holds[0].ID, To: orderly.HoldVoided, At: t0.Add(time.Second)}, false},
	}
	for _, st := range steps {
		ok := write(t, s, func(tx store.Tx) (bool, error) { return tx.WalletHoldResolve(ctx, &st.p) })
		if ok != st.want {
			t.Errorf("%s: changed %v, want %v", st.name, ok, st.want)
		}
	}
	// Over-capture is refused by the schema.
	err := txErr(t, s, func(tx store.Tx) error {
		_, err := tx.WalletHoldResolve(ctx, &store.WalletHoldResolveParams{ID: holds[2].ID, To: orderly.HoldPosted, Captured: 3001, At: t0})
		return err
	})
	if err == nil {
		t.Error("a capture above the hold's amount was written")
	}
	list := read(t, s, func(tx store.Tx) ([]*orderly.WalletHold, error) {
		return tx.WalletHoldList(ctx, &store.ListParams{Limit: 10})
	})
	states := map[string]string{}
	for _, h := range list {
		states[h.ID] = fmt.Sprintf("%s/%d", h.State, h.Captured)
	}
	equal(t, "holds", states, map[string]string{holds[0].ID: "posted/700", holds[1].ID: "expired/0", holds[2].ID: "pending/0"})
	due = write(t, s, func(tx store.Tx) ([]*orderly.WalletHold, error) { return tx.WalletHoldsDue(ctx, t0.Add(time.Hour), 10) })
	if len(due) != 1 || due[0].ID != holds[2].ID {
		t.Errorf("due later: %+v, want %s only (resolved holds wait for nothing)", due, holds[2].ID)
	}
	// Resolutions: transfers of kind post, void or expire naming a hold.
	inTx(t, s, func(tx store.Tx) error {
		return tx.WalletTransferInsert(ctx, &orderly.WalletTransfer{ID: nextID("tr"), Kind: orderly.TransferExpire, AccountID: user.ID(),
			Currency: "USD", Amount: 2000, HoldID: holds[1].ID, CreatedAt: t0})
	})
	res := read(t, s, func(tx store.Tx) ([]*store.WalletHoldResolutions, error) {
		return tx.WalletHoldResolutions(ctx, &store.ListParams{Limit: 10})
	})
	equal(t, "resolutions", res, []*store.WalletHoldResolutions{{HoldID: holds[1].ID, Transfers: 1}})
}

// testWalletConcurrentMoves: 100 transactions at once each take 100 from a user balance of
// 3700 with the guarded move: exactly 37 change it and it ends at 0.
func testWalletConcurrentMoves(t *testing.T, open opener) {
	ctx, s := setup(t, open)
	user := orderly.UserAccount("user-4", "USD")
	ext := orderly.SystemAccount(orderly.SystemExternal, "USD")
	walletTransfer(t, s, orderly.TransferCredit, "c", user, ext, 3700)
	errs := race(100, func(int) error {
		return s.InTx(ctx, func(tx store.Tx) error {
			ok, err := tx.WalletAccountMove(ctx, &store.WalletAccountMoveParams{ID: user.ID(), Available: -100, Now: t0})
			if err == nil && !ok {
				err = errInsufficient
			}
			return err
		})
	})
	var won, refused int
	for _, err := range errs {
		switch {
		case err == nil:
			won++
		case errors.Is(err, errInsufficient):
			refused++
		default:
			t.Errorf("move: %v", err)
		}
	}
	a := read(t, s, func(tx store.Tx) (*orderly.WalletAccount, error) { return tx.WalletAccountGet(ctx, user.ID()) })
	if won != 37 || refused != 63 || a.Available != 0 {
		t.Errorf("%d moves changed the balance, %d were refused, balance %d; want 37, 63, 0", won, refused, a.Available)
	}
}
