package httpapi

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/mock"
)

// TestCreateRefund: the body, path id, Idempotency-Key, actor and trace id reach the
// service; 201 with Location for a new refund, 200 for a replay; domain errors map to
// their problem types.
func TestCreateRefund(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 33, 7, 123_456_789, time.UTC)
	refund := &orderly.Refund{ID: "ref_1", OrderID: "ord_1", PaymentID: "pay_1", Amount: 700, Currency: "EUR",
		Items: []orderly.RefundItem{{SKU: "sku-1", Quantity: 1}}, Restock: true, Reason: "returned",
		State: orderly.RefundRequested, CreatedAt: at, Metadata: orderly.Metadata{"rma": "R-1"}}
	const body = `{"amount":700,"items":[{"sku":"sku-1","quantity":1}],"restock":true,"reason":"returned","metadata":{"rma":"R-1"}}`
	const want = `{"id":"ref_1","order_id":"ord_1","payment_id":"pay_1","amount":700,"currency":"EUR",
		"items":[{"sku":"sku-1","quantity":1}],"restock":true,"reason":"returned","state":"requested",
		"created_at":"2026-11-30T07:33:07.123Z","metadata":{"rma":"R-1"}}`
	tests := []struct {
		name     string
		key      string
		created  bool
		err      error
		status   int
		code     string
		location string
	}{
		{name: "created", key: "k1", created: true, status: http.StatusCreated, location: "/v1/orders/ord_1/refunds"},
		{name: "replay", key: "k1", status: http.StatusOK},
		{name: "exceeds captured", err: orderly.Errorf(orderly.EREFUNDEXCEEDS, "x"), status: http.StatusConflict, code: orderly.EREFUNDEXCEEDS},
		{name: "exceeds items", err: orderly.Errorf(orderly.EREFUNDITEMS, "x"), status: http.StatusConflict, code: orderly.EREFUNDITEMS},
		{name: "key reused", key: "k1", err: orderly.Errorf(orderly.EIDEMPOTENCY, "x"), status: http.StatusUnprocessableEntity, code: orderly.EIDEMPOTENCY},
		{name: "not refundable", err: orderly.Errorf(orderly.EILLEGAL, "x"), status: http.StatusConflict, code: orderly.EILLEGAL},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got *orderly.CreateRefundParams
			refunds := &mock.RefundService{CreateRefundFn: func(_ context.Context, p *orderly.CreateRefundParams) (*orderly.Refund, bool, error) {
				got = p
				if tt.err != nil {
					return nil, false, tt.err
				}
				return refund, tt.created, nil
			}}
			f := setup(t, func(c *Config) { c.Refunds = refunds })
			req := newRequest(http.MethodPost, "/v1/orders/ord_1/refunds", body)
			if tt.key != "" {
				req.Header.Set(IdempotencyKeyHeader, tt.key)
			}
			rec := f.do(req)
			if tt.code != "" {
				assertProblem(t, rec, tt.status, tt.code)
			} else {
				assertJSON(t, rec, tt.status, want)
			}
			if loc := rec.Header().Get("Location"); loc != tt.location {
				t.Errorf("Location = %q, want %q", loc, tt.location)
			}
			if got == nil || got.OrderID != "ord_1" || got.Amount != 700 || !got.Restock || got.Reason != "returned" ||
				len(got.Items) != 1 || got.Items[0] != (orderly.RefundItem{SKU: "sku-1", Quantity: 1}) ||
				got.IdempotencyKey != tt.key || got.Actor != actorMerchant || got.TraceID == "" {
				t.Errorf("service got %+v", got)
			}
		})
	}
}

// TestCreateRefundBadInput: malformed bodies and keys are refused before the service.
func TestCreateRefundBadInput(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) { c.Refunds = &mock.RefundService{} }) // a call would panic: 500
	for _, body := range []string{``, `{"amount":"7"}`, `{"amount":1,"extra":true}`, `[1]`} {
		assertProblem(t, f.do(newRequest(http.MethodPost, "/v1/orders/ord_1/refunds", body)), http.StatusUnprocessableEntity, orderly.EINVALID)
	}
	req := newRequest(http.MethodPost, "/v1/orders/ord_1/refunds", `{"amount":1}`)
	req.Header.Set(IdempotencyKeyHeader, "bad\x01key")
	assertProblem(t, f.do(req), http.StatusUnprocessableEntity, orderly.EINVALID)
}

func TestListRefunds(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 11, 30, 7, 33, 7, 123_000_000, time.UTC)
	done := at.Add(time.Second)
	refunds := &mock.RefundService{OrderRefundsFn: func(_ context.Context, id string) ([]*orderly.Refund, error) {
		if id != "ord_1" {
			return nil, orderly.Errorf(orderly.ENOTFOUND, "order %s not found", id)
		}
		return []*orderly.Refund{{ID: "ref_1", OrderID: "ord_1", PaymentID: "pay_1", Amount: 300, Currency: "EUR",
			State: orderly.RefundSucceeded, CreatedAt: at, CompletedAt: &done}}, nil
	}}
	f := setup(t, func(c *Config) { c.Refunds = refunds })
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/orders/ord_1/refunds", "")), http.StatusOK,
		`{"refunds":[{"id":"ref_1","order_id":"ord_1","payment_id":"pay_1","amount":300,"currency":"EUR","items":[],
		"restock":false,"state":"succeeded","created_at":"2026-11-30T07:33:07.123Z","completed_at":"2026-11-30T07:33:08.123Z","metadata":{}}]}`)
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/orders/nope/refunds", "")), http.StatusNotFound, orderly.ENOTFOUND)
}
