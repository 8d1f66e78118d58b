package gpuagent_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A stop that lands while the trainer is writing a checkpoint (its shards on disk, its
// .metadata not yet) commits the newest checkpoint that is whole by prime-rl's marks, never the
// half-written one, though its folder and the orchestrator's part of it exist. The restarted
// job resumes from the whole one and finishes.
func TestAStopDuringACheckpointCommitsTheNewestWholeOne(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms", "--emulate.ckpt-time", "2s")
	b.run(t, cfg)
	j := b.submit(t, withSteps(12))
	b.waitFor(t, j.ID, "step 2 committed", func(j *job.Job) bool { return j.Progress.CheckpointStep == 2 })
	runDir := gpuagent.RunDir(filepath.Join(cfg.WorkDir, "jobs", j.ID), j.ID)
	shard := filepath.Join(jobdata.CheckpointsDir(runDir), "step_4", "trainer", "__0_0.distcp")
	testwait.Until(t, 3*time.Minute, "the trainer writing step 4's checkpoint", func() bool {
		_, err := os.Stat(shard)
		return err == nil
	})
	if jobdata.Complete(filepath.Dir(filepath.Dir(shard))) {
		t.Fatal("step 4's checkpoint is already whole: the stop would not land during it")
	}
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Stopped || done.Progress.CheckpointStep != 2 {
		t.Fatalf("got %s with checkpoint %d (%s); want STOPPED with step 2, the newest whole one", done.Status, done.Progress.CheckpointStep, done.Error)
	}
	committed, err := jobdata.CommittedSteps(context.Background(), b.store, j.ID)
	if err != nil || fmt.Sprint(committed) != "[2]" {
		t.Fatalf("committed checkpoints %v (%v), want [2]", committed, err)
	}
	if pipeline := b.logText(t, j.ID, 1, "pipeline"); !strings.Contains(pipeline, "Received SIGTERM") {
		t.Errorf("the pipeline never heard the stop:\n%s", pipeline)
	}

	if _, err := b.user.RestartJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	again := b.waitFor(t, j.ID, "completed after the restart", func(j *job.Job) bool { return j.Status == job.Completed || j.Status == job.Failed })
	if again.Status != job.Completed || again.Progress.Step != 12 {
		t.Fatalf("the restarted job: %s at step %d (%s)", again.Status, again.Progress.Step, again.Error)
	}
	if log := b.logText(t, j.ID, 2, "pipeline"); !strings.Contains(log, "Resuming from step 2") {
		t.Errorf("attempt 2 did not resume from step 2:\n%s", log)
	}
}

// A NaN loss is what prime-rl drops from its row (not valid JSON) with a warning: the step
// stays, with every other key, and the warning is found by filtering the logs by level.
// The logs are prime-rl's loguru lines: time and level parsed, colour codes gone.
func TestANaNLossKeepsItsStepAndItsWarningIsFoundByLevel(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.nan-loss-at-step", "3")
	j := b.submit(t, smallJob)
	if done := b.waitFor(t, j.ID, "ended", terminal); done.Status != job.Completed {
		t.Fatalf("status %s (%s)", done.Status, done.Error)
	}
	ctx := context.Background()
	page, err := b.user.JobMetrics(ctx, j.ID, 0, 0, []string{rewardKey, "loss/mean", "entropy/all/mean"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 6 {
		t.Fatalf("%d steps of metrics, want all 6", len(page.Items))
	}
	for i, row := range page.Items {
		_, hasLoss := row["loss/mean"]
		if hasLoss == (i == 2) || row[rewardKey] == nil || row["entropy/all/mean"] == nil {
			t.Errorf("step %d: %v; want reward and entropy, and a loss unless it was NaN (step 3)", i+1, row)
		}
	}

	warnings, err := b.user.JobLogs(ctx, j.ID, client.LogOptions{Component: "trainer", Level: "WARNING", Tail: 100})
	if err != nil {
		t.Fatal(err)
	}
	if len(warnings.Items) != 1 || warnings.Items[0].Level != "WARNING" || warnings.Items[0].Time == nil ||
		!strings.Contains(warnings.Items[0].Line, "WARNING Dropping non-finite metric values from the metrics row: loss/mean") {
		t.Errorf("trainer warnings: %+v; want the one about the NaN loss, its time and level parsed", warnings.Items)
	}
	all, err := b.user.JobLogs(ctx, j.ID, client.LogOptions{Component: "trainer", Tail: 1000})
	if err != nil {
		t.Fatal(err)
	}
	levels := map[string]int{}
	for _, l := range all.Items {
		levels[l.Level]++
		if strings.Contains(l.Line, "\x1b[") {
			t.Errorf("a colour code reached the reader: %q", l.Line)
		}
	}
	if levels["SUCCESS"] < 6 || levels["INFO"] == 0 || len(all.Items) <= len(warnings.Items) {
		t.Errorf("trainer lines by level %v; want a SUCCESS line a step and INFO lines", levels)
	}
	// INFO and up takes SUCCESS (loguru's level 25) and WARNING, not DEBUG.
	info, err := b.user.JobLogs(ctx, j.ID, client.LogOptions{Component: "trainer", Level: "INFO", Tail: 1000})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range info.Items {
		if l.Level == "DEBUG" || l.Level == "TRACE" {
			t.Errorf("level=INFO returned %+v", l)
		}
	}
	searched, err := b.user.JobLogs(ctx, j.ID, client.LogOptions{Search: "Step 3 |", Tail: 100})
	if err != nil || len(searched.Items) != 1 || searched.Items[0].Component != "trainer" {
		t.Errorf("search for step 3's line: %+v %v", searched, err)
	}
}

// The agent checks the config it wrote with upstream's own code before the pipeline takes the
// GPUs. A taskset setting's value upstream refuses passes our contract (submit checks the
// settings' names, from the taskset table; their values are the taskset's business) but not
// verifiers' taskset config (alphabet-sort's split is Literal["train"]): the job fails with
// upstream's words, and the pipeline never starts.
func TestUpstreamRefusesAConfigBeforeThePipelineStarts(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms")
	cfg.Pipeline.Preflight = append(upstreamtest.Command(t), "prime-rl", "{config}", "--output-dir", "{output_dir}", "--run-name", "{run_name}", "{resume_set}")
	b.run(t, cfg)
	bad := strings.Replace(smallJob, `id = "primeintellect/alphabet-sort"`, "id = \"primeintellect/alphabet-sort\"\nargs = { split = \"test\" }", 1)
	j := b.submit(t, bad)
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "upstream refused the config before the run") ||
		!strings.Contains(done.Error, "orchestrator.train.source.0.env.taskset.split: Input should be 'train'") {
		t.Errorf("got %s %q; want FAILED with upstream's refusal", done.Status, done.Error)
	}
	if p := b.logText(t, j.ID, 1, "pipeline"); p != "" {
		t.Errorf("the pipeline started:\n%s", p)
	}
	// The same check lets a good job through.
	ok := b.submit(t, smallJob)
	if d := b.waitFor(t, ok.ID, "ended", terminal); d.Status != job.Completed {
		t.Errorf("a good job: %s (%s)", d.Status, d.Error)
	}
	if agentLog := b.logText(t, ok.ID, 1, "agent"); !strings.Contains(agentLog, "the config passed upstream's check") {
		t.Errorf("agent log:\n%s", agentLog)
	}
}

// An environment that does not install fails the job with the installer's own last lines,
// before any GPU time: one the Hub cannot resolve (the prime CLI exits 1), and one that
// resolves but whose install fails (the prime CLI exits 0 and says so in its summary).
func TestAFailedInstallFailsTheJobWithTheInstallersWords(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms")
	for id, said := range map[string]string{"acme/broken-env": "404 Not Found", "acme/uninstallable-env": "Failed to install 1 environment"} {
		j := b.submit(t, strings.Replace(smallJob, "primeintellect/alphabet-sort", id, 1))
		done := b.waitFor(t, j.ID, "ended", terminal)
		if done.Status != job.Failed || !strings.Contains(done.Error, "install environment "+id) || !strings.Contains(done.Error, said) {
			t.Errorf("%s: got %s %q; want FAILED naming the environment and the installer's words", id, done.Status, done.Error)
		}
		if p := b.logText(t, j.ID, 1, "pipeline"); p != "" {
			t.Errorf("%s: the pipeline started:\n%s", id, p)
		}
		if inst := b.logText(t, j.ID, 1, "install"); !strings.Contains(inst, id) {
			t.Errorf("%s: install log %q", id, inst)
		}
	}
}

// A heartbeat the service refuses as malformed (400) never costs the job its lease: the agent
// logs it and sends the minimal heartbeat from then on, and the job runs to its end on its
// first attempt though the lease is short.
func TestARefusedHeartbeatNeverCostsTheLease(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond})
	u, err := url.Parse(b.stack.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var refused atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/heartbeat") {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
			if bytes.Contains(body, []byte(`"metrics"`)) {
				refused.Add(1)
				w.Header().Set("Content-Type", "application/problem+json")
				w.WriteHeader(http.StatusBadRequest)
				_, _ = io.WriteString(w, `{"type":"about:blank","title":"Bad Request","status":400,"detail":"progress.metrics: too many properties"}`)
				return
			}
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "100ms")
	cfg.API = client.New(srv.URL, b.stack.AgentToken("agent-a"))
	b.run(t, cfg)
	j := b.submit(t, withSteps(20))
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Attempt != 1 || done.Progress.Step != 20 {
		t.Fatalf("got %s at step %d on attempt %d (%s); want COMPLETED on the first", done.Status, done.Progress.Step, done.Attempt, done.Error)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("%d heartbeats with metrics were sent and refused, want 1 (then the minimal one)", n)
	}
	if agentLog := b.logText(t, j.ID, 1, "agent"); agentLog == "" {
		t.Error("no agent log stored")
	}
}

