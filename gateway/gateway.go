package gateway

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// Deployments is what the gateway needs of the queue (queue.Deployments implements it).
type Deployments interface {
	GetAdapter(ctx context.Context, org, id string) (*job.Adapter, error)
	ListAdapters(ctx context.Context, org string, offset, limit int) ([]job.Adapter, int, error)
	Used(ctx context.Context, org, id string, requests, failures, prompt, completion int64, latenciesMs []float64) error
}

// Config is what a gateway is made of.
type Config struct {
	// Verifier checks users' tokens (the API's) and agents' (scope agent); Revoked, if set,
	// says whether a token's id was revoked.
	Verifier *auth.Verifier
	Revoked  func(ctx context.Context, jti string) (bool, error)
	// Deployments are the adapters and where they are served.
	Deployments Deployments
	// Wake deploys again an adapter unloaded for being idle, when a request asks for it (the
	// API's deploy, as the caller: token is the request's); nil: such a request is refused as
	// for an adapter not deployed.
	Wake func(ctx context.Context, org, id, token string) error
	// Spent says, with its message, whether org's budget is spent: its requests get 402.
	Spent func(ctx context.Context, org string) (string, bool, error)
	// Prefix is where users' paths start ("/api/v1", as PRIME_INFERENCE_URL names it).
	Prefix string
	// RatePerOrg and Burst bound one organization's requests per second through this gateway
	// (default DefaultRatePerOrg, DefaultBurst).
	RatePerOrg float64
	Burst      int
	// WakeWait bounds how long a request waits for its adapter to be deployed (default
	// DefaultWakeWait); past it the answer is 503 with Retry-After.
	WakeWait time.Duration
	// MaxBody bounds a request's body (default DefaultMaxBody).
	MaxBody int64
	// Routes, with several gateways, files the tunnels this one holds and finds the gateway
	// holding another's (routes.go); nil: one gateway.
	Routes *Routes
	Logger *slog.Logger
}

// The gateway's defaults.
const (
	DefaultPrefix     = "/api/v1"
	DefaultRatePerOrg = 50
	DefaultBurst      = 100
	DefaultWakeWait   = 30 * time.Second
	DefaultMaxBody    = 8 << 20
)

// Gateway serves users' inference requests and agents' tunnels.
type Gateway struct {
	cfg      Config
	tunnels  *tunnels
	limiters sync.Map // org -> *rate.Limiter

	// routes caches, for routeTTL, where a deployed adapter is served: a request costs no
	// Redis round trip on the hot path. An adapter unloaded meanwhile may get requests for
	// that long; its server answers them 404.
	routes sync.Map // org + "/" + adapter id -> route

	// counts are the requests and tokens not yet added to the adapters' records: flushed every
	// flushEvery, and when the gateway closes.
	mu     sync.Mutex
	counts map[string]*count
	stop   chan struct{}
	done   chan struct{}
}

type route struct {
	a  *job.Adapter
	at time.Time
}

type count struct {
	org                                    string
	requests, failures, prompt, completion int64
	latencies                              []float64 // ms, of the newest requests (at most 1,000)
}

const (
	routeTTL   = time.Second
	flushEvery = 500 * time.Millisecond
)

// New returns a gateway.
func New(cfg Config) *Gateway {
	cfg.Prefix = strings.TrimRight(cmp.Or(cfg.Prefix, DefaultPrefix), "/")
	cfg.RatePerOrg = cmp.Or(cfg.RatePerOrg, DefaultRatePerOrg)
	cfg.Burst = cmp.Or(cfg.Burst, DefaultBurst)
	cfg.WakeWait = cmp.Or(cfg.WakeWait, DefaultWakeWait)
	cfg.MaxBody = cmp.Or(cfg.MaxBody, DefaultMaxBody)
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	g := &Gateway{cfg: cfg, tunnels: newTunnels(cfg.Routes), counts: map[string]*count{}, stop: make(chan struct{}), done: make(chan struct{})}
	go g.flushing()
	return g
}

// flushing adds the counted requests to the adapters' records every flushEvery, until Close.
func (g *Gateway) flushing() {
	defer close(g.done)
	t := time.NewTicker(flushEvery)
	defer t.Stop()
	for {
		select {
		case <-t.C:
			g.flush()
		case <-g.stop:
			g.flush()
			return
		}
	}
}

