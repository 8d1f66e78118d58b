package api_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/seal"
)

const (
	openaiValue = "sk-live-0123456789abcdef"
	wandbValue  = "wandb-9876543210fedcba"
)

var secretJob = []byte(`{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": [{"id": "gsm8k"}],
  "wandb": {"project": "p"},
  "secrets": {"OPENAI_API_KEY": "` + openaiValue + `", "WANDB_API_KEY": "` + wandbValue + `"}}`)

func assertNoSecret(t *testing.T, where string, data []byte) {
	t.Helper()
	for _, v := range []string{openaiValue, wandbValue} {
		if strings.Contains(string(data), v) {
			t.Errorf("%s shows a secret value:\n%s", where, data)
		}
	}
}

func TestSecretsAreNamedButNeverShown(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/json", secretJob)
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	assertNoSecret(t, "the submit answer", r.body)
	var j submitted
	r.decode(t, &j)
	if strings.Join(j.Config.Secrets, ",") != "OPENAI_API_KEY,WANDB_API_KEY" {
		t.Errorf("secret names %v", j.Config.Secrets)
	}
	if len(j.Warnings) != 0 {
		t.Errorf("WANDB_API_KEY is among the secrets, yet warnings %+v", j.Warnings)
	}
	for _, path := range []string{"/v1/jobs/" + j.ID, "/v1/jobs", "/v1/jobs/" + j.ID + "/events"} {
		assertNoSecret(t, path, call(t, "GET", b.s.URL+path, b.reader, "", nil).body)
	}
	assertNoSecret(t, "the preview", call(t, "POST", b.s.URL+"/v1/jobs/preview", b.writer, "application/json", secretJob).body)

	// At rest: nothing in Redis holds a value in the clear.
	ctx := context.Background()
	keys := b.s.AllKeys("*")
	for _, k := range keys {
		dump, err := b.s.Redis.Dump(ctx, k).Result()
		if err != nil {
			t.Fatal(err)
		}
		assertNoSecret(t, "redis key "+k, []byte(dump))
	}
	sealed, err := b.s.Redis.Get(ctx, rediskeys.OwnKey("ht", j.ID, "ownsec")).Result()
	if err != nil || !strings.HasPrefix(sealed, "v1.") {
		t.Errorf("stored secrets %q (%v), want a sealed value", sealed, err)
	}

	// The agent that claims the job gets them.
	r = call(t, "POST", b.s.URL+"/v1/agent/claim", b.agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`))
	if r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	var cl job.Claim
	r.decode(t, &cl)
	if cl.Secrets["OPENAI_API_KEY"] != openaiValue || cl.Secrets["WANDB_API_KEY"] != wandbValue {
		t.Errorf("claim secrets %v", cl.Secrets)
	}
}

func TestProblemsNeverEchoSecretValues(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := []byte(`{"model": "m", "env": [{"id": "gsm8k"}], "secrets": {"BAD NAME": "` + openaiValue + `", "OK": 5}}`)
	r := call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/json", body)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	assertNoSecret(t, "the problem", r.body)
	toml := []byte("model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"gsm8k\"\n[secrets]\n\"BAD NAME\" = \"" + openaiValue + "\"\n")
	r = call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/toml", toml)
	if r.status != http.StatusUnprocessableEntity {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	assertNoSecret(t, "the problem", r.body)
}

func TestSecretsUnderARetiredKeyFailTheJobWithTheReason(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := call(t, "POST", b.s.URL+"/v1/jobs", b.writer, "application/json", secretJob)
	var j submitted
	r.decode(t, &j)

	// Another API over the same Redis whose key ring lacks the key that sealed them.
	entry, _ := seal.NewKey("other")
	ring, _ := seal.Parse(entry)
	h, err := api.New(api.Config{Queue: b.s.Queue, Verifier: auth.NewVerifier(b.s.Keys, nil), Secrets: ring})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(apitest.ValidateResponses(t, h))
	defer srv.Close()
	if r := call(t, "POST", srv.URL+"/v1/agent/claim", b.agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`)); r.status != http.StatusNoContent {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	var got job.Job
	call(t, "GET", b.s.URL+"/v1/jobs/"+j.ID, b.reader, "", nil).decode(t, &got)
	if got.Status != job.Failed || !strings.Contains(got.Error, "secrets cannot be decrypted") {
		t.Errorf("job %s %q, want FAILED saying why", got.Status, got.Error)
	}
}
