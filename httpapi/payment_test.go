package httpapi

import (
	"context"
	"net/http"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/payment"
)

func samplePayment() *orderly.Payment {
	succeeded := time.Date(2026, 11, 30, 7, 35, 0, 5000000, time.UTC)
	return &orderly.Payment{
		ID: "pay_1", OrderID: "ord_1", Attempt: 1, Channel: "sim", ChannelTxnID: "txn_1",
		Amount: 2500, Currency: "EUR", State: orderly.PaymentSucceeded,
		CreatedAt:   time.Date(2026, 11, 30, 7, 34, 0, 0, time.UTC),
		SucceededAt: &succeeded,
	}
}

const samplePaymentJSON = `{"payment_id":"pay_1","order_id":"ord_1","attempt":1,"channel":"sim","variant":"","channel_txn_id":"txn_1",
	"amount":2500,"currency":"EUR","state":"succeeded","created_at":"2026-11-30T07:34:00.000Z","succeeded_at":"2026-11-30T07:35:00.005Z","metadata":{}}`

func TestStartPayment(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		wantChannel string
	}{
		{"no body", "", ""},
		{"empty object", "{}", ""},
		{"channel", `{"channel":"card"}`, "card"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var got *orderly.StartPaymentParams
			f.payments.StartPaymentFn = func(_ context.Context, p *orderly.StartPaymentParams) (*orderly.Payment, error) {
				got = p
				return samplePayment(), nil
			}
			rec := f.do(newRequest(http.MethodPost, "/v1/orders/ord_1/payments", tt.body))
			assertJSON(t, rec, http.StatusCreated, samplePaymentJSON)
			if loc := rec.Header().Get("Location"); loc != "/v1/payments/pay_1" {
				t.Errorf("Location = %q", loc)
			}
			want := &orderly.StartPaymentParams{OrderID: "ord_1", Channel: tt.wantChannel, TraceID: rec.Header().Get(TraceIDHeader)}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("StartPayment params = %+v, want %+v", got, want)
			}
		})
	}
}

func TestStartPaymentErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		contentType string
		serviceErr  error
		wantStatus  int
		wantCode    string
	}{
		{"not payable", "", "", orderly.Errorf(orderly.ENOTPAYABLE, "closed"), 409, orderly.ENOTPAYABLE},
		{"not found", "", "", orderly.Errorf(orderly.ENOTFOUND, "no order"), 404, orderly.ENOTFOUND},
		{"unknown field", `{"channel":"card","amount":1}`, "application/json", nil, 422, orderly.EINVALID},
		{"body not JSON", `channel=card`, "application/x-www-form-urlencoded", nil, 415, CodeUnsupportedMediaType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.payments.StartPaymentFn = func(context.Context, *orderly.StartPaymentParams) (*orderly.Payment, error) {
				if tt.serviceErr == nil {
					t.Error("StartPayment called for a rejected request")
					return samplePayment(), nil
				}
				return nil, tt.serviceErr
			}
			req := newRequest(http.MethodPost, "/v1/orders/ord_1/payments", tt.body)
			if tt.contentType != "" {
				req.Header.Set("Content-Type", tt.contentType)
			}
			assertProblem(t, f.do(req), tt.wantStatus, tt.wantCode)
		})
	}
}

func TestPaymentReads(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.payments.PaymentFn = func(_ context.Context, id string) (*orderly.Payment, error) {
		if id == "pay_1" {
			return samplePayment(), nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "payment %s not found", id)
	}
	f.payments.OrderPaymentsFn = func(_ context.Context, id string) ([]*orderly.Payment, error) {
		switch id {
		case "ord_1":
			return []*orderly.Payment{samplePayment()}, nil
		case "ord_new":
			return nil, nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "order %s not found", id)
	}
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/payments/pay_1", "")), 200, samplePaymentJSON)
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/orders/ord_1/payments", "")), 200, `{"payments":[`+samplePaymentJSON+`]}`)
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/orders/ord_new/payments", "")), 200, `{"payments":[]}`)
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/payments/pay_x", "")), 404, orderly.ENOTFOUND)
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/orders/ord_x/payments", "")), 404, orderly.ENOTFOUND)
}

