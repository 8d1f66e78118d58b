package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/openapi"
)

var update = flag.Bool("update", false, "rewrite the CLI's golden files under testdata/golden")

// The CLI's tables, pinned: a change to what users read shows as a change to a golden file.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./cmd/hostedtrain -run Golden -update writes it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from its golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

var t0 = time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)

func sampleJobs() []*job.Job {
	started, finished := t0.Add(time.Minute), t0.Add(41*time.Minute)
	ahead := 3
	return []*job.Job{
		{ID: "01a20201-0000-7000-8000-000000000002", Org: "acme", Kind: "rl", Status: job.Running, Attempt: 1, MaxAttempts: 3, Run: 3,
			Config: jobspec.Spec{Model: "Qwen/Qwen3-4B-Instruct-2507", Env: []jobspec.Env{{ID: "primeintellect/alphabet-sort"}, {ID: "gsm8k"}},
				Resources: jobspec.Resources{GPUs: 2, GPUType: "H100"}, WarmStart: &jobspec.WarmStart{Job: "01a20200-0000-7000-8000-0000000000aa", Step: 40}},
			Progress: job.Progress{Step: 120, MaxSteps: 300, Metrics: map[string]float64{"train/agg/all/agent/reward/mean": 0.6123, "entropy/all/mean": 0.81, "loss/mean": 0.031},
				Series:      map[string]string{"reward": "train/agg/all/agent/reward/mean", "entropy": "entropy/all/mean", "loss": "loss/mean"},
				Checkpoints: 2, CheckpointStep: 100},
			Runtime:    &job.Runtime{AgentID: "node-7", Pipeline: "prime-rl", Upstream: &upstream.Versions{PrimeRL: upstream.PrimeRLCommit, Verifiers: upstream.VerifiersCommit, PrimeCLI: "0.6.26"}},
			GPUSeconds: 4800, BudgetGPUSeconds: 36000, CreatedAt: t0.Add(-2 * time.Hour), StartedAt: &started},
		{ID: "01a20201-0000-7000-8000-000000000001", Org: "acme", Kind: "eval", Status: job.Completed, Attempt: 1, MaxAttempts: 3,
			Config: jobspec.Spec{Model: "openai/gpt-4.1-mini", Env: []jobspec.Env{{ID: "my-env"}}},
			Progress: job.Progress{Metrics: map[string]float64{"eval/my-env/avg_reward": 0.55}, Series: map[string]string{"eval_reward": "eval/my-env/avg_reward"},
				Result: &job.Result{Eval: []job.EvalSummary{{Env: "my-env", NumExamples: 100, RolloutsPerExample: 5, Rollouts: 500, AvgReward: ptr(0.55)}}}},
			CreatedAt: t0.Add(-50 * time.Hour), StartedAt: &started, FinishedAt: &finished},
		{ID: "01a20201-0000-7000-8000-000000000000", Org: "acme", Kind: "rl", Status: job.Queued, Attempt: 2, MaxAttempts: 3,
			Config:   jobspec.Spec{Model: "Qwen/Qwen3-30B-A3B-Instruct-2507", Env: []jobspec.Env{{ID: "wiki-search"}}, Resources: jobspec.Resources{GPUs: 8, GPUType: "H100"}},
			Progress: job.Progress{MaxSteps: 1000}, RunsAhead: &ahead, QueueReason: "waiting for 8×H100: no agent has that many free",
			Error: "lease lost: node vanished", CreatedAt: t0.Add(-30 * time.Second),
			FailureAnalysis: &job.FailureAnalysis{Class: job.FailNodeLost, Fault: job.FaultPlatform, Confidence: 0.9, Attempt: 1, Retried: true,
				Summary:  "the node running the job stopped answering (its lease lapsed)",
				Evidence: []string{"service: no heartbeat from node-3 before its lease ran out"}}},
		{ID: "01a20200-0000-7000-8000-0000000000ff", Org: "acme", Kind: "rl", Status: job.Failed, Attempt: 1, MaxAttempts: 3,
			Config:   jobspec.Spec{Model: "Qwen/Qwen3-4B-Instruct-2507", Env: []jobspec.Env{{ID: "gsm8k"}}, Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"}},
			Progress: job.Progress{Step: 3, MaxSteps: 100, Checkpoints: 1, CheckpointStep: 2},
			Error:    "pipeline exited with status 1: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
			FailureAnalysis: &job.FailureAnalysis{Class: job.FailCUDAOOM, Fault: job.FaultUser, Confidence: 0.95, Attempt: 1,
				Summary:  "a GPU ran out of memory: the model, batch size or sequence length is too large for the job's GPUs (lower batch_size, seq_len or max_tokens, or ask for more GPUs)",
				Evidence: []string{"trainer.log: 10:03:07   ERROR torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."}},
			GPUSeconds: 95, CreatedAt: t0.Add(-3 * time.Hour), StartedAt: &started, FinishedAt: &finished},
	}
}

func TestGoldenCLIViews(t *testing.T) {
	time.Local = time.UTC
	var b bytes.Buffer
	jobs := sampleJobs()
	renderJobList(&b, jobs, "01a20201-0000-7000-8000-000000000000", t0)
	golden(t, "list.txt", b.Bytes())

	for i, j := range jobs {
		b.Reset()
		renderJob(&b, j)
		golden(t, fmt.Sprintf("get-%d.txt", i), b.Bytes())
	}

	b.Reset()
	for _, l := range []client.LogLine{
		{Component: "trainer", Line: "2026-11-22T10:00:01Z INFO step 1 | loss 0.0412"},
		{Component: "envs/gsm8k", Line: "2026-11-22T10:00:01Z WARNING slow rollout"},
		{Component: "trainer", Line: "  traceback continues"},
	} {
		renderLogLine(&b, l)
	}
	golden(t, "logs.txt", b.Bytes())

	var rows []jobdata.Row
	for step := 1; step <= 30; step++ {
		r := float64(step) / 40
		line := fmt.Sprintf(`{"step":%d,"time":1.5,"train/agg/all/agent/reward/mean":%g,"entropy/all/mean":%g,"loss/mean":0.03}`, step, 0.2+r*r, 1.2-r/2)
		var row jobdata.Row
		_ = json.Unmarshal([]byte(line), &row)
		rows = append(rows, row)
	}
	b.Reset()
	series := jobs[0].Progress.Series
	cols, explicit := metricColumns(series, nil)
	renderMetrics(&b, rows[:5], cols, explicit)
	golden(t, "metrics.txt", b.Bytes())
	b.Reset()
	cols, _ = metricColumns(series, []string{"reward"})
	renderPlot(&b, rows, cols[0], 60, 10)
	golden(t, "metrics-plot.txt", b.Bytes())

	at := t0.Add(time.Hour)
	b.Reset()
	renderCheckpoints(&b, []client.Checkpoint{{Step: 50, Status: "committed", Pinned: true, Best: true, Metrics: map[string]float64{"reward": 0.71, "eval_reward": 0.66}, Bytes: 2 << 30, Files: 9, Time: &at}, {Step: 100, Status: "committed", Metrics: map[string]float64{"reward": 0.74, "eval_reward": 0.61}, Bytes: 2 << 30, Files: 9, Time: &at}, {Step: 150, Status: "uploading", Bytes: 300 << 20, Files: 4}})
	golden(t, "checkpoints.txt", b.Bytes())

	b.Reset()
	renderEstimate(&b, &client.Estimate{BasedOn: "the step times of 4 past runs of Qwen/Qwen3-4B-Instruct-2507 on 2×H100 in your organization (10th, 50th and 90th percentiles)",
		Runs: 4, Steps: 100, StepSeconds: client.Range{Low: 30, Expected: 42, High: 75}, DurationSeconds: client.Range{Low: 3000, Expected: 4200, High: 7500},
		GPUHours: client.Range{Low: 1.667, Expected: 2.333, High: 4.167}, Cost: &client.Range{Low: 4.17, Expected: 5.83, High: 10.42}, PricePerGPUHour: 2.5})
	renderEstimate(&b, &client.Estimate{BasedOn: "no past run of Qwen/Qwen3-8B on 1×H100 in your organization: the service's default of 20 to 180 seconds a step (60 expected)",
		Steps: 50, StepSeconds: client.Range{Low: 20, Expected: 60, High: 180}, DurationSeconds: client.Range{Low: 1000, Expected: 3000, High: 9000},
		GPUHours: client.Range{Low: 0.278, Expected: 0.833, High: 2.5}})
	golden(t, "estimate.txt", b.Bytes())

	b.Reset()
	for _, j := range []*job.Job{
		{ID: "a1", Status: job.Queued, ResumeStep: 40},
		{ID: "a2", Status: job.Running, StopRequested: true},
		{ID: "a3", Status: job.Stopped, Error: ""},
		{ID: "a4", Status: job.Queued},
	} {
		renderRestart(&b, j)
	}
	golden(t, "restart.txt", b.Bytes())

	b.Reset()
	seen, since := t0.Add(-30*time.Second), t0.Add(-2*time.Hour)
	renderNodes(&b, []job.Node{{ID: "node-1", State: job.NodeOK, LastSeen: &seen, Free: []job.GPU{{Model: "H100", Count: 8}},
		Cache: map[string]job.CacheStats{"model": {Hits: 3, Misses: 1, Bytes: 16 << 30, Entries: 2}, "env": {Hits: 1, Misses: 1, Bytes: 300 << 20, Entries: 1}}},
		{ID: "node-2", State: job.NodeQuarantined, Since: &since, Reason: "3 platform faults within 60 min, the last on job 01a2", RecentFaults: 3},
		{ID: "node-3", State: job.NodeDraining, Since: &since, Reason: "kernel update", LastSeen: &since}}, t0)
	golden(t, "nodes.txt", b.Bytes())

	b.Reset()
	renderArtifacts(&b, []client.Artifact{{Name: "system_prompt.txt", Bytes: 412, Time: &at}, {Name: "pareto_frontier.jsonl", Bytes: 20480, Time: &at}})
	golden(t, "artifacts.txt", b.Bytes())

	b.Reset()
	renderModels(&b, &client.ModelList{Items: []client.Model{{Name: "Qwen/Qwen3-4B-Instruct-2507", GPUs: 2, Renderer: "qwen3", IdleNodes: 3},
		{Name: "Qwen/Qwen3-30B-A3B-Instruct-2507", GPUs: 8, Renderer: "qwen3"}}})
	golden(t, "models.txt", b.Bytes())
	b.Reset()
	renderModels(&b, &client.ModelList{OperatorList: true, Items: []client.Model{
		{Name: "Qwen/Qwen3-4B-Instruct-2507", GPUs: 2, PricePerGPUHour: 2.5, Renderer: "qwen3"},
		{Name: "acme/our-own-7b", GPUs: 4, PricePerGPUHour: 3}}})
	golden(t, "models-operator.txt", b.Bytes())

	pace, eta, el := 2.5, 450.0, 300.0
	b.Reset()
	renderProgress(&b, &client.JobProgress{JobID: jobs[0].ID, Status: job.Running, Step: 120, MaxSteps: 300, Percent: 40,
		Metrics: jobs[0].Progress.Metrics, Series: jobs[0].Progress.Series, CheckpointStep: 100, StepSeconds: &pace, ETASeconds: &eta, ElapsedSeconds: &el,
		StepsWithSamples: []int{1, 2, 119}})
	golden(t, "progress.txt", b.Bytes())

	cost, pgs, pcost := 3.333, 12000.0, 8.333
	b.Reset()
	renderJobUsage(&b, &client.JobUsage{JobID: jobs[0].ID, Kind: "rl", Status: job.Running, Model: "Qwen/Qwen3-4B-Instruct-2507", GPUs: 2, GPUType: "H100",
		GPUSeconds: 4800, PricePerGPUHour: 2.5, CostUSD: &cost, ProjectedGPUSeconds: &pgs, ProjectedCostUSD: &pcost, Step: 120, MaxSteps: 300,
		Tokens: client.TokenCounts{Total: 9_600_000, Input: 2_800_000, Output: 6_800_000}, StorageBytes: 17_716_740_096})
	golden(t, "usage-job.txt", b.Bytes())
	b.Reset()
	renderJobUsage(&b, &client.JobUsage{JobID: jobs[1].ID, Kind: "eval", Status: job.Completed, Model: "openai/gpt-4.1-mini"})
	golden(t, "usage-job-unpriced.txt", b.Bytes())

	b.Reset()
	renderComponents(&b, &client.LogPage{Components: []string{"agent", "envs/train/alphabet-sort", "orchestrator", "trainer"}})
	golden(t, "components.txt", b.Bytes())

	b.Reset()
	renderGPUs(&b, []client.GPUType{{GPUType: "H100", PerNode: 8, IdleNodes: []int{3, 3, 2, 2, 1, 1, 1, 1}}})
	golden(t, "gpus.txt", b.Bytes())

	step := 119
	b.Reset()
	renderSamples(&b, &client.SamplesPage{JobID: jobs[0].ID, Step: &step, Steps: []int{1, 2, 119}, Episodes: 128, Total: 32, Page: 1, Limit: 2, TotalPages: 16,
		Samples: []jobdata.Sample{
			{ID: "a1", Index: 0, Reward: 1, Advantage: 0.25, OK: true, StopCondition: "completed", OutputTokens: 31,
				Prompt:     []jobdata.SampleMessage{{Role: "system", Content: "Answer in \\boxed{}."}, {Role: "user", Content: "What is 2 + 2?"}},
				Completion: []jobdata.SampleMessage{{Role: "assistant", Content: "<think>\nadd them\n</think>\n\\boxed{4}"}},
				Rewards:    map[string]float64{"correct": 1}, Metrics: map[string]float64{"format": 1}},
			{ID: "a2", Index: 4, Reward: 0, Advantage: -0.75, StopCondition: "error", Truncated: true,
				Prompt:     []jobdata.SampleMessage{{Role: "user", Content: "What is 3 + 3?"}},
				Completion: []jobdata.SampleMessage{}, Errors: []string{"ProviderError: upstream 500"}},
		}})
	golden(t, "rollouts.txt", b.Bytes())
	b.Reset()
	renderSamples(&b, &client.SamplesPage{JobID: jobs[0].ID, Steps: []int{}, Samples: []jobdata.Sample{}})
	golden(t, "rollouts-none.txt", b.Bytes())

	b.Reset()
	renderDistribution(&b, &client.DistributionPage{JobID: jobs[0].ID, Step: &step, Type: "rewards", Steps: []int{1, 2, 119},
		Distribution: jobdata.Distribution{Count: 128, Mean: 0.6953, Std: 0.4603, Min: 0, Max: 1,
			Bins: []jobdata.Bin{{Min: 0, Max: 0.5, Count: 39}, {Min: 0.5, Max: 1, Count: 89}}}})
	golden(t, "distributions.txt", b.Bytes())

	var u client.Usage
	_ = json.Unmarshal([]byte(`{"organization":{"org":"acme","gpu_seconds":93600,"running":1,"running_gpus":2,"storage_bytes":35433480192},
		"jobs":[{"id":"j2","kind":"rl","status":"RUNNING","gpus":2,"gpu_type":"H100","gpu_seconds":4800,"storage_bytes":17716740096},
		{"id":"j1","kind":"eval","status":"COMPLETED","gpus":0,"gpu_seconds":0}],"next_cursor":"j1"}`), &u)
	b.Reset()
	renderUsage(&b, &u)
	golden(t, "usage.txt", b.Bytes())

	golden(t, "progress-line.txt", []byte(progressLine(jobs[0], 0)+"\n"))
}

func ptr(f float64) *float64 { return &f }

// The question stop, restart and delete ask on a terminal: only y or yes goes ahead.
func TestConfirmAsksAndReadsTheAnswer(t *testing.T) {
	for answer, yes := range map[string]bool{"y\n": true, "YES\n": true, "\n": false, "n\n": false, "": false, "yep\n": false} {
		var asked bytes.Buffer
		err := confirmFrom(strings.NewReader(answer), &asked, "Stop job j1?")
		if (err == nil) != yes || (!yes && err != errCancelled) {
			t.Errorf("answer %q: %v", answer, err)
		}
		if asked.String() != "Stop job j1? [y/N]: " {
			t.Errorf("asked %q", asked.String())
		}
	}
}

// `train configs` lists every key of the contract's job schemas, by kind.
func TestGoldenConfigs(t *testing.T) {
	spec, err := openapi.Load()
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"rl", "gepa", "eval", "fft"} {
		var b bytes.Buffer
		renderConfigs(&b, configOptions(spec.KindSchemas()[kind], "", 0))
		golden(t, "configs-"+kind+".txt", b.Bytes())
	}
}
