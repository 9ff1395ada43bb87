package httpapi

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

// FuzzCallback sends arbitrary bodies and signature headers to the callback endpoint. With
// sign set, the body is signed correctly, so that decoding and validation are explored too.
// The handler must never panic (a recovered panic would show as 500), must call the payment
// service only for a correctly signed, valid callback, and must then answer 200.
func FuzzCallback(f *testing.F) {
	good := callbackBody
	f.Add([]byte(good), payment.Sign(testSecret, testNow, []byte(good)), false)
	f.Add([]byte(good), "", true)
	f.Add([]byte(good), "t=1,v1=00", false)
	f.Add([]byte(good), "t=,v1=", false)
	f.Add([]byte(good), "t=99999999999999999999,v1=zz", false)
	f.Add([]byte(good), payment.Sign(testSecret, testNow.Add(-6*time.Minute), []byte(good)), false)
	f.Add([]byte(`{"payment_id":1}`), "", true)
	f.Add([]byte(`{"status":"failed","payment_id":"p","order_id":"o","amount":0,"currency":"USD","occurred_at":"2026-01-01T00:00:00Z"}`), "", true)
	f.Add([]byte(`{}{}`), "", true)
	f.Add([]byte(`null`), "", true)
	f.Add([]byte("\xff\xfe"), "", true)
	f.Add([]byte(``), "", true)

	f.Fuzz(func(t *testing.T, body []byte, header string, sign bool) {
		fx := setup(t)
		var calls []*orderly.Callback
		fx.payments.HandleCallbackFn = func(_ context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
			calls = append(calls, cb)
			return &orderly.CallbackResult{Applied: true}, nil
		}
		if sign {
			header = payment.Sign(testSecret, testNow, body)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/payments/callback", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(payment.SignatureHeader, header)
		rec := fx.do(req)

		if !slices.Contains([]int{200, 401, 413, 422}, rec.Code) {
			t.Fatalf("status %d for body %q header %q: %s", rec.Code, body, header, rec.Body)
		}
		signed := payment.Verify(testSecret, header, body, testNow, payment.DefaultSignatureTolerance) == nil
		if !signed && rec.Code != 401 {
			t.Fatalf("unsigned callback answered %d, want 401", rec.Code)
		}
		if len(calls) > 1 || (len(calls) == 1) != (rec.Code == 200) {
			t.Fatalf("HandleCallback called %d times for status %d", len(calls), rec.Code)
		}
		if len(calls) == 0 {
			return
		}
		if !signed {
			t.Fatalf("HandleCallback called without a valid signature: header %q", header)
		}
		cb := calls[0]
		if cb.PaymentID == "" || cb.OrderID == "" || !isCurrencyCode(cb.Currency) || cb.Amount < 0 ||
			!slices.Contains([]string{"succeeded", "failed", "expired"}, cb.Status) ||
			(cb.Status == "succeeded" && cb.ChannelTxnID == "") || cb.OccurredAt.IsZero() {
			t.Fatalf("HandleCallback got an invalid callback %+v from %q", cb, body)
		}
	})
}

// FuzzCreateOrder sends arbitrary bodies, content types and idempotency keys to
// POST /v1/orders. The handler must never panic, must answer with a status of the contract,
// and must pass the decoded body, key and trace id through when it calls the service.
func FuzzCreateOrder(f *testing.F) {
	f.Add([]byte(createOrderBody), "application/json", "key-1")
	f.Add([]byte(createOrderBody), "text/plain", "")
	f.Add([]byte(`{"items":[{"quantity":1e999}]}`), "application/json", "")
	f.Add([]byte(`{"user_id":"u","items":null,"flow":"x","coupon_id":""}`), "application/json; charset=utf-8", "k\x00")
	f.Add([]byte(`[]`), "application/json", "")
	f.Add([]byte(`{"user_id":"\ud800"}`), "application/json", "")
	f.Add([]byte(`{"user_id":"u"} x`), "application/problem+json", "")
	f.Add([]byte(``), "", "")

	f.Fuzz(func(t *testing.T, body []byte, contentType, key string) {
		fx := setup(t)
		var calls []*orderly.CreateOrderParams
		fx.orders.CreateOrderFn = func(_ context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
			calls = append(calls, p)
			o := sampleOrder()
			o.UserID, o.Items, o.Currency = p.UserID, p.Items, p.Currency
			return o, true, nil
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/orders", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", contentType)
		req.Header.Set(IdempotencyKeyHeader, key)
		rec := fx.do(req)

		if !slices.Contains([]int{201, 413, 415, 422}, rec.Code) {
			t.Fatalf("status %d for body %q: %s", rec.Code, body, rec.Body)
		}
		if (len(calls) == 1) != (rec.Code == 201) || len(calls) > 1 {
			t.Fatalf("CreateOrder called %d times for status %d", len(calls), rec.Code)
		}
		if rec.Code != 201 {
			var p Problem
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil || p.Status != rec.Code || p.Detail == "" {
				t.Fatalf("bad problem %q: %v", rec.Body, err)
			}
			return
		}
		p := calls[0]
		if p.IdempotencyKey != key || p.Actor != "buyer" || p.TraceID != rec.Header().Get(TraceIDHeader) {
			t.Fatalf("params %+v, key %q", p, key)
		}
		var got orderResponse
		if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil || got.UserID != p.UserID || got.Currency != p.Currency {
			t.Fatalf("response %s does not echo the order: %v", rec.Body, err)
		}
	})
}
