package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"go.opentelemetry.io/otel"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/admin"
	"github.com/orderlyhq/orderly/apikey"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/feature"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/idempotency"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/natspub"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/reconcile"
	"github.com/orderlyhq/orderly/redisq"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/wakeup"
	"github.com/orderlyhq/orderly/wallet"
	"github.com/orderlyhq/orderly/webhook"
)

// timerChannel is the PostgreSQL NOTIFY channel of earlier deadlines; the payload is the
// close_at in unix milliseconds.
const timerChannel = "orderly_timer"

// Engine is one orderly instance: the store, the flow registry, the order and payment
// services, the close path (timer, sweep, deep check), the outbox relay and the HTTP API,
// wired together. Open builds it, Start runs it, Close stops it. Its methods are safe for
// concurrent use.
type Engine struct {
	cfg      Config // with the defaults applied
	db       *sqlstore.DB
	machine  *order.Machine
	services map[string]any // of the features (feature.Parts.Service), by feature name
	wallets  *wallet.Service
	orders   *order.Service
	payments *payment.Service
	router   *channel.Router // nil without Config.ChannelRoutes
	closer   *closer.Closer
	sagas    *saga.Orchestrator
	relay    *outbox.Relay
	jobs     []*job.Runner
	recon    *reconcile.Reconciler
	admin    *admin.Service
	keys     *apikey.Service
	idem     *idempotency.Service
	metrics  *telemetry.Metrics
	handler  http.Handler

	queue     *redisq.Queue      // with TimerRedis
	redis     *dependency        // watches queue; nil without TimerRedis
	watching  chan struct{}      // closed when the watch of redis ended; nil without one
	publisher *natspub.Publisher // with NATSURL
	webhooks  *webhook.Service
	// traceShutdown flushes and stops the tracer provider the engine built from the OTEL_*
	// variables (nil otherwise).
	traceShutdown func(context.Context) error

	mu        sync.Mutex
	started   bool
	closed    bool
	cancel    context.CancelFunc // ends the workers' context
	listening chan struct{}      // closed when the LISTEN loop ended; nil without one
	listener  net.Listener       // nil without Config.Addr
	http      *http.Server
	served    chan error // Serve's result
}

