package order_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/verify"
)

// txCounter is a store whose InTx counts its calls and, when hold is set, lets the first
// call begin only once hold returns.
type txCounter struct {
	store.Store
	calls atomic.Int64
	hold  func()
}

func (s *txCounter) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	if s.calls.Add(1) == 1 && s.hold != nil {
		s.hold()
	}
	return s.Store.InTx(ctx, fn)
}

// queued is orderly_create_queue_waiting of m: the creates waiting for a batch.
func queued(m *telemetry.Metrics) int { return int(testutil.ToFloat64(m.CreateQueueWaiting)) }

// waitFor waits until cond holds (polling), failing the test after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// createAll creates ps at once behind a barrier and returns each outcome in order.
func createAll(svc *order.Service, ps []*orderly.CreateOrderParams) ([]*orderly.Order, []bool, []error) {
	orders, created, errs := make([]*orderly.Order, len(ps)), make([]bool, len(ps)), make([]error, len(ps))
	var ready, done sync.WaitGroup
	barrier := make(chan struct{})
	ready.Add(len(ps))
	for i, p := range ps {
		done.Go(func() {
			ready.Done()
			<-barrier
			orders[i], created[i], errs[i] = svc.CreateOrder(context.Background(), p)
		})
	}
	ready.Wait()
	close(barrier)
	done.Wait()
	return orders, created, errs
}

// TestCreateBatch is group commit for a hot SKU (batch.go), on every dialect. 40 buyers of a
// SKU with 7 units, the first transaction held until the 39 others wait: they are joined
// into batches of at most CreateBatch (32) — 3 transactions, not 40 — and exactly 7 are
// created, 33 refused out-of-stock, the stock exact (7 held, 0 available). Members that fail
// after their reservation (10 buyers of one coupon: one gets it) are rolled back to their
// savepoint without failing the others: 1 created, 9 coupon-unavailable, 1 unit held. Six
// creates with the same Idempotency-Key in one batch make one order, returned to all six.
func TestCreateBatch(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := enginetest.New(t, enginetest.Options{Dialect: dialect})
			st := &txCounter{Store: e.Store}
			m := telemetry.NewMetrics()
			svc, err := order.NewService(order.Config{Store: st, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			const buyers, units = 40, 7
			e.SetStock(t, "hot", units)
			e.SetStock(t, "plenty", 100)
			e.SetStock(t, "keyed", 100)
			e.InTx(t, func(tx store.Tx) error {
				return tx.CouponInsert(ctx, &orderly.Coupon{ID: "c1", UserID: "u1", AmountOff: 100, Currency: "USD",
					State: orderly.CouponAvailable, CreatedAt: enginetest.Start})
			})

			st.hold = func() { waitFor(t, "39 creates queued", func() bool { return queued(m) == buyers-1 }) }
			ps := make([]*orderly.CreateOrderParams, buyers)
			for i := range ps {
				ps[i] = params("hot", 1)
				ps[i].UserID = fmt.Sprintf("buyer-%02d", i)
			}
			first := make(chan error, 1)
			go func() { _, _, err := svc.CreateOrder(ctx, ps[0]); first <- err }()
			waitFor(t, "the first transaction", func() bool { return st.calls.Load() == 1 })
			_, _, errs := createAll(svc, ps[1:])
			errs = append(errs, <-first)
			var ok, out int
			for i, err := range errs {
				switch orderly.ErrorCode(err) {
				case "":
					ok++
				case orderly.EOUTOFSTOCK:
					out++
				default:
					t.Errorf("buyer %d: %v", i, err)
				}
			}
			if ok != units || out != buyers-units {
				t.Errorf("%d created, %d out-of-stock; want %d and %d", ok, out, units, buyers-units)
			}
			// 1 alone; 32 joined in one transaction (the 26 refused write nothing: no run
			// again, no savepoints); 7 joined.
			if got := st.calls.Load(); got != 3 {
				t.Errorf("%d transactions for %d creates, want 3 (1, then 32 joined and 7 joined)", got, buyers)
			}
			if s := e.StockOf(t, "hot"); s != (orderly.Stock{SKU: "hot", Held: units}) {
				t.Errorf("stock %+v, want %d held, 0 available", s, units)
			}

			st.hold = nil
			ps = make([]*orderly.CreateOrderParams, 10)
			for i := range ps {
				ps[i] = params("plenty", 1)
				ps[i].CouponID = "c1"
			}
			orders, _, errs := createAll(svc, ps)
			var winner *orderly.Order
			for i, err := range errs {
				switch code := orderly.ErrorCode(err); {
				case code == "" && winner == nil:
					winner = orders[i]
				case code == "":
					t.Errorf("orders %s and %s both created with coupon c1", winner.ID, orders[i].ID)
				case code != orderly.ECOUPONUNAVAIL:
					t.Errorf("coupon buyer %d: %v, want %s", i, err, orderly.ECOUPONUNAVAIL)
				}
			}
			if s := e.StockOf(t, "plenty"); s != (orderly.Stock{SKU: "plenty", Available: 99, Held: 1}) {
				t.Errorf("stock %+v after one coupon order, want 99 available, 1 held (the refused ones rolled back)", s)
			}
			if winner == nil || winner.Amount != 400 {
				t.Errorf("coupon winner %+v, want one order of amount 400", winner)
			}

			ps = make([]*orderly.CreateOrderParams, 6)
			for i := range ps {
				ps[i] = params("keyed", 1)
				ps[i].IdempotencyKey = "k1"
			}
			orders, created, errs := createAll(svc, ps)
			var made int
			for i := range ps {
				if errs[i] != nil || orders[i].ID != orders[0].ID {
					t.Fatalf("keyed create %d: %v (order %v), want order %s", i, errs[i], orders[i], orders[0].ID)
				}
				if created[i] {
					made++
				}
			}
			if made != 1 {
				t.Errorf("%d of 6 keyed creates report created, want 1", made)
			}
			if s := e.StockOf(t, "keyed"); s.Held != 1 {
				t.Errorf("stock %+v after 6 creates with one key, want 1 held", s)
			}
			if n := countOrders(t, e); n != units+1+1 {
				t.Errorf("%d orders in the store, want %d", n, units+2)
			}
			rep, err := verify.Check(ctx, e.Store, verify.Options{InitialStock: map[string]int64{"hot": units, "plenty": 100, "keyed": 100}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) != 0 {
				t.Errorf("verify: %v", rep.Violations)
			}
		})
	}
}

