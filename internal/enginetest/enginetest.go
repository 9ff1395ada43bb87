// Package enginetest builds a small, fully wired engine on a fresh database for tests
// (SQLite, or PostgreSQL or MySQL with Options.Dialect): package engine's composition, on a
// store with a controllable database clock — order and payment services, the simulated
// gateway, the closer and the outbox relay, not started: tests drive them by calling
// CloseDue and Drain, so nothing depends on sleeps. Serve starts a whole engine behind its
// HTTP API instead.
package enginetest

import (
	"cmp"
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/internal/testdb"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/telemetry"
)

// Clock is a settable clock that stands in for the database's.
type Clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *Clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// Set sets the clock.
func (c *Clock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t.UTC()
	c.mu.Unlock()
}

// Advance moves the clock forward by d.
func (c *Clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

// Env is a wired engine, opened and not started (see package doc).
type Env struct {
	Clock    *Clock
	Engine   *engine.Engine
	Store    *sqlstore.DB
	Gateway  *sim.Gateway
	Orders   *order.Service
	Payments *payment.Service
	Groups   *groupbuy.Service
	Closer   *closer.Closer
	Relay    *outbox.Relay
	Metrics  *telemetry.Metrics // the engine's
}

// Options tunes New; zero values mean the engine's defaults.
type Options struct {
	// Dialect selects the database: "" or "sqlite" (a file in t.TempDir()), "postgres" or
	// "mysql" (a fresh schema or database on the test server, see package testdb; the test
	// is skipped when the server's variable is unset). The clock stands in for the
	// database's in every dialect.
	Dialect        string
	CloseBatchSize int
	OutboxBatch    int
	// GracePeriod is added to every payment deadline (close_at = expires_at + grace).
	GracePeriod time.Duration
	MaxAttempts int64
	// Handlers are added to (and override) the engine's outbox handlers.
	Handlers map[string]outbox.Handler
	// WrapGateway, when set, wraps the simulated gateway that the payment service calls
	// (to count or fail calls); Env.Gateway stays the simulated one.
	WrapGateway func(g orderly.Gateway) orderly.Gateway
	// WrapStore, when set, wraps the store the services and the closer write through
	// (engine.Wrap.Store); Env.Store stays the database itself.
	WrapStore func(store.Store) store.Store
	// Channels are payment channels besides the simulated gateway, DefaultChannel the one
	// of attempts that name none ("" the simulated gateway), ChannelBreaker their circuit
	// breakers (engine.Config).
	Channels       []channel.Adapter
	DefaultChannel string
	ChannelBreaker channel.BreakerConfig
	// NoSimChannel leaves the channel "sim" unserved beside Channels (with Channels, an
	// Env serves it by default: most tests pay on it), as a server with a real channel
	// configured and no simulated one: the simulated gateway is then not given.
	NoSimChannel bool
	// InspectionHold is engine.Config.InspectionHold (1 min).
	InspectionHold time.Duration
	// IdleInTransactionTimeout is engine.Config.DatabaseIdleInTransactionTimeout (1 s): a
	// test that deliberately holds a transaction open while other work runs raises it, so
	// that a slow machine does not end the held session.
	IdleInTransactionTimeout time.Duration
}

// Start is the clock's initial time: a fixed instant with a non-zero millisecond part.
var Start = time.Date(2026, 11, 30, 8, 0, 0, 123_000_000, time.UTC)

// New returns an Env on a fresh database (see Options.Dialect), closed at the end of the test.
func New(t testing.TB, opts Options) *Env {
	t.Helper()
	ctx := context.Background()
	clock := &Clock{now: Start}
	var url string
	if opts.Dialect != "" && opts.Dialect != "sqlite" {
		url = testdb.Fresh(t, testdb.URL(t, opts.Dialect))
	} else {
		url = sqlitetest.Path(t)
	}
	simGW := sim.New()
	var gateway orderly.Gateway = simGW
	if opts.WrapGateway != nil {
		gateway = opts.WrapGateway(simGW)
	}
	if opts.NoSimChannel && len(opts.Channels) > 0 {
		gateway = nil
	}
	e, err := engine.Open(ctx, engine.Config{
		DatabaseURL: url, Now: clock.Now, CallbackSecret: []byte("enginetest"), InstanceID: t.Name(), Gateway: gateway,
		// 10 connections on a server: enough for the races of the tests (8 at once), and
		// tests of several packages share the server's connection limit.
		DatabaseMaxConns: 10,
		CloseBatchSize:   opts.CloseBatchSize, OutboxBatchSize: opts.OutboxBatch, OutboxMaxAttempts: opts.MaxAttempts,
		GracePeriod: opts.GracePeriod, Handlers: opts.Handlers, Wrap: engine.Wrap{Store: opts.WrapStore},
		Channels: opts.Channels, DefaultChannel: opts.DefaultChannel, ChannelBreaker: opts.ChannelBreaker,
		InspectionHold: opts.InspectionHold, DatabaseIdleInTransactionTimeout: opts.IdleInTransactionTimeout,
	}, features.All()...)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	t.Cleanup(func() { _ = e.Close(context.Background()) })
	return &Env{Clock: clock, Engine: e, Store: e.Store(), Gateway: simGW, Orders: e.Orders(), Payments: e.Payments(),
		Groups: groups(e), Closer: e.Closer(), Relay: e.Relay(), Metrics: e.Metrics()}
}

// StockOf returns a SKU's stock.
func (e *Env) StockOf(t testing.TB, sku string) orderly.Stock {
	t.Helper()
	s, err := e.Orders.Stock(context.Background(), sku)
	if err != nil {
		t.Fatalf("stock %s: %v", sku, err)
	}
	return *s
}

// OrderOf returns an order.
func (e *Env) OrderOf(t testing.TB, id string) *orderly.Order {
	t.Helper()
	o, err := e.Orders.Order(context.Background(), id)
	if err != nil {
		t.Fatalf("order %s: %v", id, err)
	}
	return o
}

// CreateOrderOpts are the options of CreateOrder; zero values mean one unit of "SKU-1" at
// 1000 minor units, 60 s to pay, no coupon.
type CreateOrderOpts struct {
	UserID         string
	SKU            string
	Quantity       int64
	UnitPrice      int64
	CouponID       string
	TimeoutSeconds int64
}

// CreateOrder creates an order, failing the test on error.
func (e *Env) CreateOrder(t testing.TB, o CreateOrderOpts) *orderly.Order {
	t.Helper()
	p := &orderly.CreateOrderParams{
		UserID: cmp.Or(o.UserID, "user-1"), Currency: "USD", CouponID: o.CouponID,
		Items:                 []orderly.Item{{SKU: cmp.Or(o.SKU, "SKU-1"), Quantity: cmp.Or(o.Quantity, 1), UnitPrice: cmp.Or(o.UnitPrice, 1000)}},
		PaymentTimeoutSeconds: cmp.Or(o.TimeoutSeconds, 60),
	}
	ord, _, err := e.Orders.CreateOrder(context.Background(), p)
	if err != nil {
		t.Fatalf("create order: %v", err)
	}
	return ord
}

// SetStock sets a SKU's available units.
func (e *Env) SetStock(t testing.TB, sku string, available int64) {
	t.Helper()
	if _, err := e.Orders.SetStock(context.Background(), sku, available); err != nil {
		t.Fatalf("set stock: %v", err)
	}
}

// Drain delivers every due outbox message, also those that handlers write while it runs
// (a refund's payment.refunded event): it drains until a pass handles nothing.
func (e *Env) Drain(t testing.TB) {
	t.Helper()
	for {
		n, err := e.Relay.Drain(context.Background())
		if err != nil {
			t.Fatalf("drain outbox: %v", err)
		}
		if n == 0 {
			return
		}
	}
}

// Trail returns an order's audit trail.
func (e *Env) Trail(t testing.TB, id string) []*orderly.Transition {
	t.Helper()
	trail, err := e.Orders.OrderHistory(context.Background(), id)
	if err != nil {
		t.Fatalf("history %s: %v", id, err)
	}
	return trail
}

// StateTrail returns the rows of an order's audit trail that are transitions of its flow:
// neither the creation row nor the rows that change pay_status only.
func (e *Env) StateTrail(t testing.TB, id string) []*orderly.Transition {
	t.Helper()
	var out []*orderly.Transition
	for _, tr := range e.Trail(t, id) {
		if !orderly.AuditEvent(tr.Event) {
			out = append(out, tr)
		}
	}
	return out
}

// Snapshot is one order's state after a race round, read in one transaction: its flow
// transitions (as StateTrail), the order, one SKU's stock, a coupon and a payment.
type Snapshot struct {
	Trail   []*orderly.Transition
	Order   *orderly.Order
	Stock   *orderly.Stock
	Coupon  *orderly.Coupon
	Payment *orderly.Payment
}

// Snapshot reads order orderID, SKU sku, coupon couponID and payment paymentID in one read
// transaction, so that they are seen at one point in time; it fails the test on error.
func (e *Env) Snapshot(t testing.TB, orderID, sku, couponID, paymentID string) *Snapshot {
	t.Helper()
	ctx := context.Background()
	s := &Snapshot{}
	e.Read(t, func(tx store.Tx) (err error) {
		if s.Trail, err = tx.TransitionList(ctx, orderID); err != nil {
			return err
		}
		s.Trail = slices.DeleteFunc(s.Trail, func(tr *orderly.Transition) bool { return orderly.AuditEvent(tr.Event) })
		if s.Order, err = tx.OrderGet(ctx, orderID); err != nil {
			return err
		}
		if s.Stock, err = tx.StockGet(ctx, sku); err != nil {
			return err
		}
		if s.Coupon, err = tx.CouponGet(ctx, couponID); err != nil {
			return err
		}
		s.Payment, err = tx.PaymentGet(ctx, paymentID)
		return err
	})
	return s
}

// Read runs fn in a read transaction, failing the test on error.
func (e *Env) Read(t testing.TB, fn func(tx store.Tx) error) {
	t.Helper()
	if err := e.Store.Read(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// InTx runs fn in a write transaction, failing the test on error.
func (e *Env) InTx(t testing.TB, fn func(tx store.Tx) error) {
	t.Helper()
	if err := e.Store.InTx(context.Background(), fn); err != nil {
		t.Fatal(err)
	}
}

// groups returns e's group-buy service (features.All has it).
func groups(e *engine.Engine) *groupbuy.Service {
	g, _ := e.Service(groupbuy.FlowName).(*groupbuy.Service)
	return g
}