func (g *Gateway) flush() {
	g.mu.Lock()
	counts := g.counts
	g.counts = map[string]*count{}
	g.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for id, c := range counts {
		if err := g.cfg.Deployments.Used(ctx, c.org, id, c.requests, c.failures, c.prompt, c.completion, c.latencies); err != nil {
			g.cfg.Logger.Warn("gateway: count requests", "adapter", id, "requests", c.requests, "err", err)
		}
	}
}

// BudgetSpent is Config.Spent from an organization's status: spent while its monthly budget
// holds it (job.OrgStatus.BudgetHeld), with the message the prime CLI prints on a 402.
func BudgetSpent(getOrg func(ctx context.Context, org string) (job.OrgStatus, error)) func(context.Context, string) (string, bool, error) {
	return func(ctx context.Context, org string) (string, bool, error) {
		st, err := getOrg(ctx, org)
		if err != nil {
			return "", false, err
		}
		return fmt.Sprintf("organization %s has spent its monthly budget of %g GPU-hours; raise it or wait for the next month", org, st.MonthlyGPUHours), st.BudgetHeld, nil
	}
}

// Close ends every tunnel and adds what was counted to the adapters' records.
func (g *Gateway) Close() {
	g.tunnels.closeAll()
	select {
	case <-g.stop:
	default:
		close(g.stop)
	}
	<-g.done
}

// Tunnels is how many agents hold a tunnel to this gateway.
func (g *Gateway) Tunnels() int { return g.tunnels.count() }

// Handles says whether path is one of the gateway's.
func (g *Gateway) Handles(path string) bool {
	return path == TunnelPath || path == g.cfg.Prefix+"/models" || strings.HasPrefix(path, g.cfg.Prefix+"/models/") ||
		path == g.cfg.Prefix+"/chat/completions"
}

func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	switch {
	case p == TunnelPath:
		g.tunnel(w, r)
	case p == g.cfg.Prefix+"/models" && r.Method == http.MethodGet:
		g.withOrg(w, r, g.listModels)
	case strings.HasPrefix(p, g.cfg.Prefix+"/models/") && r.Method == http.MethodGet:
		g.withOrg(w, r, g.getModel)
	case p == g.cfg.Prefix+"/chat/completions" && r.Method == http.MethodPost:
		g.withOrg(w, r, g.chat)
	default:
		openAIError(w, http.StatusNotFound, "invalid_request_error", "not_found", "no such path: "+r.Method+" "+p)
	}
}

// openAIError answers as OpenAI's API does: {"error": {"message", "type", "code"}}.
func openAIError(w http.ResponseWriter, status int, typ, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"message": msg, "type": typ, "code": code}})
}

// principal verifies the request's bearer token; a failure is answered.
func (g *Gateway) principal(w http.ResponseWriter, r *http.Request, scope string) (auth.Principal, bool) {
	raw, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	p, err := g.cfg.Verifier.Verify(strings.TrimSpace(raw))
	if !ok || err != nil {
		openAIError(w, http.StatusUnauthorized, "authentication_error", "invalid_api_key", "a valid token is required (Authorization: Bearer ...)")
		return p, false
	}
	if g.cfg.Revoked != nil {
		revoked, err := g.cfg.Revoked(r.Context(), p.TokenID)
		if err != nil {
			openAIError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "cannot check the token now; try again")
			return p, false
		}
		if revoked {
			openAIError(w, http.StatusUnauthorized, "authentication_error", "invalid_api_key", "the token was revoked")
			return p, false
		}
	}
	if !p.Has(scope) {
		openAIError(w, http.StatusForbidden, "permission_error", "insufficient_scope", "the token lacks the scope "+scope)
		return p, false
	}
	return p, true
}

