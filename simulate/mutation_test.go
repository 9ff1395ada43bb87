package simulate

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/internal/testenv"
	"github.com/orderlyhq/orderly/store"
)

// The mutation tests run the simulator against the real engine (enginetest.Serve: real
// services, closer, relay, HTTP API and database) with one part wrapped so that it breaks
// an invariant on purpose, and show that the run reports that violation. Each mutant runs
// twice with the same setup: with the break switched off, the run must be clean (so the
// checker does not cry wolf), switched on it must report the specific kind of violation.

// mutant is one deliberately broken server.
type mutant struct {
	name string
	// setup returns the server's options, and a function to call with the started server
	// (to hand a wrapper its services) or nil; broken switches the break on.
	setup func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server))
	// want are substrings, each of which some violation must contain.
	want []string
	// check, when set, checks more of the broken run's result.
	check func(t *testing.T, res *Result)
	// maxLateness is Config.MaxLateness of both runs; 0: no bound (it is the business of
	// one mutant only, and the one check that a machine loaded by other tests can upset).
	maxLateness time.Duration
}

func TestMutants(t *testing.T) {
	testenv.Long(t)
	if testing.Short() {
		t.Skip("ten simulations of a whole engine; skipped with -short")
	}
	t.Parallel()
	mutants := []mutant{
		{
			// (a) a server that acknowledges and ignores every success in the last 450 ms
			// before close_at: the buyers who pay just before the deadline lose their order.
			name: "ignores successes just before close_at",
			setup: func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server)) {
				ignorer := &ignoreLateSuccesses{broken: broken, window: 450 * time.Millisecond}
				return enginetest.ServerOptions{WrapPayments: func(p orderly.PaymentService) orderly.PaymentService {
					ignorer.PaymentService = p
					return ignorer
				}}, func(srv *enginetest.Server) { ignorer.orders = srv.Orders }
			},
			want: []string{"although its payment", "acknowledged at"},
			check: func(t *testing.T, res *Result) {
				if res.NearDeadline.Closed == 0 || res.NearDeadline.BeforeCloseAt == 0 {
					t.Errorf("near deadline %+v, want successes acknowledged before close_at whose orders closed", res.NearDeadline)
				}
			},
		},
		{
			// (b) a dead timer: only the sweep closes orders. The bound is the timer's poll
			// cap (5 s: a live timer re-reads the earliest deadline at least that often, and
			// on a quiet machine closes within ms). The sweep's period (12 s) exceeds the
			// span of the run's deadlines (80 orders at 30/s: 2.7 s) plus the bound, so
			// whatever its phase some order waits for it longer than the bound.
			name: "no precise timer",
			setup: func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server)) {
				return enginetest.ServerOptions{NoTimer: broken.Load(), SweepInterval: 12 * time.Second}, nil
			},
			want:        []string{"I5: ", "orders closed more than the lateness bound 5s after their close_at"},
			maxLateness: 5 * time.Second,
		},
		{
			// (c) the coupon is frozen and used, but the order is priced at full price.
			name: "full price with a coupon",
			setup: func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server)) {
				return enginetest.ServerOptions{WrapStore: func(s store.Store) store.Store { return &fullPriceStore{Store: s, broken: broken} }}, nil
			},
			want: []string{"I4: order ", "but its items cost", "I4 (database): order ", "I4: payment "},
		},
		{
			// (d) every third order refused as out of stock, whatever it asks for.
			name: "refuses every third create",
			setup: func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server)) {
				return enginetest.ServerOptions{WrapOrders: func(o orderly.OrderService) orderly.OrderService {
					return &refuseEveryThird{OrderService: o, broken: broken}
				}}, nil
			},
			want: []string{"refused: order ", "was refused out-of-stock, but it asks only for SKUs stocked above", "below the minimum share"},
		},
		{
			// (e) every refund sent to the gateway twice, under two idempotency keys.
			name: "refunds twice",
			setup: func(broken *atomic.Bool) (enginetest.ServerOptions, func(*enginetest.Server)) {
				return enginetest.ServerOptions{WrapGateway: func(g *sim.Gateway) orderly.Gateway {
					return &refundTwice{Gateway: g, broken: broken}
				}}, nil
			},
			want: []string{"I3: payment ", "the gateway refunded it 2 times"},
		},
	}
	// At most two runs at once: each is a server and a simulate run of its own, and ten at
	// once under the race detector on two cores starved the clean runs (503 "database is
	// busy", lateness past the bound) although nothing was broken.
	slots := make(chan struct{}, 2)
	for _, m := range mutants {
		for _, broken := range []bool{false, true} {
			name := m.name + "/clean"
			if broken {
				name = m.name + "/broken"
			}
			t.Run(name, func(t *testing.T) {
				t.Parallel()
				slots <- struct{}{}
				defer func() { <-slots }()
				var on atomic.Bool
				on.Store(broken)
				opts, after := m.setup(&on)
				srv := enginetest.Serve(t, withSecret(opts))
				if after != nil {
					after(srv)
				}
				res := runMutant(t, srv, m.maxLateness)
				t.Logf("\n%s", res.Summary())
				if !broken {
					if !res.OK() {
						t.Fatalf("violations with the break switched off:\n%s", strings.Join(res.Violations, "\n"))
					}
					return
				}
				for _, w := range m.want {
					if !slices.ContainsFunc(res.Violations, func(v string) bool { return strings.Contains(v, w) }) {
						t.Errorf("no violation contains %q; got:\n%s", w, strings.Join(res.Violations, "\n"))
					}
				}
				if m.check != nil {
					m.check(t, res)
				}
			})
		}
	}
}

