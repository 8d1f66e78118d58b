package gpuagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/mountns"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
	"github.com/hostedtrain/hostedtrain/queue"
)

// emulator and agentBin are the project's binaries, built once for the package's tests.
var emulator, agentBin string

// checkCmd is the upstream conformance kit's check.py: the emulator runs it on every config
// it is given, so it refuses what upstream refuses.
var checkCmd string

func TestMain(m *testing.M) {
	// As an agent does: what the tests' sandboxed jobs mount goes with the test process.
	mountns.Private()
	dir, err := os.MkdirTemp("", "gpuagent-bins")
	if err != nil {
		panic(err)
	}
	emulator = filepath.Join(dir, "prime-rl-emulator")
	agentBin = filepath.Join(dir, "gpuagent")
	for bin, pkg := range map[string]string{emulator: "./cmd/prime-rl-emulator", agentBin: "./cmd/gpuagent"} {
		cmd := exec.Command("go", "build", "-o", bin, "github.com/hostedtrain/hostedtrain/"+strings.TrimPrefix(pkg, "./"))
		if out, err := cmd.CombinedOutput(); err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	checkCmd = strings.Join(upstreamtest.Command(failer{}), " ")
	before := agentCgroups()
	code := m.Run()
	os.RemoveAll(dir)
	// The tests' agents each had a work dir of their own, so a cgroup of their own: one whose
	// agent was killed and never started again is still there, empty. Removing it is the
	// tests' cleanup (a node's agent keeps one work dir, and its next start reclaims its own).
	for _, d := range agentCgroups() {
		if !slices.Contains(before, d) {
			_ = os.Remove(d) // only an empty cgroup goes
		}
	}
	os.Exit(code)
}

// agentCgroups are the agents' cgroups on this machine, in every hierarchy.
func agentCgroups() []string {
	dirs, _ := filepath.Glob("/sys/fs/cgroup/*/hostedtrain/a-*")
	v2, _ := filepath.Glob("/sys/fs/cgroup/hostedtrain/a-*")
	return append(dirs, v2...)
}

// failer is a testing.TB for TestMain, before any test runs: a failure ends the run.
type failer struct{ testing.TB }

func (failer) Helper() {}
func (failer) Fatal(args ...any) {
	fmt.Fprintln(os.Stderr, args...)
	os.Exit(1)
}
func (failer) Fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, format+"\n", args...)
	os.Exit(1)
}

type bundle struct {
	stack *apitest.Stack
	user  *client.Client
	store blob.Store
	s3    *s3test.Server // set when the store is S3
}

// setup runs the API with a local-folder store.
func setup(t testing.TB, qc queue.Config) bundle {
	t.Helper()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return setupWith(t, qc, store, nil)
}

// setupS3 runs the API with an S3 store on a real S3-compatible server.
func setupS3(t testing.TB, qc queue.Config) bundle {
	t.Helper()
	store, srv := s3test.Store(t)
	return setupWith(t, qc, store, srv)
}

func setupWith(t testing.TB, qc queue.Config, store blob.Store, srv *s3test.Server) bundle {
	s := apitest.Start(t, apitest.Options{Queue: qc, Store: store})
	return bundle{stack: s, user: client.New(s.URL, s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)), store: store, s3: srv}
}

// emulated is the emulated pipeline at bin (the emulator, or a wrapper of it), checking every
// config with upstream's own code, with its own emulated prime-rl checkout.
func emulated(t testing.TB, bin string, emulatorFlags ...string) render.Pipeline {
	return render.EmulatedPipeline(bin, t.TempDir(), append([]string{"--emulate.check", checkCmd}, emulatorFlags...)...)
}

// nextPorts gives each agent of the tests a range of ports of its own: agents of one process
// run side by side here, where a node has one. The ranges are below the agent's default
// (20000-29999), which the dev stack's agents of other packages' tests use at the same time.
var nextPorts atomic.Int64

func portRange() [2]int {
	const size = upstream.PortBlockSize * 4
	n := int(nextPorts.Add(1)) - 1
	lo := 10000 + (n%(10000/size))*size
	return [2]int{lo, lo + size - 1}
}

// agentConfig is an in-process agent with the emulated pipeline on two H100s.
func (b bundle) agentConfig(t testing.TB, name string, emulatorFlags ...string) gpuagent.Config {
	return gpuagent.Config{
		PortRange:     portRange(),
		API:           client.New(b.stack.URL, b.stack.AgentToken(name)),
		Store:         b.store,
		WorkDir:       t.TempDir(),
		Devices:       gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 2}}),
		Pipeline:      emulated(t, emulator, emulatorFlags...),
		ClaimWait:     2 * time.Second,
		StopGrace:     5 * time.Second,
		PollInterval:  50 * time.Millisecond,
		FlushInterval: 100 * time.Millisecond,
		// A test that fails with the API out must not wait the default 15 minutes in its
		// cleanup for the final report.
		ReportTimeout: 30 * time.Second,
		Logger:        agentLogger(t, name),
	}
}

// agentLogger keeps an in-process agent's newest log lines and prints them if the test fails:
// what the agent did is what a failure on a loaded CI machine needs explained.
func agentLogger(t testing.TB, name string) *slog.Logger {
	tail := &logTail{max: 300}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("agent %s, its newest log lines:\n%s", name, tail.String())
		}
	})
	return slog.New(slog.NewTextHandler(tail, nil))
}