// Open validates cfg (errors are *ConfigError, see Config.Validate), builds the one
// order.Machine of Config.Flows and Config.Effects and those of features (a flow naming an
// effect nobody registered is refused here: "engine: flows: …"), opens the database
// (applying pending migrations), connects to Redis and NATS when configured, and builds the
// services, each feature on them (feature.Core), the closer, the relay, the jobs and the
// HTTP handler. Nothing runs until
// Start. On error everything opened so far is closed. Errors: a *ConfigError; those of
// sqlstore.Open as they are (they name the database: "database file …", "unsupported
// database URL …", EINVALID); the others wrapped with what failed ("engine: connect to
// Redis: …").
func Open(ctx context.Context, cfg Config, features ...feature.Feature) (_ *Engine, err error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults(os.Hostname, os.Getpid())
	cfg.Logger = slog.New(telemetry.NewLogHandler(cfg.Logger.Handler())) // trace_id on every line logged under a trace
	e := &Engine{cfg: cfg, metrics: telemetry.NewMetrics()}
	defer func() {
		if err != nil {
			_ = e.Close(context.WithoutCancel(ctx))
		}
	}()
	// Tracing: Config.TracerProvider; else an OTLP exporter of the engine's own when the
	// OTEL_* variables ask for one; else the global provider. Nothing is installed globally.
	if cfg.TracerProvider == nil {
		if cfg.TracerProvider, e.traceShutdown, err = telemetry.NewTracerProviderFromEnv(ctx); err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		if cfg.TracerProvider == nil {
			cfg.TracerProvider = otel.GetTracerProvider()
		}
		e.cfg.TracerProvider = cfg.TracerProvider
	}
	if e.db, err = sqlstore.Open(ctx, sqlstore.Config{URL: cfg.DatabaseURL, DB: cfg.DB, Now: cfg.Now, MaxConns: cfg.DatabaseMaxConns,
		MustExist: cfg.DatabaseMustExist, SkipMigrate: cfg.DatabaseSkipMigrate, LockTimeout: cfg.DatabaseLockTimeout, IdleInTransactionTimeout: cfg.DatabaseIdleInTransactionTimeout}); err != nil {
		return nil, err // sqlstore's errors name the database already (redacted), as `orderly migrate` prints them
	}
	for name, pool := range e.db.Pools() { // go_sql_* series, label db_name
		e.metrics.Registry.MustRegister(collectors.NewDBStatsCollector(pool, "orderly_"+name))
	}
	var st store.Store = e.db
	if cfg.Wrap.Store != nil {
		st = cfg.Wrap.Store(st)
	}
	gateway := cfg.Gateway
	// A Gateway that keeps state in the database (card holds every instance sees) is given
	// it here and creates its own tables then: a database never given one has none.
	if g, ok := gateway.(interface {
		UseDatabase(context.Context, *sqlstore.DB) error
	}); ok {
		if err := g.UseDatabase(ctx, e.db); err != nil {
			return nil, fmt.Errorf("engine: Config.Gateway: %w", err)
		}
	}
	log := cfg.Logger
	sig := &wakeup.Hub{} // connected to the closer and the relay once they are built, below

	// One machine over one flow registry (Config.Flows and the features'), shared by every
	// service that changes an order's state (docs/concepts/orders-and-flows.md).
	effects := map[string]order.Effect{}
	for _, f := range features {
		for _, fl := range f.Flows {
			if had := cfg.Flows[fl.Name]; had != nil && had != fl {
				return nil, fmt.Errorf("engine: feature %s: flow %s is registered twice", f.Name, fl.Name)
			}
			cfg.Flows[fl.Name] = fl
		}
		for name, eff := range f.Effects {
			if _, dup := effects[name]; dup {
				return nil, fmt.Errorf("engine: feature %s: effect %s is registered twice", f.Name, name)
			}
			effects[name] = eff
		}
	}
	e.cfg.Flows = cfg.Flows
	maps.Copy(effects, cfg.Effects)
	if e.machine, err = order.NewMachine(cfg.Flows, effects); err != nil {
		return nil, fmt.Errorf("engine: flows: %w", err)
	}
	e.machine.WithMetrics(e.metrics)
	holdGateway := gateway // uninstrumented: a feature asks it for more than orderly.Gateway
	if gateway != nil {
		gateway = telemetry.InstrumentGateway(gateway, e.metrics)
	}
	var router *channel.Router
	if len(cfg.ChannelRoutes) > 0 {
		if router, err = channel.NewRouter(channel.RouterConfig{Routes: cfg.ChannelRoutes, Floor: cfg.ChannelFloor,
			For: cfg.ChannelFloorFor, Logger: log,
			OnRemoved: func(route string, _ float64) {
				e.metrics.ChannelOutOfRotation.WithLabelValues(orderly.SplitRoute(route)).Inc()
			},
		}); err != nil {
			return nil, fmt.Errorf("engine: channel routes: %w", err)
		}
	}
	e.router = router
	// Wallets are core, not a feature: refunds of wallet-paid orders credit the buyer's
	// wallet (payments), and hold expiries are one more timed kind of the closer.
	if e.wallets, err = wallet.NewService(wallet.Config{Store: st, Logger: log, Signals: sig}); err != nil {
		return nil, fmt.Errorf("engine: wallet service: %w", err)
	}
	timed := append(slices.Clone(cfg.Timed), wallet.NewExpiries(log))
	if e.payments, err = payment.NewService(payment.Config{
		Store: st, Gateway: gateway, Machine: e.machine, Signals: sig, Logger: log, Metrics: e.metrics,
		Channels: cfg.Channels, Channel: cfg.paymentChannel(), CallTimeout: cfg.ChannelCallTimeout, Router: router,
		Breaker: cfg.ChannelBreaker, Wallets: e.wallets,
	}); err != nil {
		return nil, fmt.Errorf("engine: payment service: %w", err)
	}
	if e.orders, err = order.NewService(order.Config{
		Store: st, Machine: e.machine, DefaultPaymentTimeout: cfg.PaymentTimeout, GracePeriod: cfg.GracePeriod,
		Signals: sig, Payments: e.payments, Logger: log, CreateBatch: cfg.CreateBatch, CreateQueue: cfg.CreateQueue, Metrics: e.metrics,
	}); err != nil {
		return nil, fmt.Errorf("engine: order service: %w", err)
	}
	// The saga orchestrator: its due instances are one more timed kind of the closer.
	if e.sagas, err = saga.New(saga.Config{
		Store: st, Definitions: cfg.Sagas, Logger: log, Metrics: e.metrics, Signals: sig,
		JoinRuns: joinRunsOn(st.Dialect()), Wrap: cfg.Wrap.Participant,
	}); err != nil {
		return nil, fmt.Errorf("engine: sagas: %w", err)
	}
	timed = append(timed, e.sagas.Timed())

	core := &feature.Core{Store: st, Machine: e.machine, Orders: e.orders, Payments: e.payments, Wallets: e.wallets,
		Sagas: e.sagas, Gateway: holdGateway, Signals: sig, Logger: log, Metrics: e.metrics}
	handlers := map[string]outbox.Handler{}
	var checks []reconcile.Check
	e.services = map[string]any{}
	var wrapOrders []func(orderly.OrderService) orderly.OrderService
	for _, f := range features {
		if f.Build == nil {
			continue
		}
		parts, err := f.Build(core)
		if err != nil {
			return nil, fmt.Errorf("engine: feature %s: %w", f.Name, err)
		}
		if err := e.sagas.Define(parts.Sagas...); err != nil {
			return nil, fmt.Errorf("engine: feature %s: sagas: %w", f.Name, err)
		}
		timed = append(timed, parts.Timed...)
		maps.Copy(handlers, parts.Handlers)
		checks = append(checks, parts.Reconcile...)
		if parts.Service != nil {
			e.services[f.Name] = parts.Service
		}
		if parts.Orders != nil {
			wrapOrders = append(wrapOrders, parts.Orders)
		}
	}

	handlers[orderly.TopicPaymentRefund] = e.payments.RefundHandler()
	handlers[orderly.TopicPaymentCancel] = e.payments.CancelHandler()
	handlers[orderly.TopicRefundExecute] = e.payments.RefundExecuteHandler()
	for topic, h := range cfg.Handlers {
		handlers[topic] = h
	}
	events := cmp.Or(cfg.Events, eventLog(log))
	if cfg.NATSURL != "" {
		if e.publisher, err = natspub.New(ctx, natspub.Config{URL: cfg.NATSURL, Stream: cfg.NATSStream, SubjectPrefix: cfg.NATSSubjectPrefix, Logger: log}); err != nil {
			return nil, fmt.Errorf("engine: connect to NATS: %w", err)
		}
		h := e.publisher.Handler()
		events = &h
	}
	// Merchant webhooks: every event delivered fans out, in its delivery transaction, to
	// one webhook.deliver message per subscriber of its topic (package webhook).
	if e.webhooks, err = webhook.New(webhook.Config{Store: st, Logger: log, Metrics: e.metrics, Timeout: cfg.WebhookTimeout,
		Topics: orderly.EventTopics(cfg.Flows), EventsDelay: eventsDelayOn(e.db.Dialect())}); err != nil {
		return nil, fmt.Errorf("engine: webhooks: %w", err)
	}
	handlers[orderly.TopicWebhookDeliver] = e.webhooks.Handler()
	events = withFanOut(events, e.webhooks.FanOut)
	if e.relay, err = outbox.NewRelay(outbox.Config{
		Store: st, Handlers: handlers, Default: events, MaxAttempts: cfg.OutboxMaxAttempts, BatchSize: cfg.OutboxBatchSize,
		PollInterval: cfg.OutboxPollInterval, Retention: cfg.OutboxRetention, MinBackoff: cfg.OutboxMinBackoff, Logger: log, Metrics: e.metrics,
		TracerProvider: cfg.TracerProvider,
		Lanes:          []outbox.Lane{e.webhooks.Lane(cfg.WebhookConcurrency)},
	}); err != nil {
		return nil, fmt.Errorf("engine: outbox relay: %w", err)
	}

	tcfg := closer.Config{
		Store: st, Machine: e.machine, Timed: timed, Inspector: e.payments, BatchSize: cfg.CloseBatchSize, InspectionHold: cfg.InspectionHold,
		Signals: sig, Logger: log, Metrics: e.metrics, MaxSleep: cmp.Or(cfg.TimerPoll, DefaultTimerPoll),
		TracerProvider: cfg.TracerProvider,
	}
	if e.db.Dialect() != "sqlite" && !e.db.Notifies() {
		// No cross-instance wake-up: other instances' earlier deadlines are seen by polling.
		tcfg.MaxSleep = cmp.Or(cfg.TimerPoll, DefaultPolledTimerPoll)
	}
	if e.db.Notifies() {
		tcfg.Notify = func(ctx context.Context, closeAt time.Time) {
			if err := e.db.Notify(ctx, timerChannel, strconv.FormatInt(closeAt.UnixMilli(), 10)); err != nil {
				log.Warn("notify other instances of an earlier deadline", "error", err)
			}
		}
	}
	if cfg.Timer == TimerRedis {
		// Lazy: an instance starts and serves while Redis is down (a restart, a failover).
		// The database is the source of truth: the timer keeps watching its earliest
		// deadline and the sweep runs, so orders close on time without the queue; the
		// instance uses the queue again as soon as it answers (e.redis says when).
		if e.queue, err = redisq.New(ctx, redisq.Config{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Lazy: true}); err != nil {
			return nil, fmt.Errorf("engine: connect to Redis: %w", err)
		}
		e.redis = &dependency{name: "redis delay queue", ping: e.queue.Ping, logger: log,
			gauge:  e.metrics.DependencyUp.WithLabelValues("redis"),
			effect: "the database timer and the sweep close orders until it answers"}
		e.redis.check(ctx, true)
		tcfg.DelayQueue = optionalQueue{DelayQueue: e.queue, dep: e.redis}
		// Other instances' earlier deadlines reach this one only through the queue: poll it.
		tcfg.MaxSleep = cmp.Or(cfg.TimerPoll, DefaultPolledTimerPoll)
	}
	if e.closer, err = closer.New(tcfg); err != nil {
		return nil, fmt.Errorf("engine: closer: %w", err)
	}
	sig.Connect(e.closer, e.relay) // before any service can commit: Open has not returned

	if e.recon, err = reconcile.New(reconcile.Config{
		Store: st, Machine: e.machine, Payments: e.payments, Signals: sig, Registerer: e.metrics.Registry, Logger: log,
		Checks: append(wallet.ReconcileChecks(), checks...), RefundStuckAfter: cfg.ReconcileRefundStuckAfter,
		CloseDue: func(ctx context.Context) error {
			_, err := e.closer.CloseDue(ctx, reconcile.OperatorReconcile)
			return err
		},
	}); err != nil {
		return nil, fmt.Errorf("engine: reconciler: %w", err)
	}
	if e.admin, err = admin.New(admin.Config{Store: st, Reconciler: e.recon, Signals: sig, Flows: cfg.Flows,
		Jobs: []string{"sweep", "deep_check", "outbox_retention", "idempotency_retention", "reconcile"}, Lateness: e.metrics.CloseLateness}); err != nil {
		return nil, fmt.Errorf("engine: admin service: %w", err)
	}
	// API keys are read from the database itself: a key created by `orderly keys create`
	// or revoked on another instance is seen within apikey.DefaultCacheTTL.
	if e.keys, err = apikey.New(apikey.Config{Store: e.db, Logger: log}); err != nil {
		return nil, fmt.Errorf("engine: api keys: %w", err)
	}
	// A claim outlives the request it guards, which runs at most RequestTimeout.
	if e.idem, err = idempotency.New(idempotency.Config{Store: st, TTL: cfg.IdempotencyKeyTTL,
		Lease: cfg.RequestTimeout + 5*time.Second}); err != nil {
		return nil, fmt.Errorf("engine: idempotency: %w", err)
	}

	for _, j := range []struct {
		name     string
		interval time.Duration
		run      job.Func
	}{
		{"sweep", cfg.SweepInterval, e.closer.Sweep},
		{"deep_check", cfg.DeepCheckInterval, e.closer.DeepCheck},
		{"outbox_retention", retentionInterval, e.relay.Retention},
		{"idempotency_retention", retentionInterval, e.idem.Retention},
		{"reconcile", cfg.ReconcileInterval, e.recon.Job(cfg.InstanceID, !cfg.ReconcileDryRun)},
	} {
		r, err := job.New(job.Config{Store: st, Name: j.name, Instance: cfg.InstanceID, Interval: j.interval, Run: j.run, Logger: log,
			Metrics: e.metrics})
		if err != nil {
			return nil, fmt.Errorf("engine: job %s: %w", j.name, err)
		}
		e.jobs = append(e.jobs, r)
	}

	var orders orderly.OrderService = e.orders
	for _, wrap := range wrapOrders {
		orders = wrap(orders)
	}
	if cfg.Wrap.Orders != nil {
		orders = cfg.Wrap.Orders(orders)
	}
	var payments orderly.PaymentService = e.payments
	if cfg.Wrap.Payments != nil {
		payments = cfg.Wrap.Payments(payments)
	}
	// The features' services the API has routes for; nil interfaces without them.
	var groups orderly.GroupService
	var trips orderly.TripService
	for _, svc := range e.services {
		if g, ok := svc.(orderly.GroupService); ok {
			groups = g
		}
		if t, ok := svc.(orderly.TripService); ok {
			trips = t
		}
	}
	e.handler = httpapi.New(httpapi.Config{
		Trips:  trips,
		Orders: orders, Payments: payments, Catalog: e.orders, Refunds: e.orders, Metadata: e.orders, Groups: groups, Wallets: e.wallets, Sagas: e.sagas,
		CallbackSecret: cfg.CallbackSecret,
		AdminToken:     cfg.AdminToken, Keys: e.keys, Idempotency: e.idem, Admin: e.admin, Webhooks: e.webhooks,
		Channels: cfg.Channels, Notifications: e.payments, ChannelStats: channelStats(e.router),
		RequestTimeout: cfg.RequestTimeout, Logger: log, TracerProvider: cfg.TracerProvider, Metrics: promhttp.HandlerFor(e.metrics.Registry, promhttp.HandlerOpts{}), RequestMetrics: e.metrics,
		Ready: func(ctx context.Context) error {
			return e.db.Read(ctx, func(tx store.Tx) error { _, err := tx.Now(ctx); return err })
		},
		Degraded: e.degraded,
	}).Handler()
	return e, nil
}

