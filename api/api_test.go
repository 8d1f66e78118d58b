package api_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

type reply struct {
	status int
	header http.Header
	body   []byte
}

func (r reply) decode(t *testing.T, v any) {
	t.Helper()
	if err := json.Unmarshal(r.body, v); err != nil {
		t.Fatalf("decode %s: %v", r.body, err)
	}
}

func (r reply) problem(t *testing.T) api.Problem {
	t.Helper()
	if ct := r.header.Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type %q, want application/problem+json (body %s)", ct, r.body)
	}
	var p api.Problem
	r.decode(t, &p)
	if p.Status != r.status || p.Title == "" || p.Type == "" {
		t.Errorf("problem %+v does not describe status %d", p, r.status)
	}
	return p
}

// refusal checks an error answer to path: a problem (RFC 9457), or on the Prime-compatible
// surface (/api/v1/) the {"detail"} the prime CLI reads.
func (r reply) refusal(t *testing.T, path string) {
	t.Helper()
	if !strings.HasPrefix(path, "/api/v1/") {
		r.problem(t)
		return
	}
	var e struct {
		Detail any `json:"detail"`
	}
	if ct := r.header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json (body %s)", ct, r.body)
	}
	if r.decode(t, &e); e.Detail == nil || e.Detail == "" {
		t.Errorf("%s answered %d without a detail: %s", path, r.status, r.body)
	}
}

func call(t testing.TB, method, url, token, ctype string, body []byte) reply {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	if ctype != "" {
		req.Header.Set("Content-Type", ctype)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return reply{status: resp.StatusCode, header: resp.Header, body: b}
}

func fixture(t *testing.T, name string) []byte {
	t.Helper()
	return jobspectest.Fixture(t, name)
}

type bundle struct {
	s      *apitest.Stack
	writer string // acme, jobs:read + jobs:write
	reader string // acme, jobs:read
	other  string // another organization
	agent  string
}

func setup(t *testing.T) bundle {
	t.Helper()
	s := apitest.Start(t, apitest.Options{})
	return bundle{
		s:      s,
		writer: s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite),
		reader: s.Token("acme", auth.ScopeJobsRead),
		other:  s.Token("globex", auth.ScopeJobsRead, auth.ScopeJobsWrite),
		agent:  s.AgentToken("agent-7"),
	}
}

func (b bundle) submitTOML(t *testing.T, body []byte) reply {
	t.Helper()
	return call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/toml", body)
}

func (b bundle) jobCount(t *testing.T) int {
	t.Helper()
	r := call(t, "GET", b.s.URL+"/v1/jobs?limit=100", b.reader, "", nil)
	var l struct{ Items []job.Job }
	r.decode(t, &l)
	return len(l.Items)
}

func TestSubmitAcceptsTheHostedFixtures(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		file  string
		model string
		envs  []string
	}{
		{"hosted-basic.toml", "Qwen/Qwen3-30B-A3B-Instruct-2507", []string{"my-environment"}},
		{"hosted-reference.toml", "Qwen/Qwen3-30B-A3B-Instruct-2507", []string{"primeintellect/alphabet-sort"}},
		{"multi-task.toml", "Qwen/Qwen3-4B-Instruct-2507", []string{"gsm8k", "math-python", "reverse-text"}},
	}
	for _, c := range cases {
		r := b.submitTOML(t, fixture(t, c.file))
		if r.status != http.StatusCreated {
			t.Fatalf("%s: status %d, body %s", c.file, r.status, r.body)
		}
		var j job.Job
		r.decode(t, &j)
		if j.Status != job.Queued || j.Org != "acme" || j.Config.Model != c.model || j.Config.Kind != "rl" {
			t.Errorf("%s: got %+v", c.file, j)
		}
		if loc := r.header.Get("Location"); loc != "/v1/jobs/"+j.ID {
			t.Errorf("%s: Location %q", c.file, loc)
		}
		var envs []string
		for _, e := range j.Config.Env {
			envs = append(envs, e.ID)
		}
		if fmt.Sprint(envs) != fmt.Sprint(c.envs) {
			t.Errorf("%s: envs %v, want %v", c.file, envs, c.envs)
		}
	}
	// multi-task weights survive; the default weight is 1.
	r := b.submitTOML(t, fixture(t, "multi-task.toml"))
	var j job.Job
	r.decode(t, &j)
	if w := j.Config.Env[2].Weight; w != 0.5 {
		t.Errorf("reverse-text weight %v, want 0.5", w)
	}
}

