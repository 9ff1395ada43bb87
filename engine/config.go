package engine

import (
	"cmp"
	"database/sql"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
	"unicode"

	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/idempotency"
	"github.com/orderlyhq/orderly/order"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/saga"
	"github.com/orderlyhq/orderly/store"
	"github.com/orderlyhq/orderly/store/sqlstore"
	"github.com/orderlyhq/orderly/webhook"
)

// Documented defaults of Config: a zero field means the value here. `orderly serve --help`
// shows the same values.
const (
	DefaultRequestTimeout     = httpapi.DefaultRequestTimeout // 10 s
	DefaultPaymentTimeout     = order.DefaultPaymentTimeout   // 30 min
	DefaultSweepInterval      = 15 * time.Second
	DefaultDeepCheckInterval  = 5 * time.Minute
	DefaultInspectionHold     = time.Minute
	DefaultCloseBatchSize     = 1000
	DefaultCreateBatch        = order.DefaultCreateBatch // 32
	DefaultCreateQueue        = order.DefaultCreateQueue // 512
	DefaultOutboxBatchSize    = 1000
	DefaultOutboxMaxAttempts  = 10
	DefaultOutboxPollInterval = 250 * time.Millisecond
	DefaultOutboxRetention    = 7 * 24 * time.Hour
	DefaultIdempotencyKeyTTL  = idempotency.DefaultTTL     // 24 h
	DefaultWebhookTimeout     = webhook.DefaultTimeout     // 5 s
	DefaultWebhookConcurrency = webhook.DefaultConcurrency // 8
	DefaultDatabaseMaxConns   = 20
	// DefaultTimerPoll caps the precise timer's sleep where another instance's earlier
	// deadline arrives by notification (PostgreSQL NOTIFY) or only one instance runs.
	DefaultTimerPoll = 5 * time.Second
	// DefaultPolledTimerPoll caps it where other instances' deadlines are only seen by
	// polling: on MySQL/MariaDB (no cross-instance notification) and with Timer "redis".
	DefaultPolledTimerPoll = 200 * time.Millisecond
	// retentionInterval is the period of the outbox retention job.
	retentionInterval = time.Minute
	// eventsDelay is how old an event must be for GET /v1/events to list it on PostgreSQL
	// and MySQL (webhook.Config.EventsDelay): twice the default lock timeout, past which
	// a transaction that wrote events waiting on locks has committed or rolled back.
	eventsDelay = 2 * sqlstore.DefaultLockTimeout
	// shutdownTimeout bounds Close's wait for in-flight HTTP requests when its context has
	// no deadline.
	shutdownTimeout = 10 * time.Second
)

// DefaultReconcileInterval is the period of the reconciliation job: daily.
const DefaultReconcileInterval = 24 * time.Hour

// Timer values of Config.Timer.
const (
	TimerDB    = "db"    // the earliest wake_at in the database drives the precise timer
	TimerRedis = "redis" // the Redis delay queue at Config.RedisURL drives it
)

