package api_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
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
