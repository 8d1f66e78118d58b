package api_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/openapi"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

// operation is one operation of openapi.yaml that demands a scope.
type operation struct {
	method, path, scope string
	body                bool
}

func scopedOperations(t *testing.T) []operation {
	t.Helper()
	spec, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	var ops []operation
	for path, item := range spec.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			if s := openapi.Scope(op); s != "" {
				ops = append(ops, operation{method: method, path: path, scope: s, body: op.RequestBody != nil})
			}
		}
	}
	slices.SortFunc(ops, func(a, b operation) int { return strings.Compare(a.method+a.path, b.method+b.path) })
	if len(ops) < 25 {
		t.Fatalf("only %d scoped operations in the contract", len(ops))
	}
	return ops
}

// victim is one organization's data, which the others try to reach.
type victim struct {
	st                  *apitest.Stack
	jobID, hookID, dlID string
	adapterID           string // a deployment of the victim's job
	owner               string // a token of the victim's with every user scope
	receiver            string // a webhook receiver's URL
}

const victimJob = `name = "victim-private-run"
model = "Qwen/Qwen3-4B-Instruct-2507"
max_steps = 10
batch_size = 16
rollouts_per_example = 4
[[env]]
id = "primeintellect/alphabet-sort"
`

func newVictim(t *testing.T) victim {
	t.Helper()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := apitest.Start(t, apitest.Options{Store: store, Webhooks: &webhooks.Config{Schedule: []time.Duration{time.Hour}}})
	owner := st.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite, auth.ScopeWebhooks)
	c := client.New(st.URL, owner)
	ctx := context.Background()
	j, err := c.SubmitJob(ctx, []byte(victimJob), "application/toml", "")
	if err != nil {
		t.Fatal(err)
	}
	recv := httptest.NewServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	t.Cleanup(recv.Close)
	ep, err := c.CreateWebhook(ctx, recv.URL+"/victim-hook", []string{"job.completed"}, "victim hook")
	if err != nil {
		t.Fatal(err)
	}
	d, err := c.TestWebhook(ctx, ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	// A committed checkpoint with weights, deployed.
	commitCheckpoint(t, store, j.ID, 10, map[string]string{"weights/adapter_model.safetensors": "victim weights"})
	dep, err := c.Deploy(ctx, j.ID, "10")
	if err != nil {
		t.Fatal(err)
	}
	return victim{st: st, jobID: j.ID, hookID: ep.ID, dlID: d.ID, adapterID: dep.ID, owner: owner, receiver: recv.URL + "/intruder-hook"}
}

// url fills an operation's path with the victim's ids.
func (v victim) url(op operation) string {
	p := strings.NewReplacer("{id}", v.jobID, "{runId}", v.jobID, "{webhook_id}", v.hookID, "{delivery_id}", v.dlID,
		"{claim_id}", "claim-1", "{org}", "acme", "{step}", "10", "{node}", "node-1",
		"{deployment_id}", v.adapterID, "{adapterId}", v.adapterID, "{checkpointId}", v.jobID+"-step-10").Replace(op.path)
	return v.st.URL + p
}

func (v victim) do(t *testing.T, op operation, token string) reply {
	t.Helper()
	var body []byte
	ctype := ""
	if op.body {
		body, ctype = []byte(`{}`), "application/json"
		switch {
		case op.path == "/v1/jobs" || op.path == "/v1/jobs/preview":
			body, ctype = []byte(strings.Replace(victimJob, "victim-private-run", "another-run", 1)), "application/toml"
		case op.path == "/api/v1/rft/runs":
			body = []byte(`{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "environments": [{"id": "gsm8k"}], "name": "another-run"}`)
		case op.path == "/api/v1/training/runs":
			body = []byte(`{"name": "another-run", "config": {"type": "full_finetune", "max_steps": 10, "model": {"name": "Qwen/Qwen3-0.6B"},
				"orchestrator": {"train": {"source": [{"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}]}}, "trainer": {}, "inference": {}}}`)
		case op.path == "/v1/webhooks":
			body = []byte(fmt.Sprintf(`{"url":%q,"events":["job.completed"]}`, v.receiver))
		case op.path == "/v1/deployments":
			body = []byte(fmt.Sprintf(`{"job":%q}`, v.jobID))
		case op.method == "PATCH":
			body = []byte(`{"description":"changed"}`)
		case op.path == "/v1/admin/nodes/{node}":
			body = []byte(`{"state":"cordoned"}`)
		}
	}
	return call(t, op.method, v.url(op), token, ctype, body)
}

