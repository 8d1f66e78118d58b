// Package apitest runs the real API for tests: a private redis-server, the queue on it, and
// the handler behind an httptest server. Every response is checked against openapi.yaml, so
// any test that talks to the API also tests the contract.
package apitest

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/grant"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/openapi"
	"github.com/hostedtrain/hostedtrain/queue"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

// Stack is a running API with what a test needs to drive it.
type Stack struct {
	URL      string
	Queue    *queue.Client
	Redis    redis.UniversalClient
	Keys     *auth.KeySet
	Webhooks *webhooks.Service
	t        testing.TB
}

// Options adjust the stack.
type Options struct {
	Queue queue.Config
	// Store is the object storage the API reads jobs' data from (nil: none).
	Store blob.Store
	// Webhooks, if set, configures the webhook service (Secrets, Jobs, Hooks and, unless set,
	// a guard that allows loopback receivers are filled in); the test drives its dispatcher
	// through Stack.Webhooks.
	Webhooks *webhooks.Config
	// Storage hands agents storage credentials with their claims (nil: none).
	Storage grant.Granter
	// Redis is the server to use (nil: a private one is started); for tests that stop it.
	Redis redis.UniversalClient
	// Logger is the API's logger (nil: none).
	Logger *slog.Logger
	// Wrap, if set, wraps the API's handler (to record what it answers, say).
	Wrap func(http.Handler) http.Handler
	// LogRecheck is the API's (0: its default).
	LogRecheck time.Duration
	// MaxStreams is the API's (0: its default).
	MaxStreams int
	// Models is the operator's list of models (nil: none).
	Models []api.Model
	// Judge is the operator's judge endpoint (nil: none).
	Judge *api.Judge
}

// ClusterEnv set to "cluster" runs every stack whose test brings no Redis of its own on a
// private three-master Redis Cluster instead of one redis-server (`make test` runs the API's
// tests both ways).
const ClusterEnv = "HOSTEDTRAIN_TEST_REDIS"

// AllKeys lists the keys matching pattern, on every master of a cluster.
func (s *Stack) AllKeys(pattern string) []string {
	s.t.Helper()
	keys, err := redistest.AllKeys(context.Background(), s.Redis, pattern)
	if err != nil {
		s.t.Fatal(err)
	}
	return keys
}

// Start runs the stack for t and stops it when t ends.
func Start(t testing.TB, o Options) *Stack {
	t.Helper()
	rdb := o.Redis
	switch {
	case o.Redis != nil:
	case os.Getenv(ClusterEnv) == "cluster":
		rdb = redistest.ClusterClient(t)
	default:
		rdb = redistest.Client(t)
	}
	if o.Queue.LeaseTTL == 0 {
		o.Queue.LeaseTTL = 10 * time.Second
	}
	if o.Queue.HeartbeatInterval == 0 {
		o.Queue.HeartbeatInterval = 200 * time.Millisecond
	}
	q := queue.New(rdb, o.Queue)
	t.Cleanup(func() { _ = q.Close() })
	keys, err := auth.NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	entry, err := seal.NewKey("test")
	if err != nil {
		t.Fatal(err)
	}
	secrets, err := seal.Parse(entry)
	if err != nil {
		t.Fatal(err)
	}
	cfg := api.Config{Queue: q, Verifier: auth.NewVerifier(keys, nil), Secrets: secrets, Store: o.Store, Storage: o.Storage, Logger: o.Logger,
		RevocationCheck: 100 * time.Millisecond, LogRecheck: o.LogRecheck, Models: o.Models, MaxStreams: o.MaxStreams, Judge: o.Judge}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	}
	var wh *webhooks.Service
	if o.Webhooks != nil {
		wc := *o.Webhooks
		wc.Secrets, wc.Jobs, wc.Hooks = secrets, q, q
		if wc.Guard == nil {
			wc.Guard = &webhook.Guard{AllowLoopback: true}
		}
		if wh, err = webhooks.New(rdb, wc); err != nil {
			t.Fatal(err)
		}
		cfg.Webhooks = wh
	}
	h, err := api.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var handler http.Handler = ValidateResponses(t, h)
	if o.Wrap != nil {
		handler = o.Wrap(handler)
	}
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return &Stack{URL: srv.URL, Queue: q, Redis: rdb, Keys: keys, Webhooks: wh, t: t}
}

// Token mints a token for org with the given scopes.
func (s *Stack) Token(org string, scopes ...string) string {
	s.t.Helper()
	tok, err := s.Keys.Issue(auth.TokenRequest{Org: org, Scopes: scopes, TTL: time.Hour}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// AgentToken mints an agent token naming the agent.
func (s *Stack) AgentToken(agentID string) string {
	s.t.Helper()
	tok, err := s.Keys.Issue(auth.TokenRequest{Subject: agentID, Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: time.Hour}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// ValidateResponses wraps h so that every response that answers a route of openapi.yaml is
// validated against it; a mismatch fails t.
func ValidateResponses(t testing.TB, h http.Handler) http.Handler {
	spec, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec := &recorder{ResponseWriter: w}
		h.ServeHTTP(rec, r)
		if _, _, err := spec.Router.FindRoute(r); err != nil {
			return // unknown routes answer 404/405 problems, checked by their own tests
		}
		status := rec.status
		if status == 0 && rec.body.Len() == 0 && r.Context().Err() != nil {
			return // the client went away before an answer (a claim that was waiting)
		}
		if status == 0 {
			status = http.StatusOK
		}
		if err := openapi.ValidateResponse(r.Context(), r, status, rec.Header(), rec.body.Bytes()); err != nil {
			t.Errorf("response to %s %s (%d) breaks openapi.yaml: %v\nbody: %s", r.Method, r.URL, status, err, rec.body.String())
		}
	})
}

type recorder struct {
	http.ResponseWriter
	status int
	body   bytes.Buffer
}

func (r *recorder) WriteHeader(code int) {
	if r.status == 0 {
		r.status = code
	}
	r.ResponseWriter.WriteHeader(code)
}

func (r *recorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

func (r *recorder) Flush() {
	if f, ok := r.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
