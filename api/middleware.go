package api

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"mime"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/openapi"
)

type ctxKey int

const (
	principalKey ctxKey = iota
	paramsKey
	bodyKey
)

func principal(r *http.Request) auth.Principal {
	p, _ := r.Context().Value(principalKey).(auth.Principal)
	return p
}

func pathParam(r *http.Request, name string) string {
	m, _ := r.Context().Value(paramsKey).(map[string]string)
	return m[name]
}

// requestBody is the body as read, for placing rule errors at their lines.
func requestBody(r *http.Request) *body {
	b, _ := r.Context().Value(bodyKey).(*body)
	return b
}

// validatedBody returns the body value kin-openapi decoded and validated (TOML or JSON alike).
func validatedBody(r *http.Request) (any, bool) {
	v, ok := r.Body.(interface{ ValidatedValue() any })
	if !ok {
		return nil, false
	}
	return v.ValidatedValue(), true
}

// statusRecorder remembers the status for the access log.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// Flush lets streaming handlers flush through the recorder.
func (s *statusRecorder) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// ServeHTTP runs the request through the checks in the package comment, then its handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w}
	defer func() {
		if v := recover(); v != nil {
			s.internalError(rec, r, fmt.Errorf("panic: %v", v))
		}
		s.cfg.Logger.Info("request", "method", r.Method, "path", r.URL.Path, "status", rec.status,
			"ms", time.Since(start).Milliseconds(), "org", principal(r).Org)
	}()
	s.serve(rec, r)
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	if s.servePage(w, r) {
		return
	}
	route, params, err := s.spec.Router.FindRoute(r)
	if err != nil {
		if errors.Is(err, routers.ErrMethodNotAllowed) {
			writeProblem(w, r, newProblem(http.StatusMethodNotAllowed, "method-not-allowed",
				fmt.Sprintf("%s is not allowed on %s", r.Method, r.URL.Path)))
			return
		}
		writeProblem(w, r, newProblem(http.StatusNotFound, "not-found", "no such endpoint: "+r.URL.Path))
		return
	}
	ctx := context.WithValue(r.Context(), paramsKey, params)

	if scope := openapi.Scope(route.Operation); scope != "" {
		p, prob := s.authenticate(r, scope)
		if prob != nil {
			writeProblem(w, r, prob)
			return
		}
		ctx = context.WithValue(ctx, principalKey, p)
	}
	r = r.WithContext(ctx)

	r, prob := s.validate(r, route, params)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	s.handlers[route.Operation.OperationID](w, r)
}

// validate reads the body and runs kin-openapi's request validation; the request it returns
// carries the body for handlers (and for placing their errors at lines).
func (s *Server) validate(r *http.Request, route *routers.Route, params map[string]string) (*http.Request, *Problem) {
	raw, prob := s.readBody(r, route)
	if prob != nil {
		return r, prob
	}
	b := &body{raw: raw, mediaType: r.Header.Get("Content-Type")}
	r = r.WithContext(context.WithValue(r.Context(), bodyKey, b))
	if route.Operation.Parameters.GetByInAndName("query", "kind") != nil {
		b.job = true
		kind := r.URL.Query().Get("kind")
		if kind == "" {
			kind = jobspec.KindRL
		}
		r.Header.Set(openapi.KindHeader, kind)
	}
	in := &openapi3filter.RequestValidationInput{
		Request: r, PathParams: params, Route: route, Options: openapi.RequestOptions(),
	}
	if err := openapi3filter.ValidateRequest(r.Context(), in); err != nil {
		return r, validationProblem(err, b, s.hints)
	}
	return r, nil
}

