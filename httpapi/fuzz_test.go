package httpapi

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/internal/sigtest"
	"github.com/orderlyhq/orderly/payment"
)

// FuzzCallback sends arbitrary bodies and signature headers to the callback endpoint. With
// sign set, the body is signed correctly, so that decoding and validation are explored too.
// The handler must never panic (a recovered panic would show as 500), must call the payment
// service only for a correctly signed, valid callback, and must then answer 200. What
// "correctly signed" means comes from internal/sigtest, a reference implementation
// independent of package payment and pinned by openssl vectors, not from payment.Verify.
// A body with a member name twice must never reach the service.
func FuzzCallback(f *testing.F) {
	good := callbackBody
	f.Add([]byte(good), sigtest.Header(testSecret, testNow, []byte(good)), false)
	f.Add([]byte(good), "", true)
	f.Add([]byte(good), "t=1,v1=00", false)
	f.Add([]byte(good), "t=,v1=", false)
	f.Add([]byte(good), "t=99999999999999999999,v1=zz", false)
	f.Add([]byte(good), sigtest.Header(testSecret, testNow.Add(-6*time.Minute), []byte(good)), false)
	f.Add([]byte(strings.Replace(good, `"amount":2500`, `"amount":1,"amount":2500`, 1)), "", true)
	f.Add([]byte(strings.Replace(good, `"amount":2500`, `"AMOUNT":2500`, 1)), "", true)
	f.Add([]byte(strings.Replace(good, `"amount"`, `"promotion_detail":[{"id":"a","id":"b"}],"amount"`, 1)), "", true)
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
			header = sigtest.Header(testSecret, testNow, body)
		}
		req := httptest.NewRequest(http.MethodPost, "/v1/payments/callback", strings.NewReader(string(body)))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set(payment.SignatureHeader, header)
		rec := fx.do(req)

		if !slices.Contains([]int{200, 401, 413, 422}, rec.Code) {
			t.Fatalf("status %d for body %q header %q: %s", rec.Code, body, header, rec.Body)
		}
		signed := sigtest.Authentic(testSecret, header, body, testNow, payment.DefaultSignatureTolerance)
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
		if hasDuplicateName(body) {
			t.Fatalf("HandleCallback called for a body with a duplicate member name: %q", body)
		}
		cb := calls[0]
		if cb.PaymentID == "" || cb.OrderID == "" || !orderly.ValidCurrency(cb.Currency) || cb.Amount < 0 ||
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
		if rec.Code == 201 && hasDuplicateName(body) {
			t.Fatalf("an order body with a duplicate member name was accepted: %q", body)
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

// hasDuplicateName reports whether some object in the JSON text data has a member name
// twice. It walks the tokens of encoding/json (v1, which does not check names itself), so
// it is an oracle independent of the decoder under test. Invalid JSON reports false.
func hasDuplicateName(data []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(data))
	type frame struct {
		object bool
		names  map[string]bool
		key    bool // the next token of this object is a name
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.key {
			if name, ok := tok.(string); ok {
				if top.names[name] {
					return true
				}
				top.names[name] = true
				top.key = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, names: map[string]bool{}, key: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object expects a name next.
		if len(stack) > 0 && stack[len(stack)-1].object {
			stack[len(stack)-1].key = true
		}
	}
}
