package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/mock"
)

func TestNewPanicsWithoutServices(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
	}{
		{"Orders", Config{Payments: &mock.PaymentService{}, Catalog: &mock.CatalogService{}}},
		{"Payments", Config{Orders: &mock.OrderService{}, Catalog: &mock.CatalogService{}}},
		{"Catalog", Config{Orders: &mock.OrderService{}, Payments: &mock.PaymentService{}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			defer func() {
				if msg, _ := recover().(string); !strings.Contains(msg, "Config."+tt.name) {
					t.Errorf("panic = %q, want it to name Config.%s", msg, tt.name)
				}
			}()
			New(tt.cfg)
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	t.Parallel()
	s := New(Config{Orders: &mock.OrderService{}, Payments: &mock.PaymentService{}, Catalog: &mock.CatalogService{}})
	if s.maxBody != 1<<20 || s.tolerance.Minutes() != 5 || s.timeout.Seconds() != 10 || s.now == nil || s.logger == nil {
		t.Errorf("defaults: maxBody %d, tolerance %s, timeout %s, now set %v, logger set %v",
			s.maxBody, s.tolerance, s.timeout, s.now != nil, s.logger != nil)
	}
}

func TestMaxBodyBytes(t *testing.T) {
	t.Parallel()
	const body = `{"available":1}` // 15 bytes
	tests := []struct {
		limit      int64
		wantStatus int
	}{
		{15, 200},
		{14, 413},
	}
	for _, tt := range tests {
		f := setup(t, func(c *Config) { c.MaxBodyBytes = tt.limit })
		f.catalog.SetStockFn = func(_ context.Context, sku string, n int64) (*orderly.Stock, error) {
			return &orderly.Stock{SKU: sku, Available: n}, nil
		}
		for _, contentLength := range []int64{int64(len(body)), -1} { // declared and chunked
			req := newRequest(http.MethodPut, "/v1/inventory/a", body)
			req.ContentLength = contentLength
			rec := f.do(req)
			if tt.wantStatus == 200 {
				assertJSON(t, rec, 200, `{"sku":"a","available":1,"held":0,"sold":0}`)
			} else {
				p := assertProblem(t, rec, 413, CodePayloadTooLarge)
				if p.Detail != "request body is larger than 14 bytes" {
					t.Errorf("detail = %q", p.Detail)
				}
			}
		}
	}
}

func TestRouting(t *testing.T) {
	t.Parallel()
	f := setup(t)
	tests := []struct {
		method, path string
		wantStatus   int
		wantCode     string
		wantAllow    string
	}{
		{"GET", "/nope", 404, CodeRouteNotFound, ""},
		{"DELETE", "/v1/orders", 405, CodeMethodNotAllowed, "GET, POST"},
		{"DELETE", "/v1/orders/ord_1", 405, CodeMethodNotAllowed, "GET, PATCH"},
		{"POST", "/v1/inventory/sku-1", 405, CodeMethodNotAllowed, "GET, PUT"},
		{"PUT", "/v1/orders/ord_1/payments", 405, CodeMethodNotAllowed, "GET, POST"},
		{"BREW", "/v1/orders", 405, CodeMethodNotAllowed, "GET, POST"},
		{"GET", "/v1/orders/ord_1/unknown", 404, CodeRouteNotFound, ""},
	}
	for _, tt := range tests {
		t.Run(tt.method+" "+tt.path, func(t *testing.T) {
			t.Parallel()
			rec := f.do(newRequest(tt.method, tt.path, ""))
			p := assertProblem(t, rec, tt.wantStatus, tt.wantCode)
			if p.Instance != tt.path {
				t.Errorf("instance = %q, want %q", p.Instance, tt.path)
			}
			if got := rec.Header().Get("Allow"); got != tt.wantAllow {
				t.Errorf("Allow = %q, want %q", got, tt.wantAllow)
			}
			if rec.Header().Get(TraceIDHeader) == "" {
				t.Error("no trace id on a routing error")
			}
		})
	}
}

func TestRecoverer(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.orders.OrderFn = func(context.Context, string) (*orderly.Order, error) {
		panic("boom: secret detail")
	}
	// OrderHistoryFn is unset: the mock panics, like a nil pointer in a real service.
	for _, path := range []string{"/v1/orders/ord_1", "/v1/orders/ord_1/history"} {
		p := assertProblem(t, f.do(newRequest(http.MethodGet, path, "")), 500, orderly.EINTERNAL)
		if p.Detail != internalDetail {
			t.Errorf("detail = %q, want %q", p.Detail, internalDetail)
		}
	}
	logs := f.logs.String()
	if !strings.Contains(logs, "http handler panicked") || !strings.Contains(logs, "boom: secret detail") || !strings.Contains(logs, "goroutine") {
		t.Errorf("panic not logged with its value and stack: %s", logs)
	}
}

func TestRecovererAfterResponseStarted(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) {
		c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.WriteHeader(http.StatusOK)
			_, _ = io.WriteString(w, "partial")
			panic("late")
		})
	})
	rec := f.do(newRequest(http.MethodGet, "/metrics", ""))
	if rec.Code != 200 || rec.Body.String() != "partial" {
		t.Errorf("got %d %q; a started response must not get a second one", rec.Code, rec.Body)
	}
}

