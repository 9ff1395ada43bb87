package httpapi

import (
	"cmp"
	"context"
	"net/http"
	"slices"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
	"github.com/orderlyhq/orderly/apikey"
	"github.com/orderlyhq/orderly/store"
)

// CodeForbidden is the problem code of a request whose key authenticated but lacks the
// route's scope (403).
const CodeForbidden = "forbidden"

// KeyAuthenticator authenticates the API keys of requests (package apikey implements it).
type KeyAuthenticator interface {
	// Authenticate returns the key that the bearer token key is. Errors: EUNAUTHORIZED for
	// a malformed, unknown, wrong or revoked key; others when the key could not be read.
	Authenticate(ctx context.Context, key string) (*store.APIKey, error)
	// Enabled reports whether any key was ever created: then every route that has scopes
	// needs a key (or the admin token).
	Enabled(ctx context.Context) (bool, error)
}

// Scope sets of the route table.
var (
	scopesOpen          = []string{} // no key needed: signed callbacks, health, metrics, the document
	scopesBuyer         = []string{apikey.ScopeBuyer}
	scopesMerchant      = []string{apikey.ScopeMerchant}
	scopesBuyerMerchant = []string{apikey.ScopeBuyer, apikey.ScopeMerchant}
	scopesAdmin         = []string{apikey.ScopeAdmin}
)

// adminPrefix starts the operator routes: all of them need the admin scope.
const adminPrefix = "/v1/admin/"

// routeScopes maps "METHOD pattern" of every route outside /v1/admin to the scopes that
// may call it (any one of them; the admin token may call every route). A route missing
// here needs the admin scope (closed by default), and TestRouteScopesComplete fails until
// it is added. docs/operations/api-keys.md has the same table.
var routeScopes = map[string][]string{
	"POST /v1/orders":                      scopesBuyer,
	"GET /v1/orders":                       scopesBuyer,
	"GET /v1/orders/{id}":                  scopesBuyerMerchant,
	"PATCH /v1/orders/{id}":                scopesMerchant,
	"PATCH /v1/trips/{id}":                 scopesMerchant,
	"PATCH /v1/payments/{id}":              scopesMerchant,
	"GET /v1/refunds/{id}":                 scopesBuyerMerchant,
	"PATCH /v1/refunds/{id}":               scopesMerchant,
	"PATCH /v1/groups/{id}":                scopesMerchant,
	"GET /v1/orders/{id}/history":          scopesBuyerMerchant,
	"POST /v1/orders/{id}/cancel":          scopesBuyer,
	"POST /v1/trips":                       scopesBuyer,
	"GET /v1/trips/{id}":                   scopesBuyerMerchant,
	"POST /v1/trips/{id}/cancel":           scopesBuyer,
	"POST /v1/trips/{id}/assign":           scopesMerchant,
	"POST /v1/trips/{id}/start":            scopesMerchant,
	"POST /v1/trips/{id}/end":              scopesMerchant,
	"POST /v1/trips/{id}/refund":           scopesMerchant,
	"POST /v1/orders/{id}/events":          scopesMerchant,
	"POST /v1/orders/{id}/payments":        scopesBuyer,
	"GET /v1/orders/{id}/payments":         scopesBuyerMerchant,
	"POST /v1/orders/{id}/refunds":         scopesMerchant,
	"GET /v1/orders/{id}/refunds":          scopesBuyerMerchant,
	"GET /v1/payments/{id}":                scopesBuyerMerchant,
	"GET /v1/payments/{id}/refusals":       scopesMerchant,
	"POST /v1/payments/callback":           scopesOpen,
	"POST /v1/channels/{channel}/webhook":  scopesOpen,
	"GET /v1/inventory":                    scopesMerchant,
	"GET /v1/events":                       scopesMerchant,
	"PUT /v1/inventory/{sku}":              scopesMerchant,
	"POST /v1/inventory/{sku}/adjustments": scopesMerchant,
	"GET /v1/inventory/{sku}":              scopesBuyerMerchant,
	"POST /v1/coupons":                     scopesMerchant,
	"GET /v1/coupons/{id}":                 scopesBuyerMerchant,
	"POST /v1/deals":                       scopesMerchant,
	"GET /v1/deals/{id}":                   scopesBuyerMerchant,
	"POST /v1/groups":                      scopesBuyer,
	"GET /v1/groups/{id}":                  scopesBuyerMerchant,
	"POST /v1/groups/{id}/join":            scopesBuyer,
	"POST /v1/groups/{id}/leave":           scopesBuyer,
	"GET /v1/wallets/{user_id}":            scopesBuyerMerchant,
	"POST /v1/wallets/{user_id}/credits":   scopesMerchant,
	"GET /v1/wallet-accounts/{account_id}": scopesMerchant,
	"GET /v1/sagas/{id}":                   scopesMerchant,
	"GET /admin":                           scopesOpen, // the admin page: static, holds no data; its calls carry the token
	"GET /admin/{asset}":                   scopesOpen,
	"GET /healthz":                         scopesOpen,
	"GET /readyz":                          scopesOpen,
	"GET /metrics":                         scopesOpen,
	"GET /openapi.json":                    scopesOpen,
}

