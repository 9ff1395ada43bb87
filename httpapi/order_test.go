package httpapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
)

// sampleOrder returns an order whose times have sub-millisecond digits.
func sampleOrder() *orderly.Order {
	created := time.Date(2026, 11, 30, 7, 33, 7, 123456789, time.UTC)
	expires := created.Add(30 * time.Minute)
	return &orderly.Order{
		ID:        "ord_1",
		UserID:    "u_1",
		Flow:      orderly.FlowStandard,
		State:     orderly.StatePendingPayment,
		PayStatus: orderly.PayUnpaid,
		Items:     []orderly.Item{{SKU: "sku-1", Quantity: 2, UnitPrice: 1250}},
		Amount:    2500,
		Currency:  "EUR",
		CreatedAt: created,
		ExpiresAt: expires,
		CloseAt:   expires.Add(10 * time.Second),
		Version:   1,
	}
}

// sampleOrderJSON is sampleOrder as the API shows it: times with exactly milliseconds.
const sampleOrderJSON = `{"id":"ord_1","user_id":"u_1","flow":"standard","state":"pending_payment","pay_status":"unpaid",
	"items":[{"sku":"sku-1","quantity":2,"unit_price":1250}],"amount":2500,"currency":"EUR",
	"created_at":"2026-11-30T07:33:07.123Z","expires_at":"2026-11-30T08:03:07.123Z","close_at":"2026-11-30T08:03:17.123Z",
	"refunded_amount":0,"version":1,"metadata":{}}`

const createOrderBody = `{"user_id":"u_1","items":[{"sku":"sku-1","quantity":2,"unit_price":1250}],"currency":"EUR",
	"coupon_id":"c_1","payment_timeout_seconds":900,"flow":"standard"}`

func TestCreateOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		key          string
		created      bool
		wantStatus   int
		wantLocation string
	}{
		{name: "created", key: "key-1", created: true, wantStatus: http.StatusCreated, wantLocation: "/v1/orders/ord_1"},
		{name: "idempotent replay", key: "key-1", created: false, wantStatus: http.StatusOK},
		{name: "no key", key: "", created: true, wantStatus: http.StatusCreated, wantLocation: "/v1/orders/ord_1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var got []*orderly.CreateOrderParams
			f.orders.CreateOrderFn = func(_ context.Context, p *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
				got = append(got, p)
				return sampleOrder(), tt.created, nil
			}
			req := newRequest(http.MethodPost, "/v1/orders", createOrderBody)
			if tt.key != "" {
				req.Header.Set(IdempotencyKeyHeader, tt.key)
			}
			rec := f.do(req)

			assertJSON(t, rec, tt.wantStatus, sampleOrderJSON)
			if loc := rec.Header().Get("Location"); loc != tt.wantLocation {
				t.Errorf("Location = %q, want %q", loc, tt.wantLocation)
			}
			if len(got) != 1 {
				t.Fatalf("CreateOrder called %d times, want 1", len(got))
			}
			want := &orderly.CreateOrderParams{
				UserID:                "u_1",
				Items:                 []orderly.Item{{SKU: "sku-1", Quantity: 2, UnitPrice: 1250}},
				Currency:              "EUR",
				CouponID:              "c_1",
				PaymentTimeoutSeconds: 900,
				Flow:                  "standard",
				IdempotencyKey:        tt.key,
				Actor:                 "buyer",
				TraceID:               rec.Header().Get(TraceIDHeader),
			}
			if want.TraceID == "" {
				t.Error("no trace id header")
			}
			if !reflect.DeepEqual(got[0], want) {
				t.Errorf("CreateOrder params =\n%+v\nwant\n%+v", got[0], want)
			}
		})
	}
}