// sign makes a token of claims with key under kid, by alg.
func sign(t *testing.T, alg jwt.SigningMethod, kid string, key any, claims jwt.Claims) string {
	t.Helper()
	tok := jwt.NewWithClaims(alg, claims)
	tok.Header["kid"] = kid
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func claimsFor(org string, scopes []string, mutate func(*auth.Claims)) *auth.Claims {
	now := time.Now()
	c := &auth.Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer: auth.Issuer, Audience: jwt.ClaimStrings{auth.Audience}, Subject: org,
			IssuedAt: jwt.NewNumericDate(now), NotBefore: jwt.NewNumericDate(now.Add(-time.Minute)),
			ExpiresAt: jwt.NewNumericDate(now.Add(time.Hour)), ID: "forged",
		},
		Org: org, Scope: strings.Join(scopes, " "),
	}
	if mutate != nil {
		mutate(c)
	}
	return c
}

// Every scoped operation refuses a broken token with 401 problem+json, whatever it would have
// allowed a good one.
func TestBrokenTokensAre401(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	keys := v.st.Keys
	kid, key := keys.Current, keys.Keys[keys.Current]
	all := auth.AllScopes
	good := claimsFor("acme", all, nil)

	expired, err := keys.Issue(auth.TokenRequest{Org: "acme", Scopes: all, TTL: time.Hour}, time.Now().Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	valid := sign(t, jwt.SigningMethodHS256, kid, key, good)
	parts := strings.Split(valid, ".")
	forgedPayload, _ := json.Marshal(claimsFor("umbrella", all, nil))
	altered := parts[0] + "." + base64.RawURLEncoding.EncodeToString(forgedPayload) + "." + parts[2]
	noneHeader := base64.RawURLEncoding.EncodeToString([]byte(`{"alg":"none","typ":"JWT","kid":"` + kid + `"}`))
	goodPayload, _ := json.Marshal(good)

	revoked, err := keys.Issue(auth.TokenRequest{Org: "acme", Scopes: all, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	admin := v.st.Token("ops", auth.ScopeAdmin)
	if r := call(t, "POST", v.st.URL+"/v1/admin/tokens/revoke", admin, "application/json",
		[]byte(fmt.Sprintf(`{"token":%q}`, revoked))); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}

	broken := map[string]string{
		"algorithm none":         noneHeader + "." + base64.RawURLEncoding.EncodeToString(goodPayload) + ".",
		"HS256 with a guessable": sign(t, jwt.SigningMethodHS256, kid, []byte("secret"), good),
		"expired":                expired,
		"not yet valid": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme", all, func(c *auth.Claims) {
			c.NotBefore = jwt.NewNumericDate(time.Now().Add(time.Hour))
		})),
		"wrong audience": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme", all, func(c *auth.Claims) {
			c.Audience = jwt.ClaimStrings{"another-api"}
		})),
		"wrong issuer": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme", all, func(c *auth.Claims) {
			c.Issuer = "https://evil.example"
		})),
		"unknown key id":  sign(t, jwt.SigningMethodHS256, "k-unknown", key, good),
		"altered payload": altered,
		"revoked":         revoked,
		"HS512":           sign(t, jwt.SigningMethodHS512, kid, key, good),
		"no expiry": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme", all, func(c *auth.Claims) {
			c.ExpiresAt = nil
		})),
		"garbage": "not.a.token",
		// issue 14: no id, so it could not be revoked; an organization whose keys would meet
		// another's (acme's job index)
		"without an id (jti)": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme", all, func(c *auth.Claims) {
			c.ID = ""
		})),
		"for organization acme:jobs": sign(t, jwt.SigningMethodHS256, kid, key, claimsFor("acme:jobs", all, nil)),
	}
	for _, op := range scopedOperations(t) {
		for name, tok := range broken {
			r := v.do(t, op, tok)
			if r.status != http.StatusUnauthorized {
				t.Errorf("%s %s with a token %s: %d, want 401", op.method, op.path, name, r.status)
				continue
			}
			r.refusal(t, op.path)
		}
	}
	// The same claims, signed properly, get through: the refusals above are the tokens'.
	if r := call(t, "GET", v.st.URL+"/v1/jobs/"+v.jobID, valid, "", nil); r.status != http.StatusOK {
		t.Errorf("a good token: %d %s", r.status, r.body)
	}
}

