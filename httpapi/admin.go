package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/orderlyhq/orderly"
)

// actorAdmin is the actor recorded for changes made through the admin routes.
const actorAdmin = "admin"

// adminRoutes registers the operator routes under /v1/admin. They all require the admin
// bearer token (Config.AdminToken); without one configured they are off and answer 404
// route-not-found, as if they did not exist.
func (s *Server) adminRoutes(r chi.Router) {
	r.Use(s.requireAdmin)
	r.Post("/sagas/{id}/redrive", s.redriveSaga)
	s.adminServiceRoutes(r)
	s.adminOverviewRoutes(r)
	s.webhookRoutes(r)
	r.Get("/channels", s.adminChannels)
}

// requireAdmin lets a request through only when it carries "Authorization: Bearer
// <Config.AdminToken>", compared in constant time (both sides hashed first, so the
// comparison does not leak the token's length either). A missing or wrong token is 401
// unauthorized with a WWW-Authenticate challenge; with no token configured the admin
// routes are off (404).
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if len(s.adminToken) == 0 {
			s.writeProblem(w, r, CodeRouteNotFound, "the admin routes are off: start the server with an admin token (--admin-token)")
			return
		}
		scheme, token, ok := strings.Cut(r.Header.Get("Authorization"), " ")
		if !ok || !strings.EqualFold(scheme, "Bearer") || !sameToken(s.adminToken, strings.TrimSpace(token)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="orderly-admin"`)
			s.writeProblem(w, r, orderly.EUNAUTHORIZED, "the admin routes need Authorization: Bearer <admin token>")
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameToken compares two secrets in constant time, whatever their lengths.
func sameToken(want []byte, got string) bool {
	a, b := sha256.Sum256(want), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