// A node whose prime-rl is not the pinned commit starts no agent unless the operator says so.
// The versions come from the checkout itself (git), as on a node.
func TestAnAgentRefusesAnUnpinnedPrimeRL(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	checkout := t.TempDir()
	for _, args := range [][]string{{"init", "-q"}, {"-c", "user.email=t@example.com", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "not the pin"}} {
		if out, err := exec.Command("git", append([]string{"-C", checkout}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	start := func(extra ...string) *exec.Cmd {
		ports := portRange()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		t.Cleanup(cancel)
		cmd := exec.CommandContext(ctx, agentBin, append([]string{"--api", b.stack.URL, "--store", b.store.(interface{ Root() string }).Root(),
			"--gpus", "H100:2", "--work-dir", t.TempDir(), "--metrics-addr", "", "--prime-rl", checkout, "--model-hub", "",
			"--port-range", fmt.Sprintf("%d-%d", ports[0], ports[1])}, extra...)...)
		cmd.Env = append(os.Environ(), "HOSTEDTRAIN_AGENT_TOKEN="+b.stack.AgentToken("agent-u"))
		return cmd
	}
	out, err := start().CombinedOutput()
	if err == nil || !strings.Contains(string(out), "installed upstream differs from the pin: prime-rl is") ||
		!strings.Contains(string(out), upstream.PrimeRLCommit[:7]) || !strings.Contains(string(out), "--allow-unpinned") {
		t.Errorf("an unpinned agent: %v\n%s\nwant a refusal naming both commits and --allow-unpinned", err, out)
	}
	// With --allow-unpinned it starts, and says what it runs.
	cmd := start("--allow-unpinned")
	var buf lockedBuffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	testwait.Until(t, 3*time.Minute, "the agent to start unpinned", func() bool {
		return strings.Contains(buf.String(), `"msg":"agent started"`) && strings.Contains(buf.String(), `"pinned":false`)
	})
}

// `gpuagent render` writes the files the agent would hand the pipeline for a job file — the
// same render as a claim — and prints the commands; what one node cannot run is refused.
func TestRenderShowsWhatANodeWouldRun(t *testing.T) {
	t.Parallel()
	out := t.TempDir()
	job := filepath.Join(jobspectest.Dir(t), "small-qwen.toml")
	res, err := exec.Command(agentBin, "render", job, "--gpus", "H100:2", "--out", out).CombinedOutput()
	if err != nil {
		t.Fatalf("render: %v\n%s", err, res)
	}
	for _, want := range []string{"rl job on 2 GPU(s)", "wrote " + filepath.Join(out, "rl.toml"), "run: uv run --no-sync --project /opt/prime-rl rl @ " + filepath.Join(out, "rl.toml")} {
		if !strings.Contains(string(res), want) {
			t.Errorf("render printed:\n%s\nwant %q", res, want)
		}
	}
	verdict := upstreamtest.Check(t, "prime-rl", filepath.Join(out, "rl.toml"), "--output-dir", filepath.Join(out, "outputs"), "--run-name", "render")
	if len(verdict) != 1 || !verdict[0].OK || !verdict[0].StartsInference {
		t.Errorf("upstream's verdict on the render: %+v", verdict)
	}
	// The same file a claim of the job on two GPUs gets: the render is the agent's.
	spec, secrets := admit(t, "small-qwen.toml")
	want, err := render.Render(render.RenderInput{JobID: "render-small-qwen", Spec: spec, Secrets: secrets, GPUs: 2,
		Ports: upstream.Ports{Base: gpuagent.DefaultPortRange[0]}, Dir: out, Pipeline: render.DefaultPipeline()})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(filepath.Join(out, "rl.toml")); !bytes.Equal(got, want.Files["rl.toml"]) {
		t.Errorf("gpuagent render wrote:\n%s\nthe agent renders:\n%s", got, want.Files["rl.toml"])
	}

	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--gpus", "H100:8", "--nodes", "2"}, "one node"},
		{[]string{"--gpus", "H100:1"}, "at least 2 GPUs"},
	} {
		res, err := exec.Command(agentBin, append([]string{"render", job, "--out", t.TempDir()}, c.args...)...).CombinedOutput()
		if err == nil || !strings.Contains(string(res), c.want) {
			t.Errorf("render %v: %v\n%s\nwant a refusal saying %q", c.args, err, res, c.want)
		}
	}
}

// The emulator binds every port prime-rl's processes would bind — the ones the config names
// and prime-rl's fixed defaults for the rest — so two runs given the same ports fail the way
// prime-rl does: "Address already in use", exit 1.
func TestTheEmulatorFailsOnAPortInUse(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ports := upstream.Ports{Base: portRange()[0]}
	spec, _ := admit(t, "small-qwen.toml")
	r, err := render.Render(render.RenderInput{JobID: "ports", Spec: spec, GPUs: 2, Ports: ports, Dir: dir, Pipeline: render.DefaultPipeline()})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "rl.toml"), r.Files["rl.toml"], 0o644); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", ports.Inference()))
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, emulator, "rl", "@", filepath.Join(dir, "rl.toml"), "--output-dir", filepath.Join(dir, "outputs"),
		"--run.name", "ports", "--emulate.venv", t.TempDir(), "--emulate.step-time", "10ms").CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(string(out), "Orchestrator failed with exit code 1") {
		t.Errorf("the emulator with its inference port taken: %v\n%s", err, out)
	}
	// The process that met the port says which, in its own log, as prime-rl's would.
	logs, _ := filepath.Glob(filepath.Join(dir, "outputs", "ports", "logs", "latest", "*.log"))
	var said []byte
	for _, l := range logs {
		b, _ := os.ReadFile(l)
		said = append(said, b...)
	}
	if !bytes.Contains(said, []byte(fmt.Sprintf("Address already in use: port %d", ports.Inference()))) {
		t.Errorf("the run's logs %v say:\n%s\nwant the port in use", logs, said)
	}
}

