package e2e_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/orderlyhq/orderly/internal/enginetest"
)

// TestKeyScopesOverHTTP is the 401/403/200 matrix of the API key scopes on the engine's own
// handler (SQLite, real keys in the database): each request is sent without a token, with
// a key that is not one, with a revoked key and with a key of each scope; a scope that the
// route takes gets past the check (the handler's own answer), another one is 403.
func TestKeyScopesOverHTTP(t *testing.T) {
	t.Parallel()
	env := enginetest.New(t, enginetest.Options{})
	h := env.Engine.Handler()
	keys := map[string]string{}
	for _, scope := range []string{"buyer", "merchant", "admin"} {
		_, key, err := env.Engine.Keys().Create(t.Context(), scope+" app", []string{scope})
		if err != nil {
			t.Fatal(err)
		}
		keys[scope] = key
	}
	k, revoked, _ := env.Engine.Keys().Create(t.Context(), "old", []string{"buyer", "merchant", "admin"})
	if _, err := env.Engine.Keys().Revoke(t.Context(), k.ID); err != nil {
		t.Fatal(err)
	}
	do := func(method, path, body, auth string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}

	// Real work with the right scopes: stock by the merchant, an order by the buyer.
	if st, body := do("PUT", "/v1/inventory/sku-1", `{"available":5}`, keys["merchant"]); st != http.StatusOK {
		t.Fatalf("merchant sets stock: %d %s", st, body)
	}
	st, body := do("POST", "/v1/orders", `{"user_id":"u1","items":[{"sku":"sku-1","quantity":1,"unit_price":100}],"currency":"USD"}`, keys["buyer"])
	var o struct{ ID string }
	if st != http.StatusCreated || json.Unmarshal([]byte(body), &o) != nil {
		t.Fatalf("buyer creates an order: %d %s", st, body)
	}

	routes := []struct {
		method, path, body string
		scopes             []string // may call it
		ok                 int      // the answer past the check
	}{
		{"GET", "/v1/orders?user_id=u1", "", []string{"buyer"}, 200},
		{"GET", "/v1/orders/" + o.ID, "", []string{"buyer", "merchant"}, 200},
		{"POST", "/v1/orders/" + o.ID + "/events", `{"event":"ship"}`, []string{"merchant"}, 409}, // unpaid: illegal
		{"GET", "/v1/inventory/sku-1", "", []string{"buyer", "merchant"}, 200},
		{"PUT", "/v1/inventory/sku-2", `{"available":1}`, []string{"merchant"}, 200},
		{"POST", "/v1/coupons", `{"user_id":"u1","amount_off":10,"currency":"USD"}`, []string{"merchant"}, 201},
		{"GET", "/v1/admin/orders?user_id=u1", "", []string{"admin"}, 200},
		{"GET", "/v1/admin/jobs/runs", "", []string{"admin"}, 200},
	}
	for _, r := range routes {
		name := r.method + " " + r.path
		if st, body := do(r.method, r.path, r.body, ""); st != http.StatusUnauthorized || !strings.Contains(body, "/problems/unauthorized") {
			t.Errorf("%s without a token: %d %s, want 401 unauthorized", name, st, body)
		}
		if st, _ := do(r.method, r.path, r.body, "ok_notakey"); st != http.StatusUnauthorized {
			t.Errorf("%s with a made-up key: %d, want 401", name, st)
		}
		if st, body := do(r.method, r.path, r.body, revoked); st != http.StatusUnauthorized || !strings.Contains(body, "revoked") {
			t.Errorf("%s with a revoked key: %d %s, want 401 (revoked)", name, st, body)
		}
		for _, scope := range []string{"buyer", "merchant", "admin"} {
			st, body := do(r.method, r.path, r.body, keys[scope])
			allowed := strings.Contains(strings.Join(r.scopes, ","), scope)
			switch {
			case allowed && st != r.ok:
				t.Errorf("%s with a %s key: %d %s, want %d", name, scope, st, body, r.ok)
			case !allowed && (st != http.StatusForbidden || !strings.Contains(body, "/problems/forbidden")):
				t.Errorf("%s with a %s key: %d %s, want 403 forbidden", name, scope, st, body)
			}
		}
	}
	for _, open := range []string{"/healthz", "/readyz", "/openapi.json"} {
		if st, _ := do("GET", open, "", ""); st != http.StatusOK {
			t.Errorf("GET %s without a token: %d, want 200 (open)", open, st)
		}
	}

	// Revoking a key takes effect at once on the instance that revokes it.
	list, _ := env.Engine.Keys().List(t.Context())
	var buyerID string
	for _, k := range list {
		if k.Name == "buyer app" {
			buyerID = k.ID
		}
	}
	if _, err := env.Engine.Keys().Revoke(t.Context(), buyerID); err != nil {
		t.Fatal(err)
	}
	if st, _ := do("GET", "/v1/orders/"+o.ID, "", keys["buyer"]); st != http.StatusUnauthorized {
		t.Errorf("a revoked buyer key: %d, want 401", st)
	}
}

