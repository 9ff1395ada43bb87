package enginetest

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/timeout"
)

// ServerOptions configures Serve. The Wrap fields are the seams through which a test
// breaks the engine on purpose (a mutant), to show that a checker notices; nil leaves the
// real part in place.
type ServerOptions struct {
	// CallbackSecret signs payment callbacks. Required.
	CallbackSecret []byte
	// SweepInterval is the period of the sweep. Default one hour: far away, so that what
	// closes orders on time is the precise timer.
	SweepInterval time.Duration
	// NoTimer leaves the precise timer stopped (a dead timer): only the sweep closes
	// orders, and payment inspection runs inline in it.
	NoTimer bool
	// WrapStore wraps the store the order service writes through.
	WrapStore func(store.Store) store.Store
	// WrapOrders wraps the order service behind the HTTP API.
	WrapOrders func(orderly.OrderService) orderly.OrderService
	// WrapPayments wraps the payment service behind the HTTP API.
	WrapPayments func(orderly.PaymentService) orderly.PaymentService
	// WrapGateway wraps the simulated gateway the payment service calls.
	WrapGateway func(*payment.SimGateway) orderly.Gateway
}

// Server is a whole engine on the real clock behind the real HTTP API, on a fresh SQLite
// database in t.TempDir(): order and payment services, the simulated gateway, the outbox
// relay, the precise timer and the sweep, all started. It stops at the end of the test.
type Server struct {
	URL      string
	Store    *sqlstore.DB
	Gateway  *payment.SimGateway
	Orders   *order.Service
	Payments *payment.Service
	Closer   *timeout.Closer
}

// Serve starts a Server.
func Serve(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	db, err := sqlstore.Open(ctx, sqlstore.Config{URL: filepath.Join(t.TempDir(), "orderly.db")})
	if err != nil {
		t.Fatalf("open store: %v", err)
	}
	s := &Server{Store: db, Gateway: payment.NewSimGateway()}
	var (
		closer *timeout.Closer
		relay  *outbox.Relay
	)
	wake := func() { relay.Notify() }
	var orderStore store.Store = db
	if opts.WrapStore != nil {
		orderStore = opts.WrapStore(db)
	}
	var gateway orderly.Gateway = s.Gateway
	if opts.WrapGateway != nil {
		gateway = opts.WrapGateway(s.Gateway)
	}
	fail := func(err error) {
		t.Helper()
		_ = db.Close()
		t.Fatal(err)
	}
	if s.Orders, err = order.NewService(order.Config{Store: orderStore, WakeRelay: wake, Logger: logger,
		OnCreated: func(ctx context.Context, id string, closeAt time.Time) { closer.Created(ctx, id, closeAt) }}); err != nil {
		fail(err)
	}
	if s.Payments, err = payment.NewService(payment.Config{Store: db, Gateway: gateway, WakeRelay: wake, Logger: logger}); err != nil {
		fail(err)
	}
	handlers := order.ReleaseHandlers()
	handlers[orderly.TopicPaymentRefund] = s.Payments.RefundHandler()
	handlers[orderly.TopicRefundExecute] = s.Payments.RefundExecuteHandler()
	discard := &outbox.Handler{Call: func(context.Context, *orderly.Message) error { return nil }}
	if relay, err = outbox.NewRelay(outbox.Config{Store: db, Handlers: handlers, Default: discard, Logger: logger}); err != nil {
		fail(err)
	}
	if closer, err = timeout.NewCloser(timeout.Config{Store: db, Inspector: s.Payments, WakeRelay: wake, Logger: logger}); err != nil {
		fail(err)
	}
	s.Closer = closer
	sweep, err := job.New(job.Config{Store: db, Name: "sweep", Instance: t.Name(), Logger: logger,
		Interval: cmp.Or(opts.SweepInterval, time.Hour), Run: closer.Sweep})
	if err != nil {
		fail(err)
	}

	workers, cancel := context.WithCancel(ctx)
	var orders orderly.OrderService = s.Orders
	if opts.WrapOrders != nil {
		orders = opts.WrapOrders(s.Orders)
	}
	var payments orderly.PaymentService = s.Payments
	if opts.WrapPayments != nil {
		payments = opts.WrapPayments(s.Payments)
	}
	api := httpapi.New(httpapi.Config{Orders: orders, Payments: payments, Catalog: s.Orders, Refunds: s.Orders,
		CallbackSecret: opts.CallbackSecret, Logger: logger})
	srv := httptest.NewServer(api.Handler())
	s.URL = srv.URL
	// Stopped in order: no more requests, no more closes, no more deliveries, then the database.
	t.Cleanup(func() {
		srv.Close()
		sweep.Stop()
		closer.Stop()
		relay.Stop()
		cancel()
		_ = db.Close()
	})
	if err := relay.Start(workers); err != nil {
		t.Fatal(err)
	}
	if !opts.NoTimer {
		if err := closer.Start(workers); err != nil {
			t.Fatal(err)
		}
	}
	if err := sweep.Start(workers); err != nil {
		t.Fatal(err)
	}
	return s
}
