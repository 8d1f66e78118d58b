package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// checkpoint_id names a committed checkpoint of a job of the organization's: resolved at
// submit (and preview) to the run's warm start, or refused naming what is wrong.
func TestCheckpointIDResolvesToAWarmStart(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	for _, step := range []int{10, 20} {
		d.put(t, fmt.Sprintf("checkpoints/step_%d/trainer/.metadata", step), "m")
		d.put(t, fmt.Sprintf("checkpoints/step_%d/manifest.json", step), `{"step":`+fmt.Sprint(step)+`,"files":[]}`)
	}
	d.put(t, "checkpoints/step_25/trainer/.metadata", "an upload in progress: no manifest yet")
	file := func(model, ckpt string, maxSteps int) []byte {
		return []byte(fmt.Sprintf("model = %q\nmax_steps = %d\ncheckpoint_id = %q\n[[env]]\nid = \"acme/env\"\n", model, maxSteps, ckpt))
	}
	const model = "Qwen/Qwen3-4B-Instruct-2507"
	submit := func(token string, body []byte) reply {
		return call(t, "POST", d.s.URL+"/v1/jobs", token, "application/toml", body)
	}
	for _, c := range []struct {
		ckpt     string
		maxSteps int
		step     int
	}{{d.jobID + "-step-10", 50, 10}, {d.jobID, 50, 20}} {
		r := submit(d.token, file(model, c.ckpt, c.maxSteps))
		var j job.Job
		r.decode(t, &j)
		if r.status != http.StatusCreated || j.Config.WarmStart == nil || j.Config.WarmStart.Job != d.jobID || j.Config.WarmStart.Step != c.step {
			t.Fatalf("checkpoint_id %s: %d %s", c.ckpt, r.status, r.body)
		}
		if strings.Contains(string(r.body), "not built yet") {
			t.Errorf("a warm start still warns it is not built: %s", r.body)
		}
	}
	other := d.s.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	for _, c := range []struct {
		token, model, ckpt string
		maxSteps           int
		want               string
	}{
		{d.token, model, d.jobID + "-step-15", 50, "no committed checkpoint of step 15; it has steps 10, 20"},
		{d.token, model, d.jobID + "-step-25", 50, "no committed checkpoint of step 25"},
		{d.token, "Qwen/Qwen3-8B", d.jobID + "-step-10", 50, "are of Qwen/Qwen3-4B-Instruct-2507; this job trains Qwen/Qwen3-8B"},
		{d.token, model, d.jobID + "-step-20", 20, `"pointer":"/max_steps","line":2,"column":1,"message":"max_steps (20) must be more than the step the run starts from (20`},
		{d.token, model, "01a20201-0000-7000-8000-00000000dead-step-3", 50, "no job 01a20201-0000-7000-8000-00000000dead in your organization"},
		{other, model, d.jobID + "-step-10", 50, "no job " + d.jobID + " in your organization"},
	} {
		r := submit(c.token, file(c.model, c.ckpt, c.maxSteps))
		if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "checkpoint_id") && !strings.Contains(string(r.body), "max_steps") {
			t.Errorf("checkpoint_id %s (%s): %d %s", c.ckpt, c.model, r.status, r.body)
			continue
		}
		if !strings.Contains(string(r.body), c.want) {
			t.Errorf("checkpoint_id %s: %s\nwant %q", c.ckpt, r.body, c.want)
		}
	}
	// A LoRA of another rank cannot load the checkpoint's adapter.
	body := []byte(fmt.Sprintf("model = %q\nmax_steps = 50\ncheckpoint_id = %q\nlora_rank = 7\n[[env]]\nid = \"acme/env\"\n", model, d.jobID+"-step-10"))
	if r := submit(d.token, body); r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "LoRA") {
		t.Errorf("a LoRA of another rank: %d %s", r.status, r.body)
	}
	// A dry run says the same.
	r := call(t, "POST", d.s.URL+"/v1/jobs/preview", d.token, "application/toml", file(model, d.jobID+"-step-15", 50))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "it has steps 10, 20") {
		t.Errorf("preview of a missing step: %d %s", r.status, r.body)
	}
}