// Config is everything Open takes: what `orderly serve` reads from its flags, and the seams
// an embedding Go service may use (Flows, Effects, Timed, Gateway, Events, Handlers, Wrap). Zero values
// mean the documented defaults (the Default* constants); Validate lists what is refused.
type Config struct {
	// Addr is the HTTP listen address Start listens on, e.g. ":8080" or "127.0.0.1:0" (a
	// free port; see Engine.Addr). "" means no listener: an embedder mounts Engine.Handler
	// in its own server.
	Addr string
	// LoopbackWhenOpen makes Start listen on 127.0.0.1 at Addr's port (":8080" →
	// "127.0.0.1:8080") while the API is open: no AdminToken and no API key in the database
	// (Engine.AuthRequired). `orderly serve` sets it when --addr was not given.
	LoopbackWhenOpen bool
	// DatabaseURL names the database (sqlstore.Config.URL): a SQLite file path ("" means
	// ./orderly.db), postgres://… or mysql://… for many instances.
	DatabaseURL string
	// DB, in place of DatabaseURL, is a PostgreSQL or MySQL pool the embedder opened and
	// keeps (pgx or go-sql-driver/mysql): orderly migrates and uses it, never closes it,
	// and leaves its pool and session settings alone (sqlstore.Config.DB). Without the
	// LISTEN connection a URL gives on PostgreSQL, the timer polls (DefaultPolledTimerPoll).
	DB *sql.DB
	// AdminToken is the bearer token of the operator routes (/v1/admin/…); empty turns
	// them off, and Open logs that it did.
	AdminToken string
	// CallbackSecret is the HMAC secret of payment callbacks (package payment). Required.
	CallbackSecret []byte
	// InstanceID names this instance in leases, job runs and logs; "host:pid" by default.
	InstanceID string
	// Timer selects what drives the precise timer: TimerDB ("" means it; PostgreSQL NOTIFY
	// or a poll carries other instances' deadlines) or TimerRedis (the Redis delay queue at
	// RedisURL).
	Timer       string
	RedisURL    string // required with TimerRedis, e.g. "redis://127.0.0.1:6379/0"
	RedisPrefix string // key prefix of the delay queue; redisq.DefaultPrefix ("orderly")
	// DatabaseMaxConns caps this instance's PostgreSQL/MySQL connections; 20.
	DatabaseMaxConns int
	// DatabaseMustExist refuses a SQLite file that does not exist instead of creating it
	// (sqlstore.Config.MustExist): `orderly reconcile` sets it.
	DatabaseMustExist bool
	// DatabaseSkipMigrate leaves the schema alone at Open, for a deployment that migrates
	// apart (`orderly migrate`); Open then fails (EINVALID) on a schema lacking any migration
	// of this build (sqlstore.Config.SkipMigrate).
	DatabaseSkipMigrate bool
	// DatabaseLockTimeout and DatabaseIdleInTransactionTimeout bound how long a statement
	// waits for a row lock (sqlstore.DefaultLockTimeout, 10 s) and how long the database lets
	// a session sit idle inside a transaction before ending it
	// (sqlstore.DefaultIdleInTransactionTimeout, 1 s), so that an instance stopped
	// mid-transaction (SIGSTOP, a frozen VM) cannot block the others. Negative leaves the
	// server's setting; see sqlstore.Config.
	DatabaseLockTimeout              time.Duration
	DatabaseIdleInTransactionTimeout time.Duration
	// NATSURL, when set, publishes outbox events (order.closed, order.paid, …) to NATS
	// JetStream (package natspub). Without it and without Events they are logged at debug
	// level and kept in the outbox table.
	NATSURL string
	// NATSStream and NATSSubjectPrefix name the JetStream stream ("ORDERLY") and the subject
	// prefix ("orderly": topic order.closed goes to orderly.order.closed) of NATSURL, so that
	// deployments sharing a NATS server keep their events apart (natspub.Config).
	NATSStream        string
	NATSSubjectPrefix string
	// TimerPoll caps the timer's sleep: DefaultPolledTimerPoll (200 ms) on MySQL, on a
	// PostgreSQL DB and with TimerRedis, DefaultTimerPoll (5 s) elsewhere.
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
	CloseBatchSize    int           // orders closed per transaction; 1000
	// CreateBatch is the most concurrent creates of one-line orders of one SKU joined into
	// one transaction (group commit, order.Config.CreateBatch); DefaultCreateBatch
	// (32); 1 runs each create in its own transaction.
	CreateBatch int
	// CreateQueue is the most creates of one SKU waiting in this instance; past it a create
	// is answered 503 with Retry-After at once (order.Config.CreateQueue);
	// DefaultCreateQueue (512).
	CreateQueue int

	// ReconcileInterval is the period of the reconciliation job (package reconcile, under
	// its lease: one instance at a time); 24 h. Its reports are kept in reconcile_reports.
	ReconcileInterval time.Duration
	// ReconcileDryRun makes the reconciliation job report its findings without repairing.
	ReconcileDryRun bool
	// ReconcileRefundStuckAfter is how old a refund the provider accepted and never
	// confirmed (still requested, refunds.provider_status set) must be to be a
	// refund_stuck finding; reconcile.DefaultRefundStuckAfter (24 h).
	ReconcileRefundStuckAfter time.Duration

	OutboxBatchSize    int           // outbox messages claimed per transaction; 1000
	OutboxMaxAttempts  int64         // delivery attempts before a message is dead; 10
	OutboxPollInterval time.Duration // 250 ms
	OutboxRetention    time.Duration // how long delivered messages are kept; 7 days
	// OutboxMinBackoff is the delay before a message's first retry (a failed delivery, or a
	// provider's answer still pending); it doubles per attempt, ±50 % jitter, up to 5 min. 1 s.
	OutboxMinBackoff time.Duration

	// IdempotencyKeyTTL is how long the answer of a POST sent with an Idempotency-Key is
	// kept for the same request sent again (package idempotency); 24 h.
	IdempotencyKeyTTL time.Duration

	// WebhookTimeout bounds one delivery to a merchant webhook (connect, send, answer); a
	// slower answer is a failed attempt, retried with the outbox's backoff; 5 s. Webhook
	// deliveries have their own lane of the relay: however slow a subscriber, the order
	// events, releases and gateway refunds never wait for it.
	WebhookTimeout time.Duration
	// WebhookConcurrency is how many webhook deliveries (of different subscribers or
	// orders) run at once; each subscriber still gets an order's events in order; 8.
	WebhookConcurrency int

	// Flows is the registry of order flows (orderly.NewFlows); Open builds one
	// order.Machine over it and gives that to every service that changes an order's state
	// (order, payment, the closer). nil → orderly.DefaultFlows() (standard). Open adds the
	// flows of its features (feature.Feature). See docs/concepts/orders-and-flows.md.
	Flows orderly.Flows
	// Effects are the named effects of flows beyond the built-in ones (order.Effects), by
	// name, registered by a flow's own package; a name registered twice is refused.
	Effects map[string]order.Effect
	// Timed are the other kinds of timed entities (group deadlines, holds) the closer's
	// timer, sweep and deep check drive besides orders (closer.Timed). Open always adds
	// the wallet hold expiries (wallet.Expiries), the sagas and the features' kinds.
	Timed []closer.Timed
	// Sagas are the saga definitions the engine's orchestrator runs (Engine.Sagas): their
	// step deadlines and retries are timed on the closer's one timer, and GET
	// /v1/sagas/{id} and the admin re-drive serve their instances. docs/concepts/sagas.md.
	Sagas []saga.Definition
	// Gateway serves the simulated payment channel "sim" (payment.SimChannel), which moves no
	// money: channel/sim's gateway (sim.New()) or a test double; nil → "sim" is not served.
	// It is served beside Channels when both are given (a staging server's test buyers), and
	// Start then logs one warning that payments on it are simulated. A gateway with
	// UseDatabase (channel/sim's) is given the engine's database for its card holds (its own
	// tables, created then): a database that never serves "sim" has none. It serves no other
	// channel name: an attempt naming a channel that is not served ("Stripe", "stripe@v9",
	// "paypal") is refused with EINVALID (422) and changes nothing. With neither Gateway nor
	// Channels every payment attempt is refused so (a process that takes no payments, such as
	// `orderly reconcile`), and Start logs a warning.
	Gateway orderly.Gateway
	// Channels are the real payment providers (package channel; channel/stripe), each
	// reachable at POST /v1/channels/{name}/webhook. A payment attempt names its channel
	// (POST /v1/orders/{id}/payments {"channel":"stripe"}, exactly as configured: names are
	// case-sensitive, a variant "stripe@v2" is its own name); DefaultChannel names the one of
	// attempts that name none. Their calls are bounded by ChannelCallTimeout and go through
	// a circuit breaker per channel (channel.BreakerConfig defaults).
	Channels []channel.Adapter
	// DefaultChannel is the channel of attempts that name none (and that ChannelRoutes does
	// not route): "" or "sim" for the simulated gateway when Gateway is given, else one of
	// Channels' names. With Channels and without Gateway it is required and must name one
	// of Channels (Validate refuses otherwise), unless ChannelRoutes route every such
	// attempt: a server with a real provider never falls back to the simulator.
	DefaultChannel string
	// ChannelRoutes, when set, split the attempts that name no channel between channels
	// by weight, sticky per user (channel.Router: hash(user_id) mod 100); a channel whose
	// success rate stays below ChannelFloor for ChannelFloorFor (5 min) is taken out of
	// rotation, logged and counted (orderly_channel_out_of_rotation_total). Each route
	// names one of Channels. ChannelFloor 0 keeps every route in rotation.
	ChannelRoutes   []channel.Route
	ChannelFloor    float64
	ChannelFloorFor time.Duration
	// ChannelCallTimeout bounds each call to a channel's provider; channel.DefaultCallTimeout (10 s).
	ChannelCallTimeout time.Duration
	// ChannelBreaker configures the circuit breaker of every channel; zero values are
	// channel.DefaultBreakerFailures (5 failures in a row) and channel.DefaultBreakerOpen (30 s).
	ChannelBreaker channel.BreakerConfig
	// Events, when set, handles the event topics (order.closed, order.paid,
	// payment.refunded, …) instead of NATS or the debug log: an embedder's own broker. It
	// must be idempotent (delivery is at least once). Not together with NATSURL.
	Events *outbox.Handler
	// Handlers are added to (and override) the engine's outbox handlers by topic.
	Handlers map[string]outbox.Handler
	// Wrap decorates parts of the engine as Open builds them; zero leaves them as built.
	Wrap Wrap
	// Now, when set, replaces the database clock (sqlstore.Config.Now): tests and
	// simulations only.
	Now func() time.Time

	// Logger receives the engine's logs; slog.Default().
	Logger *slog.Logger
	// TracerProvider receives the engine's spans (HTTP requests, order transitions, close
	// batches, outbox dispatches, gateway calls). nil: a provider of the engine's own,
	// exporting over OTLP/HTTP, when the standard OTEL_* variables ask for one
	// (telemetry.NewTracerProviderFromEnv; flushed by Close), else the global provider
	// (otel.GetTracerProvider, a no-op unless the program installed one). The engine never
	// installs a global provider.
	TracerProvider trace.TracerProvider
}