func TestSubmitJSONMatchesTOML(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := `{"model":"Qwen/Qwen3-4B-Instruct-2507","max_steps":20,"env":[{"id":"gsm8k"}],"sampling":{"max_tokens":256}}`
	r := call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/json", []byte(body))
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j job.Job
	r.decode(t, &j)
	if j.Config.MaxSteps != 20 || j.Config.BatchSize != 128 || j.Config.RolloutsPerExample != 8 || j.Config.Sampling.MaxTokens != 256 {
		t.Errorf("normalized config %+v", j.Config)
	}
	if j.Config.Checkpoints.Interval != 20 {
		t.Errorf("default checkpoint interval %d, want min(50, max_steps)=20", j.Config.Checkpoints.Interval)
	}
}

func TestBadInputGetsAProblemAndChangesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	good := fixture(t, "hosted-basic.toml")
	cases := []struct {
		name    string
		token   string
		ctype   string
		body    []byte
		status  int
		pointer string
		line    int
	}{
		{name: "malformed TOML", token: b.writer, ctype: "application/toml",
			body: []byte("model = \"x\"\nmax_steps = = 3\n"), status: 400, line: 2},
		{name: "malformed JSON", token: b.writer, ctype: "application/json",
			body: []byte("{\n \"model\": \"x\",\n \"max_steps\": ]\n}"), status: 400, line: 3},
		{name: "unknown key", token: b.writer, ctype: "application/toml",
			body: []byte("model = \"Qwen/Qwen3-4B\"\nmax_stepz = 3\n[[env]]\nid = \"gsm8k\"\n"), status: 422, pointer: "/max_stepz"},
		{name: "wrong type", token: b.writer, ctype: "application/toml",
			body: []byte("model = \"Qwen/Qwen3-4B\"\nmax_steps = \"many\"\n[[env]]\nid = \"gsm8k\"\n"), status: 422, pointer: "/max_steps"},
		{name: "out of range", token: b.writer, ctype: "application/toml",
			body: []byte("model = \"Qwen/Qwen3-4B\"\n[sampling]\ntemperature = 9.0\n[[env]]\nid = \"gsm8k\"\n"), status: 422, pointer: "/sampling/temperature"},
		{name: "no token", token: "", ctype: "application/toml", body: good, status: 401},
		{name: "bad token", token: "not.a.jwt", ctype: "application/toml", body: good, status: 401},
		{name: "read-only token", token: b.reader, ctype: "application/toml", body: good, status: 403},
		{name: "agent token", token: b.agent, ctype: "application/toml", body: good, status: 403},
		{name: "wrong content type", token: b.writer, ctype: "text/plain", body: good, status: 415},
		{name: "too large", token: b.writer, ctype: "application/toml",
			body: append(append([]byte{}, good...), bytes.Repeat([]byte("#"), 1<<20)...), status: 413},
		{name: "empty body", token: b.writer, ctype: "application/toml", body: nil, status: 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, "POST", b.s.URL+"/v1/jobs", c.token, c.ctype, c.body)
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			p := r.problem(t)
			if c.pointer != "" {
				found := false
				for _, e := range p.Errors {
					found = found || e.Pointer == c.pointer
				}
				if !found {
					t.Errorf("errors %+v do not name %s", p.Errors, c.pointer)
				}
			}
			if c.line != 0 {
				if len(p.Errors) == 0 || p.Errors[0].Line != c.line {
					t.Errorf("errors %+v, want line %d", p.Errors, c.line)
				}
			}
		})
	}
	if n := b.jobCount(t); n != 0 {
		t.Errorf("%d jobs stored after only bad requests, want 0", n)
	}
}

func TestExpiredAndForeignTokensAreRefused(t *testing.T) {
	t.Parallel()
	b := setup(t)
	expired, err := b.s.Keys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead}, TTL: time.Minute}, time.Now().Add(-time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherKeys, _ := auth.NewKeySet()
	foreign, _ := otherKeys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead}, TTL: time.Hour}, time.Now())
	for name, tok := range map[string]string{"expired": expired, "foreign key": foreign} {
		r := call(t, "GET", b.s.URL+"/v1/jobs", tok, "", nil)
		if r.status != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, r.status)
		}
		r.problem(t)
	}
}

