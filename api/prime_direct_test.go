package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A Prime call stands for /v1 operations and gets past none of their checks: each needs the
// scope its /v1 operations need (stop, restart and delete read the run first, GET
// /v1/jobs/{id}: jobs:read), and its translated query is validated against the /v1
// operation's parameters.
func TestPrimeCallsCheckWhatV1Checks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	writeOnly := b.s.Token("acme", auth.ScopeJobsWrite)
	// A write-only token creates (POST /v1/jobs needs jobs:write alone).
	r := call(t, "POST", b.s.URL+"/api/v1/rft/runs", writeOnly, "application/json",
		[]byte(`{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "environments": [{"id": "gsm8k"}], "max_steps": 5}`))
	var created struct{ Run struct{ ID string } }
	if r.decode(t, &created); r.status != http.StatusCreated || created.Run.ID == "" {
		t.Fatalf("create with jobs:write: %d %s", r.status, r.body)
	}
	id := created.Run.ID
	for _, c := range []struct{ method, path string }{
		{"PUT", "/api/v1/rft/runs/" + id + "/stop"},
		{"PUT", "/api/v1/rft/runs/" + id + "/restart"},
		{"DELETE", "/api/v1/rft/runs/" + id},
		{"DELETE", "/api/v1/training/runs/" + id},
	} {
		r := call(t, c.method, b.s.URL+c.path, writeOnly, "", nil)
		var e struct{ Detail string }
		if r.decode(t, &e); r.status != http.StatusForbidden || r.header.Get("Content-Type") != "application/json" ||
			e.Detail != `this operation needs the "jobs:read" scope; the token has "jobs:write"` {
			t.Errorf("%s %s with jobs:write only: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	var j struct{ Status string }
	if r := call(t, "GET", b.s.URL+"/v1/jobs/"+id, b.reader, "", nil); json.Unmarshal(r.body, &j) != nil || j.Status != "QUEUED" {
		t.Errorf("the run after the refusals: %d %s", r.status, r.body)
	}

	// since_seconds passes the Prime operation's schema (an integer from 1) as +10, but the
	// since=+10s it becomes breaks GET /v1/jobs/{id}/logs's pattern: refused as /v1 refuses it.
	r = call(t, "GET", b.s.URL+"/api/v1/rft/runs/"+id+"/logs?since_seconds=%2B10", b.reader, "", nil)
	var e struct{ Detail string }
	if r.decode(t, &e); r.status != http.StatusBadRequest || !strings.HasPrefix(e.Detail, `query parameter "since" is invalid`) {
		t.Errorf("since_seconds=+10: %d %s", r.status, r.body)
	}
	r = call(t, "GET", b.s.URL+"/api/v1/rft/runs/"+id+"/logs?since_seconds=10", b.reader, "", nil)
	if r.status != http.StatusServiceUnavailable || !strings.Contains(string(r.body), "no object storage") {
		t.Errorf("since_seconds=10 (no object storage here): %d %s", r.status, r.body)
	}
}

// A problem of the /v1 operation a Prime call stands for keeps its Retry-After: object storage
// out of reach (503) and the organization's job-store limit (429).
func TestPrimeErrorsKeepRetryAfter(t *testing.T) {
	t.Parallel()
	store, s3 := s3test.Store(t)
	st := apitest.Start(t, apitest.Options{Store: store, Queue: queue.Config{MaxOrgBytes: 16 << 10, Store: store}})
	token := st.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	create := func(pad int) reply {
		return call(t, "POST", st.URL+"/api/v1/rft/runs", token, "application/json", []byte(`{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
			"environments": [{"id": "gsm8k", "args": {"system_prompt": "`+strings.Repeat("x", pad)+`"}}], "max_steps": 5}`))
	}
	r := create(1)
	var created struct{ Run struct{ ID string } }
	if r.decode(t, &created); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var refused reply
	for i := 0; ; i++ {
		if refused = create(3000); refused.status != http.StatusCreated || i > 20 {
			break
		}
	}
	if refused.status != http.StatusTooManyRequests || refused.header.Get("Retry-After") != "60" ||
		!strings.Contains(string(refused.body), `"detail":"organization acme holds`) {
		t.Errorf("a create past the job-store limit: %d (Retry-After %q) %s", refused.status, refused.header.Get("Retry-After"), refused.body)
	}

	s3.Stop()
	for _, path := range []string{"/logs", "/metrics", "/checkpoints", "/samples"} {
		r := call(t, "GET", st.URL+"/api/v1/rft/runs/"+created.Run.ID+path, token, "", nil)
		var e struct{ Detail string }
		if r.decode(t, &e); r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "5" ||
			!strings.HasPrefix(e.Detail, "object storage is unavailable for a moment") {
			t.Errorf("GET %s with object storage down: %d (Retry-After %q) %s", path, r.status, r.header.Get("Retry-After"), r.body)
		}
	}
	r = call(t, "DELETE", st.URL+"/api/v1/rft/runs/"+created.Run.ID, token, "", nil)
	if r.status != http.StatusServiceUnavailable || r.header.Get("Retry-After") != "5" || !strings.Contains(string(r.body), "send the delete again") {
		t.Errorf("DELETE with object storage down: %d (Retry-After %q) %s", r.status, r.header.Get("Retry-After"), r.body)
	}
}

// A Prime run's checkpoint link points where the caller reached the API, as /v1's do: its Host,
// https behind a proxy that says so.
func TestPrimeCheckpointLinksFollowTheCaller(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	st := apitest.Start(t, apitest.Options{Store: store})
	token := st.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	r := call(t, "POST", st.URL+"/api/v1/rft/runs", token, "application/json",
		[]byte(`{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "environments": [{"id": "gsm8k"}], "max_steps": 5}`))
	var created struct{ Run struct{ ID string } }
	if r.decode(t, &created); r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	id := created.Run.ID
	weights := "weights"
	sum := sha256.Sum256([]byte(weights))
	put := func(key, data string) {
		if err := store.Put(context.Background(), jobdata.JobPrefix(id)+key, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	put("checkpoints/step_10/trainer/model.safetensors", weights)
	m, _ := json.Marshal(jobdata.Manifest{JobID: id, Step: 10, Bytes: int64(len(weights)), Files: []jobdata.ManifestFile{
		{Path: "trainer/model.safetensors", Size: int64(len(weights)), SHA256: hex.EncodeToString(sum[:])}}})
	put("checkpoints/step_10/manifest.json", string(m))

	get := func(path string, https bool) []byte {
		req, _ := http.NewRequest("GET", st.URL+path, nil)
		req.Host = "train.example.test"
		req.Header.Set("Authorization", "Bearer "+token)
		if https {
			req.Header.Set("X-Forwarded-Proto", "https")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("GET %s: %d %s", path, resp.StatusCode, body)
		}
		return body
	}
	for _, https := range []bool{false, true} {
		want := "http://train.example.test/v1/downloads/"
		if https {
			want = "https://train.example.test/v1/downloads/"
		}
		var prime struct {
			Checkpoints []struct{ StorageURL string }
		}
		if err := json.Unmarshal(get("/api/v1/rft/runs/"+id+"/checkpoints", https), &prime); err != nil ||
			len(prime.Checkpoints) != 1 || !strings.HasPrefix(prime.Checkpoints[0].StorageURL, want) {
			t.Errorf("the Prime checkpoint (https %v): %+v (%v), want a link from %s", https, prime, err, want)
			continue
		}
		if !bytes.Contains(get("/v1/jobs/"+id+"/checkpoints", https), []byte(`"url":"`+want)) {
			t.Errorf("the /v1 checkpoint (https %v) links elsewhere than %s", https, want)
		}
	}
}