// Start runs the background workers — the outbox relay, the precise timer, the sweep, the
// deep check, the outbox retention job and, on PostgreSQL, the listener of other
// instances' deadlines — and, when Config.Addr is set, serves the HTTP API on it. The
// workers run until Close, whatever becomes of ctx (it only carries values and bounds the
// listen). Errors: Start called twice or after Close, the address cannot be listened on;
// on error nothing is left running and Close is still due.
func (e *Engine) Start(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	switch {
	case e.closed:
		return errors.New("engine: start: the engine is closed")
	case e.started:
		return errors.New("engine: start: already started")
	}
	if e.cfg.Addr != "" {
		addr := e.cfg.Addr
		if e.cfg.LoopbackWhenOpen {
			on, err := e.AuthRequired(ctx)
			if err != nil {
				return fmt.Errorf("engine: start: %w", err)
			}
			addr = ListenAddr(addr, !on)
		}
		l, err := (&net.ListenConfig{}).Listen(ctx, "tcp", addr)
		if err != nil {
			return fmt.Errorf("engine: listen on %s: %w", addr, err)
		}
		e.listener = l
	}
	e.started = true
	workers, cancel := context.WithCancel(context.WithoutCancel(ctx))
	e.cancel = cancel
	if err := e.startWorkers(workers); err != nil {
		e.stopWorkers()
		if e.listener != nil {
			_ = e.listener.Close()
			e.listener = nil
		}
		return err
	}
	if e.listener != nil {
		e.http = &http.Server{
			Handler:           e.handler,
			ReadHeaderTimeout: 10 * time.Second,
			ReadTimeout:       30 * time.Second,
			// The answer after the request deadline must still go out.
			WriteTimeout: max(30*time.Second, e.cfg.RequestTimeout+10*time.Second),
			IdleTimeout:  2 * time.Minute,
		}
		e.served = make(chan error, 1)
		go func() { e.served <- e.http.Serve(e.listener) }()
	}
	e.logSimulated()
	return nil
}

