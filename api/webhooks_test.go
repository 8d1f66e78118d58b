package api_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

type webhookReply struct {
	ID                      string   `json:"id"`
	URL                     string   `json:"url"`
	Events                  []string `json:"events"`
	Enabled                 bool     `json:"enabled"`
	Secret                  string   `json:"secret"`
	PreviousSecretExpiresAt string   `json:"previous_secret_expires_at"`
}

func TestWebhookEndpointsOverHTTP(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: &webhooks.Config{Schedule: []time.Duration{10 * time.Millisecond}}})
	tok := s.Token("acme", auth.ScopeWebhooks)
	other := s.Token("globex", auth.ScopeWebhooks)
	jobsOnly := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)

	var mu sync.Mutex
	var secret string
	var got []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.Verify(secret, r.Header, body, time.Now()); err != nil {
			t.Errorf("a delivery does not verify: %v", err)
		}
		got = append(got, string(body))
	}))
	defer recv.Close()

	r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json",
		[]byte(`{"url": "`+recv.URL+`/hooks", "events": ["job.completed", "job.failed"], "description": "ci"}`))
	if r.status != http.StatusCreated || r.header.Get("Cache-Control") != "no-store" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var ep webhookReply
	r.decode(t, &ep)
	if !strings.HasPrefix(ep.Secret, "whsec_") || !ep.Enabled || len(ep.Events) != 2 {
		t.Fatalf("created %+v", ep)
	}
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()

	// The secret is shown once.
	r = call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID, tok, "", nil)
	if r.status != 200 || strings.Contains(string(r.body), "whsec_") {
		t.Errorf("get: %d %s", r.status, r.body)
	}
	// Another organization sees nothing; a token without the scope may not look.
	for _, c := range []struct{ method, path, body string }{
		{"GET", "/v1/webhooks/" + ep.ID, ""}, {"PATCH", "/v1/webhooks/" + ep.ID, `{"enabled": false}`},
		{"DELETE", "/v1/webhooks/" + ep.ID, ""}, {"POST", "/v1/webhooks/" + ep.ID + "/test", ""},
		{"GET", "/v1/webhooks/" + ep.ID + "/deliveries", ""},
	} {
		ct := ""
		if c.body != "" {
			ct = "application/json"
		}
		if r := call(t, c.method, s.URL+c.path, other, ct, []byte(c.body)); r.status != http.StatusNotFound {
			t.Errorf("%s %s by another organization: %d", c.method, c.path, r.status)
		}
		if r := call(t, c.method, s.URL+c.path, jobsOnly, ct, []byte(c.body)); r.status != http.StatusForbidden {
			t.Errorf("%s %s without the webhooks scope: %d", c.method, c.path, r.status)
		}
	}
	var list struct{ Items []webhookReply }
	call(t, "GET", s.URL+"/v1/webhooks", other, "", nil).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("another organization lists %d endpoints", len(list.Items))
	}

	// A test delivery, signed, and its log.
	r = call(t, "POST", s.URL+"/v1/webhooks/"+ep.ID+"/test", tok, "", nil)
	if r.status != http.StatusAccepted {
		t.Fatalf("test: %d %s", r.status, r.body)
	}
	var d struct {
		ID, Status, Type string
		ResponseCode     int `json:"response_code"`
	}
	r.decode(t, &d)
	if d.Status != "pending" || d.Type != "webhook.test" {
		t.Errorf("test delivery %+v", d)
	}
	testwait.Until(t, 10*time.Second, "the test delivery", func() bool {
		if _, err := s.Webhooks.DispatchOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return len(got) == 1
	})
	var page struct {
		Items []struct {
			ID, Status   string
			ResponseCode int `json:"response_code"`
			Attempts     int
		}
	}
	call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID+"/deliveries", tok, "", nil).decode(t, &page)
	if len(page.Items) != 1 || page.Items[0].Status != "delivered" || page.Items[0].ResponseCode != 200 || page.Items[0].Attempts != 1 {
		t.Errorf("deliveries %+v", page.Items)
	}
	r = call(t, "POST", s.URL+"/v1/webhooks/"+ep.ID+"/deliveries/"+d.ID+"/redeliver", tok, "", nil)
	if r.status != http.StatusAccepted {
		t.Errorf("redeliver: %d %s", r.status, r.body)
	}

	// Rotation answers the new secret once; the old one signs beside it for a day.
	r = call(t, "PATCH", s.URL+"/v1/webhooks/"+ep.ID, tok, "application/json", []byte(`{"rotate_secret": true}`))
	var rot webhookReply
	r.decode(t, &rot)
	if r.status != 200 || rot.Secret == "" || rot.Secret == ep.Secret || rot.PreviousSecretExpiresAt == "" {
		t.Errorf("rotate: %d %s", r.status, r.body)
	}

	if r := call(t, "DELETE", s.URL+"/v1/webhooks/"+ep.ID, tok, "", nil); r.status != http.StatusNoContent {
		t.Errorf("delete: %d", r.status)
	}
	if r := call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID, tok, "", nil); r.status != http.StatusNotFound {
		t.Errorf("after delete: %d", r.status)
	}
}