// logTail keeps the newest max records written to it (slog writes a record at a time).
type logTail struct {
	mu    sync.Mutex
	max   int
	lines []string
}

func (l *logTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.lines) == l.max {
		l.lines = l.lines[1:]
	}
	l.lines = append(l.lines, string(p))
	return len(p), nil
}

func (l *logTail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "")
}

// fakeProvider stands in for a model provider's API (OpenAI's, Google's): it serves the
// models it is given to the one key, and counts the calls.
type fakeProvider struct {
	*httptest.Server
	calls atomic.Int64
	// failEvery, when n > 0, answers every nth chat completion with a 503.
	failEvery atomic.Int64
}

func newFakeProvider(t testing.TB, key string, models ...string) *fakeProvider {
	p := &fakeProvider{}
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer "+key {
			http.Error(w, `{"error":"invalid key"}`, http.StatusUnauthorized)
			return
		}
		p.calls.Add(1)
		switch r.URL.Path {
		case "/v1/models":
			var data []map[string]string
			for _, m := range models {
				data = append(data, map[string]string{"id": m})
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"data": data})
		case "/v1/chat/completions":
			if n := p.failEvery.Load(); n > 0 && p.calls.Load()%n == 0 {
				http.Error(w, `{"error":"overloaded"}`, http.StatusServiceUnavailable)
				return
			}
			_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"message": map[string]string{"role": "assistant", "content": "ok"}}}})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(p.Close)
	return p
}

// providers points every provider's API at p.
func (p *fakeProvider) providers() map[string]upstream.Provider {
	out := map[string]upstream.Provider{}
	for name, pr := range upstream.Providers {
		pr.BaseURL = p.URL + "/v1"
		out[name] = pr
	}
	return out
}

// startAgent runs an agent until the test ends or stop is called; stop drains it.
func (b bundle) startAgent(t testing.TB, name string, emulatorFlags ...string) (stop func()) {
	t.Helper()
	_, stop = b.run(t, b.agentConfig(t, name, emulatorFlags...))
	return stop
}

func (b bundle) run(t testing.TB, cfg gpuagent.Config) (*gpuagent.Agent, func()) {
	t.Helper()
	a, err := gpuagent.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			t.Errorf("agent: %v", err)
		}
	}()
	// Stopping is bounded: an agent that does not drain in time fails the test rather than
	// holding the whole run until the package's timeout.
	stop := func() {
		cancel()
		select {
		case <-done:
		case <-time.After(2 * time.Minute):
			t.Errorf("an agent did not stop within 2 minutes of its drain (work dir %s)", cfg.WorkDir)
		}
	}
	t.Cleanup(stop)
	return a, stop
}

// startAgentProcess runs cmd/gpuagent as its own process, as a node does.
func (b bundle) startAgentProcess(t testing.TB, name string, args ...string) *exec.Cmd {
	t.Helper()
	return b.startAgentProcessIn(t, name, t.TempDir(), args...)
}

// startAgentProcessIn is startAgentProcess with the agent's work folder work.
func (b bundle) startAgentProcessIn(t testing.TB, name, work string, args ...string) *exec.Cmd {
	t.Helper()
	store := ""
	if b.s3 != nil {
		s := b.store.(*blob.S3)
		store = fmt.Sprintf("s3://%s?endpoint=%s", s.Bucket(), url.QueryEscape(b.s3.Endpoint))
	} else {
		store = b.store.(*blob.Dir).Root()
	}
	ports := portRange()
	cmd := exec.Command(agentBin, append([]string{"--api", b.stack.URL, "--store", store, "--gpus", "H100:2",
		"--work-dir", work, "--emulated", "--emulator", emulator, "--metrics-addr", "", "--model-hub", "",
		"--claim-wait", "2s", "--stop-grace", "5s", "--poll-interval", "50ms", "--flush-interval", "100ms",
		"--port-range", fmt.Sprintf("%d-%d", ports[0], ports[1]), "--prime-rl", t.TempDir(), "--emulate-check", checkCmd}, append(upstreamtest.SandboxFlags(t), args...)...)...)
	cmd.Env = append(os.Environ(), "HOSTEDTRAIN_AGENT_TOKEN="+b.stack.AgentToken(name))
	if b.s3 != nil {
		cmd.Env = append(cmd.Env, b.s3.Env()...)
	}
	var out lockedBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		// What a killed agent leaves (its jobs' groups and file systems) its next start would
		// end; the test ends it here.
		if err := sandbox.Reclaim(work); err != nil {
			t.Errorf("reclaim what agent %s left: %v", name, err)
		}
		if t.Failed() {
			t.Logf("agent %s output:\n%s", name, out.String())
		}
	})
	return cmd
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (b bundle) submit(t testing.TB, toml string) *job.Job {
	t.Helper()
	return b.submitKind(t, toml, "")
}

func (b bundle) submitKind(t testing.TB, toml, kind string) *job.Job {
	t.Helper()
	s, err := b.user.SubmitJob(context.Background(), []byte(toml), "application/toml", kind)
	if err != nil {
		t.Fatal(err)
	}
	return &s.Job
}

// waitFor polls the job until cond holds (three minutes at most: a run whose steps take 100 ms
// alone took 30 s to its second step on this 2-core machine with make chaos beside it).
func (b bundle) waitFor(t testing.TB, id string, what string, cond func(*job.Job) bool) *job.Job {
	t.Helper()
	return b.waitWithin(t, 3*time.Minute, id, what, cond)
}