// withOrg runs a user's request as their organization, within its rate.
func (g *Gateway) withOrg(w http.ResponseWriter, r *http.Request, h func(http.ResponseWriter, *http.Request, string)) {
	p, ok := g.principal(w, r, auth.ScopeJobsRead)
	if !ok {
		return
	}
	l, _ := g.limiters.LoadOrStore(p.Org, rate.NewLimiter(rate.Limit(g.cfg.RatePerOrg), g.cfg.Burst))
	if !l.(*rate.Limiter).Allow() {
		w.Header().Set("Retry-After", "1")
		openAIError(w, http.StatusTooManyRequests, "rate_limit_error", "rate_limited",
			fmt.Sprintf("your organization's requests are past %g a second; slow down", g.cfg.RatePerOrg))
		return
	}
	if g.cfg.Spent != nil {
		msg, spent, err := g.cfg.Spent(r.Context(), p.Org)
		if err != nil {
			openAIError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "cannot check the budget now; try again")
			return
		}
		if spent {
			openAIError(w, http.StatusPaymentRequired, "insufficient_quota", "budget_spent", msg)
			return
		}
	}
	h(w, r, p.Org)
}

// tunnel takes an agent's Upgrade.
func (g *Gateway) tunnel(w http.ResponseWriter, r *http.Request) {
	p, ok := g.principal(w, r, auth.ScopeAgent)
	if !ok {
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), upgradeProto) {
		openAIError(w, http.StatusUpgradeRequired, "invalid_request_error", "upgrade_required", "a tunnel is an Upgrade to "+upgradeProto)
		return
	}
	if err := g.tunnels.accept(w, p.Subject); err != nil {
		g.cfg.Logger.Warn("gateway: tunnel refused", "agent", p.Subject, "err", err)
		return
	}
	g.cfg.Logger.Info("gateway: tunnel open", "agent", p.Subject)
}

// model is one entry of /models.
type model struct {
	ID      string `json:"id"`
	Object  string `json:"object"`
	Created int64  `json:"created"`
	OwnedBy string `json:"owned_by"`
	Root    string `json:"root"`
	Parent  string `json:"parent"`
	Status  string `json:"status"`
}

func modelOf(a *job.Adapter) model {
	created := a.CreatedAt.Unix()
	if a.DeployedAt != nil {
		created = a.DeployedAt.Unix()
	}
	return model{ID: a.ModelID(), Object: "model", Created: created, OwnedBy: a.Org, Root: a.ModelID(), Parent: a.Base, Status: a.Deployment}
}

// servable says whether a request may reach adapter a: deployed, on its way, or unloaded for
// being idle (a request deploys it again).
func (g *Gateway) servable(a *job.Adapter) bool {
	return a.Deployment == job.Deployed || a.Deployment == job.Deploying ||
		(g.cfg.Wake != nil && a.Idle && (a.Deployment == job.NotDeployed || a.Deployment == job.Unloading))
}

func (g *Gateway) listModels(w http.ResponseWriter, r *http.Request, org string) {
	var data []model
	for offset := 0; ; offset += 500 {
		page, total, err := g.cfg.Deployments.ListAdapters(r.Context(), org, offset, 500)
		if err != nil {
			openAIError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "cannot list the models now; try again")
			return
		}
		for i := range page {
			if g.servable(&page[i]) {
				data = append(data, modelOf(&page[i]))
			}
		}
		if offset+500 >= total {
			break
		}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": append([]model{}, data...)})
}

// resolve finds the adapter a model id names ("BASE:ADAPTER_ID"), of org; nil if none (answered).
func (g *Gateway) resolve(w http.ResponseWriter, r *http.Request, org, id string) *job.Adapter {
	base, adapterID, ok := cutLast(id, ":")
	if ok {
		if rt, hit := g.routes.Load(org + "/" + adapterID); hit && time.Since(rt.(route).at) < routeTTL && rt.(route).a.Base == base {
			return rt.(route).a
		}
		a, err := g.cfg.Deployments.GetAdapter(r.Context(), org, adapterID)
		if err == nil && a.Deployment == job.Deployed {
			g.routes.Store(org+"/"+adapterID, route{a: a, at: time.Now()})
		}
		switch {
		case err == nil && a.Base == base && g.servable(a):
			return a
		case err != nil && !errors.Is(err, job.ErrNotFound):
			openAIError(w, http.StatusServiceUnavailable, "server_error", "unavailable", "cannot look the model up now; try again")
			return nil
		}
	}
	openAIError(w, http.StatusNotFound, "invalid_request_error", "model_not_found",
		fmt.Sprintf("The model `%s` does not exist or is not deployed (deploy it: prime deployments create, or hostedtrain deploy)", id))
	return nil
}