// Wrap holds decorators Open applies to the parts it builds, for tracing, authorisation or
// fault injection (the project's mutation tests break the engine through them on purpose).
// A nil field leaves that part as built.
type Wrap struct {
	// Store wraps the store every service, the closer, the relay and the jobs write
	// through; Engine.Store stays the database itself.
	Store func(store.Store) store.Store
	// Orders wraps the order service behind the HTTP API (Handler); Engine.Orders stays
	// the service itself.
	Orders func(orderly.OrderService) orderly.OrderService
	// Payments wraps the payment service behind the HTTP API.
	Payments func(orderly.PaymentService) orderly.PaymentService
	// Participant wraps every action and compensation of the sagas (saga.Config.Wrap):
	// `orderly simulate` injects its saga faults through it (internal/fault.Saga).
	Participant func(saga.Participant) saga.Participant
}

// ConfigError is a Config that Open refuses: which field, and why. Error names fields as
// "Config.PaymentTimeout"; Describe names them as the caller's flags do.
type ConfigError struct {
	// Field is the field at fault, e.g. "PaymentTimeout".
	Field string
	// text writes the reason with each field named by name.
	text func(name func(field string) string) string
}

// Error implements error: "engine: Config.PaymentTimeout must be at most …".
func (e *ConfigError) Error() string {
	return "engine: " + e.Describe(func(f string) string { return "Config." + f })
}