// logSimulated logs, once per Start, that the channel "sim" is served: payments on it are
// simulated and move no money.
func (e *Engine) logSimulated() {
	if !e.cfg.SimServed() {
		if len(e.cfg.Channels) == 0 {
			e.cfg.Logger.Warn("no payment channel is configured: every payment attempt is refused; configure a real channel (engine.Config.Channels) or the simulated one (engine.Config.Gateway)")
		}
		return
	}
	msg := "payments are SIMULATED (test only): channel sim moves no money; configure a real channel (--stripe-api-key, --alipay-app-id, --wechat-mch-id) for real payments"
	if len(e.cfg.Channels) > 0 {
		msg = "channel sim is served beside the real channels (test only): payments on it are SIMULATED and move no money"
	}
	e.cfg.Logger.Warn(msg, "channels", e.payments.Served(), "default_channel", cmp.Or(e.cfg.DefaultChannel, payment.SimChannel))
}

// startWorkers starts the relay, the closer's timer, the jobs and the LISTEN loop on ctx.
func (e *Engine) startWorkers(ctx context.Context) error {
	if err := e.relay.Start(ctx); err != nil {
		return fmt.Errorf("engine: start relay: %w", err)
	}
	if err := e.sagas.Start(ctx); err != nil {
		return fmt.Errorf("engine: start sagas: %w", err)
	}
	if err := e.closer.Start(ctx); err != nil {
		return fmt.Errorf("engine: start timer: %w", err)
	}
	for _, r := range e.jobs {
		if err := r.Start(ctx); err != nil {
			return fmt.Errorf("engine: start job: %w", err)
		}
	}
	if e.redis != nil {
		e.watching = make(chan struct{})
		go e.redis.watch(ctx, e.watching)
	}
	if e.db.Notifies() {
		e.listening = make(chan struct{})
		closer, log := e.closer, e.cfg.Logger
		go func() {
			defer close(e.listening)
			_ = e.db.Listen(ctx, timerChannel, func(payload string) {
				if ms, err := strconv.ParseInt(payload, 10, 64); err == nil {
					closer.Arm(time.UnixMilli(ms).UTC())
				} else {
					closer.Arm(time.Time{}) // (re)connected: re-read the earliest deadline
				}
			}, func(err error) { log.Warn("listen for timer notifications", "error", err) })
		}()
	}
	return nil
}

