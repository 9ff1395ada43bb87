package wallet_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
	"github.com/orderlyhq/orderly/wallet"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// bundle is what a test works with: a store, the service on it, a closer that drives the
// hold expiries, and (SQLite with a test clock) the database clock's setter.
type bundle struct {
	db      *sqlstore.DB
	svc     *wallet.Service
	closer  *closer.Closer
	setNow  func(time.Time)
	expired int // holds the closer expired, summed over expireDue calls
}

// t0 is the tests' database clock at the start: UTC, on a whole millisecond.
var t0 = time.Date(2026, 11, 30, 8, 0, 0, 123_000_000, time.UTC)

// setup opens a fresh SQLite store whose clock the test sets (url "") or a fresh database
// on the server of url (real clock).
func setup(t *testing.T, url string) *bundle {
	t.Helper()
	b := &bundle{}
	cfg := sqlstore.Config{URL: url}
	if url == "" {
		var (
			mu  sync.Mutex
			now = t0
		)
		cfg.URL = sqlitetest.Path(t)
		cfg.Now = func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
		b.setNow = func(at time.Time) { mu.Lock(); now = at; mu.Unlock() }
	}
	db, err := sqlstore.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	b.db = db
	if b.svc, err = wallet.NewService(wallet.Config{Store: db}); err != nil {
		t.Fatal(err)
	}
	if b.closer, err = closer.New(closer.Config{Store: db, Timed: []closer.Timed{wallet.NewExpiries(nil)}}); err != nil {
		t.Fatal(err)
	}
	return b
}

// eachDialect runs fn on a fresh SQLite store with the test clock, and on fresh PostgreSQL
// and MySQL databases (real clock) when their variables are set.
func eachDialect(t *testing.T, fn func(t *testing.T, b *bundle)) {
	t.Helper()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			url := ""
			if dialect != "sqlite" {
				url = testdb.Fresh(t, testdb.URL(t, dialect))
			}
			fn(t, setup(t, url))
		})
	}
}

// expireDue runs one pass of the closer (the sweep's path) and returns how many holds it
// expired.
func (b *bundle) expireDue(t *testing.T) int {
	t.Helper()
	res, err := b.closer.CloseDue(t.Context(), closer.TriggerSweep)
	if err != nil {
		t.Fatalf("closer pass: %v", err)
	}
	b.expired += res.Fired
	return res.Fired
}

func (b *bundle) credit(t *testing.T, user string, amount int64) {
	t.Helper()
	if _, err := b.svc.Credit(t.Context(), &orderly.WalletMoveParams{UserID: user, Currency: "USD", Amount: amount,
		IdempotencyKey: fmt.Sprintf("topup-%s-%d", user, amount)}); err != nil {
		t.Fatalf("credit %s %d: %v", user, amount, err)
	}
}

// balance returns a user's (available, held) in USD.
func (b *bundle) balance(t *testing.T, user string) (int64, int64) {
	t.Helper()
	w, err := b.svc.Wallet(t.Context(), user, "USD", nil)
	if err != nil {
		t.Fatalf("wallet %s: %v", user, err)
	}
	return w.Account.Available, w.Account.Held
}

