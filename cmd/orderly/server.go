package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/job"
	"github.com/orderlyhq/orderly/natspub"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/redisq"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/telemetry"
	"github.com/orderlyhq/orderly/timeout"
)

// ServerConfig is everything `orderly serve` takes. Zero values mean the defaults of the
// packages it wires.
type ServerConfig struct {
	Addr           string // listen address; ":8080"; "127.0.0.1:0" picks a free port
	DatabaseURL    string // "" → ./orderly.db; postgres://… or mysql://… for many instances
	CallbackSecret []byte // required
	// InstanceID names this instance in leases, job runs and logs; host:pid by default.
	InstanceID string
	// Timer selects what drives the precise timer: "db" (default: the earliest wake_at in
	// the database; PostgreSQL NOTIFY or a MySQL poll across instances) or "redis" (the
	// Redis delay queue at RedisURL).
	Timer       string
	RedisURL    string
	RedisPrefix string // key prefix of the delay queue; "orderly"
	// DatabaseMaxConns caps this instance's PostgreSQL/MySQL connections; 20.
	DatabaseMaxConns int
	// DatabaseLockTimeout and DatabaseIdleInTransactionTimeout bound how long a statement
	// waits for a row lock (10 s) and how long the database lets a session sit idle inside
	// a transaction before ending it (1 s), so that an instance stopped mid-transaction
	// (SIGSTOP, a frozen VM) cannot block the others; see sqlstore.Config.
	DatabaseLockTimeout              time.Duration
	DatabaseIdleInTransactionTimeout time.Duration
	// NATSURL, when set, publishes outbox events (order.closed, order.paid, …) to NATS
	// JetStream; without it they are logged and kept in the outbox table.
	NATSURL string
	// TimerPoll caps the timer's sleep: 200 ms on MySQL (no cross-instance wake-up), 5 s
	// elsewhere.
	TimerPoll time.Duration

	// RequestTimeout is the server-side deadline of every HTTP request; past it lock waits
	// and database calls are cancelled and the request is answered 503 with Retry-After.
	// 10 s.
	RequestTimeout time.Duration

	PaymentTimeout    time.Duration // default time to pay; 30 min; at most order.MaxPaymentTimeout (7 days)
	GracePeriod       time.Duration // close_at = expires_at + this; 0
	SweepInterval     time.Duration // 15 s
	DeepCheckInterval time.Duration // 5 min
	InspectionHold    time.Duration // 1 min
	CloseBatchSize    int           // 1000

	OutboxMaxAttempts  int64         // 10
	OutboxPollInterval time.Duration // 250 ms
	OutboxRetention    time.Duration // 7 days

	Logger *slog.Logger
}

// Server is a running orderly: the store, the services, the background workers and the
// HTTP API, wired together. OpenServer starts it; Close stops it in order.
type Server struct {
	cfg      ServerConfig
	Store    *sqlstore.DB
	Gateway  *payment.SimGateway
	Orders   *order.Service
	Payments *payment.Service
	Closer   *timeout.Closer
	Relay    *outbox.Relay
	Jobs     []*job.Runner
	Metrics  *telemetry.Metrics

	queue     *redisq.Queue
	redis     *dependency // watches queue; nil without --timer redis
	publisher *natspub.Publisher

	listener  net.Listener
	http      *http.Server
	served    chan error
	cancel    context.CancelFunc
	listening chan struct{} // closed when the LISTEN loop ended
	watching  chan struct{} // closed when the check of s.redis ended
}

// timerChannel is the PostgreSQL NOTIFY channel of earlier deadlines; the payload is the
// close_at in unix milliseconds.
const timerChannel = "orderly_timer"