// stopWorkers stops what startWorkers started, in dependency order: the jobs and the timer
// (which write outbox messages), then the relay, then the LISTEN loop. e.mu is held.
func (e *Engine) stopWorkers() {
	for _, r := range e.jobs {
		r.Stop()
	}
	if e.closer != nil {
		e.closer.Stop()
	}
	if e.sagas != nil {
		e.sagas.Stop() // after the timer, which hands it due sagas
	}
	if e.relay != nil {
		e.relay.Stop()
	}
	if e.cancel != nil {
		e.cancel()
	}
	if e.listening != nil {
		<-e.listening
	}
	if e.watching != nil {
		<-e.watching
	}
}

// degraded returns the optional dependencies that are down, for GET /readyz.
func (e *Engine) degraded() []string {
	if e.redis != nil && !e.redis.up.Load() {
		return []string{"redis"}
	}
	return nil
}

// Close stops the engine in dependency order: the HTTP server stops taking requests and
// waits for those in flight (bounded by ctx, or by 10 s when ctx has no deadline; past it
// the connections are cut), then the jobs and the timer stop, then the relay, then the
// LISTEN loop; then NATS, Redis and the database are closed. It is safe on an engine that
// was never started or half opened; a second call returns nil. The error joins what
// failed, each wrapped.
func (e *Engine) Close(ctx context.Context) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.closed {
		return nil
	}
	e.closed = true
	var errs []error
	if e.http != nil {
		if _, ok := ctx.Deadline(); !ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, shutdownTimeout)
			defer cancel()
		}
		if err := e.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("engine: http shutdown: %w", err))
			_ = e.http.Close() // cut the connections still in flight
		}
		if err := <-e.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, fmt.Errorf("engine: http serve: %w", err))
		}
	}
	e.stopWorkers()
	if e.publisher != nil {
		e.publisher.Close()
	}
	if e.traceShutdown != nil {
		if err := e.traceShutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("engine: flush traces: %w", err))
		}
	}
	if e.queue != nil {
		if err := e.queue.Close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close Redis: %w", err))
		}
	}
	if e.db != nil {
		if err := e.db.Close(); err != nil {
			errs = append(errs, fmt.Errorf("engine: close store: %w", err))
		}
	}
	return errors.Join(errs...)
}