func (b *bundle) platform(t *testing.T) int64 {
	t.Helper()
	var available int64
	err := b.db.Read(t.Context(), func(tx store.Tx) (err error) {
		available, _, err = wallet.PlatformBalance(t.Context(), tx, "USD")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return available
}

// checkLedger runs verify's wallet check and fails on any violation.
func (b *bundle) checkLedger(t *testing.T) {
	t.Helper()
	var violations []string
	err := b.db.Read(t.Context(), func(tx store.Tx) (err error) {
		violations, err = verify.CheckWallets(t.Context(), tx)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range violations {
		t.Errorf("ledger: %s", v)
	}
}

// releases counts the expire and void transfers that released a hold of user's.
func (b *bundle) releases(t *testing.T, user string) (expire, void int) {
	t.Helper()
	w, err := b.svc.Wallet(t.Context(), user, "USD", &orderly.WalletEntriesPage{Limit: wallet.MaxPageSize})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range w.Entries {
		if e.Bucket != orderly.BucketHeld || e.Amount > 0 {
			continue
		}
		tr, err := b.svc.Transfer(t.Context(), e.TransferID)
		if err != nil {
			t.Fatal(err)
		}
		switch tr.Kind {
		case orderly.TransferExpire:
			expire++
		case orderly.TransferVoid:
			void++
		}
	}
	return expire, void
}

func wantCode(t *testing.T, what string, err error, code string) {
	t.Helper()
	if got := orderly.ErrorCode(err); got != code {
		t.Errorf("%s: error code %q (%v), want %q", what, got, err, code)
	}
}

// TestPostCapturesFareReleasesRest: a hold of 5000, a fare of 3820: 3820 is captured to
// the platform and 1180 goes back to available, in one transfer; the capture sent again
// with the same key (its reply lost) changes nothing more.
func TestPostCapturesFareReleasesRest(t *testing.T) {
	t.Parallel()
	eachDialect(t, testPostCapturesFareReleasesRest)
}

func testPostCapturesFareReleasesRest(t *testing.T, b *bundle) {
	ctx := t.Context()
	b.credit(t, "rider", 10000)
	h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 5000, TTL: time.Hour, IdempotencyKey: "trip-1:hold"})
	if err != nil {
		t.Fatal(err)
	}
	if av, held := b.balance(t, "rider"); av != 5000 || held != 5000 {
		t.Fatalf("after the hold: available %d held %d, want 5000 5000", av, held)
	}
	post := &orderly.WalletPostParams{HoldID: h.ID, Amount: 3820, IdempotencyKey: "trip-1:capture"}
	var firstID string
	for i := range 3 {
		got, tr, err := b.svc.Post(ctx, post)
		if err != nil {
			t.Fatalf("post %d: %v", i, err)
		}
		if i == 0 {
			firstID = tr.ID
		}
		if got.State != orderly.HoldPosted || got.Captured != 3820 || tr.ID != firstID || tr.Amount != 3820 || tr.Replay != (i > 0) {
			t.Errorf("post %d: hold %+v, transfer %+v", i, got, tr)
		}
	}
	if av, held := b.balance(t, "rider"); av != 10000-3820 || held != 0 {
		t.Errorf("after the capture: available %d held %d, want %d 0", av, held, 10000-3820)
	}
	if p := b.platform(t); p != 3820 {
		t.Errorf("platform: %d, want 3820", p)
	}
	tr, err := b.svc.Transfer(ctx, firstID)
	if err != nil {
		t.Fatal(err)
	}
	w, err := b.svc.Wallet(ctx, "rider", "USD", nil)
	if err != nil {
		t.Fatal(err)
	}
	var released int64
	for _, e := range w.Entries {
		if e.TransferID == tr.ID && e.Bucket == orderly.BucketAvailable {
			released += e.Amount
		}
	}
	if released != 1180 {
		t.Errorf("released by the capture: %d, want 1180", released)
	}
	// Another key for the same hold: the hold resolved once already.
	_, _, err = b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 3820, IdempotencyKey: "trip-1:capture-again"})
	wantCode(t, "second capture under another key", err, orderly.EHOLDNOTPENDING)
	// The same key for another amount: refused, not replayed.
	_, _, err = b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 3000, IdempotencyKey: "trip-1:capture"})
	wantCode(t, "same key, other amount", err, orderly.EIDEMPOTENCY)
	if b.setNow != nil { // the real clock of a server stays before the expiry
		b.setNow(t0.Add(2 * time.Hour))
	}
	if n := b.expireDue(t); n != 0 {
		t.Errorf("closer expired %d holds after the capture, want 0", n)
	}
	b.checkLedger(t)
}

// TestPostNeverOverCaptures: 6100 on a hold of 5000 is refused hold-exceeded and moves
// nothing; the hold stays pending and can still be captured in full.
func TestPostNeverOverCaptures(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	b.credit(t, "rider", 8000)
	h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 5000, TTL: time.Hour, IdempotencyKey: "h"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 6100, IdempotencyKey: "over"})
	wantCode(t, "capture of 6100 on 5000", err, orderly.EHOLDEXCEEDED)
	if av, held := b.balance(t, "rider"); av != 3000 || held != 5000 {
		t.Errorf("after the refusal: available %d held %d, want 3000 5000", av, held)
	}
	got, _, err := b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 5000, IdempotencyKey: "full"})
	if err != nil || got.Captured != 5000 {
		t.Fatalf("capture of the whole hold: %+v, %v", got, err)
	}
	if av, held := b.balance(t, "rider"); av != 3000 || held != 0 || b.platform(t) != 5000 {
		t.Errorf("after the full capture: available %d held %d platform %d, want 3000 0 5000", av, held, b.platform(t))
	}
	b.checkLedger(t)
}

