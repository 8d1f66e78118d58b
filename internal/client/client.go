// Package client speaks the hostedtrain HTTP API: the user calls the CLI makes and the agent
// calls a GPU node makes. Errors the API answers come back as *Error, which carries the
// problem document so callers can show each field error and its line.
package client

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// Client calls one API with one token.
type Client struct {
	BaseURL string
	Token   string
	HTTP    *http.Client
}

// New returns a client of the API at baseURL.
func New(baseURL, token string) *Client {
	return &Client{BaseURL: strings.TrimRight(baseURL, "/"), Token: token, HTTP: &http.Client{Timeout: DefaultTimeout}}
}

// DefaultTimeout bounds a request of New's client. It must outlast the longest request the
// service holds open: a claim's long poll (job.DefaultClaimWait, or the agent's --claim-wait,
// which gpuagent checks against it at start) with room for the answer.
const DefaultTimeout = 90 * time.Second

// Error is an error answer from the API.
type Error struct {
	Status  int
	Problem Problem
	// RetryAfter is the answer's Retry-After (0: none).
	RetryAfter time.Duration
}

func (e *Error) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d %s", e.Status, http.StatusText(e.Status))
	if e.Problem.Detail != "" {
		b.WriteString(": " + e.Problem.Detail)
	}
	if e.RetryAfter > 0 && !strings.Contains(e.Problem.Detail, "seconds") {
		fmt.Fprintf(&b, " (try again in %s)", e.RetryAfter)
	}
	for _, f := range e.Problem.Errors {
		if len(e.Problem.Errors) == 1 && strings.Contains(e.Problem.Detail, f.Message) {
			break // the detail says it already (a TOML syntax error names its line and column)
		}
		b.WriteString("\n  " + f.String())
	}
	return b.String()
}

// retryAfter reads a Retry-After of whole seconds (0: none, or a date, which the API never sends).
func retryAfter(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Retry-After"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(n) * time.Second
}

// Is says a client error other than a conflict, a timeout or a rate limit is job.ErrRefused:
// the request itself is at fault.
func (e *Error) Is(target error) bool {
	return target == job.ErrRefused && e.Status >= 400 && e.Status < 500 && e.Status != http.StatusConflict &&
		e.Status != http.StatusTooManyRequests && e.Status != http.StatusRequestTimeout
}

// Unwrap maps the answers the agent acts on to the job package's sentinels.
func (e *Error) Unwrap() error {
	switch e.Status {
	case http.StatusConflict:
		if strings.HasSuffix(e.Problem.Type, "/lease-lost") {
			return job.ErrLeaseLost
		}
		return job.ErrConflict
	case http.StatusNotFound:
		return job.ErrNotFound
	}
	return nil
}

// do sends a request and decodes a JSON answer into out (if not nil). A 204 leaves out alone
// and reports false.
func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) (bool, error) {
	return c.send(ctx, method, path, contentType, body, out, nil)
}

func (c *Client) send(ctx context.Context, method, path, contentType string, body []byte, out any, header http.Header) (bool, error) {
	req, err := http.NewRequestWithContext(ctx, method, c.BaseURL+path, bytes.NewReader(body))
	if err != nil {
		return false, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	req.Header.Set("Accept", "application/json, application/problem+json")
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return false, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, fmt.Errorf("%s %s: read answer: %w", method, path, err)
	}
	if resp.StatusCode >= 400 {
		e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header)}
		if err := json.Unmarshal(data, &e.Problem); err != nil || e.Problem.Status == 0 {
			e.Problem = Problem{Status: resp.StatusCode, Detail: strings.TrimSpace(string(data))}
		}
		return false, e
	}
	if resp.StatusCode == http.StatusNoContent {
		return false, nil
	}
	if out != nil {
		if err := json.Unmarshal(data, out); err != nil {
			return false, fmt.Errorf("%s %s: decode answer: %w", method, path, err)
		}
	}
	return true, nil
}

func (c *Client) postJSON(ctx context.Context, path string, in, out any) (bool, error) {
	body, err := json.Marshal(in)
	if err != nil {
		return false, err
	}
	return c.do(ctx, http.MethodPost, path, "application/json", body, out)
}