// Handler returns the HTTP API (package httpapi: /v1/…, /healthz, /readyz, /metrics) to
// mount in an embedder's own server, e.g. under a prefix with http.StripPrefix or chi's
// Mount. It serves requests from Open on; orders close on time only once Start runs the
// workers.
func (e *Engine) Handler() http.Handler { return e.handler }

// Addr returns the address the HTTP API listens on, "127.0.0.1:41234" (the port chosen
// when Config.Addr asked for port 0); "" before Start or without Config.Addr.
func (e *Engine) Addr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.listener == nil {
		return ""
	}
	return e.listener.Addr().String()
}

// URL returns the base URL of the HTTP API, "http://127.0.0.1:8080" (an unspecified listen
// address is reached on 127.0.0.1); "" before Start or without Config.Addr.
func (e *Engine) URL() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.listener == nil {
		return ""
	}
	addr, ok := e.listener.Addr().(*net.TCPAddr)
	if !ok {
		return "http://" + e.listener.Addr().String()
	}
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(addr.Port))
}

// Orders returns the order service (orderly.OrderService, orderly.CatalogService and
// orderly.RefundService), unwrapped by Config.Wrap.
func (e *Engine) Orders() *order.Service { return e.orders }

// Payments returns the payment service (orderly.PaymentService), unwrapped by Config.Wrap.
func (e *Engine) Payments() *payment.Service { return e.payments }