func TestRecovererPassesErrAbortHandler(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) {
		c.Metrics = http.HandlerFunc(func(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) })
	})
	defer func() {
		if err, ok := recover().(error); !ok || !errors.Is(err, http.ErrAbortHandler) {
			t.Errorf("recovered %v, want http.ErrAbortHandler", err)
		}
	}()
	f.do(newRequest(http.MethodGet, "/metrics", ""))
	t.Error("ErrAbortHandler was swallowed")
}

func TestInternalErrorIsLoggedNotShown(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.catalog.StockFn = func(context.Context, string) (*orderly.Stock, error) {
		return nil, errors.New("dial tcp 10.0.0.5:5432: connection refused")
	}
	req := newRequest(http.MethodGet, "/v1/inventory/sku-1", "")
	rec := f.do(req)
	p := assertProblem(t, rec, 500, orderly.EINTERNAL)
	if strings.Contains(rec.Body.String(), "10.0.0.5") || p.Detail != internalDetail {
		t.Errorf("internal detail leaked: %s", rec.Body)
	}
	logs := f.logs.String()
	for _, want := range []string{"level=ERROR", "connection refused", "trace_id=" + rec.Header().Get(TraceIDHeader), "path=/v1/inventory/sku-1"} {
		if !strings.Contains(logs, want) {
			t.Errorf("log lacks %q: %s", want, logs)
		}
	}
}