var mutantSecret = []byte("mutant-secret")

func withSecret(o enginetest.ServerOptions) enginetest.ServerOptions {
	o.CallbackSecret = mutantSecret
	return o
}

// runMutant runs a small simulation with every check on: the database, the gateway's
// ledger, the lateness bound given (the timer is armed in process, so closes take ms; the
// bound leaves room for a machine loaded by other tests) and a minimum created share of
// 75 %.
func runMutant(t *testing.T, srv *enginetest.Server, maxLateness time.Duration) *Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := Run(ctx, Config{
		Target: srv.URL, CallbackSecret: mutantSecret, Orders: 80, Rate: 30, PaymentTimeout: time.Second, Seed: 11,
		Drain: 20 * time.Second, Store: srv.Store, GatewayLedger: srv.Gateway.Ledger,
		MaxLateness: maxLateness, MinCreatedShare: 0.75,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Clock.Source != ClockSourceDatabase || res.Clock.MarginMS > 50 {
		t.Errorf("clock %+v, want the database's, measured to a few ms", res.Clock)
	}
	return res
}

// ignoreLateSuccesses acknowledges success callbacks that arrive less than window before
// their order's close_at without applying them.
type ignoreLateSuccesses struct {
	orderly.PaymentService
	orders  orderly.OrderService
	broken  *atomic.Bool
	window  time.Duration
	ignored atomic.Int64
}

func (w *ignoreLateSuccesses) HandleCallback(ctx context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
	if w.broken.Load() && cb.Status == orderly.CallbackSucceeded {
		o, err := w.orders.Order(ctx, cb.OrderID)
		if err == nil && o.State == orderly.StatePendingPayment && time.Until(o.CloseAt) < w.window {
			p, err := w.Payment(ctx, cb.PaymentID)
			if err != nil {
				return nil, err
			}
			w.ignored.Add(1)
			return &orderly.CallbackResult{Payment: p}, nil
		}
	}
	return w.PaymentService.HandleCallback(ctx, cb)
}

// fullPriceStore writes orders that use a coupon at the full price of their items: the
// coupon is still frozen and used, its amount is not taken off.
type fullPriceStore struct {
	store.Store
	broken *atomic.Bool
}

func (s *fullPriceStore) InTx(ctx context.Context, fn func(tx store.Tx) error) error {
	return s.Store.InTx(ctx, func(tx store.Tx) error { return fn(&fullPriceTx{Tx: tx, broken: s.broken}) })
}

type fullPriceTx struct {
	store.Tx
	broken *atomic.Bool
}

func (tx *fullPriceTx) OrderInsert(ctx context.Context, p *store.OrderInsertParams) error {
	if tx.broken.Load() && p.Order.CouponID != "" {
		c, err := tx.CouponGet(ctx, p.Order.CouponID)
		if err != nil {
			return err
		}
		p.Order.Amount += c.AmountOff
	}
	return tx.Tx.OrderInsert(ctx, p)
}

// refuseEveryThird refuses every third order creation as out of stock.
type refuseEveryThird struct {
	orderly.OrderService
	broken *atomic.Bool
	n      atomic.Int64
}

func (r *refuseEveryThird) CreateOrder(ctx context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
	if r.broken.Load() && r.n.Add(1)%3 == 0 {
		return nil, false, orderly.Errorf(orderly.EOUTOFSTOCK, "not enough stock")
	}
	return r.OrderService.CreateOrder(ctx, p)
}

// refundTwice sends every refund to the gateway twice, the second time under another
// idempotency key, so the money goes back twice.
type refundTwice struct {
	*sim.Gateway
	broken *atomic.Bool
}

func (g *refundTwice) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	res, err := g.Gateway.Refund(ctx, r)
	if err != nil || !g.broken.Load() {
		return res, err
	}
	return res, g.RefundWithKey(ctx, r.PaymentID, r.IdempotencyKey+"/again", r.Amount)
}