// Service returns the service of the named feature (feature.Parts.Service: a
// *groupbuy.Service for "group_buy", …), or nil when Open was given no such feature or it
// built none (ride-hailing without a gateway with holds).
func (e *Engine) Service(feature string) any { return e.services[feature] }

// Wallets returns the wallet service (accounts, ledger, holds; package wallet).
func (e *Engine) Wallets() *wallet.Service { return e.wallets }

// Store returns the database (store.Store), unwrapped by Config.Wrap; it stays open until
// Close.
func (e *Engine) Store() *sqlstore.DB { return e.db }

// Closer returns the close path (timer, sweep and deep check bodies).
func (e *Engine) Closer() *closer.Closer { return e.closer }

// Sagas returns the saga orchestrator (Run, Begin, Get, Redrive) of Config.Sagas.
func (e *Engine) Sagas() *saga.Orchestrator { return e.sagas }

// Relay returns the outbox relay.
func (e *Engine) Relay() *outbox.Relay { return e.relay }

// Reconciler returns the reconciliation of orders, payments, stock and the outbox (package
// reconcile) that the reconcile job and the admin routes use.
func (e *Engine) Reconciler() *reconcile.Reconciler { return e.recon }

// Admin returns the operator's service behind /v1/admin (package admin).
func (e *Engine) Admin() *admin.Service { return e.admin }

