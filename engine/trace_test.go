package engine_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/engine"
	"github.com/orderlyhq/orderly/features"
	"github.com/orderlyhq/orderly/outbox"
	"github.com/orderlyhq/orderly/payment"
	"github.com/orderlyhq/orderly/telemetry"
)

// TestTraceFromCreateToWebhook follows one order: created over HTTP with a W3C traceparent,
// closed by the timer at its deadline, its order.closed event published (a fake publisher
// in place of NATS: the context it gets is what natspub injects into message headers) and
// delivered to a merchant webhook. Every hop shares the incoming trace id: the HTTP span,
// the audit row, the transition span of the close, the dispatch spans, the publisher's
// context and the webhook request's traceparent header. The spans go to the provider of
// Config.TracerProvider, none to the program's global one, which stays the program's: an
// embedded engine must not take over its host's tracing (it installed its own globally).
// Not parallel: it installs a global tracer provider to see that it is left alone.
func TestTraceFromCreateToWebhook(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	hostExp := tracetest.NewInMemoryExporter()
	host := sdktrace.NewTracerProvider(sdktrace.WithSyncer(hostExp))
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(host)
	t.Cleanup(func() {
		otel.SetTracerProvider(prev)
		_ = tp.Shutdown(context.Background())
		_ = host.Shutdown(context.Background())
	})
	// The OTEL_* variables asking for an exporter of the engine's own change nothing: the
	// configured provider wins, and the global one is never replaced.
	t.Setenv("OTEL_TRACES_EXPORTER", "otlp")
	t.Setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:1")

	const traceID = "4bf92f3577b34da6a3ce929d0e0e4736"
	type hop struct{ topic, traceID string }
	published := make(chan hop, 16)
	type delivery struct {
		header http.Header
		body   []byte
	}
	delivered := make(chan delivery, 16)
	hook := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		delivered <- delivery{r.Header.Clone(), b}
	}))
	defer hook.Close()

	cfg := config(t)
	cfg.Addr, cfg.AdminToken = "127.0.0.1:0", "admin-token"
	cfg.OutboxPollInterval = 20 * time.Millisecond
	cfg.Events = &outbox.Handler{Call: func(ctx context.Context, m *orderly.Message) error {
		published <- hop{m.Topic, telemetry.TraceID(ctx)}
		return nil
	}}
	cfg.TracerProvider = tp
	e, err := engine.Open(t.Context(), cfg, features.All()...)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = e.Close(context.Background()) }()
	if err := e.Start(t.Context()); err != nil {
		t.Fatal(err)
	}
	base := "http://" + e.Addr()
	do := func(method, path, body string, header map[string]string) (int, []byte) {
		t.Helper()
		req, _ := http.NewRequestWithContext(t.Context(), method, base+path, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	admin := map[string]string{"Authorization": "Bearer admin-token"}
	status, body := do(http.MethodPost, "/v1/admin/webhooks", `{"url":"`+hook.URL+`","topics":["order.closed"]}`, admin)
	var sub struct{ ID, Secret string }
	if status != http.StatusCreated || json.Unmarshal(body, &sub) != nil || !strings.HasPrefix(sub.Secret, "whsec_") {
		t.Fatalf("subscribe: %d %s", status, body)
	}
	if status, body := do(http.MethodPut, "/v1/inventory/sku-1", `{"available":5}`, admin); status != http.StatusOK {
		t.Fatalf("stock: %d %s", status, body)
	}
	status, body = do(http.MethodPost, "/v1/orders",
		`{"user_id":"u1","items":[{"sku":"sku-1","quantity":1,"unit_price":100}],"currency":"USD","payment_timeout_seconds":1}`,
		map[string]string{"traceparent": "00-" + traceID + "-00f067aa0ba902b7-01", "Authorization": "Bearer admin-token"})
	var o struct{ ID string }
	if status != http.StatusCreated || json.Unmarshal(body, &o) != nil {
		t.Fatalf("create: %d %s", status, body)
	}

	// The close and the publish of order.closed, then its webhook delivery.
	deadline := time.After(20 * time.Second)
	for got := false; !got; {
		select {
		case h := <-published:
			if h.topic == orderly.TopicOrderClosed {
				got = true
				if h.traceID != traceID {
					t.Errorf("order.closed published in trace %q, want %q", h.traceID, traceID)
				}
			}
		case <-deadline:
			t.Fatal("order.closed was not published within 20 s")
		}
	}
	var d delivery
	select {
	case d = <-delivered:
	case <-deadline:
		t.Fatal("the webhook was not called within 20 s")
	}
	if sc := telemetry.SpanContextOf(d.header.Get("traceparent")); sc.TraceID().String() != traceID {
		t.Errorf("webhook traceparent = %q, want trace %s", d.header.Get("traceparent"), traceID)
	}
	if err := payment.Verify([]byte(sub.Secret), d.header.Get(payment.SignatureHeader), d.body, time.Now(), time.Minute); err != nil {
		t.Errorf("webhook signature does not verify: %v", err)
	}
	var env struct {
		Topic    string
		Key      string
		Sequence int64
		Data     orderly.OrderEvent
	}
	if err := json.Unmarshal(d.body, &env); err != nil || env.Topic != orderly.TopicOrderClosed || env.Key != o.ID ||
		env.Sequence != 1 || env.Data.OrderID != o.ID || env.Data.State != orderly.StateClosed {
		t.Errorf("webhook body = %s (%v), want order.closed of %s with sequence 1", d.body, err, o.ID)
	}

	// The audit row of the create carries the trace id.
	status, body = do(http.MethodGet, "/v1/orders/"+o.ID+"/history", "", admin)
	if status != http.StatusOK || !bytes.Contains(body, []byte(`"trace_id":"`+traceID+`"`)) {
		t.Errorf("history: %d %s, want the create's trace id %s", status, body, traceID)
	}

	// The spans of the trace: the HTTP create, the close transition, both dispatches.
	want := map[string]bool{"POST /v1/orders": false, "order.transition": false,
		"outbox dispatch order.closed": false, "outbox dispatch webhook.deliver": false}
	var mu sync.Mutex
	waitFor(t, 5*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range exp.GetSpans() {
			if s.SpanContext.TraceID().String() != traceID {
				continue
			}
			if _, ok := want[s.Name]; ok {
				if s.Name != "order.transition" || attr(s, "orderly.to") == string(orderly.StateClosed) && attr(s, "orderly.order_id") == o.ID {
					want[s.Name] = true
				}
			}
		}
		for _, ok := range want {
			if !ok {
				return false
			}
		}
		return true
	})
	for name, ok := range want {
		if !ok {
			t.Errorf("no span %q in trace %s", name, traceID)
		}
	}
	if otel.GetTracerProvider() != host {
		t.Errorf("the engine replaced the global tracer provider")
	}
	if spans := hostExp.GetSpans(); len(spans) > 0 {
		var names []string
		for _, s := range spans {
			names = append(names, s.Name)
		}
		t.Errorf("%d spans went to the global tracer provider, want none: %v", len(spans), names)
	}
}

// attr returns a span's string attribute, "" when absent.
func attr(s tracetest.SpanStub, key string) string {
	for _, kv := range s.Attributes {
		if string(kv.Key) == key {
			return kv.Value.AsString()
		}
	}
	return ""
}

// waitFor polls cond every 20 ms until it holds or timeout passes.
func waitFor(t *testing.T, timeout time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(timeout)
	for !cond() && time.Now().Before(end) {
		time.Sleep(20 * time.Millisecond)
	}
}
