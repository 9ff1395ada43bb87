package httpapi

import (
	"net/http"
	"strings"
	"testing"
)

// TestAdminPage: /admin serves the embedded page and its files without the token (they
// hold no data) under a same-origin CSP; an unknown or escaping asset name is 404; without
// an admin token configured the page is off (404) like the admin routes.
func TestAdminPage(t *testing.T) {
	t.Parallel()
	on := setup(t, func(cfg *Config) { cfg.AdminToken = "tok" })
	for _, c := range []struct {
		path, contentType, contains string
	}{
		{"/admin", "text/html; charset=utf-8", `<script type="module" src="/admin/admin.js">`},
		{"/admin/admin.js", "text/javascript; charset=utf-8", "sessionStorage"},
		{"/admin/admin.css", "text/css; charset=utf-8", ".bars"},
	} {
		rec := on.do(newRequest(http.MethodGet, c.path, ""))
		if rec.Code != http.StatusOK || rec.Header().Get("Content-Type") != c.contentType || !strings.Contains(rec.Body.String(), c.contains) {
			t.Errorf("GET %s = %d %q, body has %q: %v; want 200 %s", c.path, rec.Code, rec.Header().Get("Content-Type"), c.contains,
				strings.Contains(rec.Body.String(), c.contains), c.contentType)
		}
		if csp := rec.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("GET %s: CSP %q, want same-origin scripts and no framing", c.path, csp)
		}
	}
	for _, path := range []string{"/admin/nope.js", "/admin/..%2Fadmin.go", "/admin/adminui%2Findex.html"} {
		assertProblem(t, on.do(newRequest(http.MethodGet, path, "")), http.StatusNotFound, CodeRouteNotFound)
	}
	off := setup(t)
	for _, path := range []string{"/admin", "/admin/admin.js"} {
		p := assertProblem(t, off.do(newRequest(http.MethodGet, path, "")), http.StatusNotFound, CodeRouteNotFound)
		if !strings.Contains(p.Detail, "--admin-token") {
			t.Errorf("GET %s without a token: detail %q, want it to name --admin-token", path, p.Detail)
		}
	}
}
