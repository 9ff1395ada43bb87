package closer_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/verify"
)

// openDialect opens a fresh store of a dialect on the database's real clock.
func openDialect(t *testing.T, dialect string) *sqlstore.DB {
	t.Helper()
	url := sqlitetest.Path(t)
	if dialect != "sqlite" {
		url = testdb.Fresh(t, testdb.URL(t, dialect))
	}
	db, err := sqlstore.Open(t.Context(), sqlstore.Config{URL: url})
	if err != nil {
		t.Fatalf("open %s: %v", dialect, err)
	}
	t.Cleanup(func() { _ = db.Close() })
	return db
}

// seed inserts n open orders of one unit of SKU "sku" each, with a frozen coupon each,
// due at closeAt.
func seed(t testing.TB, s store.Store, n int, closeAt time.Time) []string {
	t.Helper()
	ctx := t.Context()
	ids := make([]string, n)
	err := s.InTx(ctx, func(tx store.Tx) error {
		if _, err := tx.StockSet(ctx, "sku", int64(n)); err != nil {
			return err
		}
		for i := range n {
			id := fmt.Sprintf("order-%05d", i)
			ids[i] = id
			o := &orderly.Order{ID: id, UserID: "u", Flow: orderly.FlowStandard, State: orderly.StatePendingPayment,
				PayStatus: orderly.PayUnpaid, Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}, Amount: 99,
				Currency: "USD", CouponID: "c-" + id, CreatedAt: closeAt.Add(-time.Minute), ExpiresAt: closeAt, CloseAt: closeAt, Version: 1}
			if err := tx.CouponInsert(ctx, &orderly.Coupon{ID: "c-" + id, UserID: "u", AmountOff: 1, Currency: "USD",
				State: orderly.CouponFrozen, OrderID: id, CreatedAt: o.CreatedAt}); err != nil {
				return err
			}
			if err := tx.OrderInsert(ctx, &store.OrderInsertParams{Order: o}); err != nil {
				return err
			}
			if ok, err := tx.StockReserve(ctx, &store.StockReserveParams{OrderID: id, SKU: "sku", Quantity: 1, Now: o.CreatedAt}); err != nil || !ok {
				return fmt.Errorf("reserve %s: %v, %w", id, ok, err)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// TestConcurrentSweeps: two and three sweeps at once (as on as many instances sharing the
// database) over 1000 due orders, with as many relays: every order is closed once, every
// reservation and coupon released once, one audit row per order (I3, I6), and verify finds
// nothing wrong.
func TestConcurrentSweeps(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		for _, instances := range []int{2, 3} {
			t.Run(fmt.Sprintf("%s/%d", dialect, instances), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				s := openDialect(t, dialect)
				var now time.Time
				if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
					t.Fatal(err)
				}
				ids := seed(t, s, 1000, now.Add(-time.Second))
				var wg sync.WaitGroup
				for i := range instances {
					cl, err := closer.New(closer.Config{Store: s, BatchSize: 100 + 50*i})
					if err != nil {
						t.Fatal(err)
					}
					relay, err := outbox.NewRelay(outbox.Config{Store: s, BatchSize: 150,
						Default: &outbox.Handler{Call: func(context.Context, *orderly.Message) error { return nil }}})
					if err != nil {
						t.Fatal(err)
					}
					wg.Go(func() {
						if _, _, err := cl.Sweep(ctx, nil); err != nil {
							t.Errorf("sweep %d: %v", i, err)
						}
						if _, err := relay.Drain(ctx); err != nil {
							t.Errorf("relay %d: %v", i, err)
						}
					})
				}
				wg.Wait()
				// Drain what a relay may have left to another one that finished early.
				relay, _ := outbox.NewRelay(outbox.Config{Store: s,
					Default: &outbox.Handler{Call: func(context.Context, *orderly.Message) error { return nil }}})
				if _, err := relay.Drain(ctx); err != nil {
					t.Fatal(err)
				}
				err := s.Read(ctx, func(tx store.Tx) error {
					for _, id := range []string{ids[0], ids[499], ids[999]} {
						trail, err := tx.TransitionList(ctx, id)
						if err != nil {
							return err
						}
						if len(trail) != 1 || trail[0].To != orderly.StateClosed {
							return fmt.Errorf("order %s trail %+v, want one close", id, trail)
						}
					}
					st, err := tx.StockGet(ctx, "sku")
					if err != nil {
						return err
					}
					if *st != (orderly.Stock{SKU: "sku", Available: 1000}) {
						return fmt.Errorf("stock %+v, want all 1000 units back", st)
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				rep, err := verify.Check(ctx, s, verify.Options{RequireDrained: true, InitialStock: map[string]int64{"sku": 1000}})
				if err != nil {
					t.Fatal(err)
				}
				if !rep.OK() || rep.OrdersByState[string(orderly.StateClosed)] != 1000 || rep.EarlyCloses != 0 {
					t.Fatalf("verify: %d closed, %d early, violations %v", rep.OrdersByState[string(orderly.StateClosed)], rep.EarlyCloses, rep.Violations)
				}
				// The releases ran in the closes' transactions: the outbox carried only the events.
				if got := rep.OutboxByState[orderly.MessageDelivered]; got != 1000 {
					t.Fatalf("%d messages delivered, want 1000 (one order.closed per order)", got)
				}
			})
		}
	}
}

// TestRolledBackBatchIsClosedByAnother: a close transaction that dies half way (the
// process is killed, the connection drops) rolls back entirely, and another instance's
// sweep closes those orders, each once.
func TestRolledBackBatchIsClosedByAnother(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openDialect(t, dialect)
			var now time.Time
			if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
				t.Fatal(err)
			}
			seed(t, s, 200, now.Add(-time.Second))
			// The killed instance: it closes a batch inside its transaction and dies before
			// commit.
			errDied := fmt.Errorf("process killed")
			err := s.InTx(ctx, func(tx store.Tx) error {
				due, err := tx.OrdersDue(ctx, &store.OrdersDueParams{Now: now, Limit: 100})
				if err != nil {
					return err
				}
				ids := make([]string, len(due))
				for i, d := range due {
					ids[i] = d.ID
				}
				if _, err := tx.OrdersTransition(ctx, &store.OrdersTransitionParams{IDs: ids, From: orderly.StatePendingPayment,
					To: orderly.StateClosed, Event: orderly.EventTimeout, Now: now, CloseReason: orderly.CloseReasonPaymentTimeout, Actor: "timer"}); err != nil {
					return err
				}
				return errDied
			})
			if !errors.Is(err, errDied) {
				t.Fatalf("dying transaction: %v", err)
			}
			cl, err := closer.New(closer.Config{Store: s})
			if err != nil {
				t.Fatal(err)
			}
			_, closed, err := cl.Sweep(ctx, nil)
			if err != nil || closed != 200 {
				t.Fatalf("sweep closed %d, %v; want all 200", closed, err)
			}
			rep, err := verify.Check(ctx, s, verify.Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.OrdersByState[string(orderly.StateClosed)] != 200 || rep.EarlyCloses != 0 {
				t.Fatalf("closed %d, early %d", rep.OrdersByState[string(orderly.StateClosed)], rep.EarlyCloses)
			}
			for _, v := range rep.Violations {
				if v[:2] == "I6" || v[:2] == "I1" {
					t.Fatalf("violation %s", v)
				}
			}
		})
	}
}

// TestClosedMeansReleased: from the moment an order reads closed, its reservation and its
// coupon read released, on every dialect: readers poll orders while a sweep closes them in
// batches, and never see a closed order that still holds stock or a frozen coupon (the
// releases are effects of the close, in its transaction). Each reader reads the order
// first, then what it held, so a close committed between the two reads only makes the
// second read newer.
func TestClosedMeansReleased(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			s := openDialect(t, dialect)
			var now time.Time
			if err := s.Read(ctx, func(tx store.Tx) (err error) { now, err = tx.Now(ctx); return err }); err != nil {
				t.Fatal(err)
			}
			ids := seed(t, s, 600, now.Add(-time.Second))
			cl, err := closer.New(closer.Config{Store: s, BatchSize: 50})
			if err != nil {
				t.Fatal(err)
			}
			done := make(chan struct{})
			var (
				wg       sync.WaitGroup
				mu       sync.Mutex
				seen     int // closed orders observed
				problems []string
			)
			for r := range 3 {
				wg.Go(func() {
					for i := r; ; i = (i + 7) % len(ids) {
						select {
						case <-done:
							return
						default:
						}
						id := ids[i]
						err := s.Read(ctx, func(tx store.Tx) error {
							o, err := tx.OrderGet(ctx, id)
							if err != nil || o.State != orderly.StateClosed {
								return err
							}
							res, err := tx.ReservationList(ctx, id)
							if err != nil {
								return err
							}
							c, err := tx.CouponGet(ctx, o.CouponID)
							if err != nil {
								return err
							}
							mu.Lock()
							defer mu.Unlock()
							seen++
							if len(res) != 1 || res[0].State != orderly.ReservationReleased || c.State != orderly.CouponAvailable {
								problems = append(problems, fmt.Sprintf("%s closed with reservation %+v and coupon %s", id, res, c.State))
							}
							return nil
						})
						if err != nil {
							t.Errorf("reader: %v", err)
							return
						}
					}
				})
			}
			res, err := cl.CloseDue(ctx, closer.TriggerSweep)
			close(done)
			wg.Wait()
			if err != nil || res.Closed != len(ids) {
				t.Fatalf("close: %+v, %v; want %d closed", res, err, len(ids))
			}
			if len(problems) > 0 {
				t.Fatalf("%d of %d closed orders read still holding: %v", len(problems), seen, problems[:min(3, len(problems))])
			}
			t.Logf("%d closed orders read while closing, all released", seen)
		})
	}
}
