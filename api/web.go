package api

import (
	"embed"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// The dashboard and the API reference, embedded: pages at / and /docs, their assets under
// /static/ (the chart and docs libraries vendored from npm by `make web`). They need no token to
// load; the dashboard asks for one and sends it with each API call.

//go:embed web
var webFiles embed.FS

var webFS, _ = fs.Sub(webFiles, "web")

// contentSecurity keeps the pages to their own origin: scripts only from /static, no inline
// script; styles may be inline (the docs library sets them); connections (the API) only here.
const contentSecurity = "default-src 'self'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; " +
	"connect-src 'self'; worker-src 'self' blob:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"

// servePage answers the dashboard's routes; it reports whether r was one.
func (s *Server) servePage(w http.ResponseWriter, r *http.Request) bool {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		return false
	}
	var name string
	switch p := r.URL.Path; {
	case p == "/" || p == "/index.html":
		name = "index.html"
	case p == "/docs" || p == "/docs/":
		name = "docs.html"
	case strings.HasPrefix(p, "/static/"):
		name = path.Clean(p[1:])
		if !strings.HasPrefix(name, "static/") {
			return false
		}
	default:
		return false
	}
	data, err := fs.ReadFile(webFS, name)
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusNotFound, "not-found", "no such file: "+r.URL.Path))
		return true
	}
	h := w.Header()
	h.Set("Content-Security-Policy", contentSecurity)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	switch {
	case strings.HasPrefix(name, "static/vendor/"):
		h.Set("Cache-Control", "public, max-age=86400")
	case strings.HasPrefix(name, "static/"):
		h.Set("Cache-Control", "no-cache")
	default:
		h.Set("Cache-Control", "no-store")
	}
	switch path.Ext(name) {
	case ".html":
		h.Set("Content-Type", "text/html; charset=utf-8")
	case ".js":
		h.Set("Content-Type", "text/javascript; charset=utf-8")
	case ".css":
		h.Set("Content-Type", "text/css; charset=utf-8")
	}
	if r.Method == http.MethodGet {
		_, _ = w.Write(data)
	}
	return true
}