func TestJobsAreVisibleOnlyToTheirOrganization(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.submitTOML(t, fixture(t, "hosted-basic.toml"))
	var j job.Job
	r.decode(t, &j)

	mine := call(t, "GET", b.s.URL+"/v1/jobs/"+j.ID, b.reader, "", nil)
	if mine.status != http.StatusOK {
		t.Fatalf("own job: %d", mine.status)
	}
	theirs := call(t, "GET", b.s.URL+"/v1/jobs/"+j.ID, b.other, "", nil)
	missing := call(t, "GET", b.s.URL+"/v1/jobs/0190a0a0-0000-7000-8000-000000000000", b.other, "", nil)
	if theirs.status != http.StatusNotFound || missing.status != http.StatusNotFound {
		t.Fatalf("foreign job %d, missing job %d; want 404 both", theirs.status, missing.status)
	}
	pt, pm := theirs.problem(t), missing.problem(t)
	if pt.Type != pm.Type || pt.Title != pm.Title {
		t.Errorf("foreign and missing jobs read differently: %+v vs %+v", pt, pm)
	}
	if c := call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/cancel", b.other, "", nil); c.status != http.StatusNotFound {
		t.Errorf("foreign cancel: %d, want 404", c.status)
	}
	var l struct{ Items []job.Job }
	call(t, "GET", b.s.URL+"/v1/jobs", b.other, "", nil).decode(t, &l)
	if len(l.Items) != 0 {
		t.Errorf("other organization lists %d jobs, want 0", len(l.Items))
	}
}

func TestUnknownRoutesAndParameters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := call(t, "GET", b.s.URL+"/v1/nope", b.reader, "", nil); r.status != http.StatusNotFound {
		t.Errorf("unknown path: %d", r.status)
	} else {
		r.problem(t)
	}
	if r := call(t, "DELETE", b.s.URL+"/v1/jobs", b.writer, "", nil); r.status != http.StatusMethodNotAllowed {
		t.Errorf("wrong method: %d", r.status)
	} else {
		r.problem(t)
	}
	r := call(t, "GET", b.s.URL+"/v1/jobs?limit=1000", b.reader, "", nil)
	if r.status != http.StatusBadRequest {
		t.Fatalf("limit=1000: %d", r.status)
	}
	if p := r.problem(t); len(p.Errors) == 0 || p.Errors[0].Parameter != "limit" {
		t.Errorf("problem %+v does not name the limit parameter", p)
	}
}

func TestHealthAndDocument(t *testing.T) {
	t.Parallel()
	b := setup(t)
	if r := call(t, "GET", b.s.URL+"/healthz", "", "", nil); r.status != http.StatusOK {
		t.Errorf("healthz: %d %s", r.status, r.body)
	}
	r := call(t, "GET", b.s.URL+"/openapi.yaml", "", "", nil)
	if r.status != http.StatusOK || !strings.HasPrefix(string(r.body), "openapi: 3.0") {
		t.Errorf("openapi.yaml: %d %.40s", r.status, r.body)
	}
}

func TestAgentLifecycleOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claimURL := b.s.URL + "/v1/agent/claim"
	if r := call(t, "POST", claimURL, b.agent, "application/json", []byte(`{"wait_seconds":0}`)); r.status != http.StatusNoContent {
		t.Fatalf("claim of an empty queue: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", claimURL, b.writer, "application/json", []byte(`{}`)); r.status != http.StatusForbidden {
		t.Fatalf("claim with a user token: %d, want 403", r.status)
	}
	var submitted job.Job
	b.submitTOML(t, fixture(t, "multi-task.toml")).decode(t, &submitted)

	r := call(t, "POST", claimURL, b.agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`))
	if r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	var cl struct {
		Job   job.Job
		Lease job.Lease
	}
	r.decode(t, &cl)
	if cl.Job.ID != submitted.ID || cl.Lease.Fence != 1 || cl.Job.Runtime.AgentID != "agent-7" {
		t.Fatalf("claimed %+v", cl)
	}
	jobURL := b.s.URL + "/v1/agent/jobs/" + cl.Job.ID
	hb := fmt.Sprintf(`{"lease_token":%q,"running":true,"progress":{"step":3,"max_steps":200,"checkpoints":1,"metrics":{"reward/all/mean":0.25}},"checkpoints":[2]}`, cl.Lease.Token)
	r = call(t, "POST", jobURL+"/heartbeat", b.agent, "application/json", []byte(hb))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"continue"`) {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	stale := `{"lease_token":"1.0000","running":true}`
	if r := call(t, "POST", jobURL+"/heartbeat", b.agent, "application/json", []byte(stale)); r.status != http.StatusConflict {
		t.Errorf("stale heartbeat: %d, want 409", r.status)
	} else {
		r.problem(t)
	}
	var running job.Job
	call(t, "GET", b.s.URL+"/v1/jobs/"+cl.Job.ID, b.reader, "", nil).decode(t, &running)
	if running.Status != job.Running || running.Progress.Step != 3 || running.Progress.Metrics["reward/all/mean"] != 0.25 {
		t.Errorf("user sees %+v", running)
	}
	done := fmt.Sprintf(`{"lease_token":%q,"progress":{"step":200,"max_steps":200,"checkpoints":4},"checkpoints":[200]}`, cl.Lease.Token)
	r = call(t, "POST", jobURL+"/complete", b.agent, "application/json", []byte(done))
	if r.status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", jobURL+"/complete", b.agent, "application/json", []byte(done)); r.status != http.StatusConflict {
		t.Errorf("second complete: %d, want 409", r.status)
	}
	var evs struct{ Items []job.Event }
	call(t, "GET", b.s.URL+"/v1/jobs/"+cl.Job.ID+"/events", b.reader, "", nil).decode(t, &evs)
	var types []string
	for _, e := range evs.Items {
		types = append(types, e.Type)
	}
	want := []string{"job.queued", "job.pending", "job.started", "job.checkpoint", "job.checkpoint", "job.completed"}
	if fmt.Sprint(types) != fmt.Sprint(want) {
		t.Errorf("events %v, want %v", types, want)
	}
	var after struct{ Items []job.Event }
	call(t, "GET", b.s.URL+"/v1/jobs/"+cl.Job.ID+"/events?after=4", b.reader, "", nil).decode(t, &after)
	if len(after.Items) != 2 || after.Items[0].Seq != 5 {
		t.Errorf("events after 4: %+v", after.Items)
	}
}

func TestCancelOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var j job.Job
	b.submitTOML(t, fixture(t, "hosted-basic.toml")).decode(t, &j)
	r := call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/cancel", b.writer, "", nil)
	if r.status != http.StatusOK {
		t.Fatalf("cancel: %d %s", r.status, r.body)
	}
	var stopped job.Job
	r.decode(t, &stopped)
	if stopped.Status != job.Stopped {
		t.Errorf("status %s, want STOPPED", stopped.Status)
	}
	if r := call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/cancel", b.reader, "", nil); r.status != http.StatusForbidden {
		t.Errorf("cancel with a read-only token: %d, want 403", r.status)
	}
}

// A claim's held names what the node's cache holds, one letter a kind: the kinds the service
// knows (m:, e:, c:) and any other letter are taken (a newer agent's report never stops an
// older service from handing it work); an entry that is no such name is refused, naming it.
func TestAClaimSaysWhatItsNodeHolds(t *testing.T) {
	t.Parallel()
	b := setup(t)
	claimURL := b.s.URL + "/v1/agent/claim"
	ok := `{"wait_seconds":0,"gpus":[{"model":"H100","count":8}],"held":["m:Qwen/Qwen3-8B","e:acme:o/env@1","c:acme:Qwen/Qwen3-8B|H100|2","z:a-kind-from-tomorrow"]}`
	if r := call(t, "POST", claimURL, b.agent, "application/json", []byte(ok)); r.status != http.StatusNoContent {
		t.Fatalf("claim of an empty queue with held: %d %s", r.status, r.body)
	}
	for _, bad := range []string{`"Qwen/Qwen3-8B"`, `"m:"`, `"m:has space"`, `"mc:x"`} {
		body := `{"wait_seconds":0,"gpus":[{"model":"H100","count":8}],"held":[` + bad + `]}`
		r := call(t, "POST", claimURL, b.agent, "application/json", []byte(body))
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "/held/0") {
			t.Errorf("held [%s]: %d %s; want 422 naming /held/0", bad, r.status, r.body)
		}
	}
}
