package e2e_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/httpapi"
	"github.com/orderlyhq/orderly/internal/enginetest"
	"github.com/orderlyhq/orderly/payment"
)

// refundCounter counts the gateway refunds per payment id.
type refundCounter struct {
	orderly.Gateway
	mu sync.Mutex
	n  map[string]int
}

func (g *refundCounter) Refund(ctx context.Context, r *orderly.GatewayRefund) (*orderly.GatewayRefundResult, error) {
	g.mu.Lock()
	g.n[r.PaymentID]++
	g.mu.Unlock()
	return g.Gateway.Refund(ctx, r)
}

// engine is the HTTP API on a real engine (SQLite, simulated gateway).
type engine struct {
	*enginetest.Env
	h       http.Handler
	refunds *refundCounter
}

var engineSecret = []byte("engine-test-secret")

func newEngine(t *testing.T) *engine {
	t.Helper()
	g := &engine{}
	g.Env = enginetest.New(t, enginetest.Options{WrapGateway: func(gw orderly.Gateway) orderly.Gateway {
		g.refunds = &refundCounter{Gateway: gw, n: map[string]int{}}
		return g.refunds
	}})
	g.h = httpapi.New(httpapi.Config{Orders: g.Orders, Payments: g.Payments, Catalog: g.Orders, CallbackSecret: engineSecret}).Handler()
	return g
}

func (g *engine) do(t *testing.T, method, path, body string) (int, map[string]any) {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if path == "/v1/payments/callback" {
		req.Header.Set(payment.SignatureHeader, payment.Sign(engineSecret, time.Now(), []byte(body)))
	}
	rec := httptest.NewRecorder()
	g.h.ServeHTTP(rec, req)
	var v map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil {
		t.Fatalf("%s %s: body %q: %v", method, path, rec.Body, err)
	}
	return rec.Code, v
}

func callback(paymentID, orderID, txn string, amount int64, status string) string {
	b, _ := json.Marshal(map[string]any{"payment_id": paymentID, "order_id": orderID, "channel_txn_id": txn, "amount": amount,
		"currency": "USD", "status": status, "occurred_at": "2026-11-30T07:33:05.500Z"})
	return string(b)
}

// TestSecondCaptureOverHTTP: a correctly signed success with another channel_txn_id for an
// attempt that already captured, on a shipped order, answers applied and refund; the
// order's payments list both captures; the second one is refunded once; its repeat is a
// duplicate.
func TestSecondCaptureOverHTTP(t *testing.T) {
	t.Parallel()
	g := newEngine(t)
	g.SetStock(t, "SKU-1", 3)
	o := g.CreateOrder(t, enginetest.CreateOrderOpts{UnitPrice: 3000})
	code, p := g.do(t, http.MethodPost, "/v1/orders/"+o.ID+"/payments", "")
	if code != http.StatusCreated {
		t.Fatalf("start payment: %d %v", code, p)
	}
	pid := p["payment_id"].(string)
	want := func(body string, applied, refund bool) {
		t.Helper()
		code, v := g.do(t, http.MethodPost, "/v1/payments/callback", body)
		if code != http.StatusOK || v["applied"] != applied || v["refund"] != refund {
			t.Fatalf("callback %s = %d %v, want 200 applied=%v refund=%v", body, code, v, applied, refund)
		}
	}
	want(callback(pid, o.ID, "txn-1", 3000, "succeeded"), true, false)
	if code, v := g.do(t, http.MethodPost, "/v1/orders/"+o.ID+"/events", `{"event":"ship"}`); code != http.StatusOK || v["state"] != "shipped" {
		t.Fatalf("ship = %d %v", code, v)
	}
	want(callback(pid, o.ID, "txn-2", 3000, "succeeded"), true, true)
	want(callback(pid, o.ID, "txn-2", 3000, "succeeded"), false, false)

	_, list := g.do(t, http.MethodGet, "/v1/orders/"+o.ID+"/payments", "")
	ps := list["payments"].([]any)
	if len(ps) != 2 {
		t.Fatalf("%d payments, want 2: %v", len(ps), ps)
	}
	dup := ps[1].(map[string]any)
	if dup["duplicate_of"] != pid || dup["channel_txn_id"] != "txn-2" || dup["state"] != "refund_pending" || dup["amount"] != 3000.0 {
		t.Fatalf("second capture %v, want a refund_pending duplicate of %s with txn-2", dup, pid)
	}
	g.Drain(t)
	want(callback(pid, o.ID, "txn-2", 3000, "succeeded"), false, false)
	g.Drain(t)
	dupID := dup["payment_id"].(string)
	if _, v := g.do(t, http.MethodGet, "/v1/payments/"+dupID, ""); v["state"] != "refunded" {
		t.Fatalf("second capture after the relay: %v, want refunded", v)
	}
	g.refunds.mu.Lock()
	defer g.refunds.mu.Unlock()
	if g.refunds.n[dupID] != 1 || len(g.refunds.n) != 1 {
		t.Fatalf("gateway refunds %v, want exactly one, of %s", g.refunds.n, dupID)
	}
	if _, v := g.do(t, http.MethodGet, "/v1/orders/"+o.ID, ""); v["state"] != "shipped" || v["pay_status"] != "paid" {
		t.Fatalf("order %v, want shipped and paid", v)
	}
}

