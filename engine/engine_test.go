package engine_test

import (
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/go-chi/chi/v5"
	"go.uber.org/goleak"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/channel/sim"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/internal/sqlitetest"
	"github.com/orderlyhq/orderly/outbox"
)

// TestMain checks for leaked goroutines; go-redis's background dial (a Redis that is down,
// TestServeWithoutRedis) outlives Close by up to a second.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"))
}

// config returns a Config on a fresh SQLite file with a callback secret and quiet logs.
func config(t *testing.T) engine.Config {
	t.Helper()
	return engine.Config{
		DatabaseURL: sqlitetest.Path(t), CallbackSecret: []byte("s"),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gateway: sim.New(),
	}
}

// TestConfigErrors checks what Open refuses before it opens anything, field by field;
// among them the cap of PaymentTimeout (7 days, the cap of payment_timeout_seconds):
// 2562047h used to be accepted.
func TestConfigErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		edit  func(*engine.Config)
		field string
		want  string // Error()
		flags string // Describe with --kebab names
	}{
		{func(c *engine.Config) { c.CallbackSecret = nil }, "CallbackSecret", "engine: Config.CallbackSecret is required", "--CallbackSecret is required"},
		{func(c *engine.Config) { c.PaymentTimeout = 2562047 * time.Hour }, "PaymentTimeout",
			"engine: Config.PaymentTimeout must be at most 168h0m0s (7 days, the cap of payment_timeout_seconds), not 2562047h0m0s",
			"--PaymentTimeout must be at most 168h0m0s (7 days, the cap of payment_timeout_seconds), not 2562047h0m0s"},
		{func(c *engine.Config) { c.PaymentTimeout = 7*24*time.Hour + time.Second }, "PaymentTimeout",
			"engine: Config.PaymentTimeout must be at most 168h0m0s (7 days, the cap of payment_timeout_seconds), not 168h0m1s", ""},
		{func(c *engine.Config) { c.RequestTimeout = -time.Second }, "RequestTimeout", "engine: Config.RequestTimeout must not be negative, got -1s", ""},
		{func(c *engine.Config) { c.GracePeriod = -time.Millisecond }, "GracePeriod", "engine: Config.GracePeriod must not be negative, got -1ms", ""},
		{func(c *engine.Config) { c.Timer = "cron" }, "Timer", `engine: Config.Timer must be db or redis, not "cron"`, `--Timer must be db or redis, not "cron"`},
		{func(c *engine.Config) { c.Timer = engine.TimerRedis }, "RedisURL", "engine: Config.Timer redis needs Config.RedisURL", "--Timer redis needs --RedisURL"},
		{func(c *engine.Config) { c.CloseBatchSize = -1 }, "CloseBatchSize", "engine: Config.CloseBatchSize must not be negative, got -1", ""},
		{func(c *engine.Config) { c.OutboxMaxAttempts = -2 }, "OutboxMaxAttempts", "engine: Config.OutboxMaxAttempts must not be negative, got -2", ""},
		{func(c *engine.Config) { c.OutboxMinBackoff = -time.Second }, "OutboxMinBackoff", "engine: Config.OutboxMinBackoff must not be negative, got -1s", ""},
		{func(c *engine.Config) { c.Events = &outbox.Handler{}; c.NATSURL = "nats://127.0.0.1:1" }, "Events",
			"engine: Config.Events and Config.NATSURL do not go together: events go to one place", ""},
	} {
		cfg := config(t)
		tc.edit(&cfg)
		e, err := engine.Open(t.Context(), cfg, features.All()...)
		var ce *engine.ConfigError
		if e != nil || !errors.As(err, &ce) || ce.Field != tc.field || err.Error() != tc.want {
			t.Errorf("Open: %v (%T), want a ConfigError on %s: %q", err, err, tc.field, tc.want)
			continue
		}
		if got := ce.Describe(func(f string) string { return "--" + f }); tc.flags != "" && got != tc.flags {
			t.Errorf("Describe = %q, want %q", got, tc.flags)
		}
	}
}

// TestOpenErrors: a database Open cannot open is refused with sqlstore's error and code.
func TestOpenErrors(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.DatabaseURL = "redis://localhost/x"
	_, err := engine.Open(t.Context(), cfg, features.All()...)
	if err == nil || !strings.Contains(err.Error(), "unsupported database URL") {
		t.Fatalf("redis URL as a database: %v", err)
	}
	if orderly.ErrorCode(err) != orderly.EINVALID {
		t.Errorf("code %s, want %s", orderly.ErrorCode(err), orderly.EINVALID)
	}
}