// waitWithin is waitFor with its own bound: for runs whose steps a loaded machine slows most.
func (b bundle) waitWithin(t testing.TB, limit time.Duration, id string, what string, cond func(*job.Job) bool) *job.Job {
	t.Helper()
	var j *job.Job
	testwait.Until(t, limit, "job "+what, func() bool {
		var err error
		if j, err = b.user.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return cond(j)
	})
	return j
}

func terminal(j *job.Job) bool { return j.Status.Terminal() }

func (b bundle) eventTypes(t testing.TB, id string) []string {
	t.Helper()
	evs, err := b.user.Events(context.Background(), id, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	return types
}

// logText is what the store holds of one log component of one attempt, chunks joined.
func (b bundle) logText(t testing.TB, jobID string, fence int64, component string) string {
	t.Helper()
	ctx := context.Background()
	objs, err := b.store.List(ctx, jobdata.LogPrefix(jobID, fence)+component+"/")
	if err != nil {
		t.Fatal(err)
	}
	var sb strings.Builder
	for _, o := range objs {
		rc, err := b.store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		sb.Write(data)
	}
	return sb.String()
}

const smallJob = `
model = "Qwen/Qwen3-4B-Instruct-2507"
max_steps = 6
batch_size = 16
rollouts_per_example = 4
[sampling]
max_tokens = 128
[[env]]
id = "primeintellect/alphabet-sort"
[checkpoints]
interval = 2
keep_cloud = 2
`

// rewardKey is prime-rl's name for the reward of a single-agent environment.
const rewardKey = "train/agg/all/agent/reward/mean"

func withSteps(n int) string {
	return strings.Replace(smallJob, "max_steps = 6", fmt.Sprintf("max_steps = %d", n), 1)
}

// The main path on real S3: a job runs to COMPLETED; checkpoints are committed with their
// manifests (and pruned to keep_cloud), every step's metrics reach storage and the API, logs
// are stored by component, and the events tell the story.
func TestAgentRunsAJobToCompletionOnS3(t *testing.T) {
	t.Parallel()
	b := setupS3(t, queue.Config{})
	a, _ := b.run(t, b.agentConfig(t, "agent-a", "--emulate.step-time", "20ms"))
	j := b.submit(t, smallJob)
	done := b.waitFor(t, j.ID, "ended", terminal)

	if done.Status != job.Completed {
		t.Fatalf("status %s (%s), want COMPLETED", done.Status, done.Error)
	}
	p := done.Progress
	if p.Step != 6 || p.MaxSteps != 6 || p.CheckpointStep != 6 || p.Checkpoints != 2 {
		t.Errorf("progress %+v; want step 6 of 6, newest checkpoint 6, 2 kept", p)
	}
	// Its start-up, timed phase by phase in the order they came (issue 33).
	var names []string
	for _, ph := range p.Phases {
		names = append(names, ph.Name)
		if ph.Seconds < 0 || ph.Seconds > 60 {
			t.Errorf("phase %s took %v s", ph.Name, ph.Seconds)
		}
	}
	if want := []string{job.PhaseClaim, job.PhaseStorage, job.PhaseSandbox, job.PhaseInstall, job.PhasePreflight, job.PhaseStart, job.PhaseFirstStep}; !slices.Equal(names, want) &&
		!slices.Equal(names, slices.DeleteFunc(slices.Clone(want), func(n string) bool { return n == job.PhaseSandbox || n == job.PhasePreflight })) {
		t.Errorf("start-up phases %v, want %v (sandbox and preflight where they run)", names, want)
	}
	if p.Series["reward"] != rewardKey || p.Metrics[rewardKey] == 0 || p.Series["loss"] != "loss/mean" || len(p.Metrics) > len(jobdata.Headline) {
		t.Errorf("progress metrics %v series %v; want the headline series by prime-rl's names", p.Metrics, p.Series)
	}
	if done.Runtime == nil || !done.Runtime.Emulated || done.Runtime.AgentID != "agent-a" ||
		done.Runtime.Upstream == nil || done.Runtime.Upstream.PrimeRL != upstream.PrimeRLCommit {
		t.Errorf("runtime %+v", done.Runtime)
	}
	ctx := context.Background()
	// keep_cloud = 2: steps 4 and 6 are committed, step 2 was removed.
	cps, err := b.user.JobCheckpoints(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].Step != 4 || cps[1].Step != 6 || cps[1].Status != "committed" || cps[1].Files != 5 || cps[1].Bytes < 64<<10 {
		t.Errorf("checkpoints %+v; want steps 4 and 6 committed, 5 files each (the trainer's 2, the orchestrator's, the adapter and its config)", cps)
	}
	rc, err := b.store.Get(ctx, jobdata.CheckpointPrefix(j.ID, 6)+jobdata.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	var m jobdata.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	var paths []string
	for _, f := range m.Files {
		paths = append(paths, f.Path)
	}
	slices.Sort(paths)
	if m.Step != 6 || strings.Join(paths, " ") != "orchestrator/progress.pt trainer/.metadata trainer/__0_0.distcp weights/adapter_config.json weights/adapter_model.safetensors" || m.Bytes == 0 || len(m.Files[0].SHA256) != 64 {
		t.Errorf("manifest %+v", m)
	}
	page, err := b.user.JobMetrics(ctx, j.ID, 0, 0, []string{rewardKey, "loss/mean"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 6 {
		t.Fatalf("%d metric rows from the API, want 6", len(page.Items))
	}
	for i, row := range page.Items {
		// Each step is the trainer's rows and the orchestrator's merged, cut to the names asked.
		if string(row["step"]) != fmt.Sprint(i+1) || row[rewardKey] == nil || row["loss/mean"] == nil || len(row) != 4 {
			t.Errorf("row %d: %v; want step %d with time, the reward and the loss", i, row, i+1)
		}
	}
	all, err := b.user.JobMetrics(ctx, j.ID, 3, 3, nil, 0)
	if err != nil || len(all.Items) != 1 || len(all.Items[0]) < 450 {
		t.Errorf("step 3 in full: %d keys (%v); want every key of its six rows", len(all.Items[0]), err)
	}
	trainer := b.logText(t, j.ID, 1, "trainer")
	if !strings.Contains(trainer, "Training finished after step 6") || !strings.Contains(trainer, "EMULATED") {
		t.Errorf("trainer log in storage:\n%s", trainer)
	}
	for _, comp := range []string{"orchestrator", "inference", "envs/train/alphabet-sort", "pipeline", "install", "agent"} {
		if b.logText(t, j.ID, 1, comp) == "" {
			t.Errorf("no %s log stored", comp)
		}
	}
	if inst := b.logText(t, j.ID, 1, "install"); !strings.Contains(inst, "Installed primeintellect/alphabet-sort") {
		t.Errorf("install log %q", inst)
	}
	if agentLog := b.logText(t, j.ID, 1, "agent"); !strings.Contains(agentLog, "checkpoint committed step=6") {
		t.Errorf("agent log:\n%s", agentLog)
	}
	want := "job.queued job.pending job.started job.checkpoint job.checkpoint job.checkpoint job.completed"
	if got := strings.Join(b.eventTypes(t, j.ID), " "); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	// The agent's own metrics say so too.
	body := scrape(t, a)
	for _, want := range []string{`hostedtrain_agent_jobs_ended_total{outcome="completed"} 1`, `hostedtrain_agent_checkpoint_uploads_total{result="committed"} 3`,
		`hostedtrain_agent_gpus{model="H100",state="free"} 2`} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func scrape(t *testing.T, a *gpuagent.Agent) string {
	t.Helper()
	rec := httptest.NewRecorder()
	a.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	return rec.Body.String()
}

func TestAgentReportsACrash(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.crash-at-step", "3")
	j := b.submit(t, smallJob)
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "status 1") || !strings.Contains(done.Error, "emulated crash at step 3") {
		t.Errorf("got %s %q; want FAILED naming the exit status and the crash", done.Status, done.Error)
	}
	// The trainer finished step 2's checkpoint before the crash; the orchestrator had already
	// saved step 4's part, running ahead. Step 2 is whole by prime-rl's marks and committed;
	// step 4 is not, whatever folders exist.
	if done.Progress.CheckpointStep != 2 {
		t.Errorf("checkpoint step %d committed, want 2", done.Progress.CheckpointStep)
	}
}

// A stop reaches the pipeline as SIGTERM; prime-rl exits 1 on it and writes nothing more, but
// its newest whole checkpoint is committed all the same, and the job is STOPPED.
func TestStopReachesTheRunningPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "100ms")
	j := b.submit(t, withSteps(1000))
	b.waitFor(t, j.ID, "past step 4", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 4 })
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Stopped {
		t.Fatalf("status %s (%s), want STOPPED", done.Status, done.Error)
	}
	newest := done.Progress.Step - done.Progress.Step%2
	if done.Progress.CheckpointStep != newest {
		t.Errorf("newest committed checkpoint %d, want %d (the last one the trainer wrote before it stopped at step %d)",
			done.Progress.CheckpointStep, newest, done.Progress.Step)
	}
}

// A stop is acted on while the job's data cannot be stored: with every log write held until
// its request is given up, the stop still ends the pipeline, and only then is the held write
// given up (the run's data is stored beside the watch of the pipeline, never in its way). The
// job ends STOPPED with its checkpoint. (A CI run once saw a stop wait minutes behind a backlog
// of rollouts on a loaded machine.)
func TestAStopIsNotHeldBehindTheJobsStorage(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	store := &stallingStore{Store: b.store, held: make(chan struct{}), freed: make(chan struct{})}
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.Store = store
	b.run(t, cfg)
	j := b.submit(t, withSteps(100000))
	running := b.waitFor(t, j.ID, "a checkpoint", func(x *job.Job) bool { return x.Status == job.Running && x.Progress.CheckpointStep >= 2 })
	store.armed.Store(true)
	select {
	case <-store.held:
	case <-time.After(time.Minute):
		t.Fatal("no log write within a minute of arming the store")
	}
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-store.freed:
	case <-time.After(time.Minute):
		t.Fatal("the held log write was not given up within a minute of the stop: the stop waits behind it")
	}
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Stopped || done.Progress.CheckpointStep < running.Progress.CheckpointStep {
		t.Fatalf("status %s, checkpoint %d; want STOPPED with at least checkpoint %d", done.Status, done.Progress.CheckpointStep, running.Progress.CheckpointStep)
	}
}