// ListenAddr returns the address to listen on for addr: addr itself, or, when the API is
// open (no admin token, no API key), 127.0.0.1 at addr's port, so that an API anyone could
// call is not exposed beyond this host. An addr without a port is returned as it is.
func ListenAddr(addr string, open bool) string {
	if !open {
		return addr
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// Keys returns the API keys of the HTTP API (package apikey): create, list, revoke.
func (e *Engine) Keys() *apikey.Service { return e.keys }

// AuthRequired reports whether the HTTP API needs a bearer token: an admin token is
// configured or an API key was ever created. Without either the API is open, and `orderly
// serve` listens on 127.0.0.1 only unless given an address.
func (e *Engine) AuthRequired(ctx context.Context) (bool, error) {
	if e.cfg.AdminToken != "" {
		return true, nil
	}
	return e.keys.Enabled(ctx)
}

// channelStats returns the stats of router for the admin view; nil without one.
func channelStats(router *channel.Router) func() []channel.Stat {
	if router == nil {
		return nil
	}
	return router.Stats
}

// Router returns the channel router, or nil without Config.ChannelRoutes.
func (e *Engine) Router() *channel.Router { return e.router }

// Metrics returns the engine's Prometheus collectors (served at GET /metrics).
func (e *Engine) Metrics() *telemetry.Metrics { return e.metrics }

// Flows returns the flow registry every service resolves flows in (Config.Flows, or
// orderly.DefaultFlows()).
func (e *Engine) Flows() orderly.Flows { return e.cfg.Flows }

// Machine returns the one order.Machine (flows and effects) every service applies
// transitions through.
func (e *Engine) Machine() *order.Machine { return e.machine }

// Config returns the configuration in effect: Open's with the defaults applied.
func (e *Engine) Config() Config { return e.cfg }

// eventLog is the default handler of event topics (order.closed, order.paid, …) while no
// broker is configured: events are kept in the outbox table and logged at debug level.
func eventLog(logger *slog.Logger) *outbox.Handler {
	return &outbox.Handler{Call: func(ctx context.Context, m *orderly.Message) error {
		logger.DebugContext(ctx, "event", "topic", m.Topic, "key", m.Key, "sequence", m.Sequence, "message_id", m.ID)
		return nil
	}}
}

// withFanOut returns h with fanOut run after its Apply (if any), in the same transaction.
func withFanOut(h *outbox.Handler, fanOut func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error) *outbox.Handler {
	out := *h
	apply := h.Apply
	out.Apply = func(ctx context.Context, tx store.Tx, msgs []*orderly.Message) error {
		if apply != nil {
			if err := apply(ctx, tx, msgs); err != nil {
				return err
			}
		}
		return fanOut(ctx, tx, msgs)
	}
	return &out
}

// joinRunsOn is saga.Config.JoinRuns on dialect: on SQLite, whose one writer runs
// transactions one after another anyway, concurrent starts of local sagas share a
// transaction, 32 at most; elsewhere each has its own, run side by side (joined, they
// would take rows in arrival order and deadlock with other instances' transactions).
func joinRunsOn(dialect string) int {
	if dialect == "sqlite" {
		return 32
	}
	return 0
}

// eventsDelayOn is webhook.Config.EventsDelay on dialect: 0 on SQLite, whose one writer
// commits events in the order of their positions, eventsDelay elsewhere.
func eventsDelayOn(dialect string) time.Duration {
	if dialect == "sqlite" {
		return 0
	}
	return eventsDelay
}