// Describe returns the reason with every field named by name, e.g. as a command-line flag
// ("PaymentTimeout" → "--payment-timeout"): "--payment-timeout must be at most 168h0m0s …".
func (e *ConfigError) Describe(name func(field string) string) string { return e.text(name) }

// configErrorf returns a ConfigError on field whose text is format with the first %s the
// field's name, then args.
func configErrorf(field, format string, args ...any) *ConfigError {
	return &ConfigError{Field: field, text: func(name func(string) string) string {
		return fmt.Sprintf(format, append([]any{name(field)}, args...)...)
	}}
}

// Validate checks what Open can check without opening anything. Errors are *ConfigError:
// a missing CallbackSecret, an unknown Timer, TimerRedis without RedisURL, Events with
// NATSURL, a negative duration or count, a PaymentTimeout over order.MaxPaymentTimeout.
func (c *Config) Validate() error {
	if len(c.CallbackSecret) == 0 {
		return configErrorf("CallbackSecret", "%s is required")
	}
	if c.AdminToken != "" && (strings.TrimSpace(c.AdminToken) != c.AdminToken || strings.ContainsFunc(c.AdminToken, unicode.IsControl)) {
		// " " turned the admin routes on with a token no client sends (a header value is trimmed).
		return configErrorf("AdminToken", "%s must not have spaces or control characters at either end or control characters within")
	}
	switch c.Timer {
	case "", TimerDB:
	case TimerRedis:
		if c.RedisURL == "" {
			return &ConfigError{Field: "RedisURL", text: func(name func(string) string) string {
				return fmt.Sprintf("%s redis needs %s", name("Timer"), name("RedisURL"))
			}}
		}
	default:
		return configErrorf("Timer", "%s must be db or redis, not %q", c.Timer)
	}
	names := map[string]bool{}
	for _, a := range c.Channels {
		if names[a.Name()] {
			return configErrorf("Channels", "%s names channel %q twice", a.Name())
		}
		names[a.Name()] = true
	}
	for _, r := range c.ChannelRoutes {
		if !names[r.Channel] || r.Weight <= 0 {
			return configErrorf("ChannelRoutes", "%s: route %q (weight %d) must name a configured channel with a positive weight", r.Channel, r.Weight)
		}
	}
	if c.ChannelFloor < 0 || c.ChannelFloor > 1 {
		return configErrorf("ChannelFloor", "%s must be within 0 … 1, got %g", c.ChannelFloor)
	}
	if err := c.validateChannels(names); err != nil {
		return err
	}
	if c.Events != nil && c.NATSURL != "" {
		return &ConfigError{Field: "Events", text: func(name func(string) string) string {
			return fmt.Sprintf("%s and %s do not go together: events go to one place", name("Events"), name("NATSURL"))
		}}
	}
	for _, d := range []struct {
		field string
		value time.Duration
	}{
		{"PaymentTimeout", c.PaymentTimeout}, {"GracePeriod", c.GracePeriod},
		{"SweepInterval", c.SweepInterval}, {"DeepCheckInterval", c.DeepCheckInterval}, {"ReconcileInterval", c.ReconcileInterval},
		{"ReconcileRefundStuckAfter", c.ReconcileRefundStuckAfter},
		{"InspectionHold", c.InspectionHold}, {"TimerPoll", c.TimerPoll},
		{"OutboxPollInterval", c.OutboxPollInterval}, {"OutboxRetention", c.OutboxRetention}, {"OutboxMinBackoff", c.OutboxMinBackoff}, {"IdempotencyKeyTTL", c.IdempotencyKeyTTL}, {"WebhookTimeout", c.WebhookTimeout},
		{"RequestTimeout", c.RequestTimeout}, {"ChannelCallTimeout", c.ChannelCallTimeout}, {"ChannelFloorFor", c.ChannelFloorFor},
	} {
		if d.value < 0 {
			return configErrorf(d.field, "%s must not be negative, got %s", d.value)
		}
	}
	if c.PaymentTimeout > order.MaxPaymentTimeout {
		return configErrorf("PaymentTimeout", "%s must be at most %s (7 days, the cap of payment_timeout_seconds), not %s",
			order.MaxPaymentTimeout, c.PaymentTimeout)
	}
	for _, n := range []struct {
		field string
		value int64
	}{
		{"CloseBatchSize", int64(c.CloseBatchSize)}, {"DatabaseMaxConns", int64(c.DatabaseMaxConns)},
		{"OutboxBatchSize", int64(c.OutboxBatchSize)}, {"OutboxMaxAttempts", c.OutboxMaxAttempts},
		{"CreateBatch", int64(c.CreateBatch)}, {"CreateQueue", int64(c.CreateQueue)},
		{"WebhookConcurrency", int64(c.WebhookConcurrency)},
	} {
		if n.value < 0 {
			return configErrorf(n.field, "%s must not be negative, got %d", n.value)
		}
	}
	return nil
}