// A stopped job whose store never answers does not hold its agent for good: the pipeline ends
// at once, and once the stop's grace has passed the reaper ends the job (STOPPED); its lease
// lost, the agent gives up the writes it was waiting on and lets the job go.
func TestAHungStoreDoesNotHoldAStoppedJobsAgent(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{StopGrace: 2 * time.Second})
	store := &hangingStore{Store: b.store}
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.Store = store
	a, _ := b.run(t, cfg)
	j := b.submit(t, withSteps(100000))
	b.waitFor(t, j.ID, "a checkpoint", func(x *job.Job) bool { return x.Status == job.Running && x.Progress.CheckpointStep >= 2 })
	store.armed.Store(true)
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	var done *job.Job
	testwait.Until(t, 3*time.Minute, "the reaper to end the job after the stop's grace", func() bool {
		if _, _, err := b.stack.Queue.Reap(context.Background(), 10); err != nil {
			t.Fatal(err)
		}
		var err error
		done, err = b.user.GetJob(context.Background(), j.ID)
		return err == nil && done.Status.Terminal()
	})
	if done.Status != job.Stopped {
		t.Fatalf("the reaper ended the job %s; want STOPPED", done.Status)
	}
	testwait.Until(t, 3*time.Minute, "the agent to let the job go", func() bool { return len(a.Running()) == 0 })
}