// scopesOf returns the scopes that may call the route of method and pattern (a chi route
// pattern): the table's, the admin scope under /v1/admin, else the admin scope.
func scopesOf(method, pattern string) []string {
	if strings.HasPrefix(pattern, adminPrefix) {
		return scopesAdmin
	}
	if sc, ok := routeScopes[method+" "+pattern]; ok {
		return sc
	}
	return scopesAdmin
}

// authRequired reports whether requests need a key: an admin token is configured, or a
// key was ever created (Config.Keys). Without either the API is open, as it was before
// keys, and `orderly serve` listens on 127.0.0.1 only.
func (s *Server) authRequired(ctx context.Context) (bool, error) {
	if len(s.adminToken) > 0 {
		return true, nil
	}
	if s.keys == nil {
		return false, nil
	}
	return s.keys.Enabled(ctx)
}

// authMiddleware lets a request through when its route needs no key, when no key or token
// is configured (authRequired), or when its bearer token is the admin token or a key with
// one of the route's scopes (routeScopes). Otherwise: 401 unauthorized (no bearer token,
// or one that is no valid key: malformed, unknown, wrong, revoked) with a WWW-Authenticate
// challenge, 403 forbidden (a valid key without the scope). A path that no route has goes
// on to the router's 404 or 405. An authorized request goes on through idempotent, with
// the route this middleware found (one routing per request serves both).
func (s *Server) authMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		pattern := s.router.Find(chi.NewRouteContext(), r.Method, cmp.Or(r.URL.RawPath, r.URL.Path))
		if pattern == "" {
			next.ServeHTTP(w, r)
			return
		}
		s.authorize(scopesOf(r.Method, pattern), s.idempotent(pattern, next)).ServeHTTP(w, r)
	})
}

// authorize returns a handler that checks the request's bearer token against scopes (any
// one of them) before next; see authMiddleware.
func (s *Server) authorize(scopes []string, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(scopes) == 0 {
			next.ServeHTTP(w, r)
			return
		}
		on, err := s.authRequired(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !on {
			next.ServeHTTP(w, r)
			return
		}
		token, ok := bearer(r)
		if !ok {
			s.unauthorized(w, r, "this route needs Authorization: Bearer <API key> with scope "+strings.Join(scopes, " or "))
			return
		}
		if len(s.adminToken) > 0 && sameToken(s.adminToken, token) {
			next.ServeHTTP(w, r)
			return
		}
		if s.keys == nil || !strings.HasPrefix(token, apikey.Prefix) {
			s.unauthorized(w, r, "the bearer token is neither the admin token nor an API key")
			return
		}
		key, err := s.keys.Authenticate(r.Context(), token)
		switch {
		case orderly.ErrorCode(err) == orderly.EUNAUTHORIZED:
			s.unauthorized(w, r, orderly.ErrorMessage(err))
			return
		case err != nil:
			s.writeError(w, r, err)
			return
		}
		if !slices.ContainsFunc(key.Scopes, func(sc string) bool { return slices.Contains(scopes, sc) }) {
			s.writeProblem(w, r, CodeForbidden, "API key "+key.ID+" has scope "+strings.Join(key.Scopes, ", ")+
				"; this route needs "+strings.Join(scopes, " or "))
			return
		}
		next.ServeHTTP(w, r)
	})
}

// bearer returns the token of an "Authorization: Bearer <token>" header (the scheme in any
// case); ok=false without one.
func bearer(r *http.Request) (string, bool) {
	scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	token = strings.TrimSpace(token)
	return token, ok && strings.EqualFold(scheme, "Bearer") && token != ""
}

// unauthorized answers 401 with a Bearer challenge (RFC 6750).
func (s *Server) unauthorized(w http.ResponseWriter, r *http.Request, detail string) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="orderly"`)
	s.writeProblem(w, r, orderly.EUNAUTHORIZED, detail)
}
