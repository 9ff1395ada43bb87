package httpapi

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestRequireAdmin checks the admin bearer token: the right token passes, a missing,
// malformed or wrong one is 401 with a challenge, and without a configured token the
// admin routes are off (404).
func TestRequireAdmin(t *testing.T) {
	t.Parallel()
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	cases := []struct {
		name, token, auth string
		status            int
		problem           string
	}{
		{"right token", "s3cret", "Bearer s3cret", http.StatusNoContent, ""},
		{"scheme is case-insensitive", "s3cret", "bearer s3cret", http.StatusNoContent, ""},
		{"no header", "s3cret", "", http.StatusUnauthorized, "unauthorized"},
		{"wrong token", "s3cret", "Bearer s3crex", http.StatusUnauthorized, "unauthorized"},
		{"token prefix", "s3cret", "Bearer s3cre", http.StatusUnauthorized, "unauthorized"},
		{"basic scheme", "s3cret", "Basic s3cret", http.StatusUnauthorized, "unauthorized"},
		{"no token configured", "", "Bearer ", http.StatusNotFound, "route-not-found"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := setup(t, func(cfg *Config) { cfg.AdminToken = c.token })
			req := httptest.NewRequest(http.MethodGet, "/v1/admin/anything", nil)
			if c.auth != "" {
				req.Header.Set("Authorization", c.auth)
			}
			rec := httptest.NewRecorder()
			f.srv.requireAdmin(ok).ServeHTTP(rec, req)
			if rec.Code != c.status {
				t.Fatalf("status = %d, want %d; body %s", rec.Code, c.status, rec.Body)
			}
			if c.problem == "" {
				return
			}
			var p struct {
				Type string `json:"type"`
			}
			if err := json.Unmarshal(rec.Body.Bytes(), &p); err != nil {
				t.Fatalf("decode problem: %v (%s)", err, rec.Body)
			}
			if want := ProblemTypeBase + c.problem; p.Type != want {
				t.Errorf("problem type = %q, want %q", p.Type, want)
			}
			if c.status == http.StatusUnauthorized && rec.Header().Get("WWW-Authenticate") == "" {
				t.Error("401 without a WWW-Authenticate challenge")
			}
		})
	}
}
