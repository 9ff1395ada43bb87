package httpapi

import (
	"crypto/sha256"
	"crypto/subtle"
	"net/http"

	"github.com/go-chi/chi/v5"
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

// requireAdmin turns the admin routes off (404 route-not-found, as if they did not exist)
// while the API is open (no admin token, no key: authRequired); otherwise it lets a request
// through only with the admin token or a key of scope admin, like authMiddleware: 401
// unauthorized with a WWW-Authenticate challenge for a missing or wrong token, 403
// forbidden for a key without the admin scope. Tokens are compared in constant time (both
// sides hashed first, so the comparison does not leak the token's length either).
func (s *Server) requireAdmin(next http.Handler) http.Handler {
	guarded := s.authorize(scopesAdmin, next)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		on, err := s.authRequired(r.Context())
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		if !on {
			s.writeProblem(w, r, CodeRouteNotFound, "the admin routes are off: start the server with an admin token (--admin-token) or create a key of scope admin (orderly keys create)")
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// sameToken compares two secrets in constant time, whatever their lengths.
func sameToken(want []byte, got string) bool {
	a, b := sha256.Sum256(want), sha256.Sum256([]byte(got))
	return subtle.ConstantTimeCompare(a[:], b[:]) == 1
}