func cutLast(s, sep string) (string, string, bool) {
	i := strings.LastIndex(s, sep)
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+len(sep):], true
}

func (g *Gateway) getModel(w http.ResponseWriter, r *http.Request, org string) {
	id := strings.TrimPrefix(r.URL.Path, g.cfg.Prefix+"/models/")
	if a := g.resolve(w, r, org, id); a != nil {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(modelOf(a))
	}
}

// ready waits, within WakeWait, for adapter a to be deployed on a node with a tunnel here,
// deploying it again first if it was unloaded for being idle. It returns the adapter and its
// tunnel, or the gateway that holds the node's tunnel (with several), or answers 503 with
// Retry-After.
func (g *Gateway) ready(w http.ResponseWriter, r *http.Request, a *job.Adapter) (*job.Adapter, *tunnel, string) {
	if a.Deployment != job.Deployed && a.Deployment != job.Deploying && g.cfg.Wake != nil {
		token := strings.TrimSpace(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "))
		if err := g.cfg.Wake(r.Context(), a.Org, a.ID, token); err != nil {
			g.cfg.Logger.Warn("gateway: deploy an idle adapter", "adapter", a.ID, "err", err)
		}
	}
	deadline := time.Now().Add(g.cfg.WakeWait)
	for {
		if a.Deployment == job.Deployed {
			if tn := g.tunnels.get(a.Node); tn != nil {
				return a, tn, ""
			}
			if g.cfg.Routes != nil && r.Header.Get(ForwardedHeader) == "" {
				if addr := g.cfg.Routes.owner(r.Context(), a.Node); addr != "" {
					return a, nil, addr
				}
			}
		}
		if time.Now().After(deadline) {
			break
		}
		select {
		case <-r.Context().Done():
			return nil, nil, ""
		case <-time.After(100 * time.Millisecond):
		}
		next, err := g.cfg.Deployments.GetAdapter(r.Context(), a.Org, a.ID)
		if err != nil {
			break
		}
		a = next
	}
	w.Header().Set("Retry-After", "5")
	openAIError(w, http.StatusServiceUnavailable, "server_error", "model_loading",
		fmt.Sprintf("the model %s is being deployed (%s); try again shortly", a.ModelID(), strings.ToLower(a.Deployment)))
	return nil, nil, ""
}

// chatRequest is what the gateway reads of a chat completion.
type chatRequest struct {
	Model         string `json:"model"`
	Stream        bool   `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

type usage struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, org string) {
	start := time.Now()
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, g.cfg.MaxBody))
	if err != nil {
		openAIError(w, http.StatusRequestEntityTooLarge, "invalid_request_error", "body_too_large",
			fmt.Sprintf("the request body is past %d bytes", g.cfg.MaxBody))
		return
	}
	var req chatRequest
	if err := json.Unmarshal(body, &req); err != nil {
		openAIError(w, http.StatusBadRequest, "invalid_request_error", "invalid_json", "the body is not JSON: "+err.Error())
		return
	}
	a := g.resolve(w, r, org, req.Model)
	if a == nil {
		return
	}
	// A stream always asks for its usage (what is metered); a client that did not ask for it
	// does not see it.
	sent := body
	wantsUsage := req.StreamOptions != nil && req.StreamOptions.IncludeUsage
	if req.Stream && !wantsUsage {
		var m map[string]any
		if json.Unmarshal(body, &m) == nil {
			m["stream_options"] = map[string]any{"include_usage": true}
			sent, _ = json.Marshal(m)
		}
	}
	var resp *http.Response
	for attempt := 0; ; attempt++ {
		var tn *tunnel
		var elsewhere string
		a, tn, elsewhere = g.ready(w, r, a)
		if elsewhere != "" {
			forward(w, r, elsewhere, body)
			return
		}
		if tn == nil {
			return
		}
		out, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, "http://agent/v1/chat/completions", bytes.NewReader(sent))
		out.Header.Set("Content-Type", "application/json")
		out.Header.Set(ServerHeader, a.Server)
		var err error
		if resp, err = tn.http.Do(out); err != nil {
			g.meter(r, a, usage{}, true, start, len(body), 0)
			openAIError(w, http.StatusBadGateway, "server_error", "upstream_unreachable", "the model server could not be reached; try again")
			return
		}
		if resp.StatusCode != http.StatusNotFound || attempt > 0 {
			break
		}
		// The node no longer holds it (its server moved since the route was cached): once more,
		// where it is now.
		resp.Body.Close()
		g.routes.Delete(org + "/" + a.ID)
		if fresh, err := g.cfg.Deployments.GetAdapter(r.Context(), org, a.ID); err == nil {
			a = fresh
		}
	}
	defer resp.Body.Close()
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	if !req.Stream || resp.StatusCode != http.StatusOK {
		data, err := io.ReadAll(resp.Body)
		var u struct{ Usage usage }
		_ = json.Unmarshal(data, &u)
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(data)
		g.meter(r, a, u.Usage, err != nil || resp.StatusCode >= 500, start, len(body), len(data))
		return
	}
	u, n, err := relayStream(w, resp.Body, wantsUsage)
	if err != nil {
		g.cfg.Logger.Warn("gateway: a stream broke", "model", a.ModelID(), "err", err)
	}
	g.meter(r, a, u, err != nil, start, len(body), n)
}

// relayStream copies an SSE stream event by event, flushing each: the usage event is read (and
// passed on only if the client asked for it); a stream that breaks before its end gets an
// error event, so the client ends instead of waiting.
func relayStream(w http.ResponseWriter, body io.Reader, wantsUsage bool) (usage, int, error) {
	w.WriteHeader(http.StatusOK)
	flush := func() { _ = http.NewResponseController(w).Flush() }
	flush()
	var u usage
	written := 0
	br := bufio.NewReaderSize(body, 64<<10)
	done := false
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 {
			pass := true
			if data, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("data: ")); ok {
				if bytes.Equal(data, []byte("[DONE]")) {
					done = true
				} else if bytes.Contains(data, []byte(`"usage"`)) {
					var ev struct {
						Choices []json.RawMessage `json:"choices"`
						Usage   *usage            `json:"usage"`
					}
					if json.Unmarshal(data, &ev) == nil && ev.Usage != nil {
						u = *ev.Usage
						pass = wantsUsage || len(ev.Choices) > 0
					}
				}
			}
			if pass {
				n, werr := w.Write(line)
				written += n
				if werr != nil {
					return u, written, werr
				}
				if len(bytes.TrimSpace(line)) == 0 {
					flush()
				}
			} else {
				_, _ = br.ReadBytes('\n') // the blank line that ends the dropped event
			}
		}
		if err != nil {
			if err == io.EOF && done {
				flush()
				return u, written, nil
			}
			msg, _ := json.Marshal(map[string]any{"error": map[string]any{"message": "the model server was lost mid-stream; try again", "type": "server_error", "code": "upstream_lost"}})
			n, _ := fmt.Fprintf(w, "data: %s\n\n", msg)
			flush()
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return u, written + n, err
		}
	}
}

// meter counts a request: its adapter's requests and tokens, and a log line of ids, sizes and
// timings (never a body).
func (g *Gateway) meter(r *http.Request, a *job.Adapter, u usage, failed bool, start time.Time, in, out int) {
	g.mu.Lock()
	c := g.counts[a.ID]
	if c == nil {
		c = &count{org: a.Org}
		g.counts[a.ID] = c
	}
	c.requests++
	if failed {
		c.failures++
	}
	c.prompt += u.Prompt
	c.completion += u.Completion
	if len(c.latencies) < 1000 {
		c.latencies = append(c.latencies, float64(time.Since(start).Microseconds())/1000)
	}
	g.mu.Unlock()
	g.cfg.Logger.Info("inference", "org", a.Org, "model", a.ModelID(), "server", a.Server, "node", a.Node,
		"bytes_in", in, "bytes_out", out, "prompt_tokens", u.Prompt, "completion_tokens", u.Completion,
		"failed", failed, "ms", strconv.FormatInt(time.Since(start).Milliseconds(), 10))
}