// TestPostAfterExpiryRefused: a post 1 ms after expires_at, the closer not run yet, is
// refused hold-expired and releases the amount itself, once; void the same; the closer
// then finds nothing to expire.
func TestPostAfterExpiryRefused(t *testing.T) {
	t.Parallel()
	for _, op := range []string{"post", "void"} {
		t.Run(op, func(t *testing.T) {
			t.Parallel()
			b := setup(t, "")
			ctx := t.Context()
			b.credit(t, "rider", 5000)
			h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 5000, TTL: 10 * time.Minute, IdempotencyKey: "h"})
			if err != nil {
				t.Fatal(err)
			}
			if !h.ExpiresAt.Equal(t0.Add(10 * time.Minute)) {
				t.Fatalf("expires_at %s, want %s", h.ExpiresAt, t0.Add(10*time.Minute))
			}
			b.setNow(h.ExpiresAt.Add(time.Millisecond))
			for range 2 { // the retry is refused the same way
				if op == "post" {
					_, _, err = b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 3820, IdempotencyKey: "late"})
				} else {
					_, _, err = b.svc.Void(ctx, h.ID, "late")
				}
				wantCode(t, op+" 1 ms after the expiry", err, orderly.EHOLDEXPIRED)
			}
			if n := b.expireDue(t); n != 0 {
				t.Errorf("the closer expired %d holds after the refusal, want 0", n)
			}
			got, err := b.svc.GetHold(ctx, h.ID)
			if err != nil || got.State != orderly.HoldExpired || got.Captured != 0 {
				t.Fatalf("hold: %+v, %v", got, err)
			}
			if av, held := b.balance(t, "rider"); av != 5000 || held != 0 || b.platform(t) != 0 {
				t.Errorf("available %d held %d platform %d, want 5000 0 0", av, held, b.platform(t))
			}
			if expire, void := b.releases(t, "rider"); expire != 1 || void != 0 {
				t.Errorf("releases: %d expiries, %d voids, want 1 0", expire, void)
			}
			b.checkLedger(t)
		})
	}
}

// TestExpiryNeverEarly: the closer leaves a hold alone 1 ms before expires_at and expires
// it at expires_at, once.
func TestExpiryNeverEarly(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	b.credit(t, "rider", 7000)
	h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 5000, TTL: time.Minute, IdempotencyKey: "h"})
	if err != nil {
		t.Fatal(err)
	}
	b.setNow(h.ExpiresAt.Add(-time.Millisecond))
	if n := b.expireDue(t); n != 0 {
		t.Fatalf("1 ms before expires_at: %d holds expired, want 0", n)
	}
	if got, _ := b.svc.GetHold(ctx, h.ID); got.State != orderly.HoldPending {
		t.Fatalf("1 ms before expires_at: hold %s", got.State)
	}
	// Still pending: a void just before the deadline is accepted.
	b.setNow(h.ExpiresAt)
	if n := b.expireDue(t); n != 1 {
		t.Fatalf("at expires_at: %d holds expired, want 1", n)
	}
	if n := b.expireDue(t); n != 0 {
		t.Errorf("second pass: %d holds expired, want 0", n)
	}
	got, err := b.svc.GetHold(ctx, h.ID)
	if err != nil || got.State != orderly.HoldExpired || got.ResolvedAt == nil || !got.ResolvedAt.Equal(h.ExpiresAt) {
		t.Fatalf("hold: %+v, %v", got, err)
	}
	if av, held := b.balance(t, "rider"); av != 7000 || held != 0 {
		t.Errorf("available %d held %d, want 7000 0", av, held)
	}
	_, _, err = b.svc.Void(ctx, h.ID, "v")
	wantCode(t, "void after the expiry", err, orderly.EHOLDEXPIRED)
	b.checkLedger(t)
}