func TestTraceID(t *testing.T) {
	t.Parallel()
	hex32 := regexp.MustCompile(`^[0-9a-f]{32}$`)
	tests := []struct {
		name        string
		traceparent string
		want        string // "" means a new random id
	}{
		{"valid", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"future version with more fields", "01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "4bf92f3577b34da6a3ce929d0e0e4736"},
		{"none", "", ""},
		{"version ff", "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"zero trace id", "00-00000000000000000000000000000000-00f067aa0ba902b7-01", ""},
		{"zero parent id", "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", ""},
		{"upper case", "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", ""},
		{"short", "00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", ""},
		{"version 00 with more fields", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", ""},
		{"bad separator", "00_4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", ""},
		{"not hex", "00-4bf92f3577b34da6a3ce929d0e0e473g-00f067aa0ba902b7-01", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var seen string
			f.orders.CancelOrderFn = func(_ context.Context, _, _, traceID string) (*orderly.Order, error) {
				seen = traceID
				return sampleOrder(), nil
			}
			req := newRequest(http.MethodPost, "/v1/orders/ord_1/cancel", "")
			if tt.traceparent != "" {
				req.Header.Set("traceparent", tt.traceparent)
			}
			rec := f.do(req)
			got := rec.Header().Get(TraceIDHeader)
			if tt.want != "" && got != tt.want {
				t.Errorf("trace id = %q, want %q", got, tt.want)
			}
			if !hex32.MatchString(got) || got == "4bf92f3577b34da6a3ce929d0e0e4736" && tt.want == "" {
				t.Errorf("trace id = %q, want a new 32-digit hex id", got)
			}
			if seen != got {
				t.Errorf("service saw trace id %q, response header says %q", seen, got)
			}
		})
	}
}

func TestTraceIDsAreUnique(t *testing.T) {
	t.Parallel()
	f := setup(t)
	seen := map[string]bool{}
	for range 100 {
		id := f.do(newRequest(http.MethodGet, "/healthz", "")).Header().Get(TraceIDHeader)
		if seen[id] {
			t.Fatalf("trace id %s repeated", id)
		}
		seen[id] = true
	}
}

func TestHealthAndReadiness(t *testing.T) {
	t.Parallel()
	var notReady error
	f := setup(t, func(c *Config) {
		c.Ready = func(context.Context) error { return notReady }
	})
	assertJSON(t, f.do(newRequest(http.MethodGet, "/healthz", "")), 200, `{"status":"ok"}`)
	assertJSON(t, f.do(newRequest(http.MethodGet, "/readyz", "")), 200, `{"status":"ok"}`)

	notReady = errors.New("database: connection refused")
	p := assertProblem(t, f.do(newRequest(http.MethodGet, "/readyz", "")), 503, CodeNotReady)
	if strings.Contains(p.Detail, "connection refused") {
		t.Errorf("readiness error leaked: %q", p.Detail)
	}
	if !strings.Contains(f.logs.String(), "connection refused") {
		t.Error("readiness error not logged")
	}
	assertJSON(t, f.do(newRequest(http.MethodGet, "/healthz", "")), 200, `{"status":"ok"}`)

	noReady := setup(t)
	assertJSON(t, noReady.do(newRequest(http.MethodGet, "/readyz", "")), 200, `{"status":"ok"}`)
}

// TestReadinessDegraded checks that an optional dependency that is down (Redis, the delay
// queue) leaves the server ready, saying so, and that the database decides readiness.
func TestReadinessDegraded(t *testing.T) {
	t.Parallel()
	var notReady error
	var down []string
	f := setup(t, func(c *Config) {
		c.Ready = func(context.Context) error { return notReady }
		c.Degraded = func() []string { return down }
	})
	assertJSON(t, f.do(newRequest(http.MethodGet, "/readyz", "")), 200, `{"status":"ok"}`)
	down = []string{"redis"}
	assertJSON(t, f.do(newRequest(http.MethodGet, "/readyz", "")), 200, `{"status":"degraded","degraded":["redis"]}`)
	notReady = errors.New("database: connection refused")
	assertProblem(t, f.do(newRequest(http.MethodGet, "/readyz", "")), 503, CodeNotReady)
}

func TestMetrics(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) {
		c.Metrics = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = io.WriteString(w, "orderly_up 1\n")
		})
	})
	rec := f.do(newRequest(http.MethodGet, "/metrics", ""))
	if rec.Code != 200 || rec.Body.String() != "orderly_up 1\n" {
		t.Errorf("/metrics = %d %q", rec.Code, rec.Body)
	}
	assertProblem(t, setup(t).do(newRequest(http.MethodGet, "/metrics", "")), 404, CodeRouteNotFound)
}

