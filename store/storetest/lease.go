package storetest

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

func acquire(t *testing.T, s store.Store, owner string, now time.Time) (*store.Lease, bool) {
	t.Helper()
	var (
		l  *store.Lease
		ok bool
	)
	inTx(t, s, func(tx store.Tx) (err error) {
		l, ok, err = tx.LeaseAcquire(t.Context(), &store.LeaseParams{Name: "sweep", Owner: owner, Now: now, TTL: 10 * time.Second})
		return err
	})
	return l, ok
}

func check(t *testing.T, s store.Store, owner string, token int64, now time.Time) bool {
	t.Helper()
	return write(t, s, func(tx store.Tx) (bool, error) { return tx.LeaseCheck(t.Context(), "sweep", owner, token, now) })
}

func testLeases(t *testing.T, open opener) {
	t.Run("AcquireRenewTakeover", func(t *testing.T) {
		_, s := setup(t, open)
		a, ok := acquire(t, s, "A", t0)
		equal(t, "first acquire", []any{ok, a.Owner, a.Token, a.ExpiresAt}, []any{true, "A", int64(1), t0.Add(10 * time.Second)})
		// B cannot take an unexpired lease; it learns the holder.
		b, ok := acquire(t, s, "B", t0.Add(9*time.Second))
		equal(t, "B while A holds", []any{ok, b.Owner, b.Token}, []any{false, "A", int64(1)})
		// A renews: same token, later expiry.
		a, ok = acquire(t, s, "A", t0.Add(5*time.Second))
		equal(t, "renew", []any{ok, a.Token, a.ExpiresAt}, []any{true, int64(1), t0.Add(15 * time.Second)})
		// After expiry B takes over with the next token; A's writes are fenced off.
		b, ok = acquire(t, s, "B", t0.Add(15*time.Second))
		equal(t, "takeover", []any{ok, b.Owner, b.Token}, []any{true, "B", int64(2)})
		equal(t, "stale A passes the fence", check(t, s, "A", 1, t0.Add(15*time.Second)), false)
		equal(t, "B passes the fence", check(t, s, "B", 2, t0.Add(16*time.Second)), true)
		equal(t, "B after its expiry", check(t, s, "B", 2, t0.Add(25*time.Second)), false)
		// A comes back after B's expiry: a change of owner, so the token moves on.
		a, ok = acquire(t, s, "A", t0.Add(30*time.Second))
		equal(t, "A again", []any{ok, a.Token}, []any{true, int64(3)})
	})
	t.Run("Release", func(t *testing.T) {
		_, s := setup(t, open)
		a, _ := acquire(t, s, "A", t0)
		inTx(t, s, func(tx store.Tx) error { return tx.LeaseRelease(t.Context(), "sweep", "B", a.Token) }) // not B's: no-op
		if _, ok := acquire(t, s, "B", t0.Add(time.Second)); ok {
			t.Fatal("B took a lease A still holds after B's release attempt")
		}
		inTx(t, s, func(tx store.Tx) error { return tx.LeaseRelease(t.Context(), "sweep", "A", a.Token) })
		b, ok := acquire(t, s, "B", t0.Add(time.Second))
		equal(t, "B after release", []any{ok, b.Token}, []any{true, int64(2)})
	})
	t.Run("OneWinnerAtOnce", func(t *testing.T) {
		_, s := setup(t, open)
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			winners []string
		)
		for _, owner := range []string{"A", "B", "C", "D"} {
			wg.Go(func() {
				var ok bool
				err := s.InTx(t.Context(), func(tx store.Tx) (err error) {
					_, ok, err = tx.LeaseAcquire(t.Context(), &store.LeaseParams{Name: "sweep", Owner: owner, Now: t0, TTL: time.Minute})
					return err
				})
				if err != nil {
					t.Errorf("acquire %s: %v", owner, err)
				}
				if ok {
					mu.Lock()
					winners = append(winners, owner)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if len(winners) != 1 {
			t.Fatalf("winners %v, want exactly one", winners)
		}
	})
	t.Run("RenewsAndChecksDoNotDeadlock", func(t *testing.T) {
		// The holder renews (LeaseAcquire by its owner) while its job transactions pass the
		// fence (LeaseCheck, which locks the row): on InnoDB an acquire that first took a
		// shared lock on the existing row (INSERT IGNORE of a duplicate key) and then
		// upgraded it deadlocked against a waiting check. Every call must succeed, and a
		// store that counts aborted transactions must count none.
		_, s := setup(t, open)
		a, _ := acquire(t, s, "A", t0)
		before := abortCount(s)
		var wg sync.WaitGroup
		for g := range 8 {
			wg.Go(func() {
				for i := range 25 {
					now := t0.Add(time.Duration(i) * time.Millisecond)
					err := s.InTx(t.Context(), func(tx store.Tx) error {
						if g%2 == 0 {
							_, ok, err := tx.LeaseAcquire(t.Context(), &store.LeaseParams{Name: "sweep", Owner: "A", Now: now, TTL: 10 * time.Second})
							if err == nil && !ok {
								err = fmt.Errorf("renew by the holder refused")
							}
							return err
						}
						held, err := tx.LeaseCheck(t.Context(), "sweep", "A", a.Token, now)
						if err == nil && !held {
							err = fmt.Errorf("the holder failed the fence")
						}
						return err
					})
					if err != nil {
						t.Errorf("goroutine %d, round %d: %v", g, i, err)
						return
					}
				}
			})
		}
		wg.Wait()
		if n := abortCount(s) - before; n != 0 {
			t.Errorf("the database aborted %d transactions on the lease row for a deadlock, want none", n)
		}
	})
	t.Run("JobRuns", func(t *testing.T) {
		_, s := setup(t, open)
		for i, job := range []string{"sweep", "deep_check", "sweep"} {
			r := &store.JobRun{Job: job, Instance: "i-1", Token: int64(i + 1), StartedAt: t0.Add(time.Duration(i) * time.Second),
				FinishedAt: t0.Add(time.Duration(i)*time.Second + 5*time.Millisecond), Scanned: int64(10 * i), Changed: int64(i)}
			if i == 2 {
				r.Error = "lease lost"
			}
			inTx(t, s, func(tx store.Tx) error { return tx.JobRunInsert(t.Context(), r) })
		}
		runs := read(t, s, func(tx store.Tx) ([]*store.JobRun, error) { return tx.JobRunList(t.Context(), "sweep", 10) })
		if len(runs) != 2 {
			t.Fatalf("%d sweep runs, want 2", len(runs))
		}
		got := runs[0]
		equal(t, "newest sweep run", []any{got.Job, got.Instance, got.Token, got.StartedAt, got.FinishedAt, got.Scanned, got.Changed, got.Error},
			[]any{"sweep", "i-1", int64(3), t0.Add(2 * time.Second), t0.Add(2*time.Second + 5*time.Millisecond), int64(20), int64(2), "lease lost"})
		all := read(t, s, func(tx store.Tx) ([]*store.JobRun, error) { return tx.JobRunList(t.Context(), "", 2) })
		equal(t, "all jobs, limited", len(all), 2)
	})
}

// testClaims: concurrent claims of due orders and outbox messages never return the same
// row twice, and rounds of them claim every row; the batch release methods move stock
// once. (How many rows a claimer skips while another holds locks is the dialect's
// business: MariaDB's locking joins can hide more rows than the other claimer returns, so
// the suite asserts correctness, not an even split.)
func testClaims(t *testing.T, open opener) {
	t.Run("ConcurrentOrdersDue", func(t *testing.T) {
		_, s := setup(t, open)
		for range 40 {
			insertOrder(t, s, &orderOpts{CreatedAt: t0.Add(-time.Minute), CloseAt: t0})
		}
		var (
			mu      sync.Mutex
			claimed = map[string]int{}
			wg      sync.WaitGroup
		)
		for round := 0; len(claimed) < 40 && round < 20; round++ {
			for range 4 {
				wg.Go(func() {
					err := s.InTx(t.Context(), func(tx store.Tx) error {
						due, err := tx.OrdersDue(t.Context(), &store.OrdersDueParams{Now: t0, Limit: 10})
						if err != nil {
							return err
						}
						ids := make([]string, len(due))
						for i, d := range due {
							ids[i] = d.ID
						}
						changed, err := tx.OrdersTransition(t.Context(), &store.OrdersTransitionParams{IDs: ids, From: orderly.StatePendingPayment,
							To: orderly.StateClosed, Event: orderly.EventTimeout, CloseAtBy: &t0, Now: t0, CloseReason: orderly.CloseReasonPaymentTimeout, Actor: "sweep"})
						mu.Lock()
						for _, id := range changed {
							claimed[id]++
						}
						mu.Unlock()
						return err
					})
					if err != nil {
						t.Errorf("claim: %v", err)
					}
				})
			}
			wg.Wait()
		}
		if len(claimed) != 40 {
			t.Fatalf("%d orders closed by rounds of 4 concurrent claimers, want 40", len(claimed))
		}
		for id, n := range claimed {
			if n != 1 {
				t.Fatalf("order %s closed %d times", id, n)
			}
		}
	})
	t.Run("ConcurrentOutboxClaims", func(t *testing.T) {
		_, s := setup(t, open)
		for i := range 30 {
			insertMessage(t, s, "t", nextID("k")+string(rune('a'+i%26)), t0)
		}
		var (
			mu   sync.Mutex
			seen = map[int64]int{}
			wg   sync.WaitGroup
		)
		for round := 0; len(seen) < 30 && round < 20; round++ {
			for range 3 {
				wg.Go(func() {
					err := s.InTx(t.Context(), func(tx store.Tx) error {
						msgs, err := tx.OutboxClaim(t.Context(), &store.OutboxClaimParams{Now: t0, LeaseUntil: t0.Add(time.Minute), Limit: 10})
						mu.Lock()
						for _, m := range msgs {
							seen[m.ID]++
						}
						mu.Unlock()
						return err
					})
					if err != nil {
						t.Errorf("claim: %v", err)
					}
				})
			}
			wg.Wait()
		}
		if len(seen) != 30 {
			t.Fatalf("%d messages claimed by rounds of 3 concurrent claimers, want 30", len(seen))
		}
		for id, n := range seen {
			if n != 1 {
				t.Fatalf("message %d claimed %d times", id, n)
			}
		}
	})
	// ConcurrentRelaysKeepKeyOrder: relays claiming concurrently, some deliveries failing and
	// retried, never deliver a key's messages out of id order, and deliver each once.
	t.Run("ConcurrentRelaysKeepKeyOrder", func(t *testing.T) {
		ctx, s := setup(t, open)
		const keys, perKey = 8, 6
		var msgs []*store.OutboxInsertParams
		for j := range perKey {
			for i := range keys {
				msgs = append(msgs, &store.OutboxInsertParams{Topic: "t", Key: fmt.Sprintf("order-%d", i),
					Payload: []byte(fmt.Sprintf(`{"n":%d}`, j)), Now: t0})
			}
		}
		inTx(t, s, func(tx store.Tx) error { return tx.OutboxInsert(ctx, msgs) })
		written := map[string][]int64{}
		for _, m := range listMessages(t, s, orderly.MessagePending, 1000) {
			written[m.Key] = append(written[m.Key], m.ID)
		}
		var (
			mu        sync.Mutex
			delivered = map[string][]int64{} // per key, in delivery order
			total     int
			wg        sync.WaitGroup
		)
		for range 4 {
			wg.Go(func() {
				for pass := 0; pass < 500; pass++ {
					mu.Lock()
					done := total == keys*perKey
					mu.Unlock()
					if done {
						return
					}
					var batch []*orderly.Message
					err := s.InTx(ctx, func(tx store.Tx) (err error) {
						batch, err = tx.OutboxClaim(ctx, &store.OutboxClaimParams{Now: t0, LeaseUntil: t0.Add(time.Hour), Limit: 5})
						return err
					})
					if orderly.ErrorCode(err) == orderly.EUNAVAILABLE {
						// MySQL may still deadlock concurrent claims after InTx's retries; a
						// relay then claims again at its next poll, and so does this one.
						continue
					} else if err != nil {
						t.Errorf("claim: %v", err)
						return
					}
					// Deliver in id order; every third message fails its first attempt and is due
					// again at once; the later messages of its key in the batch are put back.
					var ok, failed, held []int64
					failedKeys := map[string]bool{}
					for _, m := range batch {
						switch {
						case failedKeys[m.Key]:
							held = append(held, m.ID)
						case m.Attempts == 1 && m.ID%3 == 0:
							failed = append(failed, m.ID)
							failedKeys[m.Key] = true
						default:
							ok = append(ok, m.ID)
							mu.Lock()
							delivered[m.Key] = append(delivered[m.Key], m.ID)
							mu.Unlock()
						}
					}
					err = s.InTx(ctx, func(tx store.Tx) error {
						for _, id := range failed {
							if err := tx.OutboxMarkFailed(ctx, &store.OutboxMarkFailedParams{ID: id, LastError: "boom", NextAttemptAt: t0}); err != nil {
								return err
							}
						}
						if err := tx.OutboxUnclaim(ctx, held, t0, "held"); err != nil {
							return err
						}
						return tx.OutboxMarkDelivered(ctx, ok, t0)
					})
					if err != nil {
						t.Errorf("mark: %v", err)
						return
					}
					mu.Lock()
					total += len(ok)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		equal(t, "delivered messages per key, in delivery order", delivered, written)
	})
	// ConcurrentSequences: transactions reserving the next event of one key get consecutive
	// numbers in commit order, and their messages' ids follow that order.
	t.Run("ConcurrentSequences", func(t *testing.T) {
		ctx, s := setup(t, open)
		var wg sync.WaitGroup
		for range 12 {
			wg.Go(func() {
				err := s.InTx(ctx, func(tx store.Tx) error {
					seq, err := tx.OutboxSequences(ctx, []string{"order-1"})
					if err != nil {
						return err
					}
					return tx.OutboxInsert(ctx, []*store.OutboxInsertParams{{Topic: orderly.TopicOrderPaid, Key: "order-1",
						Payload: []byte(fmt.Sprintf(`{"sequence":%d}`, seq[0])), Sequence: seq[0], Now: t0}})
				})
				if err != nil {
					t.Errorf("write event: %v", err)
				}
			})
		}
		wg.Wait()
		var got []int64
		for _, m := range listMessages(t, s, orderly.MessagePending, 100) { // by id
			got = append(got, m.Sequence)
		}
		equal(t, "sequences in id order", got, []int64{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12})
	})
	t.Run("BatchRelease", func(t *testing.T) {
		_, s := setup(t, open)
		setStock(t, s, "sku-a", 10)
		setStock(t, s, "sku-b", 10)
		var ids []string
		for i := range 3 {
			o := insertOrder(t, s, &orderOpts{})
			reserve(t, s, o.ID, "sku-a", int64(i+1))
			reserve(t, s, o.ID, "sku-b", 1)
			ids = append(ids, o.ID)
		}
		moved := write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsReleaseMany(t.Context(), append(ids, "missing"), t0)
		})
		equal(t, "released reservations", len(moved), 6)
		equal(t, "sku-a", getStock(t, s, "sku-a"), &orderly.Stock{SKU: "sku-a", Available: 10})
		equal(t, "sku-b", getStock(t, s, "sku-b"), &orderly.Stock{SKU: "sku-b", Available: 10})
		again := write(t, s, func(tx store.Tx) ([]*orderly.Reservation, error) {
			return tx.ReservationsReleaseMany(t.Context(), ids, t0)
		})
		equal(t, "second release", len(again), 0)
		equal(t, "sku-b after twice", getStock(t, s, "sku-b"), &orderly.Stock{SKU: "sku-b", Available: 10})

		c1 := insertCoupon(t, s, &couponOpts{State: orderly.CouponFrozen, OrderID: ids[0]})
		c2 := insertCoupon(t, s, &couponOpts{State: orderly.CouponFrozen, OrderID: ids[1]})
		n := write(t, s, func(tx store.Tx) (int64, error) {
			return tx.CouponsRelease(t.Context(), []orderly.CouponRef{{CouponID: c1.ID, OrderID: ids[0]}, {CouponID: c2.ID, OrderID: ids[2]}}, t0)
		})
		equal(t, "coupons released (c2 is not ids[2]'s)", n, int64(1))
		equal(t, "c1", getCoupon(t, s, c1.ID).State, orderly.CouponAvailable)
		equal(t, "c2", getCoupon(t, s, c2.ID).State, orderly.CouponFrozen)
	})
}

// testGuardRecheck: a guarded update that waits for a concurrent transaction's row lock
// judges its guard on the row as that transaction left it. Here a failure (initiated →
// failed) holds the payment row while a success (initiated|failed → succeeded) waits: the
// success must apply, or money would be acknowledged and never recorded (I2).
func testGuardRecheck(t *testing.T, open opener) {
	t.Run("PaymentSuccessAfterFailure", func(t *testing.T) { testPaymentSuccessAfterFailure(t, open) })
}

func testPaymentSuccessAfterFailure(t *testing.T, open opener) {
	_, s := setup(t, open)
	o := insertOrder(t, s, &orderOpts{})
	p := insertPayment(t, s, &paymentOpts{OrderID: o.ID})
	locked, release := make(chan struct{}), make(chan struct{})
	failed := make(chan error, 1)
	go func() {
		failed <- s.InTx(t.Context(), func(tx store.Tx) error {
			_, err := tx.PaymentSetState(t.Context(), &store.PaymentSetStateParams{ID: p.ID,
				From: []orderly.PaymentState{orderly.PaymentInitiated}, To: orderly.PaymentFailed, FailReason: "expired"})
			close(locked)
			if err != nil {
				return err
			}
			<-release
			return nil
		})
	}()
	<-locked
	base := lockWaits(t, s)
	done := make(chan struct{})
	succeeded := make(chan leaseResult, 1)
	go func() {
		defer close(done)
		var ok bool
		err := s.InTx(t.Context(), func(tx store.Tx) (err error) {
			ok, err = tx.PaymentSetState(t.Context(), &store.PaymentSetStateParams{ID: p.ID, ChannelTxnID: "txn",
				From: []orderly.PaymentState{orderly.PaymentInitiated, orderly.PaymentFailed}, To: orderly.PaymentSucceeded})
			return err
		})
		succeeded <- leaseResult{ok, err}
	}()
	// The success must reach the failure's row lock (on SQLite, the writer queue) before the
	// failure commits, or this would test nothing.
	blocked := waitBlocked(t, s, base, done)
	close(release)
	if err := <-failed; err != nil {
		t.Fatal(err)
	}
	res := <-succeeded
	if !blocked {
		t.Fatalf("the success (ok %v, error %v) did not wait for the failure's lock", res.ok, res.err)
	}
	if res.err != nil || !res.ok {
		t.Fatalf("the success that waited for the failure's lock: changed %v, error %v; want it applied", res.ok, res.err)
	}
	equal(t, "payment after both", getPayment(t, s, p.ID).State, orderly.PaymentSucceeded)
}