// hangingStore, once armed, holds every write until its request is given up.
type hangingStore struct {
	blob.Store
	armed atomic.Bool
}

func (s *hangingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.armed.Load() {
		<-ctx.Done()
		return ctx.Err()
	}
	return s.Store.Put(ctx, key, r)
}

// stallingStore, once armed, holds the first write of a log chunk until its request is given
// up (held closes when it starts, freed when it ends); later writes go through.
type stallingStore struct {
	blob.Store
	armed       atomic.Bool
	once        sync.Once
	held, freed chan struct{}
}

func (s *stallingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.armed.Load() && strings.Contains(key, "/logs/") {
		hold := false
		s.once.Do(func() { hold = true })
		if hold {
			close(s.held)
			<-ctx.Done()
			close(s.freed)
			return ctx.Err()
		}
	}
	return s.Store.Put(ctx, key, r)
}

// Two jobs of two GPUs each run side by side on a four-GPU node, each on its own GPUs; a job
// that needs no GPU runs beside them; a four-GPU job waits for both and then runs.
func TestJobsRunSideBySideOnTheirOwnGPUs(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	seen := t.TempDir()
	wrapper := filepath.Join(t.TempDir(), "record-gpus")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s' \"$CUDA_VISIBLE_DEVICES\" > %s/$HOSTEDTRAIN_JOB_ID\nexec %s \"$@\"\n", seen, emulator)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	openai := newFakeProvider(t, "sk-provider", "gpt-4.1-mini")
	cfg := b.agentConfig(t, "agent-4", "--emulate.step-time", "50ms")
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "50ms")
	cfg.Devices = gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 4}})
	cfg.Providers = openai.providers()
	b.run(t, cfg)

	// Both rl runs bind every port prime-rl's processes take; the emulator binds prime-rl's
	// fixed defaults for any the config does not move, so a shared port fails a run.
	two := strings.Replace(withSteps(40), "[sampling]", "num_gpus = 2\n[sampling]", 1)
	j1, j2 := b.submit(t, two), b.submit(t, two)
	eval := b.submitKind(t, "env_id = \"acme/wordle\"\nmodel = \"openai/gpt-4.1-mini\"\nnum_examples = 3\nrollouts_per_example = 2\n"+
		"[secrets]\nOPENAI_API_KEY = \"sk-provider\"\n", "eval")
	if eval.Config.Resources.GPUs != 0 {
		t.Fatalf("the eval against an API model needs %d GPUs, want 0", eval.Config.Resources.GPUs)
	}
	testwait.Until(t, 3*time.Minute, "both two-GPU jobs running at once", func() bool {
		a, _ := b.user.GetJob(context.Background(), j1.ID)
		c, _ := b.user.GetJob(context.Background(), j2.ID)
		return a.Status == job.Running && c.Status == job.Running
	})
	four := b.submit(t, strings.Replace(withSteps(4), "[sampling]", "num_gpus = 4\n[sampling]", 1))
	for _, id := range []string{j1.ID, j2.ID, eval.ID, four.ID} {
		if done := b.waitFor(t, id, "ended", terminal); done.Status != job.Completed {
			t.Fatalf("job %s: %s (%s)", id, done.Status, done.Error)
		}
	}
	read := func(id string) string {
		b, err := os.ReadFile(filepath.Join(seen, id))
		if err != nil {
			t.Fatalf("job %s never started its pipeline: %v", id, err)
		}
		return string(b)
	}
	got := []string{read(j1.ID), read(j2.ID)}
	slices.Sort(got)
	if got[0] != "0,1" || got[1] != "2,3" {
		t.Errorf("the two-GPU jobs saw CUDA_VISIBLE_DEVICES %q; want 0,1 and 2,3", got)
	}
	if g := read(eval.ID); g != "" {
		t.Errorf("the eval saw CUDA_VISIBLE_DEVICES=%q, want none", g)
	}
	if g := read(four.ID); g != "0,1,2,3" {
		t.Errorf("the four-GPU job saw CUDA_VISIBLE_DEVICES=%q", g)
	}
	if openai.calls.Load() < 6 {
		t.Errorf("the eval made %d calls to its provider, want one a rollout, 6", openai.calls.Load())
	}
	// The runs' own logs say which ports their processes bound: all different.
	ports := map[string]string{}
	for _, id := range []string{j1.ID, j2.ID} {
		for _, line := range strings.Split(b.logText(t, id, 1, "agent"), "\n") {
			if i := strings.Index(line, "ports="); i >= 0 {
				block := strings.Fields(line[i+len("ports="):])[0]
				if other, ok := ports[block]; ok {
					t.Errorf("jobs %s and %s both got ports %s", other, id, block)
				}
				ports[block] = id
			}
		}
	}
	if len(ports) != 2 {
		t.Errorf("port blocks %v, want one per rl job", ports)
	}
}

