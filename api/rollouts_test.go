package api_test

import (
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// rolloutStep is a step of n samples whose rewards are i % 2.
func rolloutStep(step, n int) jobdata.RolloutStep {
	rs := jobdata.RolloutStep{Step: step, Episodes: 4 * n, Distributions: map[string]jobdata.Distribution{
		"rewards":    {Count: 4 * n, Mean: 0.5, Min: 0, Max: 1, Bins: []jobdata.Bin{{Min: 0, Max: 0.5, Count: 2 * n}, {Min: 0.5, Max: 1, Count: 2 * n}}},
		"advantages": {Count: 4 * n, Mean: 0, Min: -0.5, Max: 0.5, Bins: []jobdata.Bin{{Min: -0.5, Max: 0, Count: 2 * n}, {Min: 0, Max: 0.5, Count: 2 * n}}},
	}}
	for i := 0; i < n; i++ {
		rs.Samples = append(rs.Samples, jobdata.Sample{ID: fmt.Sprintf("t%d-%d", step, i), Index: 4 * i, Reward: float64(i % 2), OK: true,
			Prompt:     []jobdata.SampleMessage{{Role: "user", Content: fmt.Sprintf("question %d", i)}},
			Completion: []jobdata.SampleMessage{{Role: "assistant", Content: fmt.Sprintf("answer %d", i)}}})
	}
	return rs
}

// Samples and distributions on both surfaces: the newest step by default, a step by number,
// pages, a step with none named in a problem, progress listing the steps, and another
// organization kept out.
func TestSamplesAndDistributions(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	var empty client.SamplesPage
	if r := d.get(t, "/samples", &empty); r.status != 200 || empty.Step != nil || len(empty.Steps) != 0 || len(empty.Samples) != 0 {
		t.Fatalf("a job without rollouts: %d %s", r.status, r.body)
	}
	for _, step := range []int{2, 5} {
		if err := jobdata.PutRollouts(d.ctx, d.store, d.jobID, rolloutStep(step, 10)); err != nil {
			t.Fatal(err)
		}
	}

	var newest client.SamplesPage
	if r := d.get(t, "/samples", &newest); r.status != 200 || newest.Step == nil || *newest.Step != 5 || newest.Episodes != 40 ||
		len(newest.Samples) != 10 || newest.Total != 10 || newest.TotalPages != 1 || fmt.Sprint(newest.Steps) != "[2 5]" {
		t.Fatalf("newest step: %d %s", r.status, r.body)
	}
	var page client.SamplesPage
	if r := d.get(t, "/samples?step=2&page=2&limit=4", &page); r.status != 200 || *page.Step != 2 || len(page.Samples) != 4 ||
		page.Samples[0].ID != "t2-4" || page.TotalPages != 3 {
		t.Fatalf("step 2, page 2 of 4: %d %s", r.status, r.body)
	}
	r := d.get(t, "/samples?step=3", nil)
	if r.status != http.StatusNotFound || !strings.Contains(string(r.body), "steps 2, 5 have") || !strings.Contains(string(r.body), `"parameter":"step"`) {
		t.Fatalf("a step without rollouts: %d %s", r.status, r.body)
	}
	if r := d.get(t, "/samples?step=0", nil); r.status != http.StatusBadRequest {
		t.Fatalf("step 0: %d %s", r.status, r.body)
	}

	var dist client.DistributionPage
	if r := d.get(t, "/distributions?type=advantages&step=2", &dist); r.status != 200 || dist.Type != "advantages" || *dist.Step != 2 ||
		dist.Count != 40 || len(dist.Bins) != 2 || dist.Bins[0].Min != -0.5 {
		t.Fatalf("advantages of step 2: %d %s", r.status, r.body)
	}
	if r := d.get(t, "/distributions", &dist); r.status != 200 || dist.Type != "rewards" || *dist.Step != 5 || dist.Mean != 0.5 {
		t.Fatalf("rewards of the newest step: %d %s", r.status, r.body)
	}
	if r := d.get(t, "/distributions?type=losses", nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "type") {
		t.Fatalf("an unknown type: %d %s", r.status, r.body)
	}

	// progress lists the steps once the run has one
	agent := d.s.AgentToken("agent-1")
	var cl job.Claim
	call(t, "POST", d.s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`)).decode(t, &cl)
	hb := fmt.Sprintf(`{"lease_token":%q,"running":true,"progress":{"step":5,"max_steps":100,"checkpoints":0}}`, cl.Lease.Token)
	if r := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+d.jobID+"/heartbeat", agent, "application/json", []byte(hb)); r.status != 200 {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	var p client.JobProgress
	if r := d.get(t, "/progress", &p); r.status != 200 || fmt.Sprint(p.StepsWithSamples) != "[2 5]" {
		t.Fatalf("progress: %d %s", r.status, r.body)
	}

	// the Prime surface: the shapes the prime CLI's RLClient reads
	prime := func(path string, v any) reply {
		r := call(t, "GET", d.s.URL+"/api/v1/rft/runs/"+d.jobID+path, d.token, "", nil)
		if v != nil && r.status == 200 {
			r.decode(t, v)
		}
		return r
	}
	var ps struct {
		RunID      string `json:"run_id"`
		Samples    []jobdata.Sample
		Total      int
		Page       int
		Limit      int
		TotalPages int `json:"total_pages"`
	}
	if r := prime("/samples?step=5&page=1&limit=3", &ps); r.status != 200 || ps.RunID != d.jobID || len(ps.Samples) != 3 || ps.Total != 10 || ps.TotalPages != 4 {
		t.Fatalf("prime samples: %d %s", r.status, r.body)
	}
	var pd struct {
		Bins []jobdata.Bin
		Step int
	}
	if r := prime("/distributions?type=rewards", &pd); r.status != 200 || pd.Step != 5 || len(pd.Bins) != 2 {
		t.Fatalf("prime distributions: %d %s", r.status, r.body)
	}
	var pp struct {
		StepsWithSamples       []int `json:"stepsWithSamples"`
		StepsWithDistributions []int `json:"stepsWithDistributions"`
	}
	if r := prime("/progress", &pp); r.status != 200 || fmt.Sprint(pp.StepsWithSamples, pp.StepsWithDistributions) != "[2 5] [2 5]" {
		t.Fatalf("prime progress: %d %s", r.status, r.body)
	}
	if r := prime("/samples?step=3", nil); r.status != http.StatusNotFound || !strings.Contains(string(r.body), `"detail"`) {
		t.Fatalf("prime samples of a step without: %d %s", r.status, r.body)
	}

	// another organization sees nothing of it
	other := d.s.Token("umbrella", auth.ScopeJobsRead)
	if r := call(t, "GET", d.s.URL+"/v1/jobs/"+d.jobID+"/samples", other, "", nil); r.status != http.StatusNotFound {
		t.Fatalf("another organization: %d %s", r.status, r.body)
	}
}
