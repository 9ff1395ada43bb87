package httpapi

import (
	"cmp"
	"context"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-chi/chi/v5"
	"go.opentelemetry.io/otel/trace"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel"
	"github.com/orderlyhq/orderly/idempotency"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/telemetry"
)

// DefaultMaxBodyBytes is the default limit of a request body: 1 MiB.
const DefaultMaxBodyBytes = 1 << 20

// DefaultRequestTimeout is the default server-side deadline of a request: 10 s.
const DefaultRequestTimeout = 10 * time.Second

// Actors recorded in the audit trail for changes made through this API.
const (
	actorBuyer    = "buyer"    // creates and cancels orders
	actorMerchant = "merchant" // ships, completes and refunds orders
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	// Orders, Payments and Catalog are the services behind the API. Required: New panics
	// when one is nil.
	Orders   orderly.OrderService
	Payments orderly.PaymentService
	Catalog  orderly.CatalogService
	// Refunds serves the refund routes. nil means Orders when it implements
	// orderly.RefundService (order.Service does); else they answer 500.
	Refunds orderly.RefundService
	// Metadata serves the PATCH routes of orders, trips, payments, refunds and groups. nil
	// means Orders when it implements orderly.MetadataService (order.Service does); else
	// they answer 500.
	Metadata orderly.MetadataService
	// Groups serves the group-buy routes (/v1/deals, /v1/groups). nil answers them 404.
	Groups orderly.GroupService
	// Trips serves the ride-hailing routes (/v1/trips). nil answers them 404.
	Trips orderly.TripService
	// Wallets serves the wallet routes (/v1/wallets). nil answers them 404.
	Wallets orderly.WalletService
	// Sagas serves GET /v1/sagas/{id} and the admin re-drive (*saga.Orchestrator). nil answers them 404.
	Sagas SagaService

	// Channels are the payment providers whose notifications POST
	// /v1/channels/{channel}/webhook takes, by channel.Adapter.Name; Notifications applies
	// them. Without either, that route answers 404.
	Channels      []channel.Adapter
	Notifications NotificationHandler
	// ChannelStats, when set, serves GET /v1/admin/channels (channel.Router.Stats).
	ChannelStats func() []channel.Stat

	// AdminToken is a bearer token with every scope (buyer, merchant, admin). When it is set
	// or Keys has a key, every route that has scopes needs a bearer token
	// (docs/operations/api-keys.md); with neither, the API is open and the routes under /v1/admin are off (404).
	AdminToken string
	// Keys authenticates API keys (package apikey). nil: no keys, only AdminToken.
	Keys KeyAuthenticator
	// Idempotency keeps the answers of POST requests sent with an Idempotency-Key on the
	// routes whose service keeps no key itself (Server.idempotent). nil: those routes
	// ignore the header.
	Idempotency *idempotency.Service
	// RequestMetrics, when set, counts and times every answer by route
	// (telemetry.Metrics.HTTPRequests, HTTPRequestDuration).
	RequestMetrics *telemetry.Metrics
	// OrderSearch serves GET /v1/orders, a buyer's orders (admin.Service). nil means Admin;
	// with neither that route answers 404.
	OrderSearch OrderSearcher
	// Admin serves the operator routes (orders search, dead letters, job runs, audit,
	// reconciliation; package admin). nil answers them 404.
	Admin AdminService
	// Webhooks serves the merchant webhook subscriptions under /v1/admin/webhooks. nil
	// answers them 404.
	Webhooks orderly.WebhookService

	// CallbackSecret is the HMAC key that payment callbacks are signed with (docs/concepts/payments.md).
	// When empty, every callback is refused with 401: an empty key would let anyone sign.
	CallbackSecret []byte
	// SignatureTolerance is how far a callback signature's timestamp may be from Now,
	// either way. 0 means payment.DefaultSignatureTolerance (5 minutes).
	SignatureTolerance time.Duration
	// MaxBodyBytes limits request bodies; longer ones are answered 413. 0 means
	// DefaultMaxBodyBytes (1 MiB).
	MaxBodyBytes int64
	// RequestTimeout is the server-side deadline of every request, from the moment its
	// headers are read: lock waits and database calls still running then are cancelled and
	// the request is answered 503 unavailable with Retry-After (nothing was changed, so
	// the client's retry applies). 0 means DefaultRequestTimeout (10 s).
	RequestTimeout time.Duration
	// Now is the clock that callback signatures are checked against. nil means time.Now.
	Now func() time.Time
	// Logger receives internal errors, panics and refused callbacks. nil means
	// slog.Default().
	Logger *slog.Logger
	// TracerProvider receives the requests' server spans (and, through their contexts, the
	// spans started under them); nil means the global provider (otel.GetTracerProvider).
	TracerProvider trace.TracerProvider
	// Ready reports whether the server can take traffic (database reachable, migrations
	// applied, …); GET /readyz answers 503 while it returns an error. nil means always ready.
	Ready func(ctx context.Context) error
	// Degraded returns the optional dependencies that do not answer now (e.g. "redis", the
	// delay queue): while it returns some, a ready server answers GET /readyz 200
	// {"status":"degraded","degraded":[…]} instead of {"status":"ok"}; it keeps taking
	// traffic. nil means none.
	Degraded func() []string
	// Metrics serves GET /metrics (e.g. a Prometheus handler). nil answers /metrics 404.
	Metrics http.Handler
}