// Targets inside our network, and other mistakes, are 422 naming the field; nothing is made.
func TestWebhookRegistrationRefusesBadTargets(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: &webhooks.Config{Guard: &webhook.Guard{}}})
	tok := s.Token("acme", auth.ScopeWebhooks)
	cases := []struct{ body, pointer, says string }{
		{`{"url": "http://169.254.169.254/latest/meta-data", "events": ["*"]}`, "/url", "link-local"},
		{`{"url": "http://127.0.0.1:8080/hook", "events": ["*"]}`, "/url", "loopback"},
		{`{"url": "http://localhost/hook", "events": ["*"]}`, "/url", "this machine"},
		{`{"url": "http://[::ffff:10.0.0.1]/hook", "events": ["*"]}`, "/url", "private"},
		{`{"url": "http://[fd00::1]/hook", "events": ["*"]}`, "/url", "unique-local"},
		{`{"url": "ftp://example.com/hook", "events": ["*"]}`, "/url", "http:// or https://"},
		{`{"url": "https://example.com/hook", "events": ["job.exploded"]}`, "/events/0", "an event type"},
		{`{"url": "https://example.com/hook", "events": []}`, "/events", ""},
		{`{"url": "https://example.com/hook"}`, "/events", ""},
	}
	for _, c := range cases {
		r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json", []byte(c.body))
		if r.status != http.StatusUnprocessableEntity {
			t.Errorf("%s: %d %s", c.body, r.status, r.body)
			continue
		}
		p := r.problem(t)
		if len(p.Errors) == 0 || p.Errors[0].Pointer != c.pointer || !strings.Contains(p.Errors[0].Message, c.says) {
			t.Errorf("%s: %+v", c.body, p.Errors)
		}
	}
	var list struct{ Items []webhookReply }
	call(t, "GET", s.URL+"/v1/webhooks", tok, "", nil).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("%d endpoints made from refused requests", len(list.Items))
	}
}

// An organization at its number of endpoints gets 409 naming the limit, and nothing is made.
func TestWebhookEndpointsPerOrganizationAreCapped(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: &webhooks.Config{MaxEndpoints: 2}})
	tok := s.Token("acme", auth.ScopeWebhooks)
	body := []byte(`{"url": "http://127.0.0.1:9/hooks", "events": ["*"]}`)
	for range 2 {
		if r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json", body); r.status != http.StatusCreated {
			t.Fatalf("create: %d %s", r.status, r.body)
		}
	}
	r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json", body)
	if r.status != http.StatusConflict {
		t.Fatalf("a third endpoint: %d %s", r.status, r.body)
	}
	p := r.problem(t)
	if !strings.HasSuffix(p.Type, "/limit-webhook-endpoints") || !strings.Contains(p.Detail, "2 webhook endpoints") {
		t.Errorf("problem %+v", p)
	}
	var list struct{ Items []webhookReply }
	call(t, "GET", s.URL+"/v1/webhooks", tok, "", nil).decode(t, &list)
	if len(list.Items) != 2 {
		t.Errorf("%d endpoints after a refused create, want 2", len(list.Items))
	}
}

// Test deliveries past the limit are 429 with Retry-After, counted in Redis: a second API
// instance on the same Redis refuses them too.
func TestWebhookTestsAreRateLimited(t *testing.T) {
	t.Parallel()
	cfg := webhooks.Config{TestsPerEndpoint: 2, TestWindow: time.Hour}
	s := apitest.Start(t, apitest.Options{Webhooks: &cfg})
	other := apitest.Start(t, apitest.Options{Webhooks: &cfg, Redis: s.Redis})
	tok := s.Token("acme", auth.ScopeWebhooks)
	r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json", []byte(`{"url": "http://127.0.0.1:9/hooks", "events": ["*"]}`))
	var ep webhookReply
	r.decode(t, &ep)
	for range 2 {
		if r := call(t, "POST", s.URL+"/v1/webhooks/"+ep.ID+"/test", tok, "", nil); r.status != http.StatusAccepted {
			t.Fatalf("test: %d %s", r.status, r.body)
		}
	}
	for _, st := range []*apitest.Stack{s, other} {
		r := call(t, "POST", st.URL+"/v1/webhooks/"+ep.ID+"/test", st.Token("acme", auth.ScopeWebhooks), "", nil)
		if r.status != http.StatusTooManyRequests {
			t.Fatalf("a third test: %d %s", r.status, r.body)
		}
		p := r.problem(t)
		ra, err := strconv.Atoi(r.header.Get("Retry-After"))
		if !strings.HasSuffix(p.Type, "/limit-webhook-tests") || err != nil || ra < 1 || ra > 3600 {
			t.Errorf("problem %+v, Retry-After %q", p, r.header.Get("Retry-After"))
		}
	}
	var page struct{ Items []struct{ ID string } }
	call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID+"/deliveries", tok, "", nil).decode(t, &page)
	if len(page.Items) != 2 {
		t.Errorf("%d test deliveries made, want 2", len(page.Items))
	}
}