// TestOverTheWire runs the API on a real listener: headers, body limits and connection
// handling behave as they do in production, not only with a recorder.
func TestOverTheWire(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.orders.CreateOrderFn = func(_ context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
		if p.IdempotencyKey != "k-1" || p.TraceID != "4bf92f3577b34da6a3ce929d0e0e4736" {
			t.Errorf("params = %+v", p)
		}
		return sampleOrder(), true, nil
	}
	ts := httptest.NewServer(f.h)
	defer ts.Close()

	req, err := http.NewRequestWithContext(t.Context(), http.MethodPost, ts.URL+"/v1/orders", strings.NewReader(createOrderBody))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", "k-1")
	req.Header.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 201 || resp.Header.Get(TraceIDHeader) != "4bf92f3577b34da6a3ce929d0e0e4736" ||
		!strings.Contains(string(body), `"created_at":"2026-11-30T07:33:07.123Z"`) {
		t.Errorf("POST /v1/orders = %d %v %s", resp.StatusCode, resp.Header, body)
	}

	big := strings.NewReader(`{"available":` + strings.Repeat(" ", 2<<20) + `1}`)
	req, _ = http.NewRequestWithContext(t.Context(), http.MethodPut, ts.URL+"/v1/inventory/a", big)
	req.Header.Set("Content-Type", "application/json")
	resp, err = ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 413 || resp.Header.Get("Content-Type") != ProblemContentType {
		t.Errorf("oversized PUT = %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
}

// TestRequestDeadline checks that every request reaches the services with a deadline of
// RequestTimeout, and that a service error caused by that deadline, or an EUNAVAILABLE from
// the store, is answered 503 unavailable with Retry-After and logged at warn, never 500.
func TestRequestDeadline(t *testing.T) {
	t.Parallel()
	const timeout = 80 * time.Millisecond
	t.Run("deadline set", func(t *testing.T) {
		t.Parallel()
		f := setup(t, func(c *Config) { c.RequestTimeout = timeout })
		var left time.Duration
		f.orders.OrderFn = func(ctx context.Context, id string) (*orderly.Order, error) {
			d, ok := ctx.Deadline()
			if !ok {
				return nil, errors.New("no deadline")
			}
			left = time.Until(d)
			return sampleOrder(), nil
		}
		rec := f.do(newRequest(http.MethodGet, "/v1/orders/o-1", ""))
		if rec.Code != 200 || left <= 0 || left > timeout {
			t.Fatalf("status %d, deadline %s ahead; want 200 and at most %s", rec.Code, left, timeout)
		}
	})
	for name, fail := range map[string]func(ctx context.Context) error{
		"deadline expired in a service": func(ctx context.Context) error {
			<-ctx.Done()
			return fmt.Errorf("order o-1: %w", ctx.Err())
		},
		"store says unavailable": func(context.Context) error {
			return orderly.Errorf(orderly.EUNAVAILABLE, "the database is busy")
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, func(c *Config) { c.RequestTimeout = timeout })
			f.orders.OrderFn = func(ctx context.Context, id string) (*orderly.Order, error) { return nil, fail(ctx) }
			rec := f.do(newRequest(http.MethodGet, "/v1/orders/o-1", ""))
			assertProblem(t, rec, http.StatusServiceUnavailable, orderly.EUNAVAILABLE)
			if got := rec.Header().Get("Retry-After"); got != "1" {
				t.Errorf("Retry-After = %q, want 1", got)
			}
			if logs := f.logs.String(); !strings.Contains(logs, "level=WARN msg=\"http request answered 503 unavailable (retry later)\"") ||
				strings.Contains(logs, "level=ERROR") {
				t.Errorf("logs: %s", logs)
			}
		})
	}
	t.Run("caller's own deadline is internal", func(t *testing.T) {
		t.Parallel()
		f := setup(t, func(c *Config) { c.RequestTimeout = time.Minute })
		f.orders.OrderFn = func(ctx context.Context, id string) (*orderly.Order, error) {
			return nil, fmt.Errorf("gateway call: %w", context.DeadlineExceeded) // not the request's
		}
		assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/orders/o-1", "")), 500, orderly.EINTERNAL)
	})
}