// TestVoidReleasesOnce: a void releases the whole hold; a second void under another key is
// refused; the same key is a replay.
func TestVoidReleasesOnce(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	b.credit(t, "rider", 5000)
	h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 4000, TTL: time.Minute, IdempotencyKey: "h"})
	if err != nil {
		t.Fatal(err)
	}
	_, _, err = b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "rider", Currency: "USD", Amount: 1001, TTL: time.Minute, IdempotencyKey: "h2"})
	wantCode(t, "a second hold beyond the balance", err, orderly.EINSUFFICIENT)
	if _, tr, err := b.svc.Void(ctx, h.ID, "v"); err != nil || tr.Amount != 4000 {
		t.Fatalf("void: %+v, %v", tr, err)
	}
	if _, tr, err := b.svc.Void(ctx, h.ID, "v"); err != nil || !tr.Replay {
		t.Fatalf("void replay: %+v, %v", tr, err)
	}
	_, _, err = b.svc.Void(ctx, h.ID, "v2")
	wantCode(t, "second void", err, orderly.EHOLDNOTPENDING)
	if av, held := b.balance(t, "rider"); av != 5000 || held != 0 {
		t.Errorf("available %d held %d, want 5000 0", av, held)
	}
	if expire, void := b.releases(t, "rider"); expire != 0 || void != 1 {
		t.Errorf("releases: %d expiries, %d voids, want 0 1", expire, void)
	}
	b.checkLedger(t)
}

// TestRefundNeverMoreThanTaken: refunds of a debit add up to at most its amount; of a post,
// to at most the captured amount.
func TestRefundNeverMoreThanTaken(t *testing.T) {
	t.Parallel()
	eachDialect(t, testRefundNeverMoreThanTaken)
}

func testRefundNeverMoreThanTaken(t *testing.T, b *bundle) {
	ctx := t.Context()
	b.credit(t, "buyer", 10000)
	debit, err := b.svc.Debit(ctx, &orderly.WalletMoveParams{UserID: "buyer", Currency: "USD", Amount: 3000, IdempotencyKey: "order-1"})
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		key    string
		amount int64
		code   string
	}{
		{"r1", 1000, ""},
		{"r1", 1000, ""}, // replay
		{"r2", 2001, orderly.EREFUNDEXCEEDS},
		{"r3", 2000, ""},
		{"r4", 1, orderly.EREFUNDEXCEEDS},
	}
	for _, s := range steps {
		_, err := b.svc.Refund(ctx, &orderly.WalletRefundParams{TransferID: debit.ID, Amount: s.amount, IdempotencyKey: s.key})
		wantCode(t, fmt.Sprintf("refund %s of %d", s.key, s.amount), err, s.code)
	}
	h, _, err := b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "buyer", Currency: "USD", Amount: 5000, TTL: time.Minute, IdempotencyKey: "h"})
	if err != nil {
		t.Fatal(err)
	}
	_, post, err := b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: h.ID, Amount: 3820, IdempotencyKey: "p"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.svc.Refund(ctx, &orderly.WalletRefundParams{TransferID: post.ID, Amount: 3821, IdempotencyKey: "rp1"})
	wantCode(t, "refund of 3821 of a capture of 3820", err, orderly.EREFUNDEXCEEDS)
	if _, err = b.svc.Refund(ctx, &orderly.WalletRefundParams{TransferID: post.ID, Amount: 3820, IdempotencyKey: "rp2"}); err != nil {
		t.Fatal(err)
	}
	_, err = b.svc.Refund(ctx, &orderly.WalletRefundParams{TransferID: h.ID, Amount: 1, IdempotencyKey: "rh"})
	wantCode(t, "refund of a hold transfer", err, orderly.EINVALID)
	if av, held := b.balance(t, "buyer"); av != 10000 || held != 0 || b.platform(t) != 0 {
		t.Errorf("available %d held %d platform %d, want 10000 0 0", av, held, b.platform(t))
	}
	b.checkLedger(t)
}

