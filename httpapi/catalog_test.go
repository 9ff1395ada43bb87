package httpapi

import (
	"context"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/orderlyhq/orderly"
)

func TestSetStock(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name          string
		path          string
		body          string
		wantStatus    int
		wantCode      string // problem code; "" for success
		wantAvailable int64
		wantSKU       string
	}{
		{name: "set", path: "/v1/inventory/sku-1", body: `{"available":100}`, wantStatus: 200, wantAvailable: 100, wantSKU: "sku-1"},
		{name: "zero", path: "/v1/inventory/sku-1", body: `{"available":0}`, wantStatus: 200, wantAvailable: 0, wantSKU: "sku-1"},
		{name: "escaped sku", path: "/v1/inventory/red%20shirt%2FXL", body: `{"available":3}`, wantStatus: 200, wantAvailable: 3, wantSKU: "red shirt/XL"},
		{name: "negative", path: "/v1/inventory/sku-1", body: `{"available":-1}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "missing", path: "/v1/inventory/sku-1", body: `{}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "null", path: "/v1/inventory/sku-1", body: `{"available":null}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "fraction", path: "/v1/inventory/sku-1", body: `{"available":1.5}`, wantStatus: 422, wantCode: orderly.EINVALID},
		{name: "held is not settable", path: "/v1/inventory/sku-1", body: `{"available":1,"held":0}`, wantStatus: 422, wantCode: orderly.EINVALID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var calls int
			f.catalog.SetStockFn = func(_ context.Context, sku string, available int64) (*orderly.Stock, error) {
				calls++
				if sku != tt.wantSKU || available != tt.wantAvailable {
					t.Errorf("SetStock(%q, %d), want (%q, %d)", sku, available, tt.wantSKU, tt.wantAvailable)
				}
				return &orderly.Stock{SKU: sku, Available: available, Held: 2, Sold: 5}, nil
			}
			rec := f.do(newRequest(http.MethodPut, tt.path, tt.body))
			if tt.wantCode != "" {
				assertProblem(t, rec, tt.wantStatus, tt.wantCode)
				if calls != 0 {
					t.Errorf("SetStock called for a rejected request")
				}
				return
			}
			want := fmt.Sprintf(`{"sku":%q,"available":%d,"held":2,"sold":5}`, tt.wantSKU, tt.wantAvailable)
			assertJSON(t, rec, tt.wantStatus, want)
		})
	}
}

func TestGetStock(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.catalog.StockFn = func(_ context.Context, sku string) (*orderly.Stock, error) {
		if sku == "sku-1" {
			return &orderly.Stock{SKU: "sku-1", Available: 7, Held: 2, Sold: 1}, nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "sku %s not found", sku)
	}
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/inventory/sku-1", "")), 200, `{"sku":"sku-1","available":7,"held":2,"sold":1}`)
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/inventory/sku-2", "")), 404, orderly.ENOTFOUND)
}

func TestCreateCoupon(t *testing.T) {
	t.Parallel()
	expires := time.Date(2026, 12, 31, 23, 59, 59, 0, time.UTC)
	tests := []struct {
		name       string
		body       string
		serviceErr error
		wantStatus int
		wantCode   string
		wantParams *orderly.CreateCouponParams
		wantDetail string
	}{
		{name: "without expiry", body: `{"user_id":"u_1","amount_off":500,"currency":"EUR"}`, wantStatus: 201,
			wantParams: &orderly.CreateCouponParams{UserID: "u_1", AmountOff: 500, Currency: "EUR"}},
		{name: "with expiry in another zone", body: `{"user_id":"u_1","amount_off":500,"currency":"EUR","expires_at":"2027-01-01T00:59:59+01:00"}`, wantStatus: 201,
			wantParams: &orderly.CreateCouponParams{UserID: "u_1", AmountOff: 500, Currency: "EUR", ExpiresAt: &expires}},
		{name: "bad expiry", body: `{"user_id":"u_1","amount_off":500,"currency":"EUR","expires_at":"tomorrow"}`, wantStatus: 422, wantCode: orderly.EINVALID,
			wantDetail: "expires_at: must be an RFC 3339 time"},
		{name: "unknown field", body: `{"user_id":"u_1","amount_off":500,"currency":"EUR","percent":10}`, wantStatus: 422, wantCode: orderly.EINVALID,
			wantDetail: `unknown field "percent"`},
		{name: "service says invalid", body: `{"user_id":"u_1","amount_off":0,"currency":"EUR"}`, serviceErr: orderly.Errorf(orderly.EINVALID, "amount_off: must be positive"),
			wantStatus: 422, wantCode: orderly.EINVALID, wantDetail: "amount_off: must be positive",
			wantParams: &orderly.CreateCouponParams{UserID: "u_1", AmountOff: 0, Currency: "EUR"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t)
			var got *orderly.CreateCouponParams
			f.catalog.CreateCouponFn = func(_ context.Context, p *orderly.CreateCouponParams) (*orderly.Coupon, error) {
				got = p
				if tt.serviceErr != nil {
					return nil, tt.serviceErr
				}
				return &orderly.Coupon{ID: "c_1", UserID: p.UserID, AmountOff: p.AmountOff, Currency: p.Currency,
					State: orderly.CouponAvailable, ExpiresAt: p.ExpiresAt, CreatedAt: testNow}, nil
			}
			rec := f.do(newRequest(http.MethodPost, "/v1/coupons", tt.body))
			if !reflect.DeepEqual(got, tt.wantParams) {
				t.Errorf("CreateCoupon params = %+v, want %+v", got, tt.wantParams)
			}
			if tt.wantCode != "" {
				p := assertProblem(t, rec, tt.wantStatus, tt.wantCode)
				if !strings.Contains(p.Detail, tt.wantDetail) {
					t.Errorf("detail = %q, want it to contain %q", p.Detail, tt.wantDetail)
				}
				return
			}
			want := `{"id":"c_1","user_id":"u_1","amount_off":500,"currency":"EUR","state":"available","created_at":"2026-11-30T07:33:07.123Z"}`
			if tt.wantParams.ExpiresAt != nil {
				want = `{"id":"c_1","user_id":"u_1","amount_off":500,"currency":"EUR","state":"available","expires_at":"2026-12-31T23:59:59.000Z","created_at":"2026-11-30T07:33:07.123Z"}`
			}
			assertJSON(t, rec, tt.wantStatus, want)
			if loc := rec.Header().Get("Location"); loc != "/v1/coupons/c_1" {
				t.Errorf("Location = %q", loc)
			}
		})
	}
}

func TestGetCoupon(t *testing.T) {
	t.Parallel()
	f := setup(t)
	f.catalog.CouponFn = func(_ context.Context, id string) (*orderly.Coupon, error) {
		if id == "c_1" {
			return &orderly.Coupon{ID: "c_1", UserID: "u_1", AmountOff: 500, Currency: "EUR", State: orderly.CouponFrozen,
				OrderID: "ord_1", CreatedAt: time.Date(2026, 1, 2, 3, 4, 5, 6, time.UTC)}, nil
		}
		return nil, orderly.Errorf(orderly.ENOTFOUND, "coupon %s not found", id)
	}
	assertJSON(t, f.do(newRequest(http.MethodGet, "/v1/coupons/c_1", "")), 200,
		`{"id":"c_1","user_id":"u_1","amount_off":500,"currency":"EUR","state":"frozen","order_id":"ord_1","created_at":"2026-01-02T03:04:05.000Z"}`)
	assertProblem(t, f.do(newRequest(http.MethodGet, "/v1/coupons/c_2", "")), 404, orderly.ENOTFOUND)
}