const callbackBody = `{"payment_id":"pay_1","order_id":"ord_1","channel_txn_id":"txn_1","amount":2500,"currency":"EUR",` +
	`"status":"succeeded","occurred_at":"2026-11-30T07:33:05.5+01:00"}`

// callbackRequestFor returns a signed callback request: body signed with secret at t.
func callbackRequestFor(body string, secret []byte, t time.Time) *http.Request {
	req := newRequest(http.MethodPost, "/v1/payments/callback", body)
	req.Header.Set(payment.SignatureHeader, payment.Sign(secret, t, []byte(body)))
	return req
}

// countingCallbacks makes f's HandleCallback record its calls and answer res.
func countingCallbacks(f *fixture, res *orderly.CallbackResult, err error) (calls *atomic.Int64, got *atomic.Pointer[orderly.Callback]) {
	calls, got = &atomic.Int64{}, &atomic.Pointer[orderly.Callback]{}
	f.payments.HandleCallbackFn = func(_ context.Context, cb *orderly.Callback) (*orderly.CallbackResult, error) {
		calls.Add(1)
		got.Store(cb)
		return res, err
	}
	return calls, got
}

func TestCallbackAccepted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		result orderly.CallbackResult
		want   string
	}{
		{"applied", orderly.CallbackResult{Applied: true, Payment: samplePayment()}, `{"received":true,"applied":true,"refund":false}`},
		{"duplicate", orderly.CallbackResult{Applied: false, Payment: samplePayment()}, `{"received":true,"applied":false,"refund":false}`},
		{"late payment refunded", orderly.CallbackResult{Applied: true, Refund: true}, `{"received":true,"applied":true,"refund":true}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			calls, got := countingCallbacks(f, &tt.result, nil)
			// Signed 4 minutes ago: inside the 5-minute tolerance.
			rec := f.do(callbackRequestFor(callbackBody, testSecret, testNow.Add(-4*time.Minute)))
			assertJSON(t, rec, http.StatusOK, tt.want)
			if n := calls.Load(); n != 1 {
				t.Fatalf("HandleCallback called %d times, want 1", n)
			}
			want := &orderly.Callback{
				PaymentID: "pay_1", OrderID: "ord_1", ChannelTxnID: "txn_1", Amount: 2500, Currency: "EUR",
				Status: orderly.CallbackSucceeded, OccurredAt: time.Date(2026, 11, 30, 6, 33, 5, 500000000, time.UTC),
			}
			cb := got.Load()
			if string(cb.Body) != callbackBody {
				t.Errorf("HandleCallback got body %q, want the signed body %q", cb.Body, callbackBody)
			}
			cb.Body = nil
			if !reflect.DeepEqual(cb, want) {
				t.Errorf("HandleCallback got %+v, want %+v", cb, want)
			}
		})
	}
}

// TestCallbackFieldNames checks issue 6 §4: fields a provider adds are ignored (they used
// to be refused with 422 "unknown field"), and names match exactly, so "AMOUNT" is not
// "amount" (it used to be taken as the amount).
func TestCallbackFieldNames(t *testing.T) {
	t.Parallel()
	want := orderly.Callback{
		PaymentID: "pay_1", OrderID: "ord_1", ChannelTxnID: "txn_1", Amount: 2500, Currency: "EUR",
		Status: orderly.CallbackSucceeded, OccurredAt: time.Date(2026, 11, 30, 6, 33, 5, 500000000, time.UTC),
	}
	for _, tc := range []struct {
		name   string
		body   string
		amount int64
	}{
		{"provider's extra field", strings.Replace(callbackBody, `"amount"`,
			`"promotion_detail":[{"promotion_id":"p1","amount":100,"scope":"GLOBAL"}],"fee":null,"amount"`, 1), 2500},
		{"upper-case name next to the real one", strings.Replace(callbackBody, `"amount":2500`, `"amount":2500,"AMOUNT":3000`, 1), 2500},
		{"upper-case name alone", strings.Replace(callbackBody, `"amount":2500`, `"AMOUNT":3000`, 1), 0},
		{"names differing in case are not duplicates", strings.Replace(callbackBody, `"amount"`, `"extra":{"a":1,"A":2},"amount"`, 1), 2500},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			calls, got := countingCallbacks(f, &orderly.CallbackResult{Applied: true}, nil)
			assertJSON(t, f.do(callbackRequestFor(tc.body, testSecret, testNow)), 200, `{"received":true,"applied":true,"refund":false}`)
			want := want
			want.Amount, want.Body = tc.amount, []byte(tc.body)
			if cb := got.Load(); calls.Load() != 1 || !reflect.DeepEqual(cb, &want) {
				t.Errorf("HandleCallback called %d times with %+v, want once with %+v", calls.Load(), cb, &want)
			}
		})
	}
}

func TestCallbackFailedAndExpiredNeedNoTxnID(t *testing.T) {
	t.Parallel()
	for _, status := range []string{orderly.CallbackFailed, orderly.CallbackExpired} {
		t.Run(status, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			calls, got := countingCallbacks(f, &orderly.CallbackResult{Applied: true}, nil)
			body := `{"payment_id":"pay_1","order_id":"ord_1","amount":0,"currency":"EUR","status":"` + status + `","occurred_at":"2026-11-30T07:33:05Z"}`
			assertJSON(t, f.do(callbackRequestFor(body, testSecret, testNow)), 200, `{"received":true,"applied":true,"refund":false}`)
			if calls.Load() != 1 || got.Load().Status != status {
				t.Errorf("HandleCallback calls = %d, got %+v", calls.Load(), got.Load())
			}
		})
	}
}

// TestCallbackRejected checks that a callback with a bad signature, body or shape is refused
// before the payment service sees it.
func TestCallbackRejected(t *testing.T) {
	t.Parallel()
	signed := func(body string) func() *http.Request {
		return func() *http.Request { return callbackRequestFor(body, testSecret, testNow) }
	}
	tests := []struct {
		name       string
		req        func() *http.Request
		wantStatus int
		wantCode   string
		wantDetail string
	}{
		{"missing signature", func() *http.Request {
			return newRequest(http.MethodPost, "/v1/payments/callback", callbackBody)
		}, 401, orderly.EUNAUTHORIZED, "missing Orderly-Signature"},
		{"wrong secret", func() *http.Request {
			return callbackRequestFor(callbackBody, []byte("other-secret"), testNow)
		}, 401, orderly.EUNAUTHORIZED, "does not match"},
		{"signature of another body", func() *http.Request {
			req := newRequest(http.MethodPost, "/v1/payments/callback", callbackBody)
			req.Header.Set(payment.SignatureHeader, payment.Sign(testSecret, testNow, []byte(strings.Replace(callbackBody, "2500", "1", 1))))
			return req
		}, 401, orderly.EUNAUTHORIZED, "does not match"},
		{"body changed after signing", func() *http.Request {
			req := callbackRequestFor(callbackBody, testSecret, testNow)
			tampered := strings.Replace(callbackBody, "2500", "25", 1)
			req2 := newRequest(http.MethodPost, "/v1/payments/callback", tampered)
			req2.Header.Set(payment.SignatureHeader, req.Header.Get(payment.SignatureHeader))
			return req2
		}, 401, orderly.EUNAUTHORIZED, "does not match"},
		{"garbage signature", func() *http.Request {
			req := newRequest(http.MethodPost, "/v1/payments/callback", callbackBody)
			req.Header.Set(payment.SignatureHeader, "nonsense")
			return req
		}, 401, orderly.EUNAUTHORIZED, "no valid timestamp"},
		{"expired: signed 6 minutes ago", func() *http.Request {
			return callbackRequestFor(callbackBody, testSecret, testNow.Add(-6*time.Minute))
		}, 401, orderly.EUNAUTHORIZED, "outside the 5m0s tolerance"},
		{"signed 6 minutes in the future", func() *http.Request {
			return callbackRequestFor(callbackBody, testSecret, testNow.Add(6*time.Minute))
		}, 401, orderly.EUNAUTHORIZED, "outside the 5m0s tolerance"},
		{"oversized body, even if signed", func() *http.Request {
			body := `{"payment_id":"` + strings.Repeat("p", DefaultMaxBodyBytes) + `"}`
			return callbackRequestFor(body, testSecret, testNow)
		}, 413, CodePayloadTooLarge, "larger than"},
		{"oversized body without Content-Length", func() *http.Request {
			body := strings.Repeat(" ", DefaultMaxBodyBytes) + callbackBody
			req := callbackRequestFor(body, testSecret, testNow)
			req.ContentLength = -1
			return req
		}, 413, CodePayloadTooLarge, "larger than"},
		{"unsigned and malformed: the signature is checked first", func() *http.Request {
			req := newRequest(http.MethodPost, "/v1/payments/callback", `{"payment_id":`)
			req.Header.Set("Content-Type", "text/plain")
			return req
		}, 401, orderly.EUNAUTHORIZED, "missing Orderly-Signature"},
		{"malformed JSON", signed(`{"payment_id":`), 422, orderly.EINVALID, "not valid JSON"},
		{"empty body", signed(``), 422, orderly.EINVALID, "request body is required"},
		// Issue 6 §4: last-wins parsers applied `"amount":1,"amount":3000` as 3000.
		{"duplicate amount", signed(strings.Replace(callbackBody, `"amount":2500`, `"amount":1,"amount":2500`, 1)), 422, orderly.EINVALID, `duplicate field "amount"`},
		{"duplicate name inside an ignored member", signed(strings.Replace(callbackBody, `"amount"`, `"promotion_detail":[{"id":"a","id":"b"}],"amount"`, 1)),
			422, orderly.EINVALID, `duplicate field "promotion_detail[0].id"`},
		{"duplicate status", signed(strings.Replace(callbackBody, `"status":"succeeded"`, `"status":"failed","status":"succeeded"`, 1)), 422, orderly.EINVALID, `duplicate field "status"`},
		{"trailing data", signed(callbackBody + `{}`), 422, orderly.EINVALID, "single JSON object"},
		{"amount as string", signed(strings.Replace(callbackBody, `2500`, `"2500"`, 1)), 422, orderly.EINVALID, "amount: must be an integer, got string"},
		{"occurred_at not RFC 3339", signed(strings.Replace(callbackBody, `2026-11-30T07:33:05.5+01:00`, `30/11/2026`, 1)), 422, orderly.EINVALID, "occurred_at: must be an RFC 3339 time"},
		{"occurred_at a number", signed(strings.Replace(callbackBody, `"2026-11-30T07:33:05.5+01:00"`, `1764488000`, 1)), 422, orderly.EINVALID, "occurred_at: must be a string"},
		{"occurred_at missing", signed(`{"payment_id":"p","order_id":"o","channel_txn_id":"t","amount":1,"currency":"EUR","status":"succeeded"}`), 422, orderly.EINVALID, "occurred_at: is required"},
		{"payment_id missing", signed(strings.Replace(callbackBody, `"pay_1"`, `""`, 1)), 422, orderly.EINVALID, "payment_id: is required"},
		{"order_id missing", signed(strings.Replace(callbackBody, `"ord_1"`, `""`, 1)), 422, orderly.EINVALID, "order_id: is required"},
		{"unknown status", signed(strings.Replace(callbackBody, `"succeeded"`, `"paid"`, 1)), 422, orderly.EINVALID, "status: must be one of succeeded, failed, expired"},
		{"success without channel_txn_id", signed(strings.Replace(callbackBody, `"txn_1"`, `""`, 1)), 422, orderly.EINVALID, "channel_txn_id: is required when status is succeeded"},
		{"negative amount", signed(strings.Replace(callbackBody, `2500`, `-1`, 1)), 422, orderly.EINVALID, "amount: must not be negative"},
		{"lower-case currency", signed(strings.Replace(callbackBody, `"EUR"`, `"eur"`, 1)), 422, orderly.EINVALID, "currency: must be the ISO 4217 code of a currency"},
		{"not a currency of money", signed(strings.Replace(callbackBody, `"EUR"`, `"XXX"`, 1)), 422, orderly.EINVALID, "currency: must be the ISO 4217 code of a currency"},
		{"every problem at once", signed(`{"status":"x","amount":-5,"currency":"EURO","occurred_at":"x"}`), 422, orderly.EINVALID,
			"payment_id: is required; order_id: is required; status: must be one of succeeded, failed, expired; amount: must not be negative; currency: must be the ISO 4217 code of a currency of money, such as USD; occurred_at: must be an RFC 3339 time"},
		{"signed, but not JSON", func() *http.Request {
			req := callbackRequestFor(callbackBody, testSecret, testNow)
			req.Header.Set("Content-Type", "text/plain")
			return req
		}, 415, CodeUnsupportedMediaType, "text/plain"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			calls, _ := countingCallbacks(f, &orderly.CallbackResult{Applied: true}, nil)
			p := assertProblem(t, f.do(tt.req()), tt.wantStatus, tt.wantCode)
			if !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.wantDetail)
			}
			if n := calls.Load(); n != 0 {
				t.Errorf("HandleCallback called %d times, want 0", n)
			}
		})
	}
}

func TestCallbackWithoutSecretIsRefused(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) { c.CallbackSecret = nil })
	calls, _ := countingCallbacks(f, &orderly.CallbackResult{Applied: true}, nil)
	// Signed with the empty key, which anyone can do.
	p := assertProblem(t, f.do(callbackRequestFor(callbackBody, nil, testNow)), 401, orderly.EUNAUTHORIZED)
	if !strings.Contains(p.Detail, "no callback secret") {
		t.Errorf("detail = %q", p.Detail)
	}
	if calls.Load() != 0 {
		t.Error("HandleCallback called without a configured secret")
	}
}

func TestCallbackTolerance(t *testing.T) {
	t.Parallel()
	f := setup(t, func(c *Config) { c.SignatureTolerance = time.Minute })
	calls, _ := countingCallbacks(f, &orderly.CallbackResult{Applied: true}, nil)
	assertProblem(t, f.do(callbackRequestFor(callbackBody, testSecret, testNow.Add(-2*time.Minute))), 401, orderly.EUNAUTHORIZED)
	assertJSON(t, f.do(callbackRequestFor(callbackBody, testSecret, testNow.Add(-59*time.Second))), 200, `{"received":true,"applied":true,"refund":false}`)
	if calls.Load() != 1 {
		t.Errorf("HandleCallback called %d times, want 1", calls.Load())
	}
}

func TestCallbackServiceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		wantStatus int
		wantCode   string
	}{
		{orderly.Errorf(orderly.EAMOUNTMISMATCH, "amount 2500 != 2400"), 422, orderly.EAMOUNTMISMATCH},
		{orderly.Errorf(orderly.ENOTFOUND, "payment pay_1 is not for order ord_1"), 404, orderly.ENOTFOUND},
		{orderly.Errorf(orderly.ECONFLICT, "retry"), 409, orderly.ECONFLICT},
		{context.DeadlineExceeded, 500, orderly.EINTERNAL},
	}
	for _, tt := range tests {
		t.Run(tt.wantCode, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			calls, _ := countingCallbacks(f, nil, tt.err)
			assertProblem(t, f.do(callbackRequestFor(callbackBody, testSecret, testNow)), tt.wantStatus, tt.wantCode)
			if calls.Load() != 1 {
				t.Errorf("HandleCallback called %d times, want 1", calls.Load())
			}
		})
	}
	t.Run("no result and no error", func(t *testing.T) {
		t.Parallel()
		f := setup(t)
		countingCallbacks(f, nil, nil)
		assertProblem(t, f.do(callbackRequestFor(callbackBody, testSecret, testNow)), 500, orderly.EINTERNAL)
	})
}
