package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// ended waits for a stream to end by itself; false if it is still open after limit.
func ended(ch chan sseEvent, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// An open stream does not outlive its token: revoked, the stream ends within the stream's
// revocation check (issue 14: it went on for as long as the job ran).
func TestAStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	ch, stop := d.stream(t, "/events", "")
	defer stop()
	next(t, ch) // job.queued: the stream is open
	admin := d.s.Token("ops", auth.ScopeAdmin)
	if r := call(t, "POST", d.s.URL+"/v1/admin/tokens/revoke", admin, "application/json",
		[]byte(fmt.Sprintf(`{"token":%q}`, d.token))); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if !ended(ch, 10*time.Second) {
		t.Fatal("the stream was still open 10 s after its token was revoked")
	}
}

// ... and expired, it ends at its expiry and the verifier's leeway.
func TestAStreamEndsWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	short, err := d.s.Keys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead}, TTL: time.Second}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d.token = short
	ch, stop := d.stream(t, "/events", "")
	defer stop()
	next(t, ch)
	if !ended(ch, time.Second+auth.Leeway+5*time.Second) {
		t.Fatal("the stream outlived its token's expiry")
	}
}

// A secret may not set what the service sets for a job's processes: its GPUs, its programs,
// where it reaches (issue 14: a 2-GPU job's CUDA_VISIBLE_DEVICES secret showed it all 8).
// 422 naming the secret, in TOML and JSON, and nothing is stored.
func TestReservedVariablesCannotBeSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for _, name := range []string{"CUDA_VISIBLE_DEVICES", "LD_PRELOAD", "PATH", "http_proxy", "PYTHONPATH", "HOSTEDTRAIN_AGENT_TOKEN", "AWS_SECRET_ACCESS_KEY"} {
		for ct, body := range map[string]string{
			"application/toml": "model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"gsm8k\"\n[secrets]\n" + name + " = \"x\"\n",
			"application/json": `{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": [{"id": "gsm8k"}], "secrets": {"` + name + `": "x"}}`,
		} {
			r := call(t, "POST", b.s.URL+"/v1/jobs", b.writer, ct, []byte(body))
			if r.status != http.StatusUnprocessableEntity {
				t.Errorf("%s as a secret (%s): %d %s, want 422", name, ct, r.status, r.body)
				continue
			}
			p := r.problem(t)
			if len(p.Errors) == 0 || p.Errors[0].Pointer != "/secrets/"+name || !strings.Contains(p.Errors[0].Message, "reserved") {
				t.Errorf("%s: problem %+v, want one naming /secrets/%s as reserved", name, p, name)
			}
		}
	}
	if n, err := b.s.Redis.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("Redis holds %d keys after refused submits (%v)", n, err)
	}
}

// Small bodies, big costs: TOML nested 8,000 deep (32 KB) is refused from its bytes, with the
// depth named, before anything walks it (issue 14: 5 s of CPU on the error path, four at once
// took the API to 3 GB). Nothing is stored.
func TestDeepTOMLIsRefusedFromItsBytes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for name, doc := range map[string]string{
		"inline tables": "a = " + strings.Repeat("{b=", 8000) + "1" + strings.Repeat("}", 8000),
		"in env args":   "model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"gsm8k\"\nargs = " + strings.Repeat("{b=", 8000) + "1" + strings.Repeat("}", 8000),
		"dotted keys":   strings.Repeat("a.", 8000) + "b = 1",
		"a header":      "[" + strings.Repeat("a.", 8000) + "b]\nc = 1",
	} {
		for _, path := range []string{"/v1/jobs", "/v1/jobs/preview"} {
			r := call(t, "POST", b.s.URL+path, b.writer, "application/toml", []byte(doc))
			if r.status < 400 || r.status >= 500 || !strings.Contains(string(r.body), "nested deeper than 64") {
				t.Errorf("%s to %s: %d %.200s", name, path, r.status, r.body)
				continue
			}
			r.problem(t)
		}
	}
	if n, err := b.s.Redis.DBSize(context.Background()).Result(); err != nil || n != 0 {
		t.Errorf("Redis holds %d keys after refused submits (%v)", n, err)
	}
}