// TestRefusedCallbacksOverHTTP: a callback naming another order's payment is a 422 of its
// own type; refusals, including a body refused by the HTTP layer, are counted and listed by
// GET /v1/payments/{id}/refusals with the signed body.
func TestRefusedCallbacksOverHTTP(t *testing.T) {
	t.Parallel()
	g := newEngine(t)
	g.SetStock(t, "SKU-1", 3)
	o := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	other := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	p, err := g.Payments.StartPayment(context.Background(), &orderly.StartPaymentParams{OrderID: o.ID})
	if err != nil {
		t.Fatal(err)
	}
	mismatch := callback(p.ID, other.ID, "txn-1", 1000, "succeeded")
	code, prob := g.do(t, http.MethodPost, "/v1/payments/callback", mismatch)
	if code != http.StatusUnprocessableEntity || prob["type"] != httpapi.ProblemTypeBase+orderly.EORDERMISMATCH {
		t.Fatalf("callback for another order = %d %v, want 422 %s", code, prob, orderly.EORDERMISMATCH)
	}
	badStatus := callback(p.ID, o.ID, "txn-1", 1000, "maybe")
	if code, prob := g.do(t, http.MethodPost, "/v1/payments/callback", badStatus); code != http.StatusUnprocessableEntity ||
		prob["type"] != httpapi.ProblemTypeBase+orderly.EINVALID {
		t.Fatalf("callback with status maybe = %d %v, want 422 %s", code, prob, orderly.EINVALID)
	}
	code, v := g.do(t, http.MethodGet, "/v1/payments/"+p.ID+"/refusals", "")
	rs, _ := v["refusals"].([]any)
	if code != http.StatusOK || len(rs) != 2 {
		t.Fatalf("refusals = %d %v, want 2", code, v)
	}
	first, second := rs[0].(map[string]any), rs[1].(map[string]any)
	if first["reason"] != orderly.RefusalOrderMismatch || first["order_id"] != other.ID || first["body"] != mismatch ||
		first["amount"] != 1000.0 || first["channel_txn_id"] != "txn-1" || first["detail"] != prob["detail"] {
		t.Errorf("first refusal %v, want order_mismatch with the signed body", first)
	}
	if second["reason"] != orderly.RefusalInvalidStatus || second["body"] != badStatus || second["status"] != "maybe" {
		t.Errorf("second refusal %v, want invalid_status with the signed body", second)
	}
	for reason, want := range map[string]float64{orderly.RefusalOrderMismatch: 1, orderly.RefusalInvalidStatus: 1} {
		if n := testutil.ToFloat64(g.Metrics.CallbackRefusals.WithLabelValues(reason)); n != want {
			t.Errorf("orderly_payment_callback_refusals_total{reason=%q} = %v, want %v", reason, n, want)
		}
	}
	if code, v := g.do(t, http.MethodGet, "/v1/payments/unknown-id/refusals", ""); code != http.StatusOK || len(v["refusals"].([]any)) != 0 {
		t.Errorf("refusals of an id never named = %d %v, want 200 and none", code, v)
	}
}

// TestHistoryAndZeroAmountOverHTTP: the history starts with the creation row and records
// the payment start; an order of amount 0 is refused with 422 invalid-input.
func TestHistoryAndZeroAmountOverHTTP(t *testing.T) {
	t.Parallel()
	g := newEngine(t)
	g.SetStock(t, "SKU-1", 3)
	o := g.CreateOrder(t, enginetest.CreateOrderOpts{})
	if code, v := g.do(t, http.MethodPost, "/v1/orders/"+o.ID+"/payments", ""); code != http.StatusCreated {
		t.Fatalf("start payment = %d %v", code, v)
	}
	_, v := g.do(t, http.MethodGet, "/v1/orders/"+o.ID+"/history", "")
	trs := v["transitions"].([]any)
	if len(trs) != 2 {
		t.Fatalf("history %v, want the creation and the payment start", v)
	}
	created, started := trs[0].(map[string]any), trs[1].(map[string]any)
	if created["event"] != "create" || created["from"] != "" || created["to"] != "pending_payment" ||
		created["pay_status_to"] != "unpaid" || created["pay_status_from"] != nil {
		t.Errorf("first row %v, want the creation", created)
	}
	if started["event"] != "payment_started" || started["from"] != "pending_payment" || started["to"] != "pending_payment" ||
		started["pay_status_from"] != "unpaid" || started["pay_status_to"] != "paying" {
		t.Errorf("second row %v, want the payment start", started)
	}
	code, prob := g.do(t, http.MethodPost, "/v1/orders",
		`{"user_id":"u1","currency":"USD","items":[{"sku":"SKU-1","quantity":1,"unit_price":0}]}`)
	if code != http.StatusUnprocessableEntity || prob["type"] != httpapi.ProblemTypeBase+orderly.EINVALID ||
		prob["detail"] != "amount after coupon must be at least 1 minor unit" {
		t.Fatalf("order of amount 0 = %d %v, want 422 invalid-input", code, prob)
	}
}