func (s *Server) authenticate(r *http.Request, scope string) (auth.Principal, *Problem) {
	h := r.Header.Get("Authorization")
	raw, ok := strings.CutPrefix(h, "Bearer ")
	if !ok || strings.TrimSpace(raw) == "" {
		return auth.Principal{}, newProblem(http.StatusUnauthorized, "unauthenticated",
			"send `Authorization: Bearer <token>`; `hostedtrain admin token` makes one")
	}
	p, err := s.cfg.Verifier.Verify(strings.TrimSpace(raw))
	if err != nil {
		s.cfg.Logger.Info("token refused", "err", err)
		return auth.Principal{}, newProblem(http.StatusUnauthorized, "unauthenticated",
			"the token is invalid or expired")
	}
	if p.TokenID != "" {
		revoked, err := s.cfg.Queue.TokenRevoked(r.Context(), p.TokenID)
		switch {
		case err != nil:
			return auth.Principal{}, s.failure(r, fmt.Errorf("revocation check: %w", err))
		case revoked:
			s.cfg.Logger.Info("token refused", "err", "revoked", "jti", p.TokenID)
			return auth.Principal{}, newProblem(http.StatusUnauthorized, "unauthenticated", "the token was revoked")
		}
	}
	if prob := scopeProblem(p, scope); prob != nil {
		return auth.Principal{}, prob
	}
	return p, nil
}

// scopeProblem refuses a caller that lacks scope (nil if it holds it).
func scopeProblem(p auth.Principal, scope string) *Problem {
	if p.Has(scope) {
		return nil
	}
	return newProblem(http.StatusForbidden, "forbidden",
		fmt.Sprintf("this operation needs the %q scope; the token has %q", scope, strings.Join(p.Scopes, " ")))
}

// validateFor checks a request the API makes up for operation opID as serve checks one it
// receives, once its caller is known: the body limit, the content type, and the contract's
// validation of its path parameter id ("" for none; the operations it serves have no other),
// its query and its body (nil for none), sent as contentType ("" for none). The Prime surface
// checks with it the /v1 request each of its calls stands for, and Admission a job file. The
// request it returns carries what handlers' helpers read: the path parameters, and the body
// as read and as validated. Nothing is served: it is checked, not sent.
func (s *Server) validateFor(ctx context.Context, opID, id string, query url.Values, contentType string, body []byte) (*http.Request, *Problem) {
	route := s.routes[opID]
	var params map[string]string
	target := route.Path
	if id != "" {
		params = map[string]string{"id": id}
		target = strings.Replace(target, "{id}", url.PathEscape(id), 1)
	}
	if len(query) > 0 {
		target += "?" + query.Encode()
	}
	r, err := http.NewRequestWithContext(context.WithValue(ctx, paramsKey, params), route.Method, target, bytes.NewReader(body))
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, "invalid-request", err.Error())
	}
	if contentType != "" {
		r.Header.Set("Content-Type", contentType)
	}
	return s.validate(r, route, params)
}

// readBody reads the body once, under the size limit, and checks its content type against the
// operation's; the bytes are put back for validation and kept for error positions.
func (s *Server) readBody(r *http.Request, route *routers.Route) ([]byte, *Problem) {
	if r.Body == nil || r.Body == http.NoBody {
		return nil, nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	r.Body.Close()
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, "unreadable-body", "the request body could not be read")
	}
	if int64(len(body)) > s.cfg.MaxBodyBytes {
		return nil, newProblem(http.StatusRequestEntityTooLarge, "body-too-large",
			fmt.Sprintf("the request body is over the %d-byte limit", s.cfg.MaxBodyBytes))
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	rb := route.Operation.RequestBody
	if len(body) == 0 || rb == nil || rb.Value == nil {
		return body, nil
	}
	ct := r.Header.Get("Content-Type")
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || rb.Value.Content.Get(mt) == nil {
		accepted := slices.Sorted(maps.Keys(rb.Value.Content))
		return nil, newProblem(http.StatusUnsupportedMediaType, "unsupported-media-type",
			fmt.Sprintf("Content-Type %q is not accepted here; send one of: %s", ct, strings.Join(accepted, ", ")))
	}
	if mt == "application/json" {
		if err := checkJSON(body); err != nil {
			return nil, newProblem(http.StatusBadRequest, "malformed-body", "the body is not acceptable JSON: "+err.Error())
		}
	}
	return body, nil
}