func TestCreateOrderRejectsBadInput(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name        string
		body        string
		contentType string // "" means application/json
		key         string
		wantStatus  int
		wantCode    string
		wantDetail  string // a substring of the problem's detail
	}{
		{"unknown field", `{"user_id":"u","items":[],"currency":"EUR","colour":"red"}`, "", "", 422, orderly.EINVALID, `unknown field "colour"`},
		{"duplicate field", `{"user_id":"u","user_id":"v","items":[],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, `duplicate field "user_id"`},
		{"duplicate field in an item", `{"user_id":"u","items":[{"sku":"a","quantity":1,"quantity":9,"unit_price":1}],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, `duplicate field "items[0].quantity"`},
		{"names are case-sensitive", `{"USER_ID":"u","items":[],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, `unknown field "USER_ID"`},
		{"unknown field in an item", `{"user_id":"u","items":[{"sku":"a","qty":1}],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, `unknown field "items[0].qty"`},
		{"invalid UTF-8", "{\"user_id\":\"\xff\"}", "", "", 422, orderly.EINVALID, "not valid JSON"},
		{"field of the domain type that is not on the wire", `{"user_id":"u","IdempotencyKey":"k"}`, "", "", 422, orderly.EINVALID, `unknown field "IdempotencyKey"`},
		{"wrong type names the field", `{"user_id":"u","items":[{"sku":"a","quantity":"2","unit_price":1}],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, "items[0].quantity: must be an integer, got string"},
		{"fraction in an integer", `{"user_id":"u","items":[{"sku":"a","quantity":1.5,"unit_price":1}],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, "items[0].quantity: must be an integer, got number 1.5"},
		{"integer out of range", `{"user_id":"u","items":[{"sku":"a","quantity":1,"unit_price":99999999999999999999}],"currency":"EUR"}`, "", "", 422, orderly.EINVALID, "items[0].unit_price: integer 99999999999999999999 is out of range"},
		{"integer overflow", `{"user_id":"u","payment_timeout_seconds":1e40}`, "", "", 422, orderly.EINVALID, "payment_timeout_seconds: must be an integer"},
		{"string for a string array", `{"items":"sku-1"}`, "", "", 422, orderly.EINVALID, "items: must be an array, got string"},
		{"trailing data", `{"user_id":"u"} {"user_id":"v"}`, "", "", 422, orderly.EINVALID, "single JSON object"},
		{"trailing garbage", `{"user_id":"u"}x`, "", "", 422, orderly.EINVALID, "single JSON object"},
		{"malformed JSON", `{"user_id":`, "", "", 422, orderly.EINVALID, "not valid JSON"},
		{"syntax error", `{"user_id" "u"}`, "", "", 422, orderly.EINVALID, "not valid JSON"},
		{"array instead of object", `[1,2]`, "", "", 422, orderly.EINVALID, "must be a JSON object"},
		{"empty body", ``, "", "", 422, orderly.EINVALID, "request body is required"},
		{"blank body", " \n ", "", "", 422, orderly.EINVALID, "request body is required"},
		{"text/plain", createOrderBody, "text/plain", "", 415, CodeUnsupportedMediaType, "text/plain"},
		{"form", createOrderBody, "application/x-www-form-urlencoded", "", 415, CodeUnsupportedMediaType, "application/x-www-form-urlencoded"},
		{"no content type", createOrderBody, "-", "", 415, CodeUnsupportedMediaType, "none"},
		{"oversized body", `{"user_id":"` + strings.Repeat("u", DefaultMaxBodyBytes) + `"}`, "", "", 413, CodePayloadTooLarge, "1048576 bytes"},
		{"idempotency key too long", createOrderBody, "", strings.Repeat("k", 256), 422, orderly.EINVALID, "Idempotency-Key header: must be at most 255 bytes"},
		{"idempotency key with control character", createOrderBody, "", "a\x00b", 422, orderly.EINVALID, "Idempotency-Key header: must be printable ASCII"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.orders.CreateOrderFn = func(context.Context, *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
				t.Error("CreateOrder called for a rejected request")
				return sampleOrder(), true, nil
			}
			req := newRequest(http.MethodPost, "/v1/orders", tt.body)
			switch tt.contentType {
			case "":
				req.Header.Set("Content-Type", "application/json")
			case "-":
				req.Header.Del("Content-Type")
			default:
				req.Header.Set("Content-Type", tt.contentType)
			}
			if tt.key != "" {
				req.Header.Set(IdempotencyKeyHeader, tt.key)
			}
			rec := f.do(req)
			p := assertProblem(t, rec, tt.wantStatus, tt.wantCode)
			if !strings.Contains(p.Detail, tt.wantDetail) {
				t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.wantDetail)
			}
			if p.Instance != "/v1/orders" {
				t.Errorf("instance = %q, want /v1/orders", p.Instance)
			}
		})
	}
}