// Server is the HTTP adapter. It is safe for concurrent use.
type Server struct {
	orders         orderly.OrderService
	payments       orderly.PaymentService
	catalog        orderly.CatalogService
	refunds        orderly.RefundService
	metadata       orderly.MetadataService
	groups         orderly.GroupService
	wallets        orderly.WalletService
	trips          orderly.TripService
	sagas          SagaService
	webhooks       orderly.WebhookService
	secret         []byte
	adminToken     []byte
	keys           KeyAuthenticator
	idempotency    *idempotency.Service
	requestMetrics *telemetry.Metrics
	search         OrderSearcher
	admin          AdminService
	tolerance      time.Duration
	maxBody        int64
	timeout        time.Duration
	now            func() time.Time
	logger         *slog.Logger
	tracer         trace.TracerProvider
	ready          func(ctx context.Context) error
	degraded       func() []string
	metrics        http.Handler
	channels       map[string]channel.Adapter
	notifications  NotificationHandler
	channelStats   func() []channel.Stat

	router *chi.Mux
}

// New returns a Server for cfg. It panics when a service is missing, which is a
// programming error.
func New(cfg Config) *Server {
	switch {
	case cfg.Orders == nil:
		panic("httpapi: Config.Orders is nil")
	case cfg.Payments == nil:
		panic("httpapi: Config.Payments is nil")
	case cfg.Catalog == nil:
		panic("httpapi: Config.Catalog is nil")
	}
	s := &Server{
		orders:         cfg.Orders,
		payments:       cfg.Payments,
		catalog:        cfg.Catalog,
		refunds:        cfg.Refunds,
		metadata:       cfg.Metadata,
		groups:         cfg.Groups,
		wallets:        cfg.Wallets,
		trips:          cfg.Trips,
		sagas:          cfg.Sagas,
		webhooks:       cfg.Webhooks,
		secret:         cfg.CallbackSecret,
		adminToken:     []byte(cfg.AdminToken),
		keys:           cfg.Keys,
		idempotency:    cfg.Idempotency,
		requestMetrics: cfg.RequestMetrics,
		search:         cfg.OrderSearch,
		admin:          cfg.Admin,
		tolerance:      cfg.SignatureTolerance,
		maxBody:        cfg.MaxBodyBytes,
		timeout:        cfg.RequestTimeout,
		now:            cfg.Now,
		logger:         cfg.Logger,
		tracer:         cfg.TracerProvider,
		ready:          cfg.Ready,
		degraded:       cfg.Degraded,
		metrics:        cfg.Metrics,
		channels:       map[string]channel.Adapter{},
		notifications:  cfg.Notifications,
		channelStats:   cfg.ChannelStats,
	}
	for _, a := range cfg.Channels {
		s.channels[a.Name()] = a
	}
	if s.metadata == nil {
		if ms, ok := cfg.Orders.(orderly.MetadataService); ok {
			s.metadata = ms
		} else {
			s.metadata = noMetadata{}
		}
	}
	if s.refunds == nil {
		if rs, ok := cfg.Orders.(orderly.RefundService); ok {
			s.refunds = rs
		} else {
			s.refunds = noRefunds{}
		}
	}
	if s.search == nil && cfg.Admin != nil {
		s.search = cfg.Admin
	}
	if s.groups == nil {
		s.groups = noGroups{}
	}
	if s.trips == nil {
		s.trips = noTrips{}
	}
	if s.wallets == nil {
		s.wallets = noWallets{}
	}
	if s.sagas == nil {
		s.sagas = noSagas{}
	}
	if s.tolerance <= 0 {
		s.tolerance = payment.DefaultSignatureTolerance
	}
	if s.maxBody <= 0 {
		s.maxBody = DefaultMaxBodyBytes
	}
	if s.timeout <= 0 {
		s.timeout = DefaultRequestTimeout
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.router = s.routes()
	return s
}

// Handler returns the server's HTTP handler: every route of the API behind the trace id,
// request metrics, panic recovery, request deadline, API key and Idempotency-Key
// (authMiddleware, idempotent) middleware.
func (s *Server) Handler() http.Handler { return s.router }

// routes builds the router. The OpenAPI document (openapi.json) lists the same routes; a
// test walks this router to keep the two in step.
func (s *Server) routes() *chi.Mux {
	r := chi.NewRouter()
	r.Use(s.traceMiddleware, s.metricsMiddleware, s.recoverMiddleware, s.deadlineMiddleware, s.authMiddleware, s.queryMiddleware)
	r.NotFound(s.routeNotFound)
	r.MethodNotAllowed(s.methodNotAllowed)

	r.Post("/v1/orders", s.createOrder)
	r.Get("/v1/orders", s.listOrders)
	r.Get("/v1/orders/{id}", s.getOrder)
	r.Patch("/v1/orders/{id}", s.patchMetadata(orderly.MetadataOfOrder, answered(s.orders.Order, newOrderResponse)))
	r.Get("/v1/orders/{id}/history", s.getOrderHistory)
	r.Post("/v1/orders/{id}/cancel", s.cancelOrder)
	r.Post("/v1/orders/{id}/events", s.applyOrderEvent)
	r.Post("/v1/orders/{id}/payments", s.startPayment)
	r.Get("/v1/orders/{id}/payments", s.listOrderPayments)
	r.Post("/v1/orders/{id}/refunds", s.createRefund)
	r.Get("/v1/orders/{id}/refunds", s.listRefunds)

	r.Get("/v1/payments/{id}", s.getPayment)
	r.Patch("/v1/payments/{id}", s.patchMetadata(orderly.MetadataOfPayment, answered(s.payments.Payment, newPaymentResponse)))
	r.Get("/v1/refunds/{id}", s.getRefund)
	r.Patch("/v1/refunds/{id}", s.patchMetadata(orderly.MetadataOfRefund, answered(s.refunds.Refund, newRefundResponse)))
	r.Get("/v1/payments/{id}/refusals", s.listCallbackRefusals)
	r.Post("/v1/payments/callback", s.paymentCallback)
	r.Post("/v1/channels/{channel}/webhook", s.channelWebhook)

	r.Get("/v1/inventory", s.listStock)
	r.Put("/v1/inventory/{sku}", s.setStock)
	r.Post("/v1/inventory/{sku}/adjustments", s.adjustStock)
	r.Get("/v1/inventory/{sku}", s.getStock)

	r.Post("/v1/coupons", s.createCoupon)
	r.Get("/v1/coupons/{id}", s.getCoupon)

	r.Post("/v1/deals", s.createDeal)
	r.Get("/v1/deals/{id}", s.getDeal)
	r.Post("/v1/groups", s.openGroup)
	r.Get("/v1/groups/{id}", s.getGroup)
	r.Patch("/v1/groups/{id}", s.patchMetadata(orderly.MetadataOfGroup, answered(s.groups.Group, newGroupResponse)))
	r.Post("/v1/groups/{id}/join", s.joinGroup)
	r.Post("/v1/groups/{id}/leave", s.leaveGroup)

	r.Group(s.walletRoutes)
	r.Group(s.tripRoutes)
	r.Get("/v1/sagas/{id}", s.getSaga)
	r.Get("/v1/events", s.listEvents)

	r.Route("/v1/admin", s.adminRoutes)
	r.Get("/admin", s.adminPage)
	r.Get("/admin/{asset}", s.adminPage)

	r.Get("/healthz", s.healthz)
	r.Get("/readyz", s.readyz)
	r.Get("/metrics", s.serveMetrics)
	r.Get("/openapi.json", s.serveOpenAPI)
	return r
}

// routeNotFound answers a path that no route has.
func (s *Server) routeNotFound(w http.ResponseWriter, r *http.Request) {
	s.writeProblem(w, r, CodeRouteNotFound, "no route for "+r.Method+" "+r.URL.Path)
}

// allowMethods are the methods that a 405 answer's Allow header may list.
var allowMethods = []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete}

// methodNotAllowed answers a path that has routes, but none for the request's method,
// listing the methods that it has in the Allow header.
func (s *Server) methodNotAllowed(w http.ResponseWriter, r *http.Request) {
	path := cmp.Or(r.URL.RawPath, r.URL.Path)
	var allowed []string
	for _, m := range allowMethods {
		if s.router.Match(chi.NewRouteContext(), m, path) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
	}
	s.writeProblem(w, r, CodeMethodNotAllowed, r.Method+" is not allowed on "+r.URL.Path)
}

// pathParam returns the URL parameter name, unescaped. chi matches on the escaped path
// when the URL has one (an id containing "%2F"), so its parameters may still be escaped.
func pathParam(r *http.Request, name string) string {
	v := chi.URLParam(r, name)
	if r.URL.RawPath == "" {
		return v
	}
	if u, err := url.PathUnescape(v); err == nil {
		return u
	}
	return v
}
