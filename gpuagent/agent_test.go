package gpuagent_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

var emulator string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "emulator")
	if err != nil {
		panic(err)
	}
	emulator = filepath.Join(dir, "prime-rl-emulator")
	out, err := exec.Command("go", "build", "-o", emulator, "github.com/hostedtrain/hostedtrain/cmd/prime-rl-emulator").CombinedOutput()
	if err != nil {
		fmt.Fprintf(os.Stderr, "build emulator: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

type bundle struct {
	stack *apitest.Stack
	user  *client.Client
	store *blob.Dir
}

func setup(t *testing.T, qc queue.Config) bundle {
	t.Helper()
	s := apitest.Start(t, apitest.Options{Queue: qc})
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return bundle{stack: s, user: client.New(s.URL, s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)), store: store}
}

// emulatorArgv is the emulated pipeline's command with extra flags.
func emulatorArgv(flags ...string) []string {
	return append([]string{emulator, "@", "{config}", "--output-dir", "{output_dir}", "--run.name", "{run_name}"}, flags...)
}

// startAgent runs an agent with the emulated pipeline until the test ends or stop is called.
func (b bundle) startAgent(t *testing.T, name string, emulatorFlags ...string) (stop func()) {
	t.Helper()
	return b.startAgentWith(t, name, emulatorArgv(emulatorFlags...))
}

// startAgentWith runs an agent whose rl command is argv.
func (b bundle) startAgentWith(t *testing.T, name string, argv []string) (stop func()) {
	t.Helper()
	a, err := gpuagent.New(gpuagent.Config{
		API:          client.New(b.stack.URL, b.stack.AgentToken(name)),
		Store:        b.store,
		WorkDir:      t.TempDir(),
		GPUs:         []job.GPU{{Model: "H100", Count: 2}},
		Pipeline:     gpuagent.Pipeline{Name: "prime-rl", Emulated: true, RL: argv},
		ClaimWait:    2 * time.Second,
		StopGrace:    5 * time.Second,
		PollInterval: 50 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = a.Run(ctx)
	}()
	stop = func() { cancel(); <-done }
	t.Cleanup(stop)
	return stop
}

func (b bundle) submit(t *testing.T, toml string) *job.Job {
	t.Helper()
	s, err := b.user.SubmitJob(context.Background(), []byte(toml), "application/toml", "")
	if err != nil {
		t.Fatal(err)
	}
	return &s.Job
}

// waitFor polls the job until cond holds (the API has no push yet).
func (b bundle) waitFor(t *testing.T, id string, what string, cond func(*job.Job) bool) *job.Job {
	t.Helper()
	var j *job.Job
	testwait.Until(t, time.Minute, "job "+what, func() bool {
		var err error
		if j, err = b.user.GetJob(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		return cond(j)
	})
	return j
}

func terminal(j *job.Job) bool { return j.Status.Terminal() }

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

func TestAgentRunsAJobToCompletion(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "20ms")
	j := b.submit(t, smallJob)
	done := b.waitFor(t, j.ID, "ended", terminal)

	if done.Status != job.Completed {
		t.Fatalf("status %s (%s), want COMPLETED", done.Status, done.Error)
	}
	p := done.Progress
	if p.Step != 6 || p.MaxSteps != 6 || p.CheckpointStep != 6 || p.Checkpoints != 2 {
		t.Errorf("progress %+v; want step 6 of 6, newest checkpoint 6, 2 kept", p)
	}
	if _, ok := p.Metrics["reward/all/mean"]; !ok {
		t.Errorf("metrics %v lack reward/all/mean", p.Metrics)
	}
	if done.Runtime == nil || !done.Runtime.Emulated || done.Runtime.AgentID != "agent-a" {
		t.Errorf("runtime %+v", done.Runtime)
	}
	// keep_cloud = 2: steps 4 and 6 are committed, step 2 was removed.
	ctx := context.Background()
	for step, want := range map[int]bool{2: false, 4: true, 6: true} {
		_, err := b.store.Get(ctx, blob.CheckpointPrefix(j.ID, step)+blob.ManifestName)
		if got := err == nil; got != want {
			t.Errorf("step %d committed: %v, want %v (%v)", step, got, want, err)
		}
	}
	rc, err := b.store.Get(ctx, blob.CheckpointPrefix(j.ID, 6)+blob.ManifestName)
	if err != nil {
		t.Fatal(err)
	}
	var m blob.Manifest
	if err := json.NewDecoder(rc).Decode(&m); err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if m.Step != 6 || len(m.Files) != 2 || m.Bytes == 0 {
		t.Errorf("manifest %+v", m)
	}
	// Every step's metrics reached storage.
	objs, err := b.store.List(ctx, blob.JobPrefix(j.ID)+"metrics/")
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	for _, o := range objs {
		rc, _ := b.store.Get(ctx, o.Key)
		data, _ := io.ReadAll(rc)
		rc.Close()
		steps += strings.Count(string(data), `"step"`)
	}
	if steps != 6 {
		t.Errorf("%d metric lines stored across %d chunks, want 6", steps, len(objs))
	}
	logs, _ := b.store.List(ctx, blob.JobPrefix(j.ID)+"logs/attempt_1/")
	var names []string
	for _, o := range logs {
		names = append(names, strings.TrimPrefix(o.Key, blob.JobPrefix(j.ID)+"logs/attempt_1/"))
	}
	if !strings.Contains(strings.Join(names, " "), "trainer.log") {
		t.Errorf("logs stored: %v, want trainer.log among them", names)
	}
	evs, err := b.user.Events(ctx, j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	var types []string
	for _, e := range evs {
		types = append(types, e.Type)
	}
	want := "job.queued job.pending job.started job.checkpoint job.checkpoint job.checkpoint job.completed"
	if strings.Join(types, " ") != want {
		t.Errorf("events %v, want %s", types, want)
	}
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
}

func TestStopReachesTheRunningPipeline(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "1s")
	j := b.submit(t, strings.Replace(smallJob, "max_steps = 6", "max_steps = 1000", 1))
	b.waitFor(t, j.ID, "RUNNING", func(j *job.Job) bool { return j.Status == job.Running })
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Stopped {
		t.Errorf("status %s (%s), want STOPPED", done.Status, done.Error)
	}
}

func TestALostJobResumesFromItsCheckpointOnAnotherAgent(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: time.Second, HeartbeatInterval: 100 * time.Millisecond, RetryBackoff: 50 * time.Millisecond})
	stopA := b.startAgent(t, "agent-a", "--emulate.step-time", "100ms")
	j := b.submit(t, strings.Replace(smallJob, "max_steps = 6", "max_steps = 12", 1))
	b.waitFor(t, j.ID, "checkpointed twice", func(j *job.Job) bool { return j.Progress.CheckpointStep >= 4 })
	stopA() // the node vanishes: no report, the lease lapses

	// The reaper's turn: wait for the lease to lapse and requeue the job.
	testwait.Until(t, time.Minute, "the lease to lapse", func() bool {
		n, err := b.stack.Queue.Reap(context.Background(), 10)
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
	// The second attempt's trainer log says where it started.
	rc, err := b.store.Get(context.Background(), blob.JobPrefix(j.ID)+"logs/attempt_2/trainer.log")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	log, _ := io.ReadAll(rc)
	if want := fmt.Sprintf("start_step=%d", resumeFrom+1); !strings.Contains(string(log), want) {
		t.Errorf("attempt 2 trainer log lacks %q:\n%s", want, log)
	}
}

func TestAStaleAgentCannotFinishAJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	j := b.submit(t, smallJob)
	agent := client.New(b.stack.URL, b.stack.AgentToken("agent-x"))
	cl, err := agent.Claim(context.Background(), []job.GPU{{Model: "H100", Count: 8}}, 0)
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	err = agent.Complete(context.Background(), j.ID, job.Outcome{Token: "999.bogus"})
	if !errors.Is(err, job.ErrLeaseLost) {
		t.Fatalf("completion with a stale token: %v, want ErrLeaseLost", err)
	}
}

func TestSecretsReachThePipelineEnvironment(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	seen := filepath.Join(t.TempDir(), "seen")
	// A wrapper records what the pipeline sees, then runs the emulator.
	argv := append([]string{"sh", "-c", `printf %s "$OPENAI_API_KEY" > ` + seen + `; exec "$0" "$@"`},
		emulatorArgv("--emulate.step-time", "10ms")...)
	b.startAgentWith(t, "agent-s", argv)
	j := b.submit(t, smallJob+"[secrets]\nOPENAI_API_KEY = \"sk-for-the-judge\"\n")
	if done := b.waitFor(t, j.ID, "ended", terminal); done.Status != job.Completed {
		t.Fatalf("status %s (%s)", done.Status, done.Error)
	}
	got, err := os.ReadFile(seen)
	if err != nil || string(got) != "sk-for-the-judge" {
		t.Errorf("the pipeline saw OPENAI_API_KEY=%q (%v)", got, err)
	}
}