// TestOpenWithoutKeys: with no key and no admin token the API answers without a token,
// as before keys existed, and the admin routes are off (404).
func TestOpenWithoutKeys(t *testing.T) {
	t.Parallel()
	env := enginetest.New(t, enginetest.Options{})
	h := env.Engine.Handler()
	for _, c := range []struct {
		path   string
		status int
	}{{"/v1/inventory/none", 404}, {"/v1/orders?user_id=u1", 200}, {"/v1/admin/jobs/runs", 404}} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", c.path, nil))
		if rec.Code != c.status {
			t.Errorf("GET %s: %d %s, want %d", c.path, rec.Code, rec.Body, c.status)
		}
	}
	if on, err := env.Engine.AuthRequired(t.Context()); err != nil || on {
		t.Errorf("AuthRequired = %v, %v; want false", on, err)
	}
}

// TestListOrdersKeyset: GET /v1/orders pages through one buyer's orders by id with
// next_after, filters by state, and refuses a list without user_id.
func TestListOrdersKeyset(t *testing.T) {
	t.Parallel()
	env := enginetest.New(t, enginetest.Options{})
	h := env.Engine.Handler()
	do := func(method, path, body string) (int, string) {
		req := httptest.NewRequest(method, path, strings.NewReader(body))
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		return rec.Code, rec.Body.String()
	}
	if st, body := do("PUT", "/v1/inventory/sku-1", `{"available":10}`); st != 200 {
		t.Fatalf("stock: %d %s", st, body)
	}
	var ids []string
	for _, user := range []string{"u1", "u2", "u1", "u1"} {
		st, body := do("POST", "/v1/orders", `{"user_id":"`+user+`","items":[{"sku":"sku-1","quantity":1,"unit_price":100}],"currency":"USD"}`)
		var o struct{ ID string }
		if st != 201 || json.Unmarshal([]byte(body), &o) != nil {
			t.Fatalf("create: %d %s", st, body)
		}
		if user == "u1" {
			ids = append(ids, o.ID)
		}
	}
	if st, body := do("POST", "/v1/orders/"+ids[1]+"/cancel", ""); st != 200 {
		t.Fatalf("cancel: %d %s", st, body)
	}
	list := func(query string) ([]string, string) {
		t.Helper()
		st, body := do("GET", "/v1/orders?"+query, "")
		var p struct {
			Orders []struct {
				ID     string `json:"id"`
				UserID string `json:"user_id"`
			} `json:"orders"`
			NextAfter string `json:"next_after"`
		}
		if st != 200 || json.Unmarshal([]byte(body), &p) != nil {
			t.Fatalf("list %s: %d %s", query, st, body)
		}
		var got []string
		for _, o := range p.Orders {
			if o.UserID != "u1" {
				t.Errorf("list %s: order %s of %s", query, o.ID, o.UserID)
			}
			got = append(got, o.ID)
		}
		return got, p.NextAfter
	}
	first, next := list("user_id=u1&limit=2")
	if strings.Join(first, ",") != ids[0]+","+ids[1] || next != ids[1] {
		t.Errorf("page 1 = %v next %q, want %v next %q", first, next, ids[:2], ids[1])
	}
	second, next := list("user_id=u1&limit=2&after=" + next)
	if strings.Join(second, ",") != ids[2] || next != "" {
		t.Errorf("page 2 = %v next %q, want [%s] and no next", second, next, ids[2])
	}
	closed, _ := list("user_id=u1&state=closed")
	if strings.Join(closed, ",") != ids[1] {
		t.Errorf("closed = %v, want [%s]", closed, ids[1])
	}
	// A cursor that is no next_after of the user's list (it answered 200 with an empty page).
	for _, bad := range []string{"", "state=closed", "user_id=u1&limit=0", "user_id=u1&limit=1001", "user_id=u1&after=zzz",
		"user_id=u1&after=ffffffff-ffff-7fff-bfff-ffffffffffff", "user_id=u2&after=" + ids[0]} {
		if st, body := do("GET", "/v1/orders?"+bad, ""); st != 422 || !strings.Contains(body, "/problems/invalid-input") {
			t.Errorf("GET /v1/orders?%s: %d %s, want 422 invalid-input", bad, st, body)
		}
	}
}
