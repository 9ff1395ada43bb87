package enginetest

import (
	"cmp"
	"context"
	"io"
	"log/slog"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/groupbuy"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
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
	// WrapStore wraps the store the services write through (engine.Wrap.Store).
	WrapStore func(store.Store) store.Store
	// WrapOrders wraps the order service behind the HTTP API.
	WrapOrders func(orderly.OrderService) orderly.OrderService
	// WrapPayments wraps the payment service behind the HTTP API.
	WrapPayments func(orderly.PaymentService) orderly.PaymentService
	// WrapGateway wraps the simulated gateway the payment service calls.
	WrapGateway func(*sim.Gateway) orderly.Gateway
	// WrapParticipant wraps every saga participant (engine.Wrap.Participant), e.g.
	// fault.Saga's Wrap.
	WrapParticipant func(saga.Participant) saga.Participant
}

// Server is a whole engine (package engine, as `orderly serve` composes it) on the real
// clock behind the real HTTP API, on a fresh SQLite database in t.TempDir(): order and
// payment services, the simulated gateway, the outbox relay, the precise timer, the sweep
// and the other jobs, all started. It stops at the end of the test.
type Server struct {
	URL      string
	Engine   *engine.Engine
	Store    *sqlstore.DB
	Gateway  *sim.Gateway // the simulated gateway, also when WrapGateway wraps it
	Orders   *order.Service
	Payments *payment.Service
	Groups   *groupbuy.Service
	Closer   *closer.Closer
}

// Serve starts a Server.
func Serve(t testing.TB, opts ServerOptions) *Server {
	t.Helper()
	ctx := context.Background()
	simGW := sim.New()
	var gateway orderly.Gateway = simGW
	if opts.WrapGateway != nil {
		gateway = opts.WrapGateway(simGW)
	}
	e, err := engine.Open(ctx, engine.Config{
		Addr: "127.0.0.1:0", DatabaseURL: filepath.Join(t.TempDir(), "orderly.db"), CallbackSecret: opts.CallbackSecret,
		InstanceID: t.Name(), SweepInterval: cmp.Or(opts.SweepInterval, time.Hour), Gateway: gateway,
		Wrap: engine.Wrap{Store: opts.WrapStore, Orders: opts.WrapOrders, Payments: opts.WrapPayments,
			Participant: opts.WrapParticipant},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	}, features.All()...)
	if err != nil {
		t.Fatalf("open engine: %v", err)
	}
	// Stopped in order: no more requests, no more closes, no more deliveries, then the database.
	// The clients' idle connections go first: the server's graceful shutdown waits 5 s for
	// a connection that never sent a request (net/http treats it as about to), and the
	// default transport keeps one whenever two requests raced for a connection.
	t.Cleanup(func() {
		http.DefaultClient.CloseIdleConnections()
		if err := e.Close(ctx); err != nil {
			t.Errorf("close engine: %v", err)
		}
	})
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if opts.NoTimer {
		e.Closer().Stop() // a dead timer: the sweep still runs, and inspects inline
	}
	return &Server{URL: e.URL(), Engine: e, Store: e.Store(), Gateway: simGW, Orders: e.Orders(), Payments: e.Payments(), Groups: groups(e), Closer: e.Closer()}
}