// TestLifecycle opens an engine with an address, starts it, serves over HTTP, refuses a
// second Start, closes, and refuses to start again; Close twice is fine.
func TestLifecycle(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	cfg := config(t)
	cfg.Addr = "127.0.0.1:0"
	e, err := engine.Open(ctx, cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	if e.Addr() != "" || e.URL() != "" {
		t.Errorf("before Start: Addr %q, URL %q; want none", e.Addr(), e.URL())
	}
	got := e.Config()
	if got.SweepInterval != engine.DefaultSweepInterval || got.PaymentTimeout != engine.DefaultPaymentTimeout ||
		got.CloseBatchSize != engine.DefaultCloseBatchSize || got.InstanceID == "" || got.Flows == nil {
		t.Errorf("defaults not applied: %+v", got)
	}
	if e.Store() == nil || e.Orders() == nil || e.Payments() == nil || e.Closer() == nil ||
		e.Relay() == nil || e.Metrics() == nil || e.Handler() == nil {
		t.Fatal("an accessor returned nil")
	}
	if err := e.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if _, _, err := net.SplitHostPort(e.Addr()); err != nil || !strings.HasPrefix(e.URL(), "http://127.0.0.1:") {
		t.Errorf("Addr %q, URL %q", e.Addr(), e.URL())
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, e.URL()+"/readyz", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET /readyz: %s", resp.Status)
	}
	if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "already started") {
		t.Errorf("second Start: %v", err)
	}
	if err := e.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := e.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if err := e.Start(ctx); err == nil || !strings.Contains(err.Error(), "closed") {
		t.Errorf("Start after Close: %v", err)
	}
	http.DefaultClient.CloseIdleConnections()
}

// TestStartListenError: an address taken by another listener fails Start with the address
// named, leaves nothing running, and Close still closes the engine.
func TestStartListenError(t *testing.T) {
	t.Parallel()
	l, err := (&net.ListenConfig{}).Listen(t.Context(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	cfg := config(t)
	cfg.Addr = l.Addr().String()
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	if err := e.Start(t.Context()); err == nil || !strings.HasPrefix(err.Error(), "engine: listen on "+cfg.Addr+": ") {
		t.Errorf("Start on a taken address: %v", err)
	}
	if err := e.Close(t.Context()); err != nil {
		t.Errorf("Close: %v", err)
	}
}

// TestFlowsRegistry: the registry of Config.Flows is the one the services resolve flows
// in; a flow it lacks is refused.
func TestFlowsRegistry(t *testing.T) {
	t.Parallel()
	cfg := config(t)
	cfg.Flows = orderly.Flows{"express": orderly.StandardFlow}
	e, err := engine.Open(t.Context(), cfg) // no feature: no flow of theirs
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	if _, ok := e.Flows()["express"]; !ok || len(e.Flows()) != 1 {
		t.Errorf("Flows() = %v, want the registry given", e.Flows())
	}
	if _, err := e.Orders().SetStock(t.Context(), "sku", 5); err != nil {
		t.Fatal(err)
	}
	_, _, err = e.Orders().CreateOrder(t.Context(), &orderly.CreateOrderParams{UserID: "u", Currency: "EUR",
		Items: []orderly.Item{{SKU: "sku", Quantity: 1, UnitPrice: 100}}})
	if orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), `unknown flow "standard"`) {
		t.Errorf("an order of a flow missing from Config.Flows: %v", err)
	}
}

// TestHandlerMounted: the API works mounted under a prefix of an embedder's chi router
// (chi's Mount) and of a net/http mux (http.StripPrefix), problems included.
func TestHandlerMounted(t *testing.T) {
	t.Parallel()
	e, err := engine.Open(t.Context(), config(t), features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close(t.Context())
	r := chi.NewRouter()
	r.Mount("/orderly", e.Handler())
	mux := http.NewServeMux()
	mux.Handle("/orderly/", http.StripPrefix("/orderly", e.Handler()))
	for name, h := range map[string]http.Handler{"chi": r, "mux": mux} {
		for _, tc := range []struct {
			path        string
			code        int
			contentType string
		}{
			{"/orderly/healthz", http.StatusOK, ""},
			{"/orderly/v1/inventory/nope", http.StatusNotFound, "application/problem+json"},
			{"/orderly/v1/nowhere", http.StatusNotFound, "application/problem+json"},
		} {
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequestWithContext(t.Context(), http.MethodGet, tc.path, nil))
			if rec.Code != tc.code || (tc.contentType != "" && rec.Header().Get("Content-Type") != tc.contentType) {
				t.Errorf("%s: GET %s: %d %s, want %d %s\n%s", name, tc.path, rec.Code, rec.Header().Get("Content-Type"), tc.code, tc.contentType, rec.Body)
			}
		}
	}
}
