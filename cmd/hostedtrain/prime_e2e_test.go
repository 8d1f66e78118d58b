package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// primeClient runs the real prime CLI's API client (testdata/prime_client.py: the kit's
// prime_cli/api/rl.py, over Debian's httpx) against the stack, as `prime` configured with
// PRIME_API_BASE_URL and PRIME_API_KEY would; it returns the client's answer as JSON and
// whether the client raised.
func (d *devStack) primeClient(t *testing.T, args ...string) (json.RawMessage, bool) {
	t.Helper()
	py := upstreamtest.Command(t)[0]
	cmd := exec.Command(py, append([]string{"testdata/prime_client.py", upstreamtest.Kit(t)}, args...)...)
	cmd.Env = append(os.Environ(), "PRIME_API_BASE_URL="+d.url, "PRIME_API_KEY="+d.token, "HOME="+t.TempDir(),
		"PRIME_TEAM_ID=", "PRIME_CONTEXT=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("prime client %v: %v", args, err)
	}
	line := lastLine(string(out))
	if !json.Valid([]byte(line)) {
		t.Fatalf("prime client %v printed %q\n%s", args, out, stderr.String())
	}
	return json.RawMessage(line), err == nil
}

// primeRun is what the prime CLI's RLRun keeps of a run (model_dump: snake_case).
type primeRun struct {
	ID             string           `json:"id"`
	Status         string           `json:"status"`
	Kind           string           `json:"kind"`
	BaseModel      string           `json:"base_model"`
	MaxSteps       int              `json:"max_steps"`
	Environments   []map[string]any `json:"environments"`
	FailureAnalyse map[string]any   `json:"failure_analysis"`
}