// A GEPA job against a provider's models calls that provider with the user's key and needs no
// GPU; an eval of an open-weight model serves it on the job's GPU (vLLM's OpenAI server) and
// points the eval at it. Their outputs become artifacts, and their results job data: the
// eval's summary and the GEPA's best prompt on the job, their scores as metrics.
func TestGEPAAndEvalRunWhereTheirModelsLive(t *testing.T) {
	t.Parallel()
	b := setupS3(t, queue.Config{})
	gemini := newFakeProvider(t, jobspectest.Secrets(t)["GEMINI_API_KEY"], "gemini-3-flash-preview", "gemini-3-exp-ultra-preview")
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.serve-delay", "300ms")
	cfg.Providers = gemini.providers()
	b.run(t, cfg)
	g := b.submitKind(t, string(jobspectest.Fixture(t, "gepa.toml")), "gepa")
	e := b.submitKind(t, string(jobspectest.Fixture(t, "eval.toml")), "eval")
	if g.Config.Resources.GPUs != 0 || e.Config.Resources.GPUs != 1 {
		t.Fatalf("GPUs: GEPA %d, eval %d; want 0 and 1", g.Config.Resources.GPUs, e.Config.Resources.GPUs)
	}
	for id, want := range map[string][]string{
		g.ID: {"metadata.json", "pareto_frontier.jsonl", "results.jsonl", "system_prompt.txt"},
		e.ID: {"metadata.json", "results.jsonl"},
	} {
		done := b.waitFor(t, id, "ended", terminal)
		if done.Status != job.Completed {
			t.Fatalf("%s job: %s (%s)", done.Kind, done.Status, done.Error)
		}
		arts, err := b.user.JobArtifacts(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, a := range arts {
			names = append(names, a.Name)
			if a.Bytes == 0 {
				t.Errorf("%s job: artifact %s is empty", done.Kind, a.Name)
			}
		}
		if !slices.Equal(names, want) {
			t.Errorf("%s job: artifacts %v, want %v", done.Kind, names, want)
		}
	}
	if gemini.calls.Load() < 4 {
		t.Errorf("GEPA made %d calls to Gemini's API", gemini.calls.Load())
	}
	// GEPA's result: the best prompt on the job, the best score per candidate as metrics.
	gj, _ := b.user.GetJob(context.Background(), g.ID)
	if r := gj.Progress.Result; r == nil || r.GEPA == nil || !strings.Contains(r.GEPA.BestPrompt, "careful solver for my-env") ||
		r.GEPA.BestScore == nil || r.GEPA.Candidates < 2 || len(r.Eval) != 0 {
		t.Errorf("GEPA result %+v", gj.Progress.Result)
	} else if g := r.GEPA; g.ParetoRows == 0 || len(g.Pareto) != g.ParetoRows || len(g.Pareto[0].Candidates) == 0 {
		t.Errorf("GEPA's Pareto frontier: %d rows, %+v", g.ParetoRows, g.Pareto)
	}
	page, err := b.user.JobMetrics(context.Background(), g.ID, 0, 0, []string{"gepa/best_score"}, 0)
	if err != nil || len(page.Items) < 2 {
		t.Errorf("GEPA metrics: %v %v", page, err)
	}
	// The eval's result: the summary on the job; its model was served on the job's GPU.
	ej, _ := b.user.GetJob(context.Background(), e.ID)
	if r := ej.Progress.Result; r == nil || len(r.Eval) != 1 || r.Eval[0].Env != "my-env" || r.Eval[0].NumExamples != 100 ||
		r.Eval[0].RolloutsPerExample != 5 || r.Eval[0].Rollouts != 500 || r.Eval[0].AvgReward == nil {
		t.Errorf("eval result %+v", ej.Progress.Result)
	} else if d := r.Eval[0].Rewards; d == nil || d.Count != 500 || len(d.Bins) == 0 {
		t.Errorf("the eval's reward distribution: %+v; want all 500 rollouts binned", d)
	} else if n := func() (n int) {
		for _, b := range d.Bins {
			n += b.Count
		}
		return n
	}(); n != 500 {
		t.Errorf("the eval's reward bins hold %d of 500 rollouts", n)
	}
	if ej.Progress.Series["eval_reward"] != "eval/my-env/avg_reward" {
		t.Errorf("eval series %v", ej.Progress.Series)
	}
	inference := b.logText(t, e.ID, 1, "inference")
	if !strings.Contains(inference, "POST /v1/chat/completions 200") {
		t.Errorf("the eval's inference server log:\n%s", inference)
	}
	if agentLog := b.logText(t, e.ID, 1, "agent"); !strings.Contains(agentLog, "the inference server is ready") || !strings.Contains(agentLog, "stopping the inference server") {
		t.Errorf("agent log:\n%s", agentLog)
	}
}

// A node that vanishes (SIGKILL: no goodbye) loses its lease; the job is requeued and resumes
// on another agent from its newest committed checkpoint.
func TestALostJobResumesFromItsCheckpointOnAnotherAgent(t *testing.T) {
	t.Parallel()
	b := setupS3(t, queue.Config{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond})
	node := b.startAgentProcess(t, "agent-a", "--emulate-flags", "--emulate.step-time 100ms")
	j := b.submit(t, withSteps(12))
	b.waitFor(t, j.ID, "checkpointed twice", func(j *job.Job) bool { return j.Progress.CheckpointStep >= 4 })
	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = node.Wait()

	testwait.Until(t, 3*time.Minute, "the lease to lapse", func() bool {
		n, _, err := b.stack.Queue.Reap(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	requeued, err := b.user.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if requeued.Status != job.Queued || requeued.Attempt != 2 {
		t.Fatalf("after the reaper: %s attempt %d, want QUEUED attempt 2", requeued.Status, requeued.Attempt)
	}
	resumeFrom := requeued.Progress.CheckpointStep

	b.startAgent(t, "agent-b", "--emulate.step-time", "20ms")
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Runtime.AgentID != "agent-b" {
		t.Fatalf("got %s on %+v, want COMPLETED on agent-b", done.Status, done.Runtime)
	}
	if log := b.logText(t, j.ID, 2, "pipeline"); !strings.Contains(log, fmt.Sprintf("Resuming from step %d", resumeFrom)) {
		t.Errorf("attempt 2 did not resume from step %d:\n%s", resumeFrom, log)
	}
	if log := b.logText(t, j.ID, 2, "agent"); !strings.Contains(log, fmt.Sprintf("checkpoint restored and verified; the run resumes from it step=%d", resumeFrom)) {
		t.Errorf("attempt 2 agent log:\n%s", log)
	}
	// Metrics: every step once, the resumed ones from the second attempt.
	page, err := b.user.JobMetrics(context.Background(), j.ID, 0, 0, nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Items) != 12 {
		t.Errorf("%d metric rows, want 12", len(page.Items))
	}
}

// SIGTERM to the agent (a preemption notice) drains it: the pipeline is stopped, the
// checkpoint it completed is committed, and the job goes back to the queue at once — no lease
// has to lapse — to resume on another agent from that checkpoint.
func TestADrainedAgentHandsItsJobBack(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: time.Hour})
	node := b.startAgentProcess(t, "agent-a", "--emulate-flags", "--emulate.step-time 100ms")
	j := b.submit(t, withSteps(40))
	running := b.waitFor(t, j.ID, "past step 5", func(j *job.Job) bool { return j.Progress.Step >= 5 })
	if err := node.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := node.Wait(); err != nil {
		t.Fatalf("the agent did not exit cleanly after draining: %v", err)
	}
	back, err := b.user.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	// With a one-hour lease, only a hand-back explains a QUEUED job now.
	if back.Status != job.Queued || back.Attempt != 1 {
		t.Fatalf("after the drain: %s attempt %d; want QUEUED, attempt still 1", back.Status, back.Attempt)
	}
	if back.ResumeStep < running.Progress.CheckpointStep || back.ResumeStep == 0 {
		t.Errorf("resumes from step %d; the checkpoint before the drain was %d", back.ResumeStep, running.Progress.CheckpointStep)
	}
	types := b.eventTypes(t, j.ID)
	if types[len(types)-1] != "job.retrying" {
		t.Errorf("events %v end without job.retrying", types)
	}
	b.startAgent(t, "agent-b", "--emulate.step-time", "10ms")
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Progress.Step != 40 {
		t.Fatalf("got %s at step %d", done.Status, done.Progress.Step)
	}
	if log := b.logText(t, j.ID, 2, "pipeline"); !strings.Contains(log, fmt.Sprintf("Resuming from step %d", back.ResumeStep)) {
		t.Errorf("the second attempt did not resume from step %d:\n%s", back.ResumeStep, log)
	}
}

// flakyAPI stands between an agent and the API; while down it answers 503 to every request,
// as a load balancer does when the API is out.
type flakyAPI struct {
	*httptest.Server
	down     atomic.Bool
	refused  atomic.Int64
	attempts atomic.Int64
}

func newFlakyAPI(t *testing.T, target string) *flakyAPI {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	f := &flakyAPI{}
	proxy := httputil.NewSingleHostReverseProxy(u)
	f.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.attempts.Add(1)
		if f.down.Load() {
			f.refused.Add(1)
			http.Error(w, "upstream unavailable", http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(f.Close)
	return f
}

// While the API is out, the pipeline keeps training; heartbeats are retried, and what they
// carried (progress, committed checkpoints) arrives when the API is back.
func TestTheAgentRidesOutAnAPIOutage(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: time.Minute})
	api := newFlakyAPI(t, b.stack.URL)
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.API = client.New(api.URL, b.stack.AgentToken("agent-a"))
	b.run(t, cfg)
	j := b.submit(t, withSteps(60))
	before := b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 2 })
	api.down.Store(true)
	testwait.Until(t, 3*time.Minute, "heartbeats refused during the outage", func() bool { return api.refused.Load() >= 3 })
	// The pipeline trains on: its checkpoints reach storage though the API is out.
	testwait.Until(t, 3*time.Minute, "checkpoints committed during the outage", func() bool {
		cps, err := jobdata.ListCheckpoints(context.Background(), b.store, j.ID)
		return err == nil && len(cps) > 0 && cps[len(cps)-1].Step >= before.Progress.Step+6
	})
	api.down.Store(false)
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Progress.Step != 60 {
		t.Fatalf("got %s at step %d (%s)", done.Status, done.Progress.Step, done.Error)
	}
	b.checkEveryCommitReported(t, j.ID, 6)
}