// TestCreateQueueSheds is load shedding (batch.go): while a SKU's batch is stuck, at most
// CreateQueue (4) creates of it wait; the next is refused at once with EUNAVAILABLE (503
// with Retry-After over HTTP) and nothing is written for it. A waiting create whose deadline
// passes leaves the queue with EUNAVAILABLE and is never created. When the batch goes on,
// the four waiting creates are created. orderly_create_queue_waiting counts the waiting ones.
func TestCreateQueueSheds(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	unblock := make(chan struct{})
	st := &txCounter{Store: e.Store, hold: func() { <-unblock }}
	m := telemetry.NewMetrics()
	svc, err := order.NewService(order.Config{Store: st, CreateQueue: 4, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	e.SetStock(t, "hot", 100)
	var done sync.WaitGroup
	errs := make([]error, 5)
	create := func(i int) {
		done.Go(func() { _, _, errs[i] = svc.CreateOrder(context.Background(), params("hot", 1)) })
	}
	create(0) // its batch's transaction is held
	waitFor(t, "the first batch", func() bool { return st.calls.Load() == 1 })
	for i := 1; i < 5; i++ {
		create(i)
	}
	waitFor(t, "4 creates queued", func() bool { return queued(m) == 4 })

	began := time.Now()
	_, _, err = svc.CreateOrder(context.Background(), params("hot", 1))
	if orderly.ErrorCode(err) != orderly.EUNAVAILABLE {
		t.Errorf("create past the queue bound: %v, want %s", err, orderly.EUNAVAILABLE)
	}
	if waited := time.Since(began); waited > time.Second {
		t.Errorf("shed create answered after %s, want at once", waited)
	}

	// The bound holds for a create with a deadline too.
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, _, err := svc.CreateOrder(ctx, params("hot", 1)); orderly.ErrorCode(err) != orderly.EUNAVAILABLE {
		t.Errorf("second create past the bound: %v, want %s", err, orderly.EUNAVAILABLE)
	}
	close(unblock)
	done.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("queued create %d: %v", i, err)
		}
	}
	if n := queued(m); n != 0 {
		t.Errorf("orderly_create_queue_waiting %d after every create answered, want 0", n)
	}
	if s := e.StockOf(t, "hot"); s.Held != 5 || s.Available != 95 {
		t.Errorf("stock %+v, want 5 held (the shed creates wrote nothing)", s)
	}
	if n := countOrders(t, e); n != 5 {
		t.Errorf("%d orders, want 5", n)
	}
}