// TestPrimeCLIClientDrivesHostedtrain drives hostedtrain dev with the prime CLI's own client
// code — the payload `prime train CONFIG` builds (its config model, its env-file reading, the
// create_run call of its command, from its source), then list, get, logs, metrics,
// checkpoints, progress, models, stop and restart — and reads every answer with the CLI's own
// models, so a field or shape it cannot parse fails here.
func TestPrimeCLIClientDrivesHostedtrain(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	var run primeRun
	out, ok := d.primeClient(t, "create", "../../examples/quickstart.toml")
	if err := json.Unmarshal(out, &run); !ok || err != nil || run.ID == "" || run.Kind != "SHARED_RFT_HOSTED" ||
		run.BaseModel != "Qwen/Qwen3-4B-Instruct-2507" || run.MaxSteps != 20 || len(run.Environments) != 1 {
		t.Fatalf("create: %s (%v)", out, err)
	}
	// Waits poll through our own client (a Python start a poll would load the machine); what
	// the CLI's client reads is checked once the state is reached.
	v1 := client.New(d.url, d.token)
	status := func(id string) job.Status {
		j, err := v1.GetJob(context.Background(), id)
		if err != nil {
			return ""
		}
		return j.Status
	}
	testwait.Until(t, 2*time.Minute, "the run to complete", func() bool { return status(run.ID) == job.Completed })
	if out, ok := d.primeClient(t, "get", run.ID); !ok || json.Unmarshal(out, &run) != nil || run.Status != "COMPLETED" {
		t.Errorf("get of the completed run: %s", out)
	}

	out, ok = d.primeClient(t, "list")
	var runs []primeRun
	if err := json.Unmarshal(out, &runs); !ok || err != nil || len(runs) != 1 || runs[0].ID != run.ID {
		t.Errorf("list: %s", out)
	}
	out, ok = d.primeClient(t, "progress", run.ID)
	var progress struct {
		LatestStep       int   `json:"latest_step"`
		StepsWithSamples []int `json:"steps_with_samples"`
	}
	if err := json.Unmarshal(out, &progress); !ok || err != nil || progress.LatestStep != 20 || len(progress.StepsWithSamples) != 20 ||
		progress.StepsWithSamples[19] != 20 {
		t.Errorf("progress: %s", out)
	}
	// the emulated orchestrator's episodes (verifiers traces), kept by the agent
	out, ok = d.primeClient(t, "rollouts", run.ID, "7", "2", "5")
	var rollouts struct {
		RunID   string `json:"run_id"`
		Samples []struct {
			Reward     float64
			Prompt     []struct{ Role, Content string }
			Completion []struct{ Role, Content string }
		}
		Total, Page, Limit int
		TotalPages         int `json:"total_pages"`
	}
	if err := json.Unmarshal(out, &rollouts); !ok || err != nil || rollouts.RunID != run.ID || len(rollouts.Samples) != 5 || rollouts.Page != 2 ||
		rollouts.Total == 0 || len(rollouts.Samples[0].Completion) == 0 || !strings.Contains(rollouts.Samples[0].Completion[0].Content, "apples") {
		t.Errorf("rollouts of step 7: %.600s", out)
	}
	out, ok = d.primeClient(t, "env-servers", run.ID)
	var servers []struct {
		EnvName string `json:"env_name"`
		Status  string
	}
	if err := json.Unmarshal(out, &servers); !ok || err != nil || len(servers) != 1 || servers[0].Status != "COMPLETED" {
		t.Errorf("env servers: %s", out)
	} else if out, ok := d.primeClient(t, "env-server-logs", run.ID, servers[0].EnvName); !ok || !strings.Contains(string(out), "rollouts scored") {
		t.Errorf("env server logs of %s: %.400s", servers[0].EnvName, out)
	}
	out, ok = d.primeClient(t, "usage", run.ID)
	var usage struct {
		RunID       string `json:"run_id"`
		Status      string
		TotalTokens int `json:"total_tokens"`
		Training    struct {
			InputTokens  int `json:"input_tokens"`
			OutputTokens int `json:"output_tokens"`
		}
		RecordCount int `json:"record_count"`
	}
	if err := json.Unmarshal(out, &usage); !ok || err != nil || usage.RunID != run.ID || usage.Status != "COMPLETED" || usage.RecordCount != 20 ||
		usage.TotalTokens == 0 || usage.TotalTokens != usage.Training.InputTokens+usage.Training.OutputTokens {
		t.Errorf("usage: %.600s", out)
	}
	out, ok = d.primeClient(t, "distributions", run.ID, "rewards")
	var dist struct {
		Bins []struct {
			Min, Max float64
			Count    int
		}
		Step int
	}
	if err := json.Unmarshal(out, &dist); !ok || err != nil || dist.Step != 20 || len(dist.Bins) == 0 {
		t.Errorf("distributions: %.600s", out)
	}
	out, ok = d.primeClient(t, "metrics", run.ID)
	var rows []map[string]any
	if err := json.Unmarshal(out, &rows); !ok || err != nil || len(rows) != 20 || rows[19]["train/agg/all/agent/reward/mean"] == nil {
		t.Errorf("metrics: %d rows, %.300s", len(rows), out)
	}
	out, ok = d.primeClient(t, "checkpoints", run.ID)
	var cps []struct {
		Step       int    `json:"step"`
		Status     string `json:"status"`
		StorageURL string `json:"storage_url"`
	}
	if err := json.Unmarshal(out, &cps); !ok || err != nil || len(cps) == 0 || cps[len(cps)-1].Step != 20 ||
		cps[len(cps)-1].Status != "READY" || !strings.HasPrefix(cps[len(cps)-1].StorageURL, d.url+"/v1/downloads/") {
		t.Errorf("checkpoints: %s", out)
	}
	out, ok = d.primeClient(t, "logs", run.ID, `checkpoint for step \d+`)
	var logs struct {
		Logs string `json:"logs"`
	}
	if err := json.Unmarshal(out, &logs); !ok || err != nil || !strings.Contains(logs.Logs, "checkpoint for step 20") ||
		strings.Contains(logs.Logs, "Shipped batch") {
		t.Errorf("logs by regex: %s", out)
	}
	out, ok = d.primeClient(t, "models")
	if !ok || !strings.Contains(string(out), `"name": "Qwen/Qwen3-4B-Instruct-2507"`) {
		t.Errorf("models: %.300s", out)
	}
	// A finished run cannot be stopped: the CLI shows our reason.
	out, ok = d.primeClient(t, "stop", run.ID)
	if ok || !strings.Contains(string(out), "HTTP 409") || !strings.Contains(string(out), "already ended") {
		t.Errorf("stop of a finished run: %s", out)
	}

	// A long run, stopped while it runs, then restarted.
	long := filepath.Join(t.TempDir(), "long.toml")
	body, err := os.ReadFile("../../examples/quickstart.toml")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(long, []byte(strings.Replace(string(body), "max_steps = 20", "max_steps = 5000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok = d.primeClient(t, "create", long)
	var lr primeRun
	if err := json.Unmarshal(out, &lr); !ok || err != nil || lr.MaxSteps != 5000 {
		t.Fatalf("create the long run: %s", out)
	}
	testwait.Until(t, time.Minute, "the long run to run", func() bool { return status(lr.ID) == job.Running })
	// The CLI from 0.6.31 pages the list (the old answer, every run, is above): two runs, one
	// a page.
	out, ok = d.primeClient(t, "list-page", "2", "1", "false")
	var paged struct {
		Runs               []primeRun
		Total, Page, Limit int
		TotalPages         int `json:"total_pages"`
	}
	if err := json.Unmarshal(out, &paged); !ok || err != nil || paged.Total != 2 || paged.Page != 2 || paged.Limit != 1 ||
		paged.TotalPages != 2 || len(paged.Runs) != 1 || paged.Runs[0].ID != run.ID {
		t.Errorf("list, page 2 of 1 a page: %s", out)
	}
	if out, ok := d.primeClient(t, "list-page", "1", "10", "true"); !ok || !strings.Contains(string(out), `"total": 2`) {
		t.Errorf("list of my runs: %s", out)
	}
	if out, ok := d.primeClient(t, "list-page", "0", "10", "false"); ok || !strings.Contains(string(out), "page is a page number from 1") {
		t.Errorf("list of page 0: %s", out)
	}
	// Prime's delete of a running run stops it and deletes it, in one call.
	doomed := filepath.Join(t.TempDir(), "doomed.toml")
	if err := os.WriteFile(doomed, []byte(strings.Replace(string(body), "max_steps = 20", "max_steps = 5000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, ok = d.primeClient(t, "create", doomed)
	var dr primeRun
	if err := json.Unmarshal(out, &dr); !ok || err != nil {
		t.Fatalf("create the run to delete: %s", out)
	}
	testwait.Until(t, time.Minute, "the run to delete to run", func() bool { return status(dr.ID) == job.Running })
	if out, ok := d.primeClient(t, "delete", dr.ID); !ok {
		t.Errorf("delete of a running run: %s", out)
	}
	testwait.Until(t, time.Minute, "the running run to be stopped and deleted", func() bool {
		_, err := v1.GetJob(context.Background(), dr.ID)
		return errors.Is(err, job.ErrNotFound)
	})
	if out, ok = d.primeClient(t, "stop", lr.ID); !ok {
		t.Fatalf("stop: %s", out)
	}
	testwait.Until(t, time.Minute, "the long run to stop", func() bool { return status(lr.ID) == job.Stopped })
	if out, ok := d.primeClient(t, "get", lr.ID); !ok || json.Unmarshal(out, &lr) != nil || lr.Status != "STOPPED" {
		t.Errorf("get of the stopped run: %s", out)
	}
	out, ok = d.primeClient(t, "restart", lr.ID)
	// Queued again (and, with an idle agent, perhaps claimed before the answer was read).
	if err := json.Unmarshal(out, &lr); !ok || err != nil || (lr.Status != "QUEUED" && lr.Status != "PENDING" && lr.Status != "RUNNING") {
		t.Errorf("restart: %s", out)
	}
	if out, ok = d.primeClient(t, "stop", lr.ID); !ok {
		t.Errorf("stop after the restart: %s", out)
	}
	// delete, once the run has stopped (a live run's delete is refused: see above)
	testwait.Until(t, time.Minute, "the long run to stop again", func() bool { return status(lr.ID) == job.Stopped })
	if out, ok := d.primeClient(t, "delete", lr.ID); !ok || !strings.Contains(string(out), `"deleted": null`) {
		t.Errorf("delete: %s", out)
	}
	if out, ok := d.primeClient(t, "get", lr.ID); ok || !strings.Contains(string(out), "NotFoundError") {
		t.Errorf("get of the deleted run: %s", out)
	}

	// An sft run whose teacher is the CLI's [teacher] table (its model sent as {"name": ...}).
	out, ok = d.primeClient(t, "create", "../../testdata/prime-train/teacher-table.toml", "OPENAI_API_KEY=sk-openai")
	var sft struct {
		primeRun
		Loss    string         `json:"loss"`
		Teacher map[string]any `json:"teacher"`
	}
	if err := json.Unmarshal(out, &sft); !ok || err != nil || sft.Loss != "sft" || sft.Teacher["model"] != "openai/gpt-4.1-mini" {
		t.Errorf("create an sft run: %s", out)
	}

	// A full fine-tune, through the CLI's full fine-tune client: it runs to completion and is
	// a run like any other.
	out, ok = d.primeClient(t, "create-fft", "../../testdata/prime-train/fft-type-marker.toml", "HF_TOKEN=hf_x")
	var fft struct {
		RunID string `json:"run_id"`
	}
	if err := json.Unmarshal(out, &fft); !ok || err != nil || fft.RunID == "" {
		t.Fatalf("create a full fine-tune: %s", out)
	}
	testwait.Until(t, 2*time.Minute, "the full fine-tune to complete", func() bool { return status(fft.RunID) == job.Completed })
	if out, ok := d.primeClient(t, "get", fft.RunID); !ok || !strings.Contains(string(out), `"DEDICATED_FULL_FT"`) {
		t.Errorf("get of the full fine-tune: %s", out)
	}
	if out, ok := d.primeClient(t, "fft-models"); !ok || !strings.Contains(string(out), `"cluster_name": "hostedtrain"`) {
		t.Errorf("available fft models: %.300s", out)
	}
	if out, ok := d.primeClient(t, "gpu-types"); !ok || !strings.Contains(string(out), `"gpu_types": ["H100"]`) {
		t.Errorf("available gpu types: %s", out)
	}

	// What we refuse, the CLI shows field by field, named as its payload names them.
	out, ok = d.primeClient(t, "create", "../../testdata/prime-train/env-id-spaces.toml")
	if ok || !strings.Contains(string(out), "ValidationError") || !strings.Contains(string(out), "environments.0.id: an environment id is") {
		t.Errorf("create of a refused config: %s", out)
	}
	// A run of another organization's, or none, is not found.
	out, ok = d.primeClient(t, "get", "01a21473-0000-7000-8000-000000000000")
	if ok || !strings.Contains(string(out), "NotFoundError") {
		t.Errorf("get of no run: %s", out)
	}
	d.stop(t)
}
