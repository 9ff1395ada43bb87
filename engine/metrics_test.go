package engine_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/closer"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/telemetry"
)

// TestMetricsMoveOnRealActions drives one engine through a close, a payment and a relay pass and checks that each new metric moved by the right amount: close lateness by
// trigger, transitions by state, payment outcomes by channel, gateway latency, the outbox
// backlog gauges.
func TestMetricsMoveOnRealActions(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{MaxAttempts: 1})
	m := e.Metrics
	ctx := t.Context()
	e.SetStock(t, "SKU-1", 10)

	// A close by the sweep, 3 s late.
	late := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 1, UnitPrice: 100, TimeoutSeconds: 60})
	e.Clock.Set(late.CloseAt.Add(3 * time.Second))
	if _, err := e.Closer.CloseDue(ctx, closer.TriggerSweep); err != nil {
		t.Fatal(err)
	}
	if count, sum := histogram(t, m, "orderly_close_lateness_seconds", closer.TriggerSweep); count != 1 || sum != 3 {
		t.Errorf("close lateness{trigger=sweep}: %d observations summing to %v s, want 1 of 3 s", count, sum)
	}
	if got := testutil.ToFloat64(m.OrderTransitions.WithLabelValues("standard", string(orderly.StatePendingPayment), string(orderly.StateClosed))); got != 1 {
		t.Errorf("transitions pending_payment → closed = %v, want 1", got)
	}

	// A payment: started (gateway create), then a success callback.
	paid := e.CreateOrder(t, enginetest.CreateOrderOpts{Quantity: 1, UnitPrice: 100})
	p, err := e.Payments.StartPayment(ctx, &orderly.StartPaymentParams{OrderID: paid.ID})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Payments.HandleCallback(ctx, &orderly.Callback{PaymentID: p.ID, OrderID: paid.ID, ChannelTxnID: "txn-1",
		Amount: p.Amount, Currency: p.Currency, Status: orderly.CallbackSucceeded, OccurredAt: time.Now().UTC()}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.ChannelPayments.WithLabelValues(p.Channel, p.Variant, "captured")); got != 1 {
		t.Errorf("channel payments %s captured = %v, want 1", p.Channel, got)
	}
	if n := testutil.CollectAndCount(m.GatewayLatency); n < 1 {
		t.Errorf("gateway latency series = %d, want the create call", n)
	}
	if got := testutil.ToFloat64(m.OrderTransitions.WithLabelValues("standard", string(orderly.StatePendingPayment), string(orderly.StatePaid))); got != 1 {
		t.Errorf("transitions pending_payment → paid = %v, want 1", got)
	}

	// The backlog: the events above pending, aging on the database clock, then drained.
	if err := e.Relay.MeasureBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.OutboxPending); got < 1 {
		t.Errorf("outbox pending = %v, want the undelivered events", got)
	}
	e.Clock.Advance(90 * time.Second)
	if err := e.Relay.MeasureBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(m.OutboxOldestPendingAge); got < 90 {
		t.Errorf("oldest pending age = %v s, want ≥ 90", got)
	}
	if _, err := e.Relay.Drain(ctx); err != nil {
		t.Fatal(err)
	}
	if err := e.Relay.MeasureBacklog(ctx); err != nil {
		t.Fatal(err)
	}
	if pending, age := testutil.ToFloat64(m.OutboxPending), testutil.ToFloat64(m.OutboxOldestPendingAge); pending != 0 || age != 0 {
		t.Errorf("after a drain: pending %v, oldest age %v s, want 0 and 0", pending, age)
	}
}

// histogram returns the observation count and sum of a histogram's series whose only
// label value is label.
func histogram(t *testing.T, m *telemetry.Metrics, name, label string) (uint64, float64) {
	t.Helper()
	fams, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range fams {
		if f.GetName() != name {
			continue
		}
		for _, s := range f.GetMetric() {
			if len(s.GetLabel()) == 1 && s.GetLabel()[0].GetValue() == label {
				return s.GetHistogram().GetSampleCount(), s.GetHistogram().GetSampleSum()
			}
		}
	}
	return 0, 0
}

// TestHTTPAndPoolMetrics: every answer of the API is counted by method, route pattern and
// status (a path no route has under "unmatched"), and timed; the database pools' statistics
// are exported (go_sql_*, label db_name).
func TestHTTPAndPoolMetrics(t *testing.T) {
	t.Parallel()
	e := enginetest.New(t, enginetest.Options{})
	h, m := e.Engine.Handler(), e.Metrics
	for _, rq := range []struct{ method, path, body string }{
		{http.MethodGet, "/v1/orders/o-1", ""},
		{http.MethodGet, "/v1/orders/o-2", ""},
		{http.MethodPost, "/v1/orders", `{"user_id":""}`},
		{http.MethodGet, "/no/such/route", ""},
		{http.MethodGet, "/no/such/route/either", ""},
	} {
		req := httptest.NewRequest(rq.method, rq.path, strings.NewReader(rq.body))
		if rq.body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		h.ServeHTTP(httptest.NewRecorder(), req)
	}
	for _, c := range []struct {
		method, route, code string
		want                float64
	}{
		{"GET", "/v1/orders/{id}", "404", 2},
		{"POST", "/v1/orders", "422", 1},
		{"GET", "unmatched", "404", 2},
	} {
		if got := testutil.ToFloat64(m.HTTPRequests.WithLabelValues(c.method, c.route, c.code)); got != c.want {
			t.Errorf("orderly_http_requests_total{%s %s %s} = %v, want %v", c.method, c.route, c.code, got, c.want)
		}
	}
	if n := testutil.CollectAndCount(m.HTTPRequestDuration); n != 3 {
		t.Errorf("orderly_http_request_duration_seconds has %d series, want 3 (one per method and route)", n)
	}
	families, err := m.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	pools := map[string]bool{}
	for _, f := range families {
		if f.GetName() == "go_sql_max_open_connections" {
			for _, mt := range f.GetMetric() {
				for _, l := range mt.GetLabel() {
					pools[l.GetValue()] = true
				}
			}
		}
	}
	if !pools["orderly_writer"] || !pools["orderly_reader"] {
		t.Errorf("go_sql_max_open_connections for pools %v, want orderly_writer and orderly_reader (SQLite)", pools)
	}
}
