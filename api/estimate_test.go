package api_test

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A dry run estimates a training job from the step times of the organization's past runs of
// the same model on the same GPUs (a run of 10 steps over 100 s: 10 s a step), at the
// operator's price; another model, with no past run, gets the documented default.
func TestADryRunEstimatesFromPastRuns(t *testing.T) {
	t.Parallel()
	models, err := api.ParseModels([]byte("[[model]]\nname = \"Qwen/Qwen3-4B-Instruct-2507\"\ngpus = 2\nprice_per_gpu_hour = 3\n\n" +
		"[[model]]\nname = \"Qwen/Qwen3-8B\"\ngpus = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	clk := &clock{now: time.Now()}
	s := apitest.Start(t, apitest.Options{Models: models, Queue: queue.Config{Now: clk.Now}})
	token := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	agent := s.AgentToken("agent-1")
	const file = "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = %d\n[[env]]\nid = \"acme/env\"\n"
	ctx := context.Background()
	for _, secs := range []time.Duration{100 * time.Second, 100 * time.Second} {
		j := submitTOML(t, s, token, fmt.Sprintf(file, 10))
		cl := claimJob(t, s, agent)
		if _, err := s.Queue.Heartbeat(ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(secs)
		if _, err := s.Queue.Complete(ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}}); err != nil {
			t.Fatal(err)
		}
	}
	var p client.Preview
	r := call(t, "POST", s.URL+"/v1/jobs/preview", token, "application/toml", []byte(fmt.Sprintf(file, 60)))
	if r.decode(t, &p); r.status != http.StatusOK || p.Estimate == nil {
		t.Fatalf("preview: %d %s", r.status, r.body)
	}
	e := p.Estimate
	if e.Runs != 2 || e.Steps != 60 || e.StepSeconds.Expected != 10 || e.DurationSeconds.Expected != 600 ||
		e.GPUHours.Expected != round3(600*2/3600.0) || e.Cost == nil || e.Cost.Expected != 1 ||
		e.DurationSeconds.Low != 450 || e.DurationSeconds.High != 900 || !strings.Contains(e.BasedOn, "2 past run(s) of Qwen/Qwen3-4B-Instruct-2507 on 2×H100") {
		t.Errorf("estimate %+v (cost %+v)", e, e.Cost)
	}
	// A third run, of 40 steps in 220 s, and a fourth of 20 in 140: 60 s to start and 4 s a step
	// (as the first two, 10 in 100 s, also fit) is the line through them, and each run is on it.
	for _, run := range []struct {
		steps int
		secs  time.Duration
	}{{40, 220 * time.Second}, {20, 140 * time.Second}} {
		j := submitTOML(t, s, token, fmt.Sprintf(file, run.steps))
		cl := claimJob(t, s, agent)
		if _, err := s.Queue.Heartbeat(ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(run.secs)
		if _, err := s.Queue.Complete(ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Progress: &job.Progress{Step: run.steps, MaxSteps: run.steps}}); err != nil {
			t.Fatal(err)
		}
	}
	p = client.Preview{}
	r = call(t, "POST", s.URL+"/v1/jobs/preview", token, "application/toml", []byte(fmt.Sprintf(file, 100)))
	if r.decode(t, &p); r.status != http.StatusOK || p.Estimate == nil || p.Estimate.Runs != 4 || p.Estimate.DurationSeconds.Expected != 460 ||
		p.Estimate.DurationSeconds.Low != 460 || p.Estimate.DurationSeconds.High != 460 || !strings.Contains(p.Estimate.BasedOn, "a start-up of 60 s and 4.0 s a step") {
		t.Errorf("the fitted estimate: %d %s", r.status, r.body)
	}
	r = call(t, "POST", s.URL+"/v1/jobs/preview", token, "application/toml", []byte("model = \"Qwen/Qwen3-8B\"\nmax_steps = 50\n[[env]]\nid = \"acme/env\"\n"))
	p = client.Preview{}
	if r.decode(t, &p); r.status != http.StatusOK || p.Estimate == nil || p.Estimate.Runs != 0 || p.Estimate.StepSeconds.Expected != 60 ||
		p.Estimate.Cost != nil || !strings.Contains(p.Estimate.BasedOn, "default") {
		t.Errorf("the default estimate: %d %s", r.status, r.body)
	}
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }
