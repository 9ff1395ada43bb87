package httpapi

import (
	"bytes"
	"embed"
	"io/fs"
	"net/http"
	"path"
	"time"
)

// adminAssets are the admin page's files: plain HTML, CSS and one JavaScript module, no
// build step (docs/operations/admin-page.md).
//
//go:embed adminui
var adminAssets embed.FS

// adminPageCSP keeps the page to its own files and the API of its own origin: no inline
// script, no third party, no framing.
const adminPageCSP = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; img-src 'self' data:; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// adminPage handles GET /admin and GET /admin/{asset}: the operator's web page
// (adminui/index.html) and its files. They hold no data and are served without the
// token; the page asks for it and calls the /v1/admin routes with it. Without an admin
// token configured the page is off like those routes (404 route-not-found); an unknown
// asset is 404 too.
func (s *Server) adminPage(w http.ResponseWriter, r *http.Request) {
	if len(s.adminToken) == 0 {
		s.writeProblem(w, r, CodeRouteNotFound, "the admin page is off: start the server with an admin token (--admin-token)")
		return
	}
	name := "index.html"
	if a := pathParam(r, "asset"); a != "" {
		name = a
	}
	b, err := fs.ReadFile(adminAssets, path.Join("adminui", path.Base(name)))
	if err != nil || name != path.Base(name) {
		s.writeProblem(w, r, CodeRouteNotFound, "no admin page file "+name)
		return
	}
	h := w.Header()
	h.Set("Content-Security-Policy", adminPageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	// ServeContent sets Content-Type from the name's extension and answers HEAD and ranges.
	http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(b))
}