// Every scoped operation refuses a token that lacks its scope with 403 (and admin, which holds
// every scope).
func TestWrongScopeIs403(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	for _, op := range scopedOperations(t) {
		var others []string
		for _, s := range auth.AllScopes {
			if s != op.scope && s != auth.ScopeAdmin { // admin holds every scope
				others = append(others, s)
			}
		}
		r := v.do(t, op, v.st.Token("acme", others...))
		if r.status != http.StatusForbidden {
			t.Errorf("%s %s without %s: %d, want 403", op.method, op.path, op.scope, r.status)
			continue
		}
		r.refusal(t, op.path)
	}
}

// Another organization, with every user scope, finds none of the victim's jobs, webhooks or
// deliveries: 404 where it names one, lists without them, and nothing of theirs in any
// answer; the victim's job and webhook are as they were.
func TestAnotherOrganizationSeesNothing(t *testing.T) {
	t.Parallel()
	v := newVictim(t)
	intruder := v.st.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite, auth.ScopeWebhooks)
	// What the intruder never sent and must never see (an id it sent may be echoed back).
	secrets := []string{"victim-private-run", "victim-hook"}
	tried := 0
	for _, op := range scopedOperations(t) {
		if op.scope == auth.ScopeAgent || op.scope == auth.ScopeAdmin {
			continue // agents serve every organization; admins are the operator
		}
		r := v.do(t, op, intruder)
		named := strings.Contains(op.path, "{id}") || strings.Contains(op.path, "{runId}") || strings.Contains(op.path, "{webhook_id}") ||
			strings.Contains(op.path, "{deployment_id}") || strings.Contains(op.path, "{adapterId}") || strings.Contains(op.path, "{checkpointId}") ||
			(op.path == "/v1/deployments" && op.method == "POST") // names the victim's job
		switch {
		case named && r.status != http.StatusNotFound:
			t.Errorf("%s %s of another organization: %d %s, want 404", op.method, op.path, r.status, r.body)
		case !named && r.status >= 300:
			t.Errorf("%s %s: %d %s", op.method, op.path, r.status, r.body)
		}
		seen := secrets
		if !named {
			seen = append(seen, v.jobID, v.hookID, v.dlID)
		}
		for _, s := range seen {
			if strings.Contains(string(r.body), s) {
				t.Errorf("%s %s answered another organization with %q: %s", op.method, op.path, s, r.body)
			}
		}
		tried++
	}
	if tried < 18 {
		t.Errorf("only %d operations tried", tried)
	}
	var j struct{ Status, Name string }
	call(t, "GET", v.st.URL+"/v1/jobs/"+v.jobID, v.owner, "", nil).decode(t, &j)
	if j.Status != "QUEUED" || j.Name != "victim-private-run" {
		t.Errorf("the victim's job after the intrusion: %+v", j)
	}
	var hook struct {
		Enabled     bool
		Description string
	}
	call(t, "GET", v.st.URL+"/v1/webhooks/"+v.hookID, v.owner, "", nil).decode(t, &hook)
	if !hook.Enabled || hook.Description != "victim hook" {
		t.Errorf("the victim's webhook was changed: %+v", hook)
	}
}