// SimServed reports whether the simulated channel "sim" is served: Gateway is given.
func (c *Config) SimServed() bool { return c.Gateway != nil }

// validateChannels checks the simulated channel's rule (see Gateway, DefaultChannel):
// names are the configured real channels.
func (c *Config) validateChannels(names map[string]bool) error {
	if names[payment.SimChannel] {
		return configErrorf("Channels", "%s: %q is the simulated gateway's channel", payment.SimChannel)
	}
	configured := slices.Sorted(maps.Keys(names))
	if c.SimServed() {
		configured = append([]string{payment.SimChannel}, configured...)
	}
	switch {
	case c.DefaultChannel == "" && !c.SimServed() && len(c.Channels) > 0 && len(c.ChannelRoutes) == 0:
		return &ConfigError{Field: "DefaultChannel", text: func(name func(string) string) string {
			return fmt.Sprintf("%s is required with real payment channels (one of %s): the simulated channel %q is not served without %s",
				name("DefaultChannel"), strings.Join(configured, ", "), payment.SimChannel, name("Gateway"))
		}}
	case c.DefaultChannel != "" && !slices.Contains(configured, c.DefaultChannel):
		return configErrorf("DefaultChannel", "%s %q is not a served channel (served: %s)", c.DefaultChannel, cmp.Or(strings.Join(configured, ", "), "none"))
	}
	return nil
}

