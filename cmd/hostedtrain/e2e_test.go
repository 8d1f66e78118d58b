package main

// End-to-end tests of the built binaries: `hostedtrain dev` runs Redis, the API, the reaper and
// an emulated agent; the CLI submits and follows jobs over HTTP; SIGTERM stops everything.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "hostedtrain-bin")
	if err != nil {
		panic(err)
	}
	binDir = dir
	for _, pkg := range []string{"./", "../prime-rl-emulator"} {
		out, err := exec.Command("go", "build", "-o", dir+"/", pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// syncBuffer is a buffer the child's output goroutine and the test may share.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

type devStack struct {
	cmd   *exec.Cmd
	data  string
	url   string
	token string
	out   *syncBuffer
	done  chan struct{} // closed when the process has exited
	err   error         // its exit error, set before done closes
}

// startDev runs `hostedtrain dev` on a free port and waits until it is ready.
// devSlots numbers the dev stacks the tests start.
var devSlots atomic.Int64

func startDev(t testing.TB, stepTime string, extra ...string) *devStack {
	t.Helper()
	return startDevIn(t, t.TempDir(), stepTime, extra...)
}

// startDevIn is startDev on the data folder given.
func startDevIn(t testing.TB, data, stepTime string, extra ...string) *devStack {
	t.Helper()
	out := &syncBuffer{}
	// Dev stacks of tests that run at once each get their own ports for their jobs: their
	// agents would otherwise take the same free block before either run binds it.
	slot := int(devSlots.Add(1)-1) % 15
	ports := fmt.Sprintf("%d-%d", 20000+slot*640, 20000+(slot+1)*640-1)
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), append([]string{"dev", "--addr", "127.0.0.1:0", "--data", data,
		"--agents", "1", "--step-time", stepTime, "--heartbeat", "200ms", "--port-range", ports}, extra...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &devStack{cmd: cmd, data: data, out: out, done: make(chan struct{})}
	go func() { d.err = cmd.Wait(); close(d.done) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("hostedtrain dev's output:\n%s", out.String())
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-d.done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-d.done
		}
		// What the stack's agents leave if it was killed (their jobs' control groups), as their
		// next start would.
		agents, _ := filepath.Glob(filepath.Join(data, "agents", "*"))
		for _, a := range agents {
			if err := sandbox.Reclaim(a); err != nil {
				t.Errorf("reclaim what agent %s left: %v", a, err)
			}
		}
	})
	testwait.Until(t, 30*time.Second, "hostedtrain dev to write api.url", func() bool {
		if b, err := os.ReadFile(filepath.Join(data, "api.url")); err == nil && len(b) > 0 {
			d.url = strings.TrimSpace(string(b))
			return true
		}
		select {
		case <-d.done:
			t.Fatalf("hostedtrain dev exited (%v) before it was ready:\n%s", d.err, out.String())
		default:
		}
		return false
	})
	tok, err := os.ReadFile(filepath.Join(data, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	d.token = strings.TrimSpace(string(tok))
	return d
}

// cli runs the hostedtrain CLI against the stack.
func (d *devStack) cli(t *testing.T, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), args...)
	cmd.Env = append(os.Environ(), "HOSTEDTRAIN_URL="+d.url, "HOSTEDTRAIN_TOKEN="+d.token)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// stop sends SIGTERM and waits for a clean exit.
func (d *devStack) stop(t *testing.T) {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
		if d.err != nil {
			t.Errorf("hostedtrain dev exited with %v:\n%s", d.err, d.out.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("hostedtrain dev did not stop within 30 s of SIGTERM:\n%s", d.out.String())
	}
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func TestDevRunsTheQuickstartToCompletion(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	out, code := d.cli(t, "train", "submit", "../../examples/quickstart.toml", "--wait", "--poll", "100ms", "-o", "json")
	if code != 0 {
		t.Fatalf("submit --wait exited %d:\n%s", code, out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
		t.Fatalf("last line is not the job: %v\n%s", err, out)
	}
	if j.Status != job.Completed || j.Progress.Step != 20 || j.Progress.CheckpointStep != 20 || !j.Runtime.Emulated {
		t.Errorf("finished job %+v", j)
	}

	table, code := d.cli(t, "train", "list")
	if code != 0 || !strings.Contains(table, j.ID) || !strings.Contains(table, "COMPLETED") {
		t.Errorf("train list (%d):\n%s", code, table)
	}
	get, code := d.cli(t, "train", "get", j.ID)
	if code != 0 || !strings.Contains(get, "20/20") || !strings.Contains(get, "emulated") {
		t.Errorf("train get (%d):\n%s", code, get)
	}
	// The run's metrics and checkpoints, as the agent stored them, through the API.
	api := client.New(d.url, d.token)
	page, err := api.JobMetrics(context.Background(), j.ID, 0, 0, []string{"train/agg/all/agent/reward/mean"}, 0)
	if err != nil || len(page.Items) != 20 || page.Items[19]["train/agg/all/agent/reward/mean"] == nil {
		t.Errorf("metrics: %d rows, %v", len(page.Items), err)
	}
	cps, err := api.JobCheckpoints(context.Background(), j.ID)
	if err != nil || len(cps) == 0 || cps[len(cps)-1].Step != 20 || cps[len(cps)-1].Status != "committed" {
		t.Errorf("checkpoints: %+v, %v", cps, err)
	}
	d.stop(t)
}

// A full fine-tune — a whole prime-rl config, as `prime train` sends down its full fine-tune
// path — runs as its own kind: the agent lays its ports and checkpoints over it and the
// emulated prime-rl (which checks it with the pinned prime-rl's own code) trains it to the end.
func TestDevRunsAFullFinetuneToCompletion(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms", append([]string{"--emulate-check", strings.Join(upstreamtest.Command(t), " ")}, upstreamtest.SandboxFlags(t)...)...)
	out, code := d.cli(t, "train", "submit", "../../testdata/prime-train/fft-type-marker.toml", "--wait", "--poll", "100ms", "-o", "json")
	if code != 0 {
		t.Fatalf("submit --wait exited %d:\n%s", code, out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
		t.Fatalf("last line is not the job: %v\n%s", err, out)
	}
	if j.Kind != "fft" || j.Status != job.Completed || j.Progress.Step != 10 || j.Progress.CheckpointStep != 10 ||
		j.Config.Resources.GPUs != 2 || j.Config.Model != "Qwen/Qwen3-0.6B" {
		t.Errorf("finished job: kind %s, status %s, step %d, checkpoint %d, config %+v", j.Kind, j.Status, j.Progress.Step,
			j.Progress.CheckpointStep, j.Config)
	}
	cps, err := client.New(d.url, d.token).JobCheckpoints(context.Background(), j.ID)
	if err != nil || len(cps) == 0 || cps[len(cps)-1].Step != 10 || cps[len(cps)-1].Status != "committed" {
		t.Errorf("checkpoints: %+v, %v", cps, err)
	}
	// Its settings are prime-rl's, and prime-rl's own code judges them on the node: a key the
	// trainer does not have fails the job before any step, in upstream's words.
	body, err := os.ReadFile("../../testdata/prime-train/fft-type-marker.toml")
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "typo.toml")
	if err := os.WriteFile(bad, append(body, []byte("\n[trainer.optim]\nlrr = 1e-5\n")...), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = d.cli(t, "train", "submit", bad, "--wait", "--poll", "100ms", "-o", "json")
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
		t.Fatalf("last line is not the job (%d): %v\n%s", code, err, out)
	}
	if j.Status != job.Failed || j.Progress.Step != 0 || !strings.Contains(j.Error, "lrr") {
		t.Errorf("a config prime-rl refuses: status %s, step %d, error %q", j.Status, j.Progress.Step, j.Error)
	}
	d.stop(t)
}

func TestDevExplainsBadInput(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = [\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := d.cli(t, "train", "submit", bad)
	if code != 1 || !strings.Contains(out, "400 Bad Request") || !strings.Contains(out, "line 2") {
		t.Errorf("bad TOML (%d):\n%s", code, out)
	}
	out, code = d.cli(t, "train", "get", "0190a0a0-0000-7000-8000-000000000000")
	if code != 1 || !strings.Contains(out, "404") {
		t.Errorf("unknown job (%d):\n%s", code, out)
	}
	d.stop(t)
}

// descendants lists the live processes below pid (children, grandchildren...).
func descendants(pid int) map[int]string {
	parent := map[int]int{}
	cmdline := map[int]string{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...; comm may hold spaces, so split after the last ')'.
		fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
		if len(fields) < 2 || fields[0] == "Z" {
			continue
		}
		parent[p], _ = strconv.Atoi(fields[1])
		cl, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		cmdline[p] = strings.ReplaceAll(string(cl), "\x00", " ")
	}
	out := map[int]string{}
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out[p] = cmdline[p]
				break
			}
		}
	}
	return out
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(stat[bytes.LastIndexByte(stat, ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func TestDevLeavesNothingBehindWhenStoppedMidJob(t *testing.T) {
	t.Parallel()
	d := startDev(t, "1s")
	long := filepath.Join(t.TempDir(), "long.toml")
	body := "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 1000\n[[env]]\nid = \"gsm8k\"\n"
	if err := os.WriteFile(long, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := d.cli(t, "train", "submit", long, "-o", "json")
	if code != 0 {
		t.Fatalf("submit (%d): %s", code, out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
		t.Fatal(err)
	}
	api := client.New(d.url, d.token)
	testwait.Until(t, 30*time.Second, "the job to run", func() bool {
		got, err := api.GetJob(context.Background(), j.ID)
		if err != nil {
			t.Fatal(err)
		}
		return got.Status == job.Running
	})
	kids := descendants(d.cmd.Process.Pid)
	var sawRedis, sawPipeline bool
	for _, cl := range kids {
		sawRedis = sawRedis || strings.Contains(cl, "redis-server")
		sawPipeline = sawPipeline || strings.Contains(cl, "prime-rl-emulator")
	}
	if !sawRedis || !sawPipeline {
		t.Fatalf("expected redis-server and the pipeline among the children, got %v", kids)
	}
	d.stop(t)
	for pid, cl := range kids {
		if alive(pid) {
			t.Errorf("left running after SIGTERM: %d %s", pid, cl)
		}
	}
}

func TestCLISendsSecretsFromEnvFilesAndFlags(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	dir := t.TempDir()
	jobFile := "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 2\n[[env]]\nid = \"gsm8k\"\n" +
		"[wandb]\nproject = \"p\"\nenv_file = [\"keys/secrets.env\"]\n"
	if err := os.MkdirAll(filepath.Join(dir, "keys"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "job.toml"), jobFile)
	writeFile(t, filepath.Join(dir, "keys", "secrets.env"), "# judge keys\nOPENAI_API_KEY=sk-from-file\nexport ANTHROPIC_API_KEY=\"sk-ant-file\"\n")

	// W&B without its key is refused before anything is queued, as the prime CLI refuses it.
	out, code := d.cli(t, "train", "submit", filepath.Join(dir, "job.toml"), "--dry-run")
	if code != 1 || !strings.Contains(out, "line 5 (/wandb): WANDB_API_KEY is required when W&B monitoring is configured") {
		t.Errorf("dry run without WANDB_API_KEY (%d):\n%s", code, out)
	}
	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "job.toml"), "--dry-run", "-e", "WANDB_API_KEY=wandb-from-flag")
	if code != 0 || !strings.Contains(out, `"secrets": [`) || !strings.Contains(out, "needs 2×H100") {
		t.Errorf("dry run (%d):\n%s", code, out)
	}
	if strings.Contains(out, "sk-from-file") {
		t.Errorf("dry run shows a secret value:\n%s", out)
	}
	if list, _ := d.cli(t, "train", "list", "-o", "json"); strings.Contains(list, "gsm8k") {
		t.Errorf("--dry-run queued a job: %s", list)
	}

	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), "train", "submit", filepath.Join(dir, "job.toml"),
		"-e", "WANDB_API_KEY", "-e", "OPENAI_API_KEY=sk-from-flag", "-o", "json")
	cmd.Env = append(os.Environ(), "HOSTEDTRAIN_URL="+d.url, "HOSTEDTRAIN_TOKEN="+d.token, "WANDB_API_KEY=wandb-from-env")
	b, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("submit: %v\n%s", err, b)
	}
	if strings.Contains(string(b), "warning") || strings.Contains(string(b), "sk-from") {
		t.Errorf("submit output:\n%s", b)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(string(b))), &j); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(j.Config.Secrets, ","); got != "ANTHROPIC_API_KEY,OPENAI_API_KEY,WANDB_API_KEY" {
		t.Errorf("secret names %q", got)
	}

	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "job.toml"), "-e", "NOT_SET_ANYWHERE_XYZ")
	if code != 1 || !strings.Contains(out, "NOT_SET_ANYWHERE_XYZ is not set") {
		t.Errorf("-e of an unset variable (%d): %s", code, out)
	}
	writeFile(t, filepath.Join(dir, "missing.toml"), "model = \"m\"\nenv_file = \"nope.env\"\n[[env]]\nid = \"a\"\n")
	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "missing.toml"))
	if code != 1 || !strings.Contains(out, `names env file "nope.env"`) {
		t.Errorf("missing env file (%d): %s", code, out)
	}

	// An env file outside the job's folder is read only when asked for.
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "sub", "up.toml"), strings.Replace(jobFile, "keys/secrets.env", "../keys/secrets.env", 1))
	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "sub", "up.toml"), "--dry-run")
	if code != 1 || !strings.Contains(out, "outside the job file's folder") || strings.Contains(out, "sk-from-file") {
		t.Errorf("env file in ../ (%d): %s", code, out)
	}
	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "sub", "up.toml"), "--dry-run", "--allow-outside-env-file", "-e", "WANDB_API_KEY=w")
	if code != 0 || !strings.Contains(out, `"secrets": [`) {
		t.Errorf("env file in ../ with --allow-outside-env-file (%d): %s", code, out)
	}
	// A broken env file is named with its line, and none of it is shown.
	writeFile(t, filepath.Join(dir, "keys", "broken.env"), "OPENAI_API_KEY=sk-broken-1\nnot/a key sk-broken-2\n")
	writeFile(t, filepath.Join(dir, "broken.toml"), strings.Replace(jobFile, "secrets.env", "broken.env", 1))
	out, code = d.cli(t, "train", "submit", filepath.Join(dir, "broken.toml"))
	if code != 1 || !strings.Contains(out, "line 2:") || strings.Contains(out, "sk-broken") {
		t.Errorf("broken env file (%d): %s", code, out)
	}
	d.stop(t)
}