// Submitted is the answer to a submit: the job and what will surprise about it.
type Submitted struct {
	job.Job
	Warnings []FieldError `json:"warnings,omitempty"`
}

func jobPath(base, kind string) string {
	if kind == "" {
		return base
	}
	return base + "?kind=" + url.QueryEscape(kind)
}

// SubmitJob sends a job file; contentType is application/toml or application/json, and kind
// is what a file that does not say is taken for ("" for rl). It sends an Idempotency-Key and
// retries a few times when the answer is lost on the way (a network error, a 502/503/504), so
// a retry never makes a second job.
func (c *Client) SubmitJob(ctx context.Context, body []byte, contentType, kind string) (*Submitted, error) {
	key := newIdempotencyKey()
	var s Submitted
	var err error
	for attempt, wait := 1, 500*time.Millisecond; ; attempt, wait = attempt+1, wait*2 {
		_, err = c.send(ctx, http.MethodPost, jobPath("/v1/jobs", kind), contentType, body, &s,
			http.Header{"Idempotency-Key": {key}})
		if err == nil || attempt == 4 || !retryable(err) {
			break
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(wait):
		}
	}
	if err != nil {
		return nil, err
	}
	return &s, nil
}

func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// retryable reports an error after which the request may or may not have taken effect.
func retryable(err error) bool {
	var apiErr *Error
	if errors.As(err, &apiErr) {
		return apiErr.Status == http.StatusBadGateway || apiErr.Status == http.StatusServiceUnavailable ||
			apiErr.Status == http.StatusGatewayTimeout
	}
	var ne net.Error
	return errors.As(err, &ne) || errors.Is(err, io.ErrUnexpectedEOF)
}

