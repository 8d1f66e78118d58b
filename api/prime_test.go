package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The Prime-compatible surface through the contract: every answer here is checked against
// openapi.yaml (apitest validates each response), in the shapes and error forms the prime CLI
// reads. TestPrimeCLIClientDrivesHostedtrain (cmd/hostedtrain) drives it with the CLI's own
// client code.
func TestPrimeSurfaceCreatesAndReadsRuns(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := apitest.Start(t, apitest.Options{Store: store})
	b := bundle{s: s, writer: s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite), reader: s.Token("acme", auth.ScopeJobsRead),
		other: s.Token("globex", auth.ScopeJobsRead, auth.ScopeJobsWrite)}
	payload := `{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"},
		"environments": [{"taskset": {"id": "primeintellect/alphabet-sort", "min_turns": 1}, "ratio": 2.0}],
		"rollouts_per_example": 8, "max_steps": 30, "batch_size": 64, "max_tokens": 256, "temperature": 0.7,
		"name": "from-prime", "monitoring": {"wandb": {"project": "p"}}, "team_id": "team-1",
		"secrets": [{"key": "WANDB_API_KEY", "value": "wandb-secret"}],
		"eval": {"interval": 10, "environments": [{"id": "primeintellect/alphabet-sort", "num_examples": 5}]}}`
	r := call(t, "POST", b.s.URL+"/api/v1/rft/runs", b.writer, "application/json", []byte(payload))
	if r.status != http.StatusCreated {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var created struct {
		Run map[string]any `json:"run"`
	}
	r.decode(t, &created)
	run := created.Run
	id, _ := run["id"].(string)
	if run["status"] != "QUEUED" || run["userId"] != "acme" || run["baseModel"] != "Qwen/Qwen3-4B-Instruct-2507" ||
		run["maxSteps"] != 30.0 || run["maxTokens"] != 256.0 || run["wandbProject"] != "p" || run["name"] != "from-prime" {
		t.Errorf("created run: %v", run)
	}
	if strings.Contains(string(r.body), "wandb-secret") {
		t.Errorf("the answer shows a secret: %s", r.body)
	}
	// The same job as /v1 sees it: the payload's names turned into a job file's.
	var j struct {
		Config struct {
			Env []struct {
				ID     string         `json:"id"`
				Args   map[string]any `json:"args"`
				Weight float64        `json:"weight"`
			} `json:"env"`
			Sampling struct {
				MaxTokens   int     `json:"max_tokens"`
				Temperature float64 `json:"temperature"`
			} `json:"sampling"`
			Secrets []string `json:"secrets"`
			Eval    struct {
				Env []struct {
					NumExamples int `json:"num_examples"`
				} `json:"env"`
			} `json:"eval"`
		} `json:"config"`
	}
	call(t, "GET", b.s.URL+"/v1/jobs/"+id, b.reader, "", nil).decode(t, &j)
	if len(j.Config.Env) != 1 || j.Config.Env[0].ID != "primeintellect/alphabet-sort" || j.Config.Env[0].Weight != 2 ||
		j.Config.Env[0].Args["min_turns"] != 1.0 || j.Config.Sampling.MaxTokens != 256 || j.Config.Sampling.Temperature != 0.7 ||
		len(j.Config.Secrets) != 1 || len(j.Config.Eval.Env) != 1 || j.Config.Eval.Env[0].NumExamples != 5 {
		t.Errorf("the job: %+v", j.Config)
	}

	for _, path := range []string{"/api/v1/rft/runs/" + id, "/api/v1/rft/runs", "/api/v1/rft/runs/" + id + "/progress",
		"/api/v1/rft/runs/" + id + "/checkpoints", "/api/v1/rft/runs/" + id + "/metrics", "/api/v1/rft/models"} {
		if r := call(t, "GET", b.s.URL+path, b.reader, "", nil); r.status != http.StatusOK {
			t.Errorf("GET %s: %d %s", path, r.status, r.body)
		}
	}
	r = call(t, "PUT", b.s.URL+"/api/v1/rft/runs/"+id+"/stop", b.writer, "", nil)
	var stopped struct {
		Run map[string]any `json:"run"`
	}
	if r.decode(t, &stopped); r.status != http.StatusOK || stopped.Run["status"] != "STOPPED" {
		t.Errorf("stop a queued run: %d %s", r.status, r.body)
	}
	// A job that is not a training run (GEPA) is not a run here, and not in the list.
	g := call(t, "POST", b.s.URL+"/v1/jobs?kind=gepa", b.writer, "application/toml", fixture(t, "gepa.toml"))
	var gj struct {
		ID string `json:"id"`
	}
	g.decode(t, &gj)
	if r := call(t, "GET", b.s.URL+"/api/v1/rft/runs/"+gj.ID, b.reader, "", nil); g.status != http.StatusCreated || r.status != http.StatusNotFound {
		t.Errorf("a GEPA job as a run: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", b.s.URL+"/api/v1/rft/runs", b.reader, "", nil); strings.Contains(string(r.body), gj.ID) || !strings.Contains(string(r.body), id) {
		t.Errorf("the list of runs: %s", r.body)
	}
	// Another organization's run is not there.
	if r := call(t, "GET", b.s.URL+"/api/v1/rft/runs/"+id, b.other, "", nil); r.status != http.StatusNotFound ||
		!strings.Contains(string(r.body), `"detail":"no job`) {
		t.Errorf("another organization's run: %d %s", r.status, r.body)
	}
}

func TestPrimeSurfaceAnswersErrorsAsTheCLIReadsThem(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		name, token, body string
		status            int
		loc               []any
		contains          string
	}{
		{"a refused environment id", b.writer, `{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "environments": [{"id": "not a valid id!"}]}`,
			422, []any{"body", "environments", 0.0, "id"}, "an environment id is"},
		{"a refused sampling value", b.writer, `{"model": {"name": "Qwen/Qwen3-4B-Instruct-2507"}, "environments": [{"id": "gsm8k"}], "temperature": 9}`,
			422, []any{"body", "temperature"}, "at most 2"},
		{"a payload key the CLI does not send", b.writer, `{"model": {"name": "m"}, "environments": [], "bogus": 1}`,
			422, []any{"body", "bogus"}, "unknown key"},
		{"no token", "", `{"model": {"name": "m"}, "environments": []}`, 401, nil, "token"},
		{"a read-only token", b.reader, `{"model": {"name": "m"}, "environments": []}`, 403, nil, "scope"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := call(t, "POST", b.s.URL+"/api/v1/rft/runs", c.token, "application/json", []byte(c.body))
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			var e struct {
				Detail json.RawMessage `json:"detail"`
			}
			r.decode(t, &e)
			if c.loc == nil {
				var msg string
				if err := json.Unmarshal(e.Detail, &msg); err != nil || !strings.Contains(strings.ToLower(msg), c.contains) {
					t.Errorf("detail %s, want a message with %q", e.Detail, c.contains)
				}
				return
			}
			var items []struct {
				Loc []any  `json:"loc"`
				Msg string `json:"msg"`
			}
			if err := json.Unmarshal(e.Detail, &items); err != nil || len(items) == 0 {
				t.Fatalf("detail %s: %v", e.Detail, err)
			}
			if got, _ := json.Marshal(items[0].Loc); string(got) != mustJSON(c.loc) || !strings.Contains(items[0].Msg, c.contains) {
				t.Errorf("first error %v %q; want %v containing %q", items[0].Loc, items[0].Msg, c.loc, c.contains)
			}
		})
	}
	if n := b.jobCount(t); n != 0 {
		t.Errorf("%d jobs were made by refused payloads", n)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// The full fine-tune path: the CLI's payload is the fft job it stands for, refused as a job
// file is (here: no [inference], which a run on one node needs).
func TestPrimeSurfaceCreatesFullFinetunes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const cfg = `"type": "full_finetune", "max_steps": 10, "model": {"name": "Qwen/Qwen3-0.6B"}, "trainer": {},
		"orchestrator": {"train": {"source": [{"name": "reverse-text", "env": {"taskset": {"id": "reverse-text"}}}]}}`
	r := call(t, "POST", b.s.URL+"/api/v1/training/runs", b.writer, "application/json",
		[]byte(`{"name": "fft-1", "hfToken": "hf_x", "gpuType": "H100", "config": {`+cfg+`, "inference": {}}}`))
	var created struct {
		RunID      string `json:"runId"`
		TokenValue string `json:"tokenValue"`
	}
	r.decode(t, &created)
	if r.status != http.StatusCreated || created.RunID == "" {
		t.Fatalf("create: %d %s", r.status, r.body)
	}
	var j job.Job
	call(t, "GET", b.s.URL+"/v1/jobs/"+created.RunID, b.writer, "", nil).decode(t, &j)
	if j.Kind != "fft" || j.Name != "fft-1" || len(j.Config.Secrets) != 1 || j.Config.Secrets[0] != "HF_TOKEN" {
		t.Fatalf("the job: kind %s name %q secrets %v", j.Kind, j.Name, j.Config.Secrets)
	}
	r = call(t, "POST", b.s.URL+"/api/v1/training/runs", b.writer, "application/json", []byte(`{"config": {`+cfg+`}}`))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "inference") || !strings.Contains(string(r.body), `"detail"`) {
		t.Fatalf("a full fine-tune without [inference]: %d %s", r.status, r.body)
	}
}
