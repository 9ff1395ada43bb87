package closer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/verify"
)

// raceRounds is the number of rounds of each race, per dialect.
const raceRounds = 200

// raceTogether runs fns in goroutines that start together: each reports ready and waits on
// one barrier, opened once all are ready. Goroutines start in the order of perm.
func raceTogether(perm []int, fns ...func()) {
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	ready.Add(len(fns))
	for _, i := range perm {
		done.Go(func() {
			ready.Done()
			<-start
			fns[i]()
		})
	}
	ready.Wait()
	close(start)
	done.Wait()
}

// TestRaceOnOneOrder races the timer, the sweep, a buyer cancel and a success callback on
// one due order whose attempt failed or is in flight, behind a start barrier, for raceRounds rounds on
// every dialect. Every round exactly one transition leaves pending_payment: either the
// payment wins (paid, the close skipped, stock sold, coupon used) or a close wins (closed,
// stock and coupon released, the payment refunded once). Over the rounds both outcomes
// occur, and verify finds nothing wrong at the end (I2, I3, I4, I6).
//
// The callback runs three statements (read the attempt, mark it succeeded, read the order)
// before it reaches the order's row, the closers one, so on a server it would rarely win a
// plain start. In a random half of the rounds the others start when the callback reads the
// order (see gatedStore): still a race for the order's row, with both outcomes likely.
func TestRaceOnOneOrder(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			testRaceOnOneOrder(t, dialect)
		})
	}
}

// gatedStore holds back the write transactions of contexts marked waiter, while a gate is
// armed, until a transaction of a context marked leader reads an order (OrderGet).
type gatedStore struct {
	store.Store
	mu     sync.Mutex
	opened chan struct{} // closed when the leader read the order; nil: no gate
}

type roleKey struct{}

const (
	roleLeader = "leader"
	roleWaiter = "waiter"
)

// arm sets the gate of the next round: on, or none.
func (g *gatedStore) arm(on bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opened = nil
	if on {
		g.opened = make(chan struct{})
	}
}

func (g *gatedStore) open(opened chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	select {
	case <-opened:
	default:
		close(opened)
	}
}

// InTx implements store.Store.
func (g *gatedStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	g.mu.Lock()
	opened := g.opened
	g.mu.Unlock()
	role, _ := ctx.Value(roleKey{}).(string)
	if opened == nil || role == "" {
		return g.Store.InTx(ctx, fn)
	}
	if role == roleWaiter {
		select { // before asking for a connection: on SQLite the leader holds the one writer
		case <-opened:
		case <-ctx.Done():
			return ctx.Err()
		}
		return g.Store.InTx(ctx, fn)
	}
	defer g.open(opened) // whatever the leader does, the waiters go on
	return g.Store.InTx(ctx, func(tx store.Tx) error {
		return fn(&gatedTx{Tx: tx, open: func() { g.open(opened) }})
	})
}

// gatedTx opens the gate when the leader reads an order.
type gatedTx struct {
	store.Tx
	open func()
}

func (t *gatedTx) OrderGet(ctx context.Context, id string) (*orderly.Order, error) {
	t.open()
	return t.Tx.OrderGet(ctx, id)
}

// raceOutcome is how one round of TestRaceOnOneOrder ended.
type raceOutcome struct {
	payment string // the attempt whose success raced
	winner  string // "paid", or the actor of the close
}