// paymentChannel is the payment service's default channel (payment.Config.Channel): where
// the simulator is not served and ChannelRoutes route every attempt that names none, the
// first route, which the router also falls back to.
func (c *Config) paymentChannel() string {
	if c.DefaultChannel == "" && !c.SimServed() && len(c.ChannelRoutes) > 0 {
		return c.ChannelRoutes[0].Channel
	}
	return c.DefaultChannel
}

// withDefaults returns c with the documented defaults in place of zero values.
func (c Config) withDefaults(hostname func() (string, error), pid int) Config {
	c.Timer = cmp.Or(c.Timer, TimerDB)
	c.RequestTimeout = cmp.Or(c.RequestTimeout, DefaultRequestTimeout)
	c.PaymentTimeout = cmp.Or(c.PaymentTimeout, DefaultPaymentTimeout)
	c.SweepInterval = cmp.Or(c.SweepInterval, DefaultSweepInterval)
	c.DeepCheckInterval = cmp.Or(c.DeepCheckInterval, DefaultDeepCheckInterval)
	c.ReconcileInterval = cmp.Or(c.ReconcileInterval, DefaultReconcileInterval)
	c.InspectionHold = cmp.Or(c.InspectionHold, DefaultInspectionHold)
	c.CloseBatchSize = cmp.Or(c.CloseBatchSize, DefaultCloseBatchSize)
	c.OutboxBatchSize = cmp.Or(c.OutboxBatchSize, DefaultOutboxBatchSize)
	c.OutboxMaxAttempts = cmp.Or(c.OutboxMaxAttempts, DefaultOutboxMaxAttempts)
	c.OutboxPollInterval = cmp.Or(c.OutboxPollInterval, DefaultOutboxPollInterval)
	c.OutboxRetention = cmp.Or(c.OutboxRetention, DefaultOutboxRetention)
	c.IdempotencyKeyTTL = cmp.Or(c.IdempotencyKeyTTL, DefaultIdempotencyKeyTTL)
	c.WebhookTimeout = cmp.Or(c.WebhookTimeout, DefaultWebhookTimeout)
	c.WebhookConcurrency = cmp.Or(c.WebhookConcurrency, DefaultWebhookConcurrency)
	c.DatabaseMaxConns = cmp.Or(c.DatabaseMaxConns, DefaultDatabaseMaxConns)
	c.DatabaseLockTimeout = cmp.Or(c.DatabaseLockTimeout, sqlstore.DefaultLockTimeout)
	c.DatabaseIdleInTransactionTimeout = cmp.Or(c.DatabaseIdleInTransactionTimeout, sqlstore.DefaultIdleInTransactionTimeout)
	if c.Flows == nil {
		c.Flows = orderly.DefaultFlows()
	}
	c.Flows = maps.Clone(c.Flows) // Open adds the features' flows
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.InstanceID == "" {
		host, _ := hostname()
		c.InstanceID = fmt.Sprintf("%s:%d", cmp.Or(host, "orderly"), pid)
	}
	return c
}
