package ride_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// TestRoleAccountsOutOfBuyersReach: the platform's fees and a driver's payout live in role
// accounts (role:USD:ride_platform, role:USD:driver:<id>), read by the merchant at
// /v1/wallet-accounts/{id}; no buyer id reaches them: /v1/wallets/ride_platform, the
// driver's id and a buyer named "role:USD:ride_platform" answer 404, and a wallet checkout
// as any of them is refused (409 insufficient-funds: its own wallet is empty) without touching the platform's money. Before, the platform's
// and drivers' accounts were user wallets: GET /v1/wallets/ride_platform answered 200 with
// the fees, and a wallet checkout as user ride_platform spent them.
func TestRoleAccountsOutOfBuyersReach(t *testing.T) {
	t.Parallel()
	eachDialect(t, func(t *testing.T, b *bundle) {
		do := func(method, path, body string) (int, map[string]any) {
			t.Helper()
			req := httptest.NewRequest(method, path, strings.NewReader(body))
			if body != "" {
				req.Header.Set("Content-Type", "application/json")
			}
			rec := httptest.NewRecorder()
			b.e.Handler().ServeHTTP(rec, req)
			var out map[string]any
			if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil {
				t.Fatalf("%s %s: %d %q", method, path, rec.Code, rec.Body)
			}
			return rec.Code, out
		}
		code, tr := do(http.MethodPost, "/v1/trips", `{"rider_id":"rider-r","currency":"USD","estimate":4000}`)
		if code != 201 {
			t.Fatalf("create trip: %d %v", code, tr)
		}
		id := tr["id"].(string)
		for _, step := range []struct{ path, body string }{{"/assign", `{"driver_id":"driver-r"}`}, {"/start", ""}, {"/end", `{"fare":3820}`}} {
			if code, tr = do(http.MethodPost, "/v1/trips/"+id+step.path, step.body); code != 200 {
				t.Fatalf("%s: %d %v", step.path, code, tr)
			}
		}
		if tr["state"] != "settled" || tr["platform_fee"] != 764.0 || tr["driver_payout"] != 3056.0 {
			t.Fatalf("ended trip %v, want settled with fee 764 and payout 3056", tr)
		}
		account := func(id string, want float64) {
			t.Helper()
			code, a := do(http.MethodGet, "/v1/wallet-accounts/"+url.PathEscape(id), "")
			if code != 200 || a["kind"] != "role" || a["available"] != want {
				t.Fatalf("GET /v1/wallet-accounts/%s: %d %v, want a role account with %v available", id, code, a, want)
			}
		}
		account("role:USD:ride_platform", 764)
		account("role:USD:driver:driver-r", 3056)

		code, p := do(http.MethodPut, "/v1/inventory/sku-r", `{"available":10}`)
		if code != 200 {
			t.Fatalf("stock: %d %v", code, p)
		}
		for _, buyer := range []string{"ride_platform", "driver-r", "role:USD:ride_platform", "role:USD:driver:driver-r"} {
			if code, p = do(http.MethodGet, "/v1/wallets/"+url.PathEscape(buyer)+"?currency=USD", ""); code != 404 {
				t.Errorf("GET /v1/wallets/%s: %d %v, want 404 (no such user wallet)", buyer, code, p)
			}
			code, p = do(http.MethodPost, "/v1/orders", `{"user_id":"`+buyer+`","currency":"USD","payment_method":"wallet",`+
				`"items":[{"sku":"sku-r","quantity":1,"unit_price":500}]}`)
			if code != 409 || p["type"] != "https://orderly.dev/problems/insufficient-funds" {
				t.Errorf("wallet checkout as %s: %d %v, want 409 insufficient-funds (an empty wallet of its own)", buyer, code, p)
			}
		}
		account("role:USD:ride_platform", 764)
		account("role:USD:driver:driver-r", 3056)
	})
}
