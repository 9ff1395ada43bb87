package httpapi

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/store"
)

// TestRouteScopesComplete: every route outside /v1/admin has a row in routeScopes, every
// row is a route, and openapi.json's x-orderly-scopes of each operation are the scopes the
// server enforces.
func TestRouteScopesComplete(t *testing.T) {
	t.Parallel()
	routed := map[string]bool{}
	err := chi.Walk(setup(t).srv.router, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+route] = true
		if _, ok := routeScopes[method+" "+route]; !ok && !strings.HasPrefix(route, adminPrefix) {
			t.Errorf("route %s %s has no row in routeScopes (it needs the admin scope until it has one)", method, route)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for r := range routeScopes {
		if !routed[r] {
			t.Errorf("routeScopes has %s, which is not a route", r)
		}
	}
	for name, op := range loadOpenAPI(t).operations(t) {
		method, path, _ := strings.Cut(name, " ")
		if op.Scopes == nil {
			t.Errorf("%s: no x-orderly-scopes", name)
			continue
		}
		if want := scopesOf(method, path); !slices.Equal(*op.Scopes, want) {
			t.Errorf("%s: x-orderly-scopes %v, the server enforces %v", name, *op.Scopes, want)
		}
	}
}

// fakeKeys authenticates the keys of a map.
type fakeKeys struct {
	keys map[string]*store.APIKey
	on   bool
}

func (f *fakeKeys) Authenticate(_ context.Context, key string) (*store.APIKey, error) {
	if k, ok := f.keys[key]; ok {
		return k, nil
	}
	return nil, orderly.Errorf(orderly.EUNAUTHORIZED, "unknown API key")
}

func (f *fakeKeys) Enabled(context.Context) (bool, error) { return f.on, nil }

// TestAuthorize covers the decisions of the middleware on real routes of a server with
// mock services: open without token and keys (admin routes off), the admin token passing
// every scope, a key with the scope passing, a key without it 403, no or a wrong token 401
// with a challenge, the open routes staying open.
func TestAuthorize(t *testing.T) {
	t.Parallel()
	keys := &fakeKeys{keys: map[string]*store.APIKey{
		"ok_b_x": {ID: "b", Scopes: []string{"buyer"}},
		"ok_m_x": {ID: "m", Scopes: []string{"merchant"}},
	}}
	cases := []struct {
		name       string
		token      string // the server's admin token
		on         bool   // a key exists
		method     string
		path, auth string
		status     int
		problem    string
	}{
		{"open API", "", false, "GET", "/v1/sagas/s-1", "", 404, "not-found"}, // no saga service: 404 from the handler
		{"open API, admin off", "", false, "GET", "/v1/admin/jobs/runs", "", 404, "route-not-found"},
		{"no token", "", true, "GET", "/v1/sagas/s-1", "", 401, "unauthorized"},
		{"not a key", "", true, "GET", "/v1/sagas/s-1", "Bearer nope", 401, "unauthorized"},
		{"unknown key", "", true, "GET", "/v1/sagas/s-1", "Bearer ok_z_x", 401, "unauthorized"},
		{"wrong scope", "", true, "GET", "/v1/sagas/s-1", "Bearer ok_b_x", 403, "forbidden"},
		{"right scope", "", true, "GET", "/v1/sagas/s-1", "Bearer ok_m_x", 404, "not-found"},
		{"admin route, merchant key", "", true, "GET", "/v1/admin/jobs/runs", "Bearer ok_m_x", 403, "forbidden"},
		{"admin token, merchant route", "tok", false, "GET", "/v1/sagas/s-1", "Bearer tok", 404, "not-found"},
		{"admin token set, no bearer", "tok", false, "GET", "/v1/sagas/s-1", "", 401, "unauthorized"},
		{"admin token set, key", "tok", true, "GET", "/v1/sagas/s-1", "Bearer ok_m_x", 404, "not-found"},
		{"health stays open", "tok", true, "GET", "/healthz", "", 200, ""},
		{"unknown path", "tok", true, "GET", "/v1/nothing", "", 404, "route-not-found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			k := &fakeKeys{keys: keys.keys, on: c.on}
			f := setup(t, func(cfg *Config) { cfg.AdminToken, cfg.Keys = c.token, k })
			req := newRequest(c.method, c.path, "")
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := f.do(req)
			if c.problem == "" {
				if rec.Code != c.status {
					t.Fatalf("status %d, want %d: %s", rec.Code, c.status, rec.Body)
				}
				return
			}
			assertProblem(t, rec, c.status, c.problem)
			if c.status == 401 && rec.Header().Get("WWW-Authenticate") != `Bearer realm="orderly"` {
				t.Errorf("WWW-Authenticate = %q", rec.Header().Get("WWW-Authenticate"))
			}
		})
	}
}
