package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// A fork starts a new job from a committed checkpoint of a job of the organization's, in any
// state: its config and secrets, the changes asked for, its lineage in warm_start; a step
// without a checkpoint is refused naming step, another organization finds nothing.
func TestForkStartsANewJobFromACheckpoint(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	sub := call(t, "POST", d.s.URL+"/v1/jobs", d.token, "application/toml",
		[]byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 40\nsecrets = { WANDB_API_KEY = \"wk-1\" }\n[[env]]\nid = \"acme/env\"\n"))
	var src job.Job
	sub.decode(t, &src)
	if sub.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", sub.status, sub.body)
	}
	call(t, "POST", d.s.URL+"/v1/jobs/"+src.ID+"/cancel", d.token, "", nil) // a STOPPED run forks too
	for _, step := range []int{10, 20} {
		if err := d.store.Put(d.ctx, fmt.Sprintf("jobs/%s/checkpoints/step_%d/manifest.json", src.ID, step), strings.NewReader(`{"files":[]}`)); err != nil {
			t.Fatal(err)
		}
	}
	fork := func(token, body string) reply {
		return call(t, "POST", d.s.URL+"/v1/jobs/"+src.ID+"/fork", token, "application/json", []byte(body))
	}
	r := fork(d.token, `{}`)
	var f job.Job
	r.decode(t, &f)
	if r.status != http.StatusCreated || f.ID == src.ID || f.Config.WarmStart == nil || f.Config.WarmStart.Job != src.ID || f.Config.WarmStart.Step != 20 ||
		f.Config.MaxSteps != 40 || f.Status != job.Queued {
		t.Fatalf("fork from the newest: %d %s", r.status, r.body)
	}
	r = fork(d.token, `{"step": 10, "max_steps": 60, "name": "lr-down", "learning_rate": 0.00001}`)
	r.decode(t, &f)
	if r.status != http.StatusCreated || f.Config.WarmStart.Step != 10 || f.Config.MaxSteps != 60 || f.Name != "lr-down" || f.Config.LearningRate != 1e-5 {
		t.Fatalf("fork from step 10 with changes: %d %s", r.status, r.body)
	}
	// The fork's secrets are the source's, sealed for the fork: its agent reads them.
	agent := d.s.AgentToken("agent-1")
	for i := 0; i < 3; i++ {
		var cl job.Claim
		cr := call(t, "POST", d.s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`))
		if cr.status != http.StatusOK {
			t.Fatalf("claim %d: %d %s", i, cr.status, cr.body)
		}
		cr.decode(t, &cl)
		if cl.Job.ID == f.ID {
			if cl.Secrets["WANDB_API_KEY"] != "wk-1" {
				t.Fatalf("the fork's claim carries secrets %v", cl.Secrets)
			}
			break
		}
	}
	if r := fork(d.token, `{"step": 15}`); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"pointer":"/step"`) ||
		!strings.Contains(string(r.body), "it has steps 10, 20") {
		t.Fatalf("fork of a step without a checkpoint: %d %s", r.status, r.body)
	}
	if r := fork(d.token, `{"step": 20, "max_steps": 20}`); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "max_steps") {
		t.Fatalf("fork with nothing left to do: %d %s", r.status, r.body)
	}
	if r := fork(d.token, `{"time_limit": "99999h"}`); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "time_limit must be between 1m and") {
		t.Fatalf("fork with a time limit past the most: %d %s", r.status, r.body)
	}
	if r := fork(d.token, `{"steps": 20}`); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Fatalf("a misspelt key: %d %s", r.status, r.body)
	}
	other := d.s.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	if r := fork(other, `{}`); r.status != http.StatusNotFound {
		t.Fatalf("fork by another organization: %d %s", r.status, r.body)
	}
}