// admit is a fixture as the API admits it: its spec and its secrets' names.
func admit(t *testing.T, name string) (jobspec.Spec, []string) {
	t.Helper()
	adm, err := api.NewAdmission()
	if err != nil {
		t.Fatal(err)
	}
	got, prob := adm.Admit(jobspectest.Kind(name), "application/toml", jobspectest.Fixture(t, name))
	if prob != nil {
		t.Fatalf("%s: %s %+v", name, prob.Detail, prob.Errors)
	}
	return got.Spec, slices.Sorted(maps.Keys(got.Secrets))
}

// verifiers stores a model call that fails on its rollout and goes on, exiting 0: an eval
// whose every rollout failed measured nothing and FAILS with the first error; one with some
// failed rollouts completes, its share of errors on the result and in its log.
func TestAnEvalReportsItsFailedRollouts(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	openai := newFakeProvider(t, "sk-provider", "gpt-4.1-mini")
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms")
	cfg.Providers = openai.providers()
	b.run(t, cfg)
	eval := "env_id = \"acme/wordle\"\nmodel = \"openai/gpt-4.1-mini\"\nnum_examples = 2\nrollouts_per_example = 2\n" +
		"[secrets]\nOPENAI_API_KEY = \"sk-provider\"\n"

	openai.failEvery.Store(1)
	all := b.submitKind(t, eval, "eval")
	done := b.waitFor(t, all.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "every rollout of wordle failed: ModelError") || !strings.Contains(done.Error, "503") {
		t.Errorf("every rollout failed: got %s %q; want FAILED with the model's error", done.Status, done.Error)
	}

	openai.failEvery.Store(2)
	some := b.submitKind(t, eval, "eval")
	done = b.waitFor(t, some.ID, "ended", terminal)
	if done.Status != job.Completed {
		t.Fatalf("some rollouts failed: got %s %q; want COMPLETED", done.Status, done.Error)
	}
	r := done.Progress.Result
	if r == nil || len(r.Eval) != 1 || r.Eval[0].AvgError == nil || *r.Eval[0].AvgError <= 0 || *r.Eval[0].AvgError >= 1 ||
		!strings.Contains(r.Eval[0].FirstError, "503") {
		t.Errorf("the result %+v; want a share of errors and the first one", r)
	}
	if log := b.logText(t, some.ID, 1, "agent"); !strings.Contains(log, "of the rollouts of wordle ended in an error") {
		t.Errorf("agent log:\n%s", log)
	}
}
