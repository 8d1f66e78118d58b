package api_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// While Redis is down every endpoint that needs it answers 503 problem+json with Retry-After
// and changes nothing; when it is back (from its AOF) everything acknowledged before is there.
func TestRedisOutageAnswers503(t *testing.T) {
	t.Parallel()
	rs := redistest.StartRestartable(t)
	st := apitest.Start(t, apitest.Options{Redis: rs.Client})
	writer := st.Token("acme", "jobs:read", "jobs:write")
	agent := st.AgentToken("agent-1")

	r := call(t, "POST", st.URL+"/v1/jobs", writer, "application/toml", fixture(t, "hosted-basic.toml"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var before struct{ ID string }
	r.decode(t, &before)

	rs.Stop()
	for _, c := range []struct{ method, path, token, ctype, body string }{
		{"GET", "/v1/jobs/" + before.ID, writer, "", ""},
		{"GET", "/v1/jobs", writer, "", ""},
		{"POST", "/v1/jobs", writer, "application/toml", string(fixture(t, "hosted-basic.toml"))},
		{"POST", "/v1/jobs/" + before.ID + "/cancel", writer, "", ""},
		{"POST", "/v1/agent/claim", agent, "application/json", `{"wait_seconds":0}`},
		{"POST", "/v1/agent/jobs/" + before.ID + "/heartbeat", agent, "application/json", `{"lease_token":"1.x"}`},
	} {
		var body []byte
		if c.body != "" {
			body = []byte(c.body)
		}
		r := call(t, c.method, st.URL+c.path, c.token, c.ctype, body)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("%s %s with Redis down: %d (Retry-After %q) %s", c.method, c.path, r.status, r.header.Get("Retry-After"), r.body)
			continue
		}
		r.problem(t)
	}

	rs.Start(t)
	testwait.Until(t, 20*time.Second, "the API to answer again", func() bool {
		return call(t, "GET", st.URL+"/v1/jobs/"+before.ID, writer, "", nil).status == http.StatusOK
	})
	var list struct{ Items []struct{ ID, Status string } }
	call(t, "GET", st.URL+"/v1/jobs", writer, "", nil).decode(t, &list)
	if len(list.Items) != 1 || list.Items[0].ID != before.ID || list.Items[0].Status != "QUEUED" {
		t.Errorf("after the outage: %+v (want the one job submitted before it, QUEUED)", list.Items)
	}
}

// With object storage down (a real S3 server, stopped), reading a job's data answers 503 under
// its own name, storage-unavailable, with Retry-After — not "the job store is unavailable",
// which is Redis's (issue 15: any network error read as Redis's).
func TestObjectStorageOutageAnswers503ByItsName(t *testing.T) {
	t.Parallel()
	store, s3 := s3test.Store(t)
	st := apitest.Start(t, apitest.Options{Store: store})
	writer := st.Token("acme", "jobs:read", "jobs:write")
	r := call(t, "POST", st.URL+"/v1/jobs", writer, "application/toml", fixture(t, "hosted-basic.toml"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j struct{ ID string }
	r.decode(t, &j)
	s3.Stop()
	for _, path := range []string{"/metrics", "/logs", "/checkpoints"} {
		r := call(t, "GET", st.URL+"/v1/jobs/"+j.ID+path, writer, "", nil)
		if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") == "" {
			t.Errorf("GET %s with object storage down: %d (Retry-After %q) %s", path, r.status, r.header.Get("Retry-After"), r.body)
			continue
		}
		if p := r.problem(t); !strings.HasSuffix(p.Type, "/storage-unavailable") {
			t.Errorf("GET %s: problem %s, want storage-unavailable", path, p.Type)
		}
	}
	// The job itself, in Redis, still answers.
	if r := call(t, "GET", st.URL+"/v1/jobs/"+j.ID, writer, "", nil); r.status != http.StatusOK {
		t.Errorf("GET the job with object storage down: %d", r.status)
	}
}
