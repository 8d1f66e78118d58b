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
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
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

// Problem is the API's problem+json document.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// FieldError names one thing wrong with a request: a body field by JSON pointer (and its
// place in the TOML or JSON document where known) or a parameter.
type FieldError struct {
	Pointer   string `json:"pointer,omitempty"`
	Parameter string `json:"parameter,omitempty"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	Message   string `json:"message"`
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

// String places the message: "line 3 (/sampling/max_token): unknown key ...".
func (f FieldError) String() string {
	switch {
	case f.Line > 0 && f.Pointer != "":
		return fmt.Sprintf("line %d (%s): %s", f.Line, f.Pointer, f.Message)
	case f.Line > 0:
		return fmt.Sprintf("line %d, column %d: %s", f.Line, f.Column, f.Message)
	case f.Pointer != "":
		return f.Pointer + ": " + f.Message
	case f.Parameter != "":
		return "parameter " + f.Parameter + ": " + f.Message
	}
	return f.Message
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

// Preview is a job as it would run, without queueing it.
type Preview struct {
	Config   json.RawMessage `json:"config"`
	Warnings []FieldError    `json:"warnings"`
	GPUs     struct {
		Count int    `json:"count"`
		Type  string `json:"type"`
	} `json:"gpus"`
	Queue struct {
		RunsAhead int `json:"runs_ahead"`
	} `json:"queue"`
	Estimate *Estimate `json:"estimate,omitempty"`
}

// Estimate is what a training job would take, from the step times of past runs of the same
// model on the same number of GPUs (or the service's default where there are none).
type Estimate struct {
	BasedOn         string  `json:"based_on"`
	Runs            int     `json:"runs"`
	Steps           int     `json:"steps"`
	StepSeconds     Range   `json:"step_seconds"`
	DurationSeconds Range   `json:"duration_seconds"`
	GPUHours        Range   `json:"gpu_hours"`
	Cost            *Range  `json:"cost,omitempty"`
	PricePerGPUHour float64 `json:"price_per_gpu_hour,omitempty"`
}

// Range is a low, expected and high figure.
type Range struct {
	Low      float64 `json:"low"`
	Expected float64 `json:"expected"`
	High     float64 `json:"high"`
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

// MetricsPage is a page of a job's metrics, one row a step.
type MetricsPage struct {
	Items       []jobdata.Row `json:"items"`
	NextMinStep *int          `json:"next_min_step,omitempty"`
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

// Checkpoint is one of a job's checkpoints in storage.
type Checkpoint struct {
	Step   int    `json:"step"`
	Status string `json:"status"`
	Pinned bool   `json:"pinned,omitempty"`
	// Metrics are the step's reward and newest eval_reward at or before it.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Best marks the committed checkpoint with the highest value of the job's best_metric.
	Best     bool           `json:"best,omitempty"`
	Bytes    int64          `json:"bytes"`
	Files    int            `json:"files"`
	Time     *time.Time     `json:"time,omitempty"`
	Download []DownloadFile `json:"download,omitempty"`
}

// DownloadFile is one file of a committed checkpoint and a short-lived link to it.
type DownloadFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
	URL    string `json:"url"`
}

// JobCheckpoints lists a job's checkpoints, ascending by step.
func (c *Client) JobCheckpoints(ctx context.Context, id string) ([]Checkpoint, error) {
	var page struct {
		Items []Checkpoint `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/checkpoints", "", nil, &page)
	return page.Items, err
}