// PreviewJob validates and normalizes a job file without queueing it.
func (c *Client) PreviewJob(ctx context.Context, body []byte, contentType, kind string) (*Preview, error) {
	var p Preview
	if _, err := c.do(ctx, http.MethodPost, jobPath("/v1/jobs/preview", kind), contentType, body, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// GetJob fetches one job.
func (c *Client) GetJob(ctx context.Context, id string) (*job.Job, error) {
	var j job.Job
	if _, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id), "", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// ListJobs fetches a page of jobs, newest first.
func (c *Client) ListJobs(ctx context.Context, f job.ListFilter, cursor string, limit int) ([]*job.Job, string, error) {
	q := url.Values{}
	if len(f.Statuses) > 0 {
		st := make([]string, len(f.Statuses))
		for i, s := range f.Statuses {
			st[i] = string(s)
		}
		q.Set("status", strings.Join(st, ","))
	}
	if f.Kind != "" {
		q.Set("kind", f.Kind)
	}
	if !f.CreatedAfter.IsZero() {
		q.Set("created_after", f.CreatedAfter.UTC().Format(time.RFC3339Nano))
	}
	if !f.CreatedBefore.IsZero() {
		q.Set("created_before", f.CreatedBefore.UTC().Format(time.RFC3339Nano))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page struct {
		Items      []*job.Job `json:"items"`
		NextCursor string     `json:"next_cursor"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/jobs?"+q.Encode(), "", nil, &page); err != nil {
		return nil, "", err
	}
	return page.Items, page.NextCursor, nil
}

// RestartJob runs a failed or stopped job again from its newest checkpoint (a running one is
// stopped first).
func (c *Client) RestartJob(ctx context.Context, id string) (*job.Job, error) {
	var j job.Job
	if _, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/restart", "", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// SetBudget sets a job's budget: the GPU hours, the cost at the operator's price, or both (the
// lower binds); neither removes it.
func (c *Client) SetBudget(ctx context.Context, id string, maxGPUHours, maxCost float64) (*job.Job, error) {
	body := map[string]float64{}
	if maxGPUHours > 0 {
		body["max_gpu_hours"] = maxGPUHours
	}
	if maxCost > 0 {
		body["max_cost"] = maxCost
	}
	b, _ := json.Marshal(body)
	var j job.Job
	if _, err := c.do(ctx, http.MethodPut, "/v1/jobs/"+url.PathEscape(id)+"/budget", "application/json", b, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// GetOrg reads an organization's queue settings and use (scope admin).
func (c *Client) GetOrg(ctx context.Context, org string) (*job.OrgStatus, error) {
	var st job.OrgStatus
	if _, err := c.do(ctx, http.MethodGet, "/v1/admin/orgs/"+url.PathEscape(org), "", nil, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// SetOrg changes an organization's weight and limits (scope admin).
func (c *Client) SetOrg(ctx context.Context, org string, s job.OrgSettings) (*job.OrgStatus, error) {
	body, _ := json.Marshal(s)
	var st job.OrgStatus
	if _, err := c.do(ctx, http.MethodPut, "/v1/admin/orgs/"+url.PathEscape(org), "application/json", body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Nodes lists the nodes the queue knows, with their health (scope admin).
func (c *Client) Nodes(ctx context.Context) ([]job.Node, error) {
	var out struct {
		Items []job.Node `json:"items"`
	}
	if _, err := c.do(ctx, http.MethodGet, "/v1/admin/nodes", "", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// SetNode cordons (job.NodeCordoned), drains (job.NodeDraining) or uncordons (job.NodeOK) a
// node (scope admin).
func (c *Client) SetNode(ctx context.Context, id, state, reason string) (*job.Node, error) {
	body, _ := json.Marshal(map[string]string{"state": state, "reason": reason})
	var n job.Node
	if _, err := c.do(ctx, http.MethodPut, "/v1/admin/nodes/"+url.PathEscape(id), "application/json", body, &n); err != nil {
		return nil, err
	}
	return &n, nil
}

// RevokeToken refuses token from now until it expires (scope admin); it returns the token's
// id and when the revocation ends.
func (c *Client) RevokeToken(ctx context.Context, token string) (string, time.Time, error) {
	var out struct {
		JTI          string    `json:"jti"`
		RevokedUntil time.Time `json:"revoked_until"`
	}
	if _, err := c.postJSON(ctx, "/v1/admin/tokens/revoke", map[string]string{"token": token}, &out); err != nil {
		return "", time.Time{}, err
	}
	return out.JTI, out.RevokedUntil, nil
}

// CancelJob asks for a job to stop.
func (c *Client) CancelJob(ctx context.Context, id string) (*job.Job, error) {
	var j job.Job
	if _, err := c.do(ctx, http.MethodPost, "/v1/jobs/"+url.PathEscape(id)+"/cancel", "", nil, &j); err != nil {
		return nil, err
	}
	return &j, nil
}

// Events fetches the job's events after sequence number after.
func (c *Client) Events(ctx context.Context, id string, after int64) ([]job.Event, error) {
	var page struct {
		Items []job.Event `json:"items"`
	}
	path := fmt.Sprintf("/v1/jobs/%s/events?after=%d&limit=100", url.PathEscape(id), after)
	if _, err := c.do(ctx, http.MethodGet, path, "", nil, &page); err != nil {
		return nil, err
	}
	return page.Items, nil
}

// Claim asks for the next job that fits req.GPUs, waiting up to req.Wait for one; nil when
// none came.
//
// Ending ctx while the claim waits is safe: the claim is abandoned by its id (one is made up
// when req.ClaimID is empty), so a job claimed as the agent stopped waiting goes back to the
// queue rather than being held by nobody. Once the answer has begun to arrive, it is read
// whole even if ctx ends. (The agent is the token's subject, not req.AgentID.)
func (c *Client) Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error) {
	if req.ClaimID == "" {
		req.ClaimID = newClaimID()
	}
	var cl job.Claim
	body := req.Body()
	reqCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	var answering atomic.Bool
	reqCtx = httptrace.WithClientTrace(reqCtx, &httptrace.ClientTrace{GotFirstResponseByte: func() { answering.Store(true) }})
	stop := context.AfterFunc(ctx, func() {
		if !answering.Load() {
			cancel()
		}
	})
	defer stop()
	ok, err := c.postJSON(reqCtx, "/v1/agent/claim", body, &cl)
	if err != nil && reqCtx.Err() != nil {
		// We stopped waiting: whatever the service did with the claim, take it back.
		actx, acancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer acancel()
		if aerr := c.AbandonClaim(actx, req.ClaimID); aerr != nil {
			return nil, fmt.Errorf("%w; abandoning the claim also failed: %v", err, aerr)
		}
		return nil, err
	}
	if err != nil || !ok {
		return nil, err
	}
	return &cl, nil
}

// AbandonClaim takes back a claim whose answer never arrived (see Claim).
func (c *Client) AbandonClaim(ctx context.Context, claimID string) error {
	var err error
	for attempt := range 3 {
		if _, err = c.do(ctx, http.MethodPost, "/v1/agent/claims/"+url.PathEscape(claimID)+"/abandon", "", nil, nil); err == nil {
			return nil
		}
		var apiErr *Error
		if errors.As(err, &apiErr) && apiErr.Status < 500 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(time.Duration(attempt+1) * 200 * time.Millisecond):
		}
	}
	return err
}

func newClaimID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Heartbeat renews a lease and reports progress. A lost lease is job.ErrLeaseLost.
func (c *Client) Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error) {
	var rep job.HeartbeatReply
	_, err := c.postJSON(ctx, "/v1/agent/jobs/"+url.PathEscape(id)+"/heartbeat", hb, &rep)
	return rep, err
}

// Complete reports a pipeline that finished.
func (c *Client) Complete(ctx context.Context, id string, o job.Outcome) error {
	_, err := c.postJSON(ctx, "/v1/agent/jobs/"+url.PathEscape(id)+"/complete", o, nil)
	return err
}

// Release gives a job back (the node is going away) so it resumes elsewhere at once.
func (c *Client) Release(ctx context.Context, id string, o job.Outcome) error {
	_, err := c.postJSON(ctx, "/v1/agent/jobs/"+url.PathEscape(id)+"/release", o, nil)
	return err
}

// Fail reports a pipeline that failed or stopped on request.
func (c *Client) Fail(ctx context.Context, id string, o job.Outcome) error {
	if o.Reason == "" {
		return errors.New("client: a failure needs a reason")
	}
	_, err := c.postJSON(ctx, "/v1/agent/jobs/"+url.PathEscape(id)+"/fail", o, nil)
	return err
}

// JobMetrics reads a job's metrics: steps from minStep to maxStep (0: no bound), only the
// named metrics (none: all), at most limit rows (0: the service's default).
func (c *Client) JobMetrics(ctx context.Context, id string, minStep, maxStep int, names []string, limit int) (*MetricsPage, error) {
	q := url.Values{}
	q.Set("min_step", strconv.Itoa(minStep))
	if maxStep > 0 {
		q.Set("max_step", strconv.Itoa(maxStep))
	}
	if len(names) > 0 {
		q.Set("names", strings.Join(names, ","))
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page MetricsPage
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/metrics?"+q.Encode(), "", nil, &page)
	return &page, err
}

// JobCheckpoints lists a job's checkpoints, ascending by step.
func (c *Client) JobCheckpoints(ctx context.Context, id string) ([]Checkpoint, error) {
	var page struct {
		Items []Checkpoint `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/checkpoints", "", nil, &page)
	return page.Items, err
}

// JobArtifacts lists a job's outputs.
func (c *Client) JobArtifacts(ctx context.Context, id string) ([]Artifact, error) {
	var page struct {
		Items []Artifact `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/artifacts", "", nil, &page)
	return page.Items, err
}

// CreateWebhook registers an endpoint; the answer carries its signing secret, once.
func (c *Client) CreateWebhook(ctx context.Context, url string, events []string, description string) (*webhook.Endpoint, error) {
	var ep webhook.Endpoint
	body := map[string]any{"url": url, "events": events}
	if description != "" {
		body["description"] = description
	}
	if _, err := c.postJSON(ctx, "/v1/webhooks", body, &ep); err != nil {
		return nil, err
	}
	return &ep, nil
}

// ListWebhooks lists the organization's endpoints.
func (c *Client) ListWebhooks(ctx context.Context) ([]webhook.Endpoint, error) {
	var page struct {
		Items []webhook.Endpoint `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/webhooks", "", nil, &page)
	return page.Items, err
}

// GetWebhook reads one endpoint.
func (c *Client) GetWebhook(ctx context.Context, id string) (*webhook.Endpoint, error) {
	var ep webhook.Endpoint
	if _, err := c.do(ctx, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id), "", nil, &ep); err != nil {
		return nil, err
	}
	return &ep, nil
}

// UpdateWebhook changes an endpoint: the fields of patch that are set (see the API's
// WebhookPatch: url, events, enabled, description, rotate_secret).
func (c *Client) UpdateWebhook(ctx context.Context, id string, patch map[string]any) (*webhook.Endpoint, error) {
	body, err := json.Marshal(patch)
	if err != nil {
		return nil, err
	}
	var ep webhook.Endpoint
	if _, err := c.do(ctx, http.MethodPatch, "/v1/webhooks/"+url.PathEscape(id), "application/json", body, &ep); err != nil {
		return nil, err
	}
	return &ep, nil
}

// DeleteWebhook removes an endpoint.
func (c *Client) DeleteWebhook(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/webhooks/"+url.PathEscape(id), "", nil, nil)
	return err
}

// TestWebhook queues a webhook.test delivery.
func (c *Client) TestWebhook(ctx context.Context, id string) (*webhook.Delivery, error) {
	var d webhook.Delivery
	if _, err := c.do(ctx, http.MethodPost, "/v1/webhooks/"+url.PathEscape(id)+"/test", "", nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// WebhookDeliveries lists an endpoint's deliveries, newest first.
func (c *Client) WebhookDeliveries(ctx context.Context, id, cursor string, limit int) ([]webhook.Delivery, string, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var page struct {
		Items      []webhook.Delivery `json:"items"`
		NextCursor string             `json:"next_cursor"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/webhooks/"+url.PathEscape(id)+"/deliveries?"+q.Encode(), "", nil, &page)
	return page.Items, page.NextCursor, err
}

// RedeliverWebhook sends a delivery again now.
func (c *Client) RedeliverWebhook(ctx context.Context, id, deliveryID string) (*webhook.Delivery, error) {
	var d webhook.Delivery
	path := "/v1/webhooks/" + url.PathEscape(id) + "/deliveries/" + url.PathEscape(deliveryID) + "/redeliver"
	if _, err := c.do(ctx, http.MethodPost, path, "", nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// LogOptions selects log lines (see GET /v1/jobs/{id}/logs).
type LogOptions struct {
	Tail      int
	Since     string
	Component string
	Search    string
	Regex     bool // Search is a regular expression
	Level     string
	Attempt   int
}

func (o LogOptions) query() url.Values {
	q := url.Values{}
	if o.Tail > 0 {
		q.Set("tail_lines", strconv.Itoa(o.Tail))
	}
	for k, v := range map[string]string{"since": o.Since, "component": o.Component, "search": o.Search, "level": o.Level} {
		if v != "" {
			q.Set(k, v)
		}
	}
	if o.Attempt > 0 {
		q.Set("attempt", strconv.Itoa(o.Attempt))
	}
	if o.Regex && o.Search != "" {
		q.Set("regex", "true")
	}
	return q
}

// JobLogs reads a job's log lines.
func (c *Client) JobLogs(ctx context.Context, id string, o LogOptions) (*LogPage, error) {
	var page LogPage
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/logs?"+o.query().Encode(), "", nil, &page)
	return &page, err
}

// FollowLogs calls line for the tail and then each new line until the job has ended (or ctx
// does). A stream the service ends early (a deployment's stream limit) is resumed where it
// stopped; attempt is called when a newer attempt is followed.
func (c *Client) FollowLogs(ctx context.Context, id string, o LogOptions, line func(LogLine), attempt func(int64)) error {
	q := o.query()
	q.Set("follow", "true")
	return c.stream(ctx, "/v1/jobs/"+url.PathEscape(id)+"/logs?"+q.Encode(), id, func(name string, data []byte) error {
		if name == "attempt" {
			var a struct {
				Attempt int64 `json:"attempt"`
			}
			if err := json.Unmarshal(data, &a); err == nil && attempt != nil {
				attempt(a.Attempt)
			}
			return nil
		}
		var l LogLine
		if err := json.Unmarshal(data, &l); err != nil {
			return err
		}
		line(l)
		return nil
	})
}

// FollowEvents calls ev for each of the job's events after `after`, as they happen, until the
// job has ended.
func (c *Client) FollowEvents(ctx context.Context, id string, after int64, ev func(job.Event)) error {
	path := fmt.Sprintf("/v1/jobs/%s/events?after=%d", url.PathEscape(id), after)
	return c.stream(ctx, path, id, func(_ string, data []byte) error {
		var e job.Event
		if err := json.Unmarshal(data, &e); err != nil {
			return err
		}
		ev(e)
		return nil
	})
}

// stream reads a Server-Sent Events stream, reconnecting with Last-Event-ID when it ends
// before the job has.
func (c *Client) stream(ctx context.Context, path, jobID string, handle func(name string, data []byte) error) error {
	lastID := ""
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.BaseURL+path, nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+c.Token)
		req.Header.Set("Accept", "text/event-stream")
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := c.streamHTTP().Do(req)
		if err != nil {
			return err
		}
		if resp.StatusCode != http.StatusOK {
			data, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			e := &Error{Status: resp.StatusCode, RetryAfter: retryAfter(resp.Header)}
			if err := json.Unmarshal(data, &e.Problem); err != nil || e.Problem.Status == 0 {
				e.Problem = Problem{Status: resp.StatusCode, Detail: strings.TrimSpace(string(data))}
			}
			return e
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 16<<20)
		var id, name string
		var data []byte
		for sc.Scan() {
			line := sc.Text()
			switch {
			case line == "":
				if data != nil {
					if id != "" {
						lastID = id
					}
					if err := handle(name, data); err != nil {
						resp.Body.Close()
						return err
					}
				}
				id, name, data = "", "", nil
			case strings.HasPrefix(line, "id:"):
				id = strings.TrimSpace(line[3:])
			case strings.HasPrefix(line, "event:"):
				name = strings.TrimSpace(line[6:])
			case strings.HasPrefix(line, "data:"):
				data = append(data, strings.TrimPrefix(line[5:], " ")...)
			}
		}
		resp.Body.Close()
		if ctx.Err() != nil {
			return ctx.Err()
		}
		j, err := c.GetJob(ctx, jobID)
		if err != nil {
			return err
		}
		if j.Status.Terminal() {
			return nil
		}
	}
}

// streamHTTP is the client for streams: no overall timeout (a stream lasts as long as the job).
func (c *Client) streamHTTP() *http.Client {
	h := *c.HTTP
	h.Timeout = 0
	return &h
}

// JobProgress reads where a run stands, its pace and ETA.
func (c *Client) JobProgress(ctx context.Context, id string) (*JobProgress, error) {
	var p JobProgress
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/progress", "", nil, &p)
	return &p, err
}

// PinCheckpoint keeps job id's committed checkpoint of step past its keep_cloud (pin) or lets
// it go again (!pin).
func (c *Client) PinCheckpoint(ctx context.Context, id string, step int, pin bool) error {
	method := http.MethodPut
	if !pin {
		method = http.MethodDelete
	}
	_, err := c.do(ctx, method, "/v1/jobs/"+url.PathEscape(id)+"/checkpoints/"+strconv.Itoa(step)+"/pin", "", nil, nil)
	return err
}

// ForkJob starts a new run from a committed checkpoint of job id.
func (c *Client) ForkJob(ctx context.Context, id string, req ForkRequest) (*job.Job, error) {
	var j job.Job
	_, err := c.postJSON(ctx, "/v1/jobs/"+url.PathEscape(id)+"/fork", req, &j)
	return &j, err
}

// DeleteJob deletes a job that ended, with everything it stored.
func (c *Client) DeleteJob(ctx context.Context, id string) error {
	_, err := c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id), "", nil, nil)
	return err
}

// StopAndDeleteJob deletes a job that may be live: stopped first, then deleted once it has
// ended. deleted says it is gone already; otherwise the job is returned as it stops.
func (c *Client) StopAndDeleteJob(ctx context.Context, id string) (deleted bool, stopping *job.Job, err error) {
	var j job.Job
	answered, err := c.do(ctx, http.MethodDelete, "/v1/jobs/"+url.PathEscape(id)+"?stop=true", "", nil, &j)
	if err != nil {
		return false, nil, err
	}
	if answered { // 202: the job as it stops (a 204 is deleted)
		return false, &j, nil
	}
	return true, nil, nil
}

// JobUsage reads what one job used.
func (c *Client) JobUsage(ctx context.Context, id string) (*JobUsage, error) {
	var u JobUsage
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/usage", "", nil, &u)
	return &u, err
}

// JobSamples reads a page of a step's samples; step 0 for the newest step, page and limit 0
// for the defaults.
func (c *Client) JobSamples(ctx context.Context, id string, step, page, limit int) (*SamplesPage, error) {
	q := url.Values{}
	for name, n := range map[string]int{"step": step, "page": page, "limit": limit} {
		if n > 0 {
			q.Set(name, strconv.Itoa(n))
		}
	}
	var p SamplesPage
	_, err := c.do(ctx, http.MethodGet, withQuery("/v1/jobs/"+url.PathEscape(id)+"/samples", q), "", nil, &p)
	return &p, err
}

// JobDistribution reads a step's histogram of typ (rewards or advantages; "" for rewards);
// step 0 for the newest step.
func (c *Client) JobDistribution(ctx context.Context, id string, step int, typ string) (*DistributionPage, error) {
	q := url.Values{}
	if step > 0 {
		q.Set("step", strconv.Itoa(step))
	}
	if typ != "" {
		q.Set("type", typ)
	}
	var d DistributionPage
	_, err := c.do(ctx, http.MethodGet, withQuery("/v1/jobs/"+url.PathEscape(id)+"/distributions", q), "", nil, &d)
	return &d, err
}

// withQuery is path with q's query string, if any.
func withQuery(path string, q url.Values) string {
	if len(q) == 0 {
		return path
	}
	return path + "?" + q.Encode()
}

// Usage reads the organization's GPU time and its jobs', a page of jobs at a time.
func (c *Client) Usage(ctx context.Context, cursor string, limit int) (*Usage, error) {
	q := url.Values{}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	if limit > 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	var u Usage
	_, err := c.do(ctx, http.MethodGet, "/v1/usage?"+q.Encode(), "", nil, &u)
	return &u, err
}

// Download fetches a download link into w (the link is its own credential: no token goes with
// it) and returns the bytes written.
func (c *Client) Download(ctx context.Context, link string, w io.Writer) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, link, nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.streamHTTP().Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		data, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		return 0, fmt.Errorf("download: %d %s", resp.StatusCode, strings.TrimSpace(string(data)))
	}
	return io.Copy(w, resp.Body)
}

// GPUs lists the GPU types jobs run on.
func (c *Client) GPUs(ctx context.Context) ([]GPUType, error) {
	var list struct {
		Items []GPUType `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/gpus", "", nil, &list)
	return list.Items, err
}

// Models lists the models training jobs may name, with the GPUs an rl job of each takes.
func (c *Client) Models(ctx context.Context) (*ModelList, error) {
	var list ModelList
	_, err := c.do(ctx, http.MethodGet, "/v1/models", "", nil, &list)
	return &list, err
}

// Wire types: the API's answers and requests, defined once in internal/wire, which the server
// imports too.
type (
	Range            = wire.Range
	SamplesPage      = wire.SamplesPage
	Preview          = wire.Preview
	ModelList        = wire.ModelList
	LogPage          = wire.LogPage
	JobProgress      = wire.JobProgress
	Estimate         = wire.Estimate
	DownloadFile     = wire.DownloadFile
	DistributionPage = wire.DistributionPage
	Checkpoint       = wire.Checkpoint
	UsageJob         = wire.UsageJob
	Problem          = wire.Problem
	Model            = wire.Model
	JobUsage         = wire.JobUsage
	GPUType          = wire.GPUType
	Artifact         = wire.Artifact
	Usage            = wire.Usage
	TokenCounts      = wire.TokenCounts
	OrgUsage         = wire.OrgUsage
	MetricsPage      = wire.MetricsPage
	ForkRequest      = wire.ForkRequest
	FieldError       = wire.FieldError
	LogLine          = wire.LogLine
)

// Serving is a model server's agent, under its serve job's lease token, saying which adapters
// its server holds and which it could not load (id → why); the answer is the adapters it is to
// hold, each with its weights' files and links. A lost lease is job.ErrLeaseLost.
func (c *Client) Serving(ctx context.Context, id, token string, loaded []string, failed map[string]string) ([]wire.ServedAdapter, error) {
	type failure struct {
		ID    string `json:"id"`
		Error string `json:"error"`
	}
	body := struct {
		Token  string    `json:"token"`
		Loaded []string  `json:"loaded"`
		Failed []failure `json:"failed"`
	}{Token: token, Loaded: append([]string{}, loaded...), Failed: []failure{}}
	for a, why := range failed {
		body.Failed = append(body.Failed, failure{a, why})
	}
	var rep struct {
		Adapters []wire.ServedAdapter `json:"adapters"`
	}
	_, err := c.postJSON(ctx, "/v1/agent/jobs/"+url.PathEscape(id)+"/serving", body, &rep)
	return rep.Adapters, err
}

// Deployments are the organization's deployments, newest first, from offset, and how many it
// has.
func (c *Client) Deployments(ctx context.Context, offset, limit int) ([]wire.Deployment, int, error) {
	var page struct {
		Items []wire.Deployment `json:"items"`
		Total int               `json:"total"`
	}
	_, err := c.do(ctx, http.MethodGet, fmt.Sprintf("/v1/deployments?offset=%d&limit=%d", offset, limit), "", nil, &page)
	return page.Items, page.Total, err
}

// Deployment reads one deployment.
func (c *Client) Deployment(ctx context.Context, id string) (*wire.Deployment, error) {
	var d wire.Deployment
	_, err := c.do(ctx, http.MethodGet, "/v1/deployments/"+url.PathEscape(id), "", nil, &d)
	return &d, err
}

// Deploy deploys a committed checkpoint of a job: step is a step number, "best" or "latest".
func (c *Client) Deploy(ctx context.Context, jobID, step string) (*wire.Deployment, error) {
	body := map[string]any{"job": jobID}
	if n, err := strconv.Atoi(step); err == nil {
		body["step"] = n
	} else if step != "" {
		body["step"] = step
	}
	var d wire.Deployment
	_, err := c.postJSON(ctx, "/v1/deployments", body, &d)
	return &d, err
}

// Undeploy unloads a deployment.
func (c *Client) Undeploy(ctx context.Context, id string) (*wire.Deployment, error) {
	var d wire.Deployment
	_, err := c.do(ctx, http.MethodDelete, "/v1/deployments/"+url.PathEscape(id), "", nil, &d)
	return &d, err
}

// WarmNode asks node's agent to fetch models into its cache ahead of demand (scope admin).
func (c *Client) WarmNode(ctx context.Context, node string, models []string) error {
	body, _ := json.Marshal(map[string]any{"models": models})
	_, err := c.do(ctx, http.MethodPost, "/v1/admin/nodes/"+url.PathEscape(node)+"/warm", "application/json", body, nil)
	return err
}

// ReportCache reports the agent's node cache and answers the models it is asked to warm
// (scope agent).
func (c *Client) ReportCache(ctx context.Context, stats map[string]job.CacheStats) ([]string, error) {
	body, _ := json.Marshal(map[string]any{"stats": stats})
	var out struct {
		Warm []string `json:"warm"`
	}
	if _, err := c.do(ctx, http.MethodPost, "/v1/agent/cache", "application/json", body, &out); err != nil {
		return nil, err
	}
	return out.Warm, nil
}
