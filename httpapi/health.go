package httpapi

import (
	_ "embed"
	"net/http"
)

// healthz handles GET /healthz, the liveness probe: always 200 {"status":"ok"}.
func (s *Server) healthz(w http.ResponseWriter, r *http.Request) {
	s.writeJSON(w, r, http.StatusOK, &statusResponse{Status: "ok"})
}

// readyz handles GET /readyz, the readiness probe: 200 {"status":"ok"} when Config.Ready
// returns nil (or is nil), 200 {"status":"degraded","degraded":[…]} when moreover an
// optional dependency is down (Config.Degraded), else a 503 not-ready problem. The error
// is logged, not shown.
func (s *Server) readyz(w http.ResponseWriter, r *http.Request) {
	if s.ready != nil {
		if err := s.ready(r.Context()); err != nil {
			s.logger.WarnContext(r.Context(), "not ready", "trace_id", TraceIDFromContext(r.Context()), "err", err)
			s.writeProblem(w, r, CodeNotReady, "The service is not ready to take traffic.")
			return
		}
	}
	if s.degraded != nil {
		if deps := s.degraded(); len(deps) > 0 {
			s.writeJSON(w, r, http.StatusOK, &statusResponse{Status: "degraded", Degraded: deps})
			return
		}
	}
	s.writeJSON(w, r, http.StatusOK, &statusResponse{Status: "ok"})
}

// serveMetrics handles GET /metrics with Config.Metrics; 404 when it is nil.
func (s *Server) serveMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		s.writeProblem(w, r, CodeRouteNotFound, "metrics are not enabled on this server")
		return
	}
	s.metrics.ServeHTTP(w, r)
}

// openAPIDocument is the OpenAPI 3.0 description of this API, served at /openapi.json.
//
//go:embed openapi.json
var openAPIDocument []byte

// OpenAPIDocument returns a copy of the OpenAPI 3.0 document (JSON) that describes the API.
func OpenAPIDocument() []byte { return append([]byte(nil), openAPIDocument...) }

// serveOpenAPI handles GET /openapi.json.
func (s *Server) serveOpenAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(openAPIDocument)
}
