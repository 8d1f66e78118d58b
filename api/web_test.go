package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api/apitest"
)

// The dashboard and the docs are served without a token, from the binary, with a policy that
// keeps them to their own origin.
func TestDashboardPagesAreServed(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	for path, want := range map[string]string{
		"/":                                  `<script src="/static/app.js">`,
		"/docs":                              `/static/vendor/redoc.standalone.js`,
		"/static/app.js":                     "sessionStorage",
		"/static/vendor/uPlot.iife.min.js":   "uPlot",
		"/static/vendor/redoc.standalone.js": "Redoc",
		"/static/app.css":                    ".badge",
	} {
		r := call(t, "GET", s.URL+path, "", "", nil)
		if r.status != 200 || !strings.Contains(string(r.body), want) {
			t.Errorf("%s: %d, %d bytes", path, r.status, len(r.body))
		}
		if csp := r.header.Get("Content-Security-Policy"); !strings.Contains(csp, "script-src 'self'") || !strings.Contains(csp, "connect-src 'self'") {
			t.Errorf("%s: CSP %q", path, csp)
		}
	}
	if r := call(t, "GET", s.URL+"/static/missing.js", "", "", nil); r.status != http.StatusNotFound {
		t.Errorf("a missing asset: %d", r.status)
	}
	if r := call(t, "GET", s.URL+"/static/../openapi.go", "", "", nil); r.status != http.StatusNotFound {
		t.Errorf("a path out of the assets: %d", r.status)
	}
	if r := call(t, "POST", s.URL+"/", "", "", nil); r.status != http.StatusNotFound && r.status != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d", r.status)
	}
	// The vendored scripts fetch nothing from elsewhere.
	r := call(t, "GET", s.URL+"/static/vendor/redoc.standalone.js", "", "", nil)
	if strings.Contains(string(r.body), "cdn.redoc.ly") {
		t.Error("the docs bundle still loads its logo from a CDN")
	}
}