func testRaceOnOneOrder(t *testing.T, dialect string) {
	ctx := context.Background()
	began := time.Now()
	e := enginetest.New(t, enginetest.Options{Dialect: dialect})
	gs := &gatedStore{Store: e.Store}
	orders, err := order.NewService(order.Config{Store: gs})
	if err != nil {
		t.Fatal(err)
	}
	payments, err := payment.NewService(payment.Config{Store: gs, Gateway: e.Gateway})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := closer.New(closer.Config{Store: gs, Inspector: payments})
	if err != nil {
		t.Fatal(err)
	}
	const sku, initial = "SKU-1", 1000
	e.SetStock(t, sku, initial)
	coupons := make([]*orderly.Coupon, raceRounds)
	e.InTx(t, func(tx store.Tx) error {
		for r := range coupons {
			coupons[r] = &orderly.Coupon{ID: fmt.Sprintf("coupon-%03d", r), UserID: "user-1", AmountOff: 100, Currency: "USD",
				State: orderly.CouponAvailable, CreatedAt: enginetest.Start}
			if err := tx.CouponInsert(ctx, coupons[r]); err != nil {
				return err
			}
		}
		return nil
	})
	rng := rand.New(rand.NewPCG(3, 5))
	outcomes := make([]raceOutcome, 0, raceRounds)
	tally := map[string]int{}
	for r, c := range coupons {
		o := e.CreateOrder(t, enginetest.CreateOrderOpts{SKU: sku, Quantity: 2, TimeoutSeconds: 1, CouponID: c.ID})
		// An attempt whose success races the closers. In two rounds of three it failed at the
		// gateway first, so the closers may close the order at once; in the others it is still
		// in flight at close_at, so the closers inspect it (the gateway cancels the pending
		// attempt) and close the order only once it is marked failed.
		p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: o.ID})
		if err != nil {
			t.Fatal(err)
		}
		if inFlight := rng.IntN(3) == 0; !inFlight {
			if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID, Currency: "USD", Status: orderly.CallbackFailed}); err != nil {
				t.Fatal(err)
			}
		}
		e.Clock.Set(o.CloseAt)

		var (
			timerRes, sweepRes closer.PassResult
			timerErr, sweepErr error
			cancelErr, payErr  error
			cbRes              *orderly.CallbackResult
		)
		gs.arm(rng.IntN(2) == 0)
		leader, waiter := context.WithValue(ctx, roleKey{}, roleLeader), context.WithValue(ctx, roleKey{}, roleWaiter)
		raceTogether(rng.Perm(4),
			func() { timerRes, timerErr = cl.CloseDue(waiter, closer.TriggerTimer) },
			func() { sweepRes, sweepErr = cl.CloseDue(waiter, closer.TriggerSweep) },
			func() { _, cancelErr = orders.CancelOrder(waiter, o.ID, "buyer", "") },
			func() {
				cbRes, payErr = payments.HandleCallback(leader, &orderly.Callback{PaymentID: p.ID, OrderID: o.ID,
					ChannelTxnID: "txn-" + p.ID, Amount: o.Amount, Currency: "USD", Status: orderly.CallbackSucceeded})
			},
		)
		for what, err := range map[string]error{"timer": timerErr, "sweep": sweepErr, "callback": payErr} {
			if err != nil {
				t.Fatalf("round %d: %s: %v", r, what, err)
			}
		}
		if cancelErr != nil && orderly.ErrorCode(cancelErr) != orderly.EILLEGAL {
			t.Fatalf("round %d: cancel: %v (losing the race is EILLEGAL)", r, cancelErr)
		}
		e.Drain(t)

		snap := e.Snapshot(t, o.ID, sku, c.ID, p.ID)
		trail, got, stock, coupon, pay := snap.Trail, snap.Order, snap.Stock, snap.Coupon, snap.Payment
		if len(trail) != 1 || trail[0].From != orderly.StatePendingPayment {
			t.Fatalf("round %d: trail %+v, want exactly one transition out of pending_payment", r, trail)
		}
		winner := trail[0].Actor
		if trail[0].To == orderly.StatePaid {
			winner = "paid"
		}
		tally[winner]++
		outcomes = append(outcomes, raceOutcome{payment: p.ID, winner: winner})
		// Each contender's own report agrees with the trail.
		closedBy := map[string]int{closer.TriggerTimer: timerRes.Closed, closer.TriggerSweep: sweepRes.Closed, "buyer": 0}
		if cancelErr == nil {
			closedBy["buyer"] = 1
		}
		for actor, n := range closedBy {
			if want := map[bool]int{true: 1, false: 0}[actor == winner]; n != want {
				t.Fatalf("round %d: %s closed %d orders, want %d (winner %s)", r, actor, n, want, winner)
			}
		}
		if !cbRes.Applied || cbRes.Refund != (winner != "paid") {
			t.Fatalf("round %d: callback result applied %v refund %v, winner %s", r, cbRes.Applied, cbRes.Refund, winner)
		}

		// Conservation (I4) on the shared SKU: every earlier round is settled, so nothing is
		// held and 2 units are sold per paid round.
		type state struct {
			Order       orderly.State
			PayStatus   orderly.PayStatus
			Reason      orderly.CloseReason
			Stock       orderly.Stock
			Coupon      string
			CouponOrder string
			Payment     orderly.PaymentState
			Refunded    int64
		}
		sold := int64(2 * tally["paid"])
		have := state{got.State, got.PayStatus, got.CloseReason, *stock, coupon.State, coupon.OrderID, pay.State, e.Gateway.Refunded(p.ID)}
		want := state{Order: orderly.StateClosed, PayStatus: orderly.PayRefunded, Reason: orderly.CloseReasonPaymentTimeout,
			Stock: orderly.Stock{SKU: sku, Available: initial - sold, Sold: sold}, Coupon: orderly.CouponAvailable,
			Payment: orderly.PaymentRefunded, Refunded: o.Amount}
		switch winner {
		case "paid":
			want = state{Order: orderly.StatePaid, PayStatus: orderly.PayPaid, Stock: want.Stock,
				Coupon: orderly.CouponUsed, CouponOrder: o.ID, Payment: orderly.PaymentSucceeded}
		case "buyer":
			want.Reason = orderly.CloseReasonBuyerCancelled
		}
		if have != want {
			t.Fatalf("round %d (%s won):\nhave %+v\nwant %+v", r, winner, have, want)
		}
	}

	// Each payment was refunded at most once: one payment.refund message per closed round's
	// attempt, none for a paid one.
	refunds := map[string]int{}
	e.Read(t, func(tx store.Tx) error {
		msgs, err := tx.OutboxList(ctx, orderly.MessageDelivered, 1_000_000)
		for _, m := range msgs {
			if m.Topic == orderly.TopicPaymentRefund {
				refunds[m.Key]++
			}
		}
		return err
	})
	for r, oc := range outcomes {
		if want := map[bool]int{true: 0, false: 1}[oc.winner == "paid"]; refunds[oc.payment] != want {
			t.Errorf("round %d (%s won): %d refund messages for payment %s, want %d", r, oc.winner, refunds[oc.payment], oc.payment, want)
		}
	}
	rep, err := verify.Check(ctx, e.Store, verify.Options{RequireDrained: true, InitialStock: map[string]int64{sku: initial}})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() {
		t.Errorf("verify: %v", rep.Violations)
	}
	closed := tally[closer.TriggerTimer] + tally[closer.TriggerSweep] + tally["buyer"]
	if tally["paid"] == 0 || closed == 0 {
		t.Errorf("outcomes over %d rounds %v: want both \"paid, close skipped\" and \"closed, payment refunded\"", raceRounds, tally)
	}
	t.Logf("%s: outcomes over %d rounds %v in %s", dialect, raceRounds, tally, time.Since(began).Round(time.Millisecond))
}