// Artifact is one of a job's outputs.
type Artifact struct {
	Name  string     `json:"name"`
	Bytes int64      `json:"bytes"`
	Time  *time.Time `json:"time,omitempty"`
	URL   string     `json:"url,omitempty"`
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

// LogLine is one line of a job's log.
type LogLine = jobdata.LogLine

// LogPage is a read of a job's logs.
type LogPage struct {
	Attempt    int64     `json:"attempt,omitempty"`
	Attempts   []int64   `json:"attempts"`
	Components []string  `json:"components,omitempty"`
	Items      []LogLine `json:"items"`
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

// JobProgress is where a run stands.
type JobProgress struct {
	JobID          string             `json:"job_id"`
	Status         job.Status         `json:"status"`
	Step           int                `json:"step"`
	MaxSteps       int                `json:"max_steps"`
	Percent        float64            `json:"percent"`
	Metrics        map[string]float64 `json:"metrics,omitempty"`
	Series         map[string]string  `json:"series,omitempty"`
	Result         *job.Result        `json:"result,omitempty"`
	CheckpointStep int                `json:"checkpoint_step,omitempty"`
	StepSeconds    *float64           `json:"step_seconds,omitempty"`
	ETASeconds     *float64           `json:"eta_seconds,omitempty"`
	ElapsedSeconds *float64           `json:"elapsed_seconds,omitempty"`
	StartedAt      *time.Time         `json:"started_at,omitempty"`
	UpdatedAt      time.Time          `json:"updated_at"`
	// StepsWithSamples are the steps whose rollouts are stored (prime-rl runs only).
	StepsWithSamples []int `json:"steps_with_samples,omitempty"`
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

// ForkRequest is what a fork changes: the step it starts from (0: the newest committed
// checkpoint) and the new run's settings (zero: the job's own).
type ForkRequest struct {
	Step         int     `json:"step,omitempty"`
	MaxSteps     int     `json:"max_steps,omitempty"`
	Name         string  `json:"name,omitempty"`
	LearningRate float64 `json:"learning_rate,omitempty"`
	Priority     *int    `json:"priority,omitempty"`
	TimeLimit    string  `json:"time_limit,omitempty"`
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

// JobUsage is what one job used: GPU time, its price where the operator set one, and the
// tokens its rollouts took.
type JobUsage struct {
	JobID           string     `json:"job_id"`
	Name            string     `json:"name,omitempty"`
	Kind            string     `json:"kind"`
	Status          job.Status `json:"status"`
	Model           string     `json:"model,omitempty"`
	GPUs            int        `json:"gpus"`
	GPUType         string     `json:"gpu_type,omitempty"`
	GPUSeconds      float64    `json:"gpu_seconds"`
	PricePerGPUHour float64    `json:"price_per_gpu_hour,omitempty"`
	CostUSD         *float64   `json:"cost_usd,omitempty"`
	// Projected* are what the whole run will use at its pace so far (a running rl job).
	ProjectedGPUSeconds *float64 `json:"projected_gpu_seconds,omitempty"`
	ProjectedCostUSD    *float64 `json:"projected_cost_usd,omitempty"`
	Step                int      `json:"step"`
	MaxSteps            int      `json:"max_steps,omitempty"`
	// StorageBytes is what the job keeps in object storage as last measured; 0 before.
	StorageBytes int64       `json:"storage_bytes,omitempty"`
	Tokens       TokenCounts `json:"tokens"`
	// JudgeTokens are the tokens of the service's judge calls for the job (billed to its
	// organization); absent when it used none.
	JudgeTokens *TokenCounts `json:"judge_tokens,omitempty"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

// TokenCounts are tokens of the run's rollouts: prompts (input) and completions (output).
type TokenCounts struct {
	Total  int64 `json:"total"`
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// JobUsage reads what one job used.
func (c *Client) JobUsage(ctx context.Context, id string) (*JobUsage, error) {
	var u JobUsage
	_, err := c.do(ctx, http.MethodGet, "/v1/jobs/"+url.PathEscape(id)+"/usage", "", nil, &u)
	return &u, err
}

// SamplesPage is a page of one step's rollout samples: what the model was asked, what it
// answered, how it scored. Step is nil while the job has none.
type SamplesPage struct {
	JobID      string           `json:"job_id"`
	Step       *int             `json:"step,omitempty"`
	Steps      []int            `json:"steps"`
	Episodes   int              `json:"episodes,omitempty"`
	Samples    []jobdata.Sample `json:"samples"`
	Total      int              `json:"total"`
	Page       int              `json:"page"`
	Limit      int              `json:"limit"`
	TotalPages int              `json:"total_pages"`
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

// DistributionPage is a histogram of a step's rewards or advantages.
type DistributionPage struct {
	JobID string `json:"job_id"`
	Step  *int   `json:"step,omitempty"`
	Type  string `json:"type"`
	Steps []int  `json:"steps"`
	jobdata.Distribution
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

// Usage is GPU time used by the organization and by its jobs.
type Usage struct {
	Organization OrgUsage   `json:"organization"`
	Jobs         []UsageJob `json:"jobs"`
	NextCursor   string     `json:"next_cursor,omitempty"`
	// ByUser and ByToken are the organization's GPU time (and its cost, where priced) by the
	// user and by the token that submitted its jobs, the most used first.
	ByUser  []job.UsageShare `json:"by_user"`
	ByToken []job.UsageShare `json:"by_token"`
}

// OrgUsage is the organization's GPU time and what runs now.
type OrgUsage struct {
	Org         string  `json:"org"`
	GPUSeconds  float64 `json:"gpu_seconds"`
	Running     int     `json:"running"`
	RunningGPUs int     `json:"running_gpus"`
	// StorageBytes is what its jobs keep in object storage, as last measured.
	StorageBytes int64 `json:"storage_bytes"`
}

// UsageJob is one job's line of the organization's usage.
type UsageJob struct {
	ID         string     `json:"id"`
	Name       string     `json:"name,omitempty"`
	Kind       string     `json:"kind"`
	Status     job.Status `json:"status"`
	GPUs       int        `json:"gpus"`
	GPUType    string     `json:"gpu_type,omitempty"`
	GPUSeconds float64    `json:"gpu_seconds"`
	// StorageBytes is what the job keeps in object storage, as last measured; 0 before.
	StorageBytes int64     `json:"storage_bytes,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
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

// Model is one model a job may train without naming a renderer.
type Model struct {
	Name            string  `json:"name"`
	GPUs            int     `json:"gpus"`
	PricePerGPUHour float64 `json:"price_per_gpu_hour,omitempty"`
	Renderer        string  `json:"renderer,omitempty"`
	// IdleNodes is how many nodes wait for work with the model's GPUs free right now.
	IdleNodes int `json:"idle_nodes"`
}

// GPUType is a GPU type jobs run on: the most one job takes (a node's), and how many nodes
// wait for work now with at least n GPUs free (IdleNodes[n-1]).
type GPUType struct {
	GPUType   string `json:"gpu_type"`
	PerNode   int    `json:"per_node"`
	IdleNodes []int  `json:"idle_nodes"`
}

// GPUs lists the GPU types jobs run on.
func (c *Client) GPUs(ctx context.Context) ([]GPUType, error) {
	var list struct {
		Items []GPUType `json:"items"`
	}
	_, err := c.do(ctx, http.MethodGet, "/v1/gpus", "", nil, &list)
	return list.Items, err
}

// ModelList is what training jobs may name: the operator's list, or the models prime-rl
// renders by itself (then any other model trains too, with a renderer named).
type ModelList struct {
	Items        []Model `json:"items"`
	OperatorList bool    `json:"operator_list"`
}

// Models lists the models training jobs may name, with the GPUs an rl job of each takes.
func (c *Client) Models(ctx context.Context) (*ModelList, error) {
	var list ModelList
	_, err := c.do(ctx, http.MethodGet, "/v1/models", "", nil, &list)
	return &list, err
}