// OpenServer opens the database (applying migrations), builds the services, starts the
// timer, sweep, deep check and outbox relay, and starts serving HTTP on cfg.Addr. On error
// everything started so far is stopped.
func OpenServer(ctx context.Context, cfg ServerConfig) (_ *Server, err error) {
	if len(cfg.CallbackSecret) == 0 {
		return nil, errors.New("a callback secret is required")
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg.Addr = cmp.Or(cfg.Addr, ":8080")
	cfg.RequestTimeout = cmp.Or(cfg.RequestTimeout, httpapi.DefaultRequestTimeout)
	cfg.Logger = cmp.Or(cfg.Logger, slog.Default())
	cfg.SweepInterval = cmp.Or(cfg.SweepInterval, defaults.SweepInterval)
	cfg.DeepCheckInterval = cmp.Or(cfg.DeepCheckInterval, defaults.DeepCheckInterval)
	if cfg.InstanceID == "" {
		host, _ := os.Hostname()
		cfg.InstanceID = fmt.Sprintf("%s:%d", cmp.Or(host, "orderly"), os.Getpid())
	}
	s := &Server{cfg: cfg, Gateway: payment.NewSimGateway(), Metrics: telemetry.NewMetrics()}
	defer func() {
		if err != nil {
			_ = s.Close()
		}
	}()

	if s.Store, err = sqlstore.Open(ctx, sqlstore.Config{URL: cfg.DatabaseURL, MaxConns: cfg.DatabaseMaxConns,
		LockTimeout: cfg.DatabaseLockTimeout, IdleInTransactionTimeout: cfg.DatabaseIdleInTransactionTimeout}); err != nil {
		return nil, err
	}
	var (
		closer *timeout.Closer
		relay  *outbox.Relay
	)
	wakeRelay := func() { relay.Notify() }
	if s.Payments, err = payment.NewService(payment.Config{
		Store: s.Store, Gateway: s.Gateway, WakeRelay: wakeRelay, Logger: cfg.Logger, Metrics: s.Metrics,
	}); err != nil {
		return nil, err
	}
	if s.Orders, err = order.NewService(order.Config{
		Store: s.Store, DefaultPaymentTimeout: cfg.PaymentTimeout, GracePeriod: cfg.GracePeriod,
		OnCreated: func(ctx context.Context, id string, closeAt time.Time) {
			closer.Created(ctx, id, closeAt)
			s.Metrics.OrdersCreated.Inc()
		},
		WakeRelay: wakeRelay, Payments: s.Payments, Logger: cfg.Logger,
	}); err != nil {
		return nil, err
	}
	handlers := order.ReleaseHandlers()
	handlers[orderly.TopicPaymentRefund] = s.Payments.RefundHandler()
	handlers[orderly.TopicRefundExecute] = s.Payments.RefundExecuteHandler()
	events := eventLog(cfg.Logger)
	if cfg.NATSURL != "" {
		if s.publisher, err = natspub.New(ctx, natspub.Config{URL: cfg.NATSURL, Logger: cfg.Logger}); err != nil {
			return nil, err
		}
		h := s.publisher.Handler()
		events = &h
	}
	if relay, err = outbox.NewRelay(outbox.Config{
		Store: s.Store, Handlers: handlers, Default: events, MaxAttempts: cfg.OutboxMaxAttempts, BatchSize: 1000,
		PollInterval: cfg.OutboxPollInterval, Retention: cfg.OutboxRetention, Logger: cfg.Logger, Metrics: s.Metrics,
	}); err != nil {
		return nil, err
	}
	tcfg := timeout.Config{
		Store: s.Store, Inspector: s.Payments, BatchSize: cfg.CloseBatchSize, InspectionHold: cfg.InspectionHold,
		WakeRelay: wakeRelay, Logger: cfg.Logger, Metrics: s.Metrics, MaxSleep: cfg.TimerPoll,
	}
	if s.Store.Dialect() == "mysql" {
		tcfg.MaxSleep = cmp.Or(cfg.TimerPoll, 200*time.Millisecond)
	}
	if s.Store.Notifies() {
		tcfg.Notify = func(ctx context.Context, closeAt time.Time) {
			if err := s.Store.Notify(ctx, timerChannel, strconv.FormatInt(closeAt.UnixMilli(), 10)); err != nil {
				cfg.Logger.Warn("notify other instances of an earlier deadline", "error", err)
			}
		}
	}
	if cfg.Timer == "redis" {
		// Lazy: an instance starts and serves while Redis is down (a restart, a failover).
		// The database is the source of truth: the timer keeps watching its earliest
		// deadline and the sweep runs, so orders close on time without the queue; the
		// instance uses the queue again as soon as it answers (s.redis says when).
		if s.queue, err = redisq.New(ctx, redisq.Config{URL: cfg.RedisURL, Prefix: cfg.RedisPrefix, Lazy: true}); err != nil {
			return nil, err
		}
		s.redis = &dependency{name: "redis delay queue", ping: s.queue.Ping, logger: cfg.Logger,
			gauge:  s.Metrics.DependencyUp.WithLabelValues("redis"),
			effect: "the database timer and the sweep close orders until it answers"}
		s.redis.check(ctx, true)
		tcfg.DelayQueue = optionalQueue{DelayQueue: s.queue, dep: s.redis}
		// Other instances' earlier deadlines reach this one only through the queue: poll it.
		tcfg.MaxSleep = cmp.Or(cfg.TimerPoll, 200*time.Millisecond)
	}
	if closer, err = timeout.NewCloser(tcfg); err != nil {
		return nil, err
	}
	s.Closer, s.Relay = closer, relay
	for _, j := range []struct {
		name     string
		interval time.Duration
		run      job.Func
	}{
		{"sweep", cfg.SweepInterval, closer.Sweep},
		{"deep_check", cfg.DeepCheckInterval, closer.DeepCheck},
		{"outbox_retention", time.Minute, relay.Retention},
	} {
		r, err := job.New(job.Config{Store: s.Store, Name: j.name, Instance: cfg.InstanceID, Interval: j.interval, Run: j.run, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		s.Jobs = append(s.Jobs, r)
	}

	workers, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.cancel = cancel
	if err := relay.Start(workers); err != nil {
		return nil, err
	}
	if err := closer.Start(workers); err != nil {
		return nil, err
	}
	for _, r := range s.Jobs {
		if err := r.Start(workers); err != nil {
			return nil, err
		}
	}
	if s.redis != nil {
		s.watching = make(chan struct{})
		go s.redis.watch(workers, s.watching)
	}
	if s.Store.Notifies() {
		s.listening = make(chan struct{})
		go func() {
			defer close(s.listening)
			_ = s.Store.Listen(workers, timerChannel, func(payload string) {
				if ms, err := strconv.ParseInt(payload, 10, 64); err == nil {
					closer.Arm(time.UnixMilli(ms).UTC())
				} else {
					closer.Arm(time.Time{}) // (re)connected: re-read the earliest deadline
				}
			}, func(err error) { cfg.Logger.Warn("listen for timer notifications", "error", err) })
		}()
	}

	api := httpapi.New(httpapi.Config{
		Orders: s.Orders, Payments: s.Payments, Catalog: s.Orders, Refunds: s.Orders, CallbackSecret: cfg.CallbackSecret,
		RequestTimeout: cfg.RequestTimeout, Logger: cfg.Logger, Metrics: promhttp.HandlerFor(s.Metrics.Registry, promhttp.HandlerOpts{}),
		Ready: func(ctx context.Context) error {
			return s.Store.Read(ctx, func(tx store.Tx) error { _, err := tx.Now(ctx); return err })
		},
		Degraded: s.degraded,
	})
	if s.listener, err = (&net.ListenConfig{}).Listen(ctx, "tcp", cfg.Addr); err != nil {
		return nil, fmt.Errorf("listen on %s: %w", cfg.Addr, err)
	}
	s.http = &http.Server{
		Handler:           api.Handler(),
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       30 * time.Second,
		WriteTimeout:      max(30*time.Second, cfg.RequestTimeout+10*time.Second), // the answer after the deadline must still go out
		IdleTimeout:       2 * time.Minute,
	}
	s.served = make(chan error, 1)
	go func() { s.served <- s.http.Serve(s.listener) }()
	return s, nil
}

// validate checks what OpenServer can check without opening anything, so that `serve`
// refuses a bad command line before it generates or prints anything. Errors name the flag.
func (cfg *ServerConfig) validate() error {
	switch cfg.Timer {
	case "", "db":
	case "redis":
		if cfg.RedisURL == "" {
			return errors.New("--timer redis needs --redis-url")
		}
	default:
		return fmt.Errorf("--timer must be db or redis, not %q", cfg.Timer)
	}
	for _, d := range []struct {
		flag  string
		value time.Duration
	}{
		{"--payment-timeout", cfg.PaymentTimeout}, {"--grace-period", cfg.GracePeriod},
		{"--sweep-interval", cfg.SweepInterval}, {"--deep-check-interval", cfg.DeepCheckInterval},
		{"--inspection-hold", cfg.InspectionHold}, {"--timer-poll", cfg.TimerPoll},
		{"--outbox-poll-interval", cfg.OutboxPollInterval}, {"--outbox-retention", cfg.OutboxRetention},
		{"--request-timeout", cfg.RequestTimeout},
	} {
		if d.value < 0 {
			return fmt.Errorf("%s must not be negative, got %s", d.flag, d.value)
		}
	}
	if cfg.PaymentTimeout > order.MaxPaymentTimeout {
		return fmt.Errorf("--payment-timeout must be at most %s (7 days, the cap of payment_timeout_seconds), not %s",
			order.MaxPaymentTimeout, cfg.PaymentTimeout)
	}
	if cfg.CloseBatchSize < 0 || cfg.DatabaseMaxConns < 0 || cfg.OutboxMaxAttempts < 0 {
		return errors.New("--close-batch-size, --database-max-conns and --outbox-max-attempts must not be negative")
	}
	return nil
}

// URL returns the base URL the server listens on, e.g. "http://127.0.0.1:8080".
func (s *Server) URL() string {
	addr := s.listener.Addr().(*net.TCPAddr)
	host := addr.IP.String()
	if addr.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return fmt.Sprintf("http://%s", net.JoinHostPort(host, fmt.Sprint(addr.Port)))
}

// Close stops the server in order, each step bounded: stop taking HTTP requests (letting
// those in flight finish, up to 10 s), stop the close path, stop the relay, close the
// database. Safe to call on a half-opened server.
func (s *Server) Close() error {
	var errs []error
	if s.http != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := s.http.Shutdown(ctx); err != nil {
			errs = append(errs, fmt.Errorf("http shutdown: %w", err))
		}
		cancel()
		if err := <-s.served; err != nil && !errors.Is(err, http.ErrServerClosed) {
			errs = append(errs, err)
		}
	} else if s.listener != nil {
		errs = append(errs, s.listener.Close())
	}
	for _, r := range s.Jobs {
		r.Stop()
	}
	if s.Closer != nil {
		s.Closer.Stop()
	}
	if s.Relay != nil {
		s.Relay.Stop()
	}
	if s.cancel != nil {
		s.cancel()
	}
	if s.listening != nil {
		<-s.listening
	}
	if s.watching != nil {
		<-s.watching
	}
	if s.publisher != nil {
		s.publisher.Close()
	}
	if s.queue != nil {
		errs = append(errs, s.queue.Close())
	}
	if s.Store != nil {
		errs = append(errs, s.Store.Close())
	}
	return errors.Join(errs...)
}

// degraded returns the optional dependencies that are down, for GET /readyz.
func (s *Server) degraded() []string {
	if s.redis != nil && !s.redis.up.Load() {
		return []string{"redis"}
	}
	return nil
}

// eventLog is the default handler of event topics (order.closed, order.paid, …) while no
// broker is configured: events are kept in the outbox table and logged at debug level.
func eventLog(logger *slog.Logger) *outbox.Handler {
	return &outbox.Handler{Call: func(ctx context.Context, m *orderly.Message) error {
		logger.DebugContext(ctx, "event", "topic", m.Topic, "key", m.Key, "sequence", m.Sequence, "message_id", m.ID)
		return nil
	}}
}