// A receiver's answer to a delivery is never shown: whatever a 500 says (it could be anything
// the URL reaches), the delivery log holds its status and a fixed hint, and Redis holds no
// part of it.
func TestAFailedDeliverysAnswerIsNeverShown(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Webhooks: &webhooks.Config{Schedule: []time.Duration{time.Millisecond}}})
	tok := s.Token("acme", auth.ScopeWebhooks)
	const secret = "INTERNAL-ONLY-7f3a9c-aws_secret_access_key=wJalrXUtnFEMI"
	var hits atomic.Int64
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.WriteHeader(http.StatusInternalServerError)
		_, _ = io.WriteString(w, secret)
	}))
	defer recv.Close()
	r := call(t, "POST", s.URL+"/v1/webhooks", tok, "application/json", []byte(`{"url": "`+recv.URL+`/hooks", "events": ["*"]}`))
	var ep webhookReply
	r.decode(t, &ep)
	r = call(t, "POST", s.URL+"/v1/webhooks/"+ep.ID+"/test", tok, "", nil)
	var d struct{ ID string }
	r.decode(t, &d)
	var page reply
	testwait.Until(t, 10*time.Second, "both attempts to fail", func() bool {
		if _, err := s.Webhooks.DispatchOnce(context.Background()); err != nil {
			t.Fatal(err)
		}
		page = call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID+"/deliveries", tok, "", nil)
		return hits.Load() == 2 && strings.Contains(string(page.body), `"failed"`)
	})
	var got struct {
		Items []struct {
			ResponseCode int `json:"response_code"`
			Error        string
			AttemptLog   []struct{ Error string } `json:"attempt_log"`
		}
	}
	page.decode(t, &got)
	if len(got.Items) != 1 || got.Items[0].ResponseCode != 500 || !strings.HasPrefix(got.Items[0].Error, "HTTP 500 (") ||
		len(got.Items[0].AttemptLog) != 2 {
		t.Errorf("delivery %+v", got.Items)
	}
	answers := []reply{page,
		call(t, "POST", s.URL+"/v1/webhooks/"+ep.ID+"/deliveries/"+d.ID+"/redeliver", tok, "", nil),
		call(t, "GET", s.URL+"/v1/webhooks/"+ep.ID, tok, "", nil),
		call(t, "GET", s.URL+"/v1/webhooks", tok, "", nil),
	}
	for _, a := range answers {
		if strings.Contains(string(a.body), "INTERNAL-ONLY") || strings.Contains(string(a.body), "wJalr") {
			t.Errorf("the API shows the receiver's answer: %s", a.body)
		}
	}
	ctx := context.Background()
	keys := s.AllKeys("*")
	for _, k := range keys {
		var vals []string
		switch typ, _ := s.Redis.Type(ctx, k).Result(); typ {
		case "hash":
			for f, v := range s.Redis.HGetAll(ctx, k).Val() {
				vals = append(vals, f, v)
			}
		case "list":
			vals = s.Redis.LRange(ctx, k, 0, -1).Val()
		case "set":
			vals = s.Redis.SMembers(ctx, k).Val()
		case "zset":
			vals = s.Redis.ZRange(ctx, k, 0, -1).Val()
		case "string":
			vals = []string{s.Redis.Get(ctx, k).Val()}
		case "stream":
			for _, m := range s.Redis.XRange(ctx, k, "-", "+").Val() {
				for f, v := range m.Values {
					vals = append(vals, f, fmt.Sprint(v))
				}
			}
		}
		if all := strings.Join(vals, " "); strings.Contains(all, "INTERNAL-ONLY") || strings.Contains(all, "wJalr") {
			t.Errorf("Redis key %s holds the receiver's answer", k)
		}
	}
}