func TestCreateOrderAcceptsJSONMediaTypes(t *testing.T) {
	t.Parallel()
	for _, ct := range []string{"application/json", "application/json; charset=utf-8", "Application/JSON", "application/merge-patch+json"} {
		t.Run(ct, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.orders.CreateOrderFn = func(context.Context, *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
				return sampleOrder(), true, nil
			}
			req := newRequest(http.MethodPost, "/v1/orders", createOrderBody)
			req.Header.Set("Content-Type", ct)
			assertJSON(t, f.do(req), http.StatusCreated, sampleOrderJSON)
		})
	}
}

// TestServiceErrors checks the error table: each domain code the services return comes out
// with its status, type URI and message; anything else is a logged, generic 500.
func TestServiceErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		err        error
		wantStatus int
		wantCode   string
		wantDetail string
	}{
		{orderly.Errorf(orderly.EINVALID, "items: must not be empty"), 422, orderly.EINVALID, "items: must not be empty"},
		{orderly.Errorf(orderly.ENOTFOUND, "coupon c_9 not found"), 404, orderly.ENOTFOUND, "coupon c_9 not found"},
		{orderly.Errorf(orderly.EOUTOFSTOCK, "sku-1: 1 available, 2 wanted"), 409, orderly.EOUTOFSTOCK, "sku-1: 1 available, 2 wanted"},
		{orderly.Errorf(orderly.ECOUPONUNAVAIL, "coupon c_1 is frozen"), 409, orderly.ECOUPONUNAVAIL, "coupon c_1 is frozen"},
		{orderly.Errorf(orderly.EIDEMPOTENCY, "key reused with another body"), 422, orderly.EIDEMPOTENCY, "key reused with another body"},
		{orderly.Errorf(orderly.EILLEGAL, "no transition"), 409, orderly.EILLEGAL, "no transition"},
		{orderly.Errorf(orderly.ENOTPAYABLE, "deadline passed"), 409, orderly.ENOTPAYABLE, "deadline passed"},
		{orderly.Errorf(orderly.ECONFLICT, "retry"), 409, orderly.ECONFLICT, "retry"},
		{orderly.Errorf(orderly.EUNAUTHORIZED, "no"), 401, orderly.EUNAUTHORIZED, "no"},
		{orderly.Errorf(orderly.EAMOUNTMISMATCH, "amount 1 != 2"), 422, orderly.EAMOUNTMISMATCH, "amount 1 != 2"},
		{fmt.Errorf("create order: %w", orderly.Errorf(orderly.EOUTOFSTOCK, "wrapped")), 409, orderly.EOUTOFSTOCK, "wrapped"},
		{orderly.Errorf(orderly.EINTERNAL, "secret internals"), 500, orderly.EINTERNAL, internalDetail},
		{errors.New("pq: password authentication failed for user orderly"), 500, orderly.EINTERNAL, internalDetail},
		{orderly.Errorf("made-up-code", "secret internals"), 500, orderly.EINTERNAL, internalDetail},
	}
	for _, tt := range tests {
		t.Run(tt.err.Error(), func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			f.orders.CreateOrderFn = func(context.Context, *orderly.CreateOrderParams) (*orderly.Order, bool, error) {
				return nil, false, tt.err
			}
			rec := f.do(newRequest(http.MethodPost, "/v1/orders", createOrderBody))
			p := assertProblem(t, rec, tt.wantStatus, tt.wantCode)
			if p.Detail != tt.wantDetail {
				t.Errorf("detail = %q, want %q", p.Detail, tt.wantDetail)
			}
			logged := strings.Contains(f.logs.String(), "http request failed")
			if wantLogged := tt.wantStatus == 500; logged != wantLogged {
				t.Errorf("logged = %v, want %v; logs: %s", logged, wantLogged, f.logs)
			}
		})
	}
}

func TestGetOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.orders.OrderFn = func(_ context.Context, id string) (*orderly.Order, error) {
		switch id {
		case "ord_1":
			return sampleOrder(), nil
		case "ord_closed":
			o := sampleOrder()
			o.ID, o.State, o.CloseReason = "ord_closed", orderly.StateClosed, orderly.CloseReasonBuyerCancelled
			closed := time.Date(2026, 11, 30, 7, 40, 0, 999999999, time.FixedZone("CET", 3600))
			o.ClosedAt, o.Version = &closed, 2
			return o, nil
		case "a/b":
			o := sampleOrder()
			o.ID = "a/b"
			return o, nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "order %s not found", id)
	}
	t.Run("found", func(t *testing.T) {
		t.Parallel()
		assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/orders/ord_1", "")), http.StatusOK, sampleOrderJSON)
	})
	t.Run("closed, optional times in UTC with milliseconds", func(t *testing.T) {
		t.Parallel()
		rec := f.do(newRequest(http.MethodGet, "/v1/orders/ord_closed", ""))
		assertJSON(t, rec, http.StatusOK, `{"id":"ord_closed","user_id":"u_1","flow":"standard","state":"closed","pay_status":"unpaid",
			"items":[{"sku":"sku-1","quantity":2,"unit_price":1250}],"amount":2500,"currency":"EUR",
			"created_at":"2026-11-30T07:33:07.123Z","expires_at":"2026-11-30T08:03:07.123Z","close_at":"2026-11-30T08:03:17.123Z",
			"closed_at":"2026-11-30T06:40:00.999Z","close_reason":"buyer_cancelled","refunded_amount":0,"version":2,"metadata":{}}`)
	})
	t.Run("escaped id", func(t *testing.T) {
		t.Parallel()
		rec := f.do(newRequest(http.MethodGet, "/v1/orders/a%2Fb", ""))
		if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"id":"a/b"`) {
			t.Errorf("GET /v1/orders/a%%2Fb = %d %s, want 200 with id a/b", rec.Code, rec.Body)
		}
	})
	t.Run("not found", func(t *testing.T) {
		t.Parallel()
		p := assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/orders/nope", "")), http.StatusNotFound, orderly.ENOTFOUND)
		if p.Detail != "order nope not found" || p.Instance != "/v1/orders/nope" {
			t.Errorf("problem = %+v", p)
		}
	})
}

func TestOrderHistory(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.orders.OrderHistoryFn = func(_ context.Context, id string) ([]*orderly.Transition, error) {
		switch id {
		case "ord_1":
			return []*orderly.Transition{{
				ID: 7, OrderID: "ord_1", From: orderly.StatePendingPayment, To: orderly.StateClosed,
				Event: orderly.EventTimeout, Cause: "payment_timeout", Actor: "timer",
				At: time.Date(2026, 11, 30, 8, 3, 17, 124000000, time.UTC), TraceID: "abc",
			}}, nil
		case "ord_new":
			return nil, nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "order %s not found", id)
	}
	tests := []struct {
		path       string
		wantStatus int
		want       string
	}{
		{"/v1/orders/ord_1/history", 200, `{"transitions":[{"id":7,"order_id":"ord_1","from":"pending_payment","to":"closed",
			"event":"timeout","cause":"payment_timeout","actor":"timer","at":"2026-11-30T08:03:17.124Z","trace_id":"abc"}]}`},
		{"/v1/orders/ord_new/history", 200, `{"transitions":[]}`},
	}
	for _, tt := range tests {
		assertJSON(t, f.do(newRequest(http.MethodGet, tt.path, "")), tt.wantStatus, tt.want)
	}
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/orders/x/history", "")), 404, orderly.ENOTFOUND)
}

func TestCancelOrder(t *testing.T) {
	t.Parallel()
	f := setup(t)
	type call struct{ id, actor, traceID string }
	var calls []call
	f.orders.CancelOrderFn = func(_ context.Context, id, actor, traceID string) (*orderly.Order, error) {
		calls = append(calls, call{id, actor, traceID})
		if id != "ord_1" {
			return nil, orderly.Errorf(orderly.EILLEGAL, "order %s is paid", id)
		}
		o := sampleOrder()
		o.State, o.CloseReason = orderly.StateClosed, orderly.CloseReasonBuyerCancelled
		return o, nil
	}
	req := newRequest(http.MethodPost, "/v1/orders/ord_1/cancel", "")
	req.Header.Set("traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
	rec := f.do(req)
	if rec.Code != http.StatusOK || !strings.Contains(rec.Body.String(), `"close_reason":"buyer_cancelled"`) {
		t.Errorf("cancel = %d %s", rec.Code, rec.Body)
	}
	assertProblem(t, f.do(newRequest(http.MethodPost, "/v1/orders/ord_2/cancel", "")), http.StatusConflict, orderly.EILLEGAL)
	want := []call{{"ord_1", "buyer", "4bf92f3577b34da6a3ce929d0e0e4736"}, {"ord_2", "buyer", calls[len(calls)-1].traceID}}
	if !reflect.DeepEqual(calls, want) {
		t.Errorf("CancelOrder calls = %+v, want %+v", calls, want)
	}
}

func TestApplyOrderEvent(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		body       string
		serviceErr error
		wantStatus int
		wantCode   string // problem code; "" for success
		wantEvent  orderly.Event
	}{
		{name: "ship", body: `{"event":"ship"}`, wantStatus: 200, wantEvent: orderly.EventShip},
		{name: "complete", body: `{"event":"complete"}`, wantStatus: 200, wantEvent: orderly.EventComplete},
		{name: "refund", body: `{"event":"refund"}`, wantStatus: 200, wantEvent: orderly.EventRefund},
		{name: "illegal", body: `{"event":"ship"}`, serviceErr: orderly.Errorf(orderly.EILLEGAL, "no"), wantStatus: 409, wantCode: orderly.EILLEGAL, wantEvent: orderly.EventShip},
		{name: "internal event", body: `{"event":"pay"}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "missing event", body: `{}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "event not a string", body: `{"event":1}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "extra field", body: `{"event":"ship","carrier":"dhl"}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "no body", body: ``, wantStatus: 422, wantCode: orderly.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var gotEvent orderly.Event
			var gotActor string
			f.orders.ApplyEventFn = func(_ context.Context, id string, e orderly.Event, actor, _ string) (*orderly.Order, error) {
				gotEvent, gotActor = e, actor
				if tt.serviceErr != nil {
					return nil, tt.serviceErr
				}
				return sampleOrder(), nil
			}
			rec := f.do(newRequest(http.MethodPost, "/v1/orders/ord_1/events", tt.body))
			if tt.wantCode != "" {
				assertProblem(t, rec, tt.wantStatus, tt.wantCode)
			} else {
				assertJSON(t, rec, tt.wantStatus, sampleOrderJSON)
			}
			if gotEvent != tt.wantEvent {
				t.Errorf("ApplyEvent event = %q, want %q", gotEvent, tt.wantEvent)
			}
			if tt.wantEvent != "" && gotActor != "merchant" {
				t.Errorf("ApplyEvent actor = %q, want merchant", gotActor)
			}
		})
	}
}

// TestDecodeTimeField: a time field that is not an RFC 3339 string is named as such, not
// as "an object" (the Go type behind it).
func TestDecodeTimeField(t *testing.T) {
	t.Parallel()
	var v redriveWhereRequest
	for _, body := range []string{`{"created_from":"bad"}`, `{"created_from":12}`} {
		err := decodeJSON([]byte(body), &v, rejectUnknown)
		if orderly.ErrorCode(err) != orderly.EINVALID || !strings.Contains(err.Error(), "created_from: must be an RFC 3339 time") {
			t.Errorf("%s: %v, want created_from named an RFC 3339 time", body, err)
		}
	}
}