// TestInvalidInput: bad input is EINVALID and writes nothing; a debit of a user without a
// wallet is ENOTFOUND.
func TestInvalidInput(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	cases := []struct {
		name string
		p    orderly.WalletMoveParams
		code string
	}{
		{"zero amount", orderly.WalletMoveParams{UserID: "u", Currency: "USD", Amount: 0, IdempotencyKey: "k"}, orderly.EINVALID},
		{"negative amount", orderly.WalletMoveParams{UserID: "u", Currency: "USD", Amount: -5, IdempotencyKey: "k"}, orderly.EINVALID},
		{"no key", orderly.WalletMoveParams{UserID: "u", Currency: "USD", Amount: 5}, orderly.EINVALID},
		{"bad currency", orderly.WalletMoveParams{UserID: "u", Currency: "XXX", Amount: 5, IdempotencyKey: "k"}, orderly.EINVALID},
		{"no user", orderly.WalletMoveParams{Currency: "USD", Amount: 5, IdempotencyKey: "k"}, orderly.EINVALID},
		{"counterparty in another currency", orderly.WalletMoveParams{UserID: "u", Currency: "USD", Amount: 5, IdempotencyKey: "k",
			Counterparty: &orderly.AccountRef{Kind: orderly.AccountSystem, Owner: orderly.SystemPlatform, Currency: "EUR"}}, orderly.EINVALID},
		{"unknown system account", orderly.WalletMoveParams{UserID: "u", Currency: "USD", Amount: 5, IdempotencyKey: "k",
			Counterparty: &orderly.AccountRef{Kind: orderly.AccountSystem, Owner: "bank", Currency: "USD"}}, orderly.EINVALID},
	}
	for _, c := range cases {
		_, err := b.svc.Credit(ctx, &c.p)
		wantCode(t, c.name, err, c.code)
	}
	_, err := b.svc.Debit(ctx, &orderly.WalletMoveParams{UserID: "nobody", Currency: "USD", Amount: 1, IdempotencyKey: "d"})
	wantCode(t, "debit of a user without a wallet", err, orderly.ENOTFOUND)
	_, _, err = b.svc.Hold(ctx, &orderly.WalletHoldParams{UserID: "u", Currency: "USD", Amount: 1, IdempotencyKey: "h"})
	wantCode(t, "hold without a ttl", err, orderly.EINVALID)
	_, _, err = b.svc.Post(ctx, &orderly.WalletPostParams{HoldID: "no-such-hold", Amount: 1, IdempotencyKey: "p"})
	wantCode(t, "post of an unknown hold", err, orderly.ENOTFOUND)
	_, err = b.svc.Wallet(ctx, "nobody", "", nil)
	wantCode(t, "wallet of nobody", err, orderly.ENOTFOUND)
	b.checkLedger(t)
}

// TestEntriesPage: an account's entries page newest first with a keyset cursor.
func TestEntriesPage(t *testing.T) {
	t.Parallel()
	b := setup(t, "")
	ctx := t.Context()
	for i := range 5 {
		b.credit(t, "u", int64(100+i))
	}
	var got []int64
	page := &orderly.WalletEntriesPage{Limit: 2}
	for {
		w, err := b.svc.Wallet(ctx, "u", "", page)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range w.Entries {
			got = append(got, e.Amount)
		}
		if w.NextBeforeID == 0 {
			break
		}
		page.BeforeID = w.NextBeforeID
	}
	if fmt.Sprint(got) != "[104 103 102 101 100]" {
		t.Errorf("entries: %v, want [104 103 102 101 100]", got)
	}
}

// TestConcurrentDebits: 100 concurrent debits of 100 against a balance of 3700: exactly 37
// succeed, the balance ends at 0 and the ledger sums to zero; on every dialect.
func TestConcurrentDebits(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, b *bundle) {
		b.credit(t, "buyer", 3700)
		var (
			wg      sync.WaitGroup
			start   = make(chan struct{})
			mu      sync.Mutex
			ok      int
			refused int
			other   []error
		)
		for i := range 100 {
			wg.Go(func() {
				<-start
				_, err := b.svc.Debit(context.WithoutCancel(t.Context()), &orderly.WalletMoveParams{UserID: "buyer", Currency: "USD",
					Amount: 100, IdempotencyKey: fmt.Sprintf("debit-%d", i)})
				mu.Lock()
				defer mu.Unlock()
				switch orderly.ErrorCode(err) {
				case "":
					ok++
				case orderly.EINSUFFICIENT:
					refused++
				default:
					other = append(other, err)
				}
			})
		}
		close(start)
		wg.Wait()
		if ok != 37 || refused != 63 || len(other) > 0 {
			t.Errorf("%d succeeded, %d refused insufficient-funds, other errors %v; want 37, 63, none", ok, refused, other)
		}
		if av, held := b.balance(t, "buyer"); av != 0 || held != 0 {
			t.Errorf("balance: available %d held %d, want 0 0", av, held)
		}
		if p := b.platform(t); p != 3700 {
			t.Errorf("platform: %d, want 3700", p)
		}
		b.checkLedger(t)
	})
}