// When the lease turns out lost (the API was out longer than the lease and the job went to
// another agent), the agent stops its pipeline and reports nothing.
func TestALostLeaseStopsThePipeline(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RetryBackoff: time.Hour})
	api := newFlakyAPI(t, b.stack.URL)
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.API = client.New(api.URL, b.stack.AgentToken("agent-a"))
	a, _ := b.run(t, cfg)
	j := b.submit(t, withSteps(100000))
	b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running })
	api.down.Store(true)
	testwait.Until(t, 3*time.Minute, "the lease to lapse", func() bool {
		n, _, err := b.stack.Queue.Reap(context.Background(), 10)
		if err != nil {
			t.Fatal(err)
		}
		return n > 0
	})
	api.down.Store(false)
	testwait.Until(t, 3*time.Minute, "the agent to let the job go", func() bool { return len(a.Running()) == 0 })
	if !strings.Contains(scrape(t, a), `hostedtrain_agent_jobs_ended_total{outcome="lost"} 1`) {
		t.Error("the agent does not count the job as lost")
	}
	back, err := b.user.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if back.Status != job.Queued || back.Attempt != 2 {
		t.Errorf("the job is %s attempt %d; the stale agent must not have changed it", back.Status, back.Attempt)
	}
}

func TestAStaleAgentCannotFinishAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	j := b.submit(t, smallJob)
	agent := client.New(b.stack.URL, b.stack.AgentToken("agent-x"))
	cl, err := agent.Claim(context.Background(), job.ClaimRequest{GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	err = agent.Complete(context.Background(), j.ID, job.Outcome{Token: "999.bogus"})
	if !errors.Is(err, job.ErrLeaseLost) {
		t.Fatalf("completion with a stale token: %v, want ErrLeaseLost", err)
	}
}

func TestSecretsReachOnlyThePipelineEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	seen := filepath.Join(t.TempDir(), "seen")
	wrapper := filepath.Join(t.TempDir(), "record-secret")
	script := fmt.Sprintf("#!/bin/sh\nprintf '%%s|%%s' \"$OPENAI_API_KEY\" \"$CUDA_VISIBLE_DEVICES\" > %s\nexec %s \"$@\"\n", seen, emulator)
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := b.agentConfig(t, "agent-s")
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "10ms")
	b.run(t, cfg)
	j := b.submit(t, smallJob+"[secrets]\nOPENAI_API_KEY = \"sk-for-the-judge\"\n")
	if done := b.waitFor(t, j.ID, "ended", terminal); done.Status != job.Completed {
		t.Fatalf("status %s (%s)", done.Status, done.Error)
	}
	got, err := os.ReadFile(seen)
	if err != nil || string(got) != "sk-for-the-judge|0,1" {
		t.Errorf("the pipeline saw %q (%v); want the secret and the job's GPUs 0,1", got, err)
	}
	// Nothing the agent stored holds the secret.
	objs, err := b.store.List(context.Background(), jobdata.JobPrefix(j.ID))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		rc, _ := b.store.Get(context.Background(), o.Key)
		data, _ := io.ReadAll(rc)
		rc.Close()
		if bytes.Contains(data, []byte("sk-for-the-judge")) {
			t.Errorf("%s holds the secret", o.Key)
		}
	}
}