// TestCreateQueueDeadline: a create waiting behind a stuck batch whose deadline passes
// returns EUNAVAILABLE, leaves the queue, and is not created when the batch goes on.
func TestCreateQueueDeadline(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	unblock := make(chan struct{})
	st := &txCounter{Store: e.Store, hold: func() { <-unblock }}
	m := telemetry.NewMetrics()
	svc, err := order.NewService(order.Config{Store: st, Metrics: m})
	if err != nil {
		t.Fatal(err)
	}
	e.SetStock(t, "hot", 100)
	firstErr := make(chan error, 1)
	go func() { _, _, err := svc.CreateOrder(context.Background(), params("hot", 1)); firstErr <- err }()
	waitFor(t, "the first batch", func() bool { return st.calls.Load() == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, _, err = svc.CreateOrder(ctx, params("hot", 1))
	if orderly.ErrorCode(err) != orderly.EUNAVAILABLE || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("queued create past its deadline: %v, want %s (deadline exceeded)", err, orderly.EUNAVAILABLE)
	}
	if n := queued(m); n != 0 {
		t.Errorf("%d creates still queued, want 0", n)
	}
	close(unblock)
	if err := <-firstErr; err != nil {
		t.Fatal(err)
	}
	if s := e.StockOf(t, "hot"); s.Held != 1 {
		t.Errorf("stock %+v, want 1 held (the expired create wrote nothing)", s)
	}
	if n := countOrders(t, e); n != 1 {
		t.Errorf("%d orders, want 1", n)
	}
}

// TestCreateTogether is a batch without coupons written as one set (createTogether), on
// every dialect: units are handed out in arrival order under the stock row's lock, a
// member that no longer fits is refused out-of-stock while a later smaller one still gets
// the last unit, and members with one idempotency key get the first one's order (same
// request) or idempotency-conflict (another body), as one create at a time would. The
// batch is one transaction and the stock ends exact.
func TestCreateTogether(t *testing.T) {
	t.Parallel()
	for _, dialect := range []string{"sqlite", "postgres", "mysql"} {
		t.Run(dialect, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			e := enginetest.New(t, enginetest.Options{Dialect: dialect})
			unblock := make(chan struct{})
			st := &txCounter{Store: e.Store, hold: func() { <-unblock }}
			m := telemetry.NewMetrics()
			svc, err := order.NewService(order.Config{Store: st, Metrics: m})
			if err != nil {
				t.Fatal(err)
			}
			e.SetStock(t, "mix", 5)
			keyed := func(qty int64, key string) *orderly.CreateOrderParams {
				p := params("mix", qty)
				p.IdempotencyKey = key
				return p
			}
			ps := []*orderly.CreateOrderParams{
				params("mix", 1), // alone, held until the others wait: 4 left
				keyed(3, "kA"),   // 3 of the 4: 1 left
				params("mix", 3), // no longer fits: out-of-stock
				keyed(3, "kA"),   // the same request as the second: its order
				keyed(2, "kA"),   // the same key, another body: idempotency-conflict
				params("mix", 1), // the last unit
				params("mix", 1), // out-of-stock
			}
			type outcome struct {
				o       *orderly.Order
				created bool
				err     error
			}
			outs := make([]chan outcome, len(ps))
			for i, p := range ps {
				outs[i] = make(chan outcome, 1)
				go func() {
					o, created, err := svc.CreateOrder(ctx, p)
					outs[i] <- outcome{o, created, err}
				}()
				if i == 0 {
					waitFor(t, "the first transaction", func() bool { return st.calls.Load() == 1 })
				} else {
					waitFor(t, fmt.Sprintf("%d creates queued", i), func() bool { return queued(m) == i })
				}
			}
			close(unblock)
			got := make([]outcome, len(ps))
			for i := range outs {
				got[i] = <-outs[i]
			}
			codes := make([]string, len(ps))
			for i, g := range got {
				codes[i] = orderly.ErrorCode(g.err)
			}
			want := []string{"", "", string(orderly.EOUTOFSTOCK), "", string(orderly.EIDEMPOTENCY), "", string(orderly.EOUTOFSTOCK)}
			if fmt.Sprint(codes) != fmt.Sprint(want) {
				t.Fatalf("outcomes %q, want %q (errors: %v)", codes, want, got)
			}
			if !got[1].created || got[3].created || got[3].o.ID != got[1].o.ID {
				t.Errorf("the replayed key: created %v/%v, orders %s and %s; want one order, created once",
					got[1].created, got[3].created, got[1].o.ID, got[3].o.ID)
			}
			for _, i := range []int{0, 1, 5} {
				if !got[i].created || got[i].o.Amount != ps[i].Items[0].Quantity*500 {
					t.Errorf("create %d: %+v, created %v", i, got[i].o, got[i].created)
				}
			}
			if n := st.calls.Load(); n != 2 {
				t.Errorf("%d transactions, want 2 (one alone, one batch of 6)", n)
			}
			if s := e.StockOf(t, "mix"); s != (orderly.Stock{SKU: "mix", Held: 5}) {
				t.Errorf("stock %+v, want 5 held, 0 available", s)
			}
			if n := countOrders(t, e); n != 3 {
				t.Errorf("%d orders in the store, want 3", n)
			}
			rep, err := verify.Check(ctx, e.Store, verify.Options{InitialStock: map[string]int64{"mix": 5}})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Violations) != 0 {
				t.Errorf("verify: %v", rep.Violations)
			}
		})
	}
}