func TestCLISubmitsGEPAAndEvalJobs(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	fixtures := filepath.Join("..", "..", "testdata", "jobs")
	cases := []struct {
		args []string
		kind string
	}{
		{[]string{"gepa", "submit", filepath.Join(fixtures, "gepa.toml"), "-o", "json"}, "gepa"},
		{[]string{"eval", "submit", filepath.Join(fixtures, "eval.toml"), "-o", "json"}, "eval"},
		{[]string{"eval", "run", "my-env", "-m", "Qwen/Qwen3-4B-Instruct-2507", "-n", "100", "-r", "5", "-o", "json"}, "eval"},
		{[]string{"gepa", "run", "primeintellect/wordle", "-m", "google/gemini-3-flash-preview", "-B", "1000", "--state-columns", "a,b", "-e", "GEMINI_API_KEY=sk-g", "-o", "json"}, "gepa"},
	}
	// The taskset verifiers ships as `wordle` is v1-only: its legacy loader, which GEPA and
	// evals run at the pin, cannot load it, and the CLI says so before anything is queued.
	if out, code := d.cli(t, "gepa", "run", "wordle", "-m", "google/gemini-3-flash-preview", "-e", "GEMINI_API_KEY=sk-g"); code != 1 ||
		!strings.Contains(out, "wordle is a verifiers v1 taskset") {
		t.Errorf("gepa run of a v1-only taskset (%d): %s", code, out)
	}
	for _, c := range cases {
		out, code := d.cli(t, c.args...)
		if code != 0 {
			t.Errorf("%v (%d): %s", c.args, code, out)
			continue
		}
		var j job.Job
		if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
			t.Fatalf("%v: %v\n%s", c.args, err, out)
		}
		if j.Kind != c.kind || j.Config.Kind != c.kind {
			t.Errorf("%v: kind %q", c.args, j.Kind)
		}
		if c.args[1] == "run" && c.kind == "eval" && (j.Config.Evaluation.NumExamples != 100 || j.Config.Evaluation.RolloutsPerExample != 5) {
			t.Errorf("eval run flags: %+v", j.Config.Evaluation)
		}
		if c.args[1] == "run" && c.kind == "gepa" && (j.Config.GEPA.MaxCalls != 1000 || len(j.Config.GEPA.StateColumns) != 2) {
			t.Errorf("gepa run flags: %+v", j.Config.GEPA)
		}
	}
	// Every fixture goes through the command its kind takes; the ones naming secrets.env send
	// its keys, so W&B has its key and there is no warning about it.
	files, _ := filepath.Glob(filepath.Join(fixtures, "*.toml"))
	for _, f := range files {
		cmd := "train"
		switch filepath.Base(f) {
		case "gepa.toml":
			cmd = "gepa"
		case "eval.toml":
			cmd = "eval"
		}
		args := []string{cmd, "submit", f, "-o", "json"}
		if body, _ := os.ReadFile(f); bytes.Contains(body, []byte("\n[wandb]")) && !bytes.Contains(body, []byte("secrets.env")) {
			args = append(args, "-e", "WANDB_API_KEY=wandb-from-flag") // as a user of the docs' example would
		}
		out, code := d.cli(t, args...)
		if code != 0 {
			t.Errorf("%s submit %s (%d): %s", cmd, f, code, out)
			continue
		}
		var j job.Job
		if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
			t.Fatalf("%s: %v\n%s", f, err, out)
		}
		if len(j.Config.EnvFiles) > 0 && (len(j.Config.Secrets) != 4 || strings.Contains(out, "will not log to W&B")) {
			t.Errorf("%s: secrets %v, output %s", f, j.Config.Secrets, out)
		}
	}
	// A GEPA file through `train submit` is refused with the way out.
	out, code := d.cli(t, "train", "submit", filepath.Join(fixtures, "gepa.toml"))
	if code != 1 || !strings.Contains(out, "hostedtrain gepa submit") {
		t.Errorf("gepa file as rl (%d): %s", code, out)
	}
	d.stop(t)
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}