// A run that reaches its time limit is stopped through its heartbeat (the reaper asks), and
// the job FAILS saying why.
func TestATimeLimitStopsTheRun(t *testing.T) {
	t.Parallel()
	var offset atomic.Int64 // how far the service's clock is ahead of the wall's
	now := func() time.Time { return time.Now().Add(time.Duration(offset.Load())) }
	b := setup(t, queue.Config{LeaseTTL: time.Hour, Now: now})
	b.startAgent(t, "agent-a", "--emulate.step-time", "50ms")
	j := b.submit(t, "time_limit = \"1m\"\n"+withSteps(100000))
	b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running })
	offset.Store(int64(2 * time.Minute))
	if _, _, err := b.stack.Queue.Reap(context.Background(), 10); err != nil {
		t.Fatal(err)
	}
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "time limit") {
		t.Errorf("got %s %q; want FAILED at its time limit", done.Status, done.Error)
	}
}

// checkEveryCommitReported checks that every checkpoint the agent committed (its notes in the
// job's agent log) became one job.checkpoint event: none lost while the service was out.
// The agent skips a checkpoint when the trainer completes them faster than storage takes them
// (on a loaded test machine, at one every 100 ms; it says so in the log), so how many are
// committed depends on the machine: least is a floor that only proves the run was not vacuous.
func (b bundle) checkEveryCommitReported(t *testing.T, jobID string, least int) {
	t.Helper()
	evs, err := b.user.Events(context.Background(), jobID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var events []string
	for _, e := range evs {
		if e.Type == "job.checkpoint" {
			events = append(events, strings.TrimPrefix(e.Detail, "step "))
		}
	}
	var committed []string
	for _, line := range strings.Split(b.logText(t, jobID, 1, "agent"), "\n") {
		if i := strings.Index(line, "checkpoint committed step="); i >= 0 {
			committed = append(committed, strings.Fields(line[i+len("checkpoint committed step="):])[0])
		}
	}
	if strings.Join(events, " ") != strings.Join(committed, " ") || len(committed) < least {
		t.Errorf("job.checkpoint events for steps %v; the agent committed %v (want at least %d, none unreported)", events, committed, least)
	}
}
