package gpuagent_test

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
	"github.com/hostedtrain/hostedtrain/queue"
)

// fullStore is object storage that has filled up once full is set: every write is refused.
type fullStore struct {
	blob.Store
	full atomic.Bool
}

func (s *fullStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.full.Load() {
		return errors.New("XMinioStorageFull: storage backend has reached its minimum free drive threshold")
	}
	return s.Store.Put(ctx, key, r)
}

// sandboxed is the agent's sandbox as a node runs it, with what the emulator's config check
// needs (the kit and its Python) shown read-only.
func sandboxed(t testing.TB) *sandbox.Config {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the sandbox tests need root, as the agent does on a node: run make test as root (CI does)")
	}
	var f sandbox.Flags
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse(upstreamtest.SandboxFlags(t)); err != nil {
		t.Fatal(err)
	}
	return f.Config()
}

// When the job's storage fills up while it runs, the attempt fails with the reason after a
// bounded number of tries — it does not sit RUNNING while retries go on forever — and its
// pipeline is stopped. It is the platform's fault (retried on another node while attempts
// last: here there is one).
func TestStorageFullFailsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{MaxAttempts: 1})
	store := &fullStore{Store: b.store}
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.Store, cfg.StorageTries, cfg.Sandbox = store, 3, sandboxed(t)
	b.run(t, cfg)
	j := b.submit(t, withSteps(100000))
	b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 2 })
	store.full.Store(true)
	done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "storage refused its writes") || !strings.Contains(done.Error, "StorageFull") {
		t.Fatalf("got %s %q; want FAILED saying the storage refused the job's writes", done.Status, done.Error)
	}
	if a := done.FailureAnalysis; a == nil || a.Class != job.FailStorage || a.Fault != job.FaultPlatform || a.Retried ||
		!strings.Contains(strings.Join(a.Evidence, " "), "StorageFull") {
		t.Errorf("analysis %+v; want storage, the platform's, on its last attempt", a)
	}
}

// What a hostile tenant did on a node (issue 14), through the whole agent: its job prints its
// environment, lists /proc and reads every process's environment, looks for other jobs'
// folders and the agent's configuration, and calls the API's port — while another
// organization's job with a secret runs beside it. None of it reaches anything; what it
// printed is in its own logs, read back through the API.
func TestAHostileJobReachesNothingButItself(t *testing.T) {
	b := setup(t, queue.Config{})
	agentToken := b.stack.AgentToken("agent-h")
	t.Setenv("HOSTEDTRAIN_AGENT_TOKEN", agentToken) // where a node's agent has it
	api := strings.TrimPrefix(b.stack.URL, "http://")
	host, port, _ := strings.Cut(api, ":")
	cfg := b.agentConfig(t, "agent-h", "--emulate.step-time", "100ms")
	cfg.Devices = gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 4}})
	cfg.Sandbox = sandboxed(t)
	probe := fmt.Sprintf(`if [ "$HOSTILE" = 1 ]; then
echo "== env"; env
echo "== pids $(ls /proc | grep -cE '^[0-9]+$')"
echo "== environs"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
echo "== jobs"; ls %[1]s/jobs 2>&1
echo "== config"; cat /etc/hostedtrain/agent.env 2>&1
echo "== api"; /usr/bin/python3 -c 'import socket; socket.create_connection(("%[2]s", %[3]s), timeout=3); print("API REACHED")' 2>&1 | tail -1
echo "== venv"; echo hijacked >> %[5]s/.venv/lib/shared.py 2>&1; echo hijacked > %[5]s/.venv/evil.py 2>&1
echo "== end"
fi
exec %[4]s "$@"
`, cfg.WorkDir, host, port, emulator, cfg.Pipeline.PrimeRL)
	wrapper := filepath.Join(t.TempDir(), "hostile")
	if err := os.WriteFile(wrapper, []byte("#!/bin/sh\n"+probe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Dir(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	primeRL := cfg.Pipeline.PrimeRL
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "100ms")
	cfg.Pipeline.PrimeRL = primeRL
	// The node's prime-rl Python, which every job imports from.
	shared := filepath.Join(cfg.Pipeline.PrimeRL, ".venv", "lib", "shared.py")
	if err := os.MkdirAll(filepath.Dir(shared), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(shared, []byte("node's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A package the node's Python already has, which the job installs again: in its copy, the
	// file is the node's (a hard link), replaced, never written into.
	installed := filepath.Join(cfg.Pipeline.PrimeRL, ".venv", "hostedtrain-emulated-packages", "alphabet_sort")
	if err := os.MkdirAll(filepath.Dir(installed), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(installed, []byte("node's own\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg.Sandbox.ReadOnly = append(cfg.Sandbox.ReadOnly, emulator)
	b.run(t, cfg)

	twoGPUs := "num_gpus = 2\n" + withSteps(100000)
	victim := b.submit(t, twoGPUs+"[secrets]\nVICTIM_SECRET = \"other-orgs-secret\"\n")
	b.waitFor(t, victim.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 1 })
	hostile := b.submit(t, strings.Replace(twoGPUs, "max_steps = 100000", "max_steps = 2", 1)+"[secrets]\nHOSTILE = \"1\"\n")
	done := b.waitFor(t, hostile.ID, "ended", terminal)
	if done.Status != job.Completed {
		t.Fatalf("the hostile job: %s %s", done.Status, done.Error)
	}
	var out strings.Builder
	testwait.Until(t, 30*time.Second, "the probe's output in the job's logs", func() bool {
		page, err := b.user.JobLogs(context.Background(), hostile.ID, client.LogOptions{Component: "pipeline", Tail: 5000})
		if err != nil {
			t.Fatal(err)
		}
		out.Reset()
		for _, l := range page.Items {
			out.WriteString(l.Line + "\n")
		}
		return strings.Contains(out.String(), "== end")
	})
	logs := out.String()
	for _, leak := range []string{agentToken, "HOSTEDTRAIN_AGENT_TOKEN", "other-orgs-secret", victim.ID, "API REACHED"} {
		if strings.Contains(logs, leak) {
			t.Errorf("the hostile job got %q:\n%s", leak, logs)
		}
	}
	// The job installed its Hub environment and tried to change prime-rl's Python: both
	// stayed in its own copy.
	if b, _ := os.ReadFile(shared); string(b) != "node's own\n" {
		t.Errorf("a job changed the node's prime-rl Python: %q", b)
	}
	if b, _ := os.ReadFile(installed); string(b) != "node's own\n" {
		t.Errorf("a job's install changed the node's copy of a package: %q", b)
	}
	venv, _ := os.ReadDir(filepath.Join(cfg.Pipeline.PrimeRL, ".venv"))
	for _, e := range venv {
		if e.Name() != "lib" && e.Name() != "hostedtrain-emulated-packages" {
			t.Errorf("a job left %s in the node's prime-rl Python", e.Name())
		}
	}
	if !strings.Contains(logs, "HOSTILE=1") {
		t.Errorf("the job's own secret is not in its environment:\n%s", logs)
	}
}

// In the sandbox, a GEPA job reaches its provider and an eval job the operator's own inference
// endpoint, both on the node's loopback (where the job's network has nothing) because the
// operator allowed them: the endpoint's address with its key, the provider's with
// --sandbox-allow. Nothing else of the node is forwarded.
func TestSandboxedJobsReachTheModelsTheOperatorAllows(t *testing.T) {
	b := setup(t, queue.Config{})
	gemini := newFakeProvider(t, jobspectest.Secrets(t)["GEMINI_API_KEY"], "gemini-3-flash-preview", "gemini-3-exp-ultra-preview")
	endpoint := newFakeProvider(t, "operator-endpoint-key", "Qwen/Qwen3-4B-Instruct-2507")
	t.Setenv("ENDPOINT_KEY", "operator-endpoint-key")
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms")
	cfg.Providers = gemini.providers()
	cfg.Endpoint = &render.Endpoint{BaseURL: endpoint.URL + "/v1", KeyVar: "ENDPOINT_KEY"}
	cfg.Sandbox = sandboxed(t)
	cfg.Sandbox.Allow = []string{strings.TrimPrefix(gemini.URL, "http://")}
	b.run(t, cfg)
	g := b.submitKind(t, string(jobspectest.Fixture(t, "gepa.toml")), "gepa")
	e := b.submitKind(t, string(jobspectest.Fixture(t, "eval.toml")), "eval")
	for _, id := range []string{g.ID, e.ID} {
		if done := b.waitFor(t, id, "ended", terminal); done.Status != job.Completed {
			t.Fatalf("%s job: %s (%s)", done.Kind, done.Status, done.Error)
		}
	}
	if gemini.calls.Load() < 4 || endpoint.calls.Load() < 1 {
		t.Errorf("calls: %d to the provider, %d to the endpoint", gemini.calls.Load(), endpoint.calls.Load())
	}
}

// A killed agent leaves nothing running (red team, issue 29: after make chaos six sandboxes
// were left, each pid 1 of its namespace): SIGKILL of the agent process ends every process of
// its jobs — a pipeline that left a process in the background, one that ignores SIGTERM and
// hangs up — and leaves no mount of theirs on the node. What could still outlive it (here a
// process the test puts in the job's control group, as one that got away from the agent would
// be) is ended by the agent's next start on the node, before it claims anything.
func TestAKilledAgentLeavesNothingRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{LeaseTTL: 2 * time.Second, HeartbeatInterval: 200 * time.Millisecond})
	work := t.TempDir()
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	emu := filepath.Join(bins, "prime-rl-emulator")
	if data, err := os.ReadFile(emulator); err != nil || os.WriteFile(emu, data, 0o755) != nil {
		t.Fatalf("copy the emulator: %v", err)
	}
	wrapper := filepath.Join(bins, "lingering")
	script := "#!/bin/sh\nif [ \"$1\" != versions ]; then (setsid sh -c 'trap \"\" TERM HUP; exec sleep 1000' </dev/null >/dev/null 2>&1 &); fi\nexec " + emu + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	node := b.startAgentProcessIn(t, "agent-k", work, "--emulator", wrapper, "--sandbox-ro", bins, "--emulate-flags", "--emulate.step-time 100ms")
	j := b.submit(t, withSteps(100000))
	if got := b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status.Terminal() || j.Progress.Step >= 2 }); got.Status.Terminal() {
		t.Fatalf("the job ended: %s %s", got.Status, got.Error)
	}
	pids, err := sandbox.Running(work)
	if err != nil || len(pids) < 3 {
		t.Fatalf("the job's processes: %v, %v; want its sandbox, pipeline and the process it left behind", pids, err)
	}
	stray := exec.Command("sleep", "1000")
	if err := stray.Start(); err != nil {
		t.Fatal(err)
	}
	strayDone := make(chan struct{})
	go func() { _ = stray.Wait(); close(strayDone) }()
	defer func() { _ = stray.Process.Kill() }()
	joinV2Group(t, pids[0], stray.Process.Pid)

	if err := node.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = node.Wait()
	testwait.Until(t, 30*time.Second, "the job's processes to end with their agent", func() bool {
		left, err := sandbox.Running(work)
		return err == nil && len(left) == 1 && left[0] == stray.Process.Pid
	})
	if mi, _ := os.ReadFile("/proc/self/mountinfo"); strings.Contains(string(mi), work) {
		t.Errorf("a mount of the killed agent's jobs is left on the node:\n%s", mi)
	}
	b.startAgentProcessIn(t, "agent-k", work)
	select {
	case <-strayDone:
	case <-time.After(60 * time.Second):
		t.Fatal("the next agent on the node did not end the process the last one left in its job's group")
	}
	if left, err := sandbox.Running(work); err != nil || len(left) != 0 {
		t.Fatalf("after the next agent started: %v, %v", left, err)
	}
}

// joinV2Group moves pid into the unified-hierarchy control group of other.
func joinV2Group(t *testing.T, other, pid int) {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", other))
	if err != nil {
		t.Fatal(err)
	}
	var path string
	for _, line := range strings.Split(string(data), "\n") {
		if p, ok := strings.CutPrefix(line, "0::"); ok {
			path = p
		}
	}
	mi, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var root string
	for _, line := range strings.Split(string(mi), "\n") {
		if pre, post, ok := strings.Cut(line, " - "); ok && strings.HasPrefix(post, "cgroup2 ") {
			root = strings.Fields(pre)[4]
			break
		}
	}
	if root == "" || !strings.Contains(path, "/hostedtrain/") {
		t.Fatalf("no unified cgroup hierarchy with the job's group (%q in %q)", path, root)
	}
	if err := os.WriteFile(filepath.Join(root, path, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0); err != nil {
		t.Fatal(err)
	}
}

// A job that allocates past its memory dies alone (red team, issue 29: one job could take the
// node's RAM from the jobs beside it): the kernel ends it at its share of the node, its failure
// names the limit as the job's own (not retried, the node not suspected), and another job on
// the same node runs on.
func TestAJobPastItsMemoryDiesAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{MaxAttempts: 3, RetryBackoff: time.Millisecond})
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(bins, "hog")
	script := "#!/bin/sh\nif [ \"$HOG\" = 1 ]; then /usr/bin/python3 -c 'b = b\"x\" * (3 << 30); print(len(b))'; exit 1; fi\nexec " + emulator + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := b.agentConfig(t, "agent-m", "--emulate.step-time", "50ms")
	primeRL := cfg.Pipeline.PrimeRL
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "50ms")
	cfg.Pipeline.PrimeRL = primeRL
	cfg.Sandbox = sandboxed(t)
	cfg.Sandbox.ReadOnly = append(cfg.Sandbox.ReadOnly, emulator)
	cfg.Devices = gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 4}})
	cfg.Sandbox.NodeMemory = 1 << 30 // a 2-GPU job's share of the four: under 512 MiB
	b.run(t, cfg)

	neighbour := b.submit(t, withSteps(100000))
	b.waitFor(t, neighbour.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 1 })
	hog := b.submit(t, withSteps(100)+"[secrets]\nHOG = \"1\"\n")
	done := b.waitFor(t, hog.ID, "ended", terminal)
	a := done.FailureAnalysis
	if done.Status != job.Failed || a == nil || a.Class != job.FailResourceLimit || a.Fault != job.FaultUser || a.Retried ||
		!strings.Contains(a.Summary, "memory: the kernel ended") {
		t.Fatalf("the job past its memory: %s %q, analysis %+v; want FAILED, the job's own resource limit naming memory, not retried", done.Status, done.Error, a)
	}
	before, err := b.user.GetJob(context.Background(), neighbour.ID)
	if err != nil {
		t.Fatal(err)
	}
	after := b.waitFor(t, neighbour.ID, "stepping on", func(j *job.Job) bool { return j.Progress.Step >= before.Progress.Step+5 || j.Status.Terminal() })
	if after.Status != job.Running {
		t.Fatalf("the job beside it: %s %q; want it running on", after.Status, after.Error)
	}
}

// A job holding 20,000 connections to its egress proxy leaves the jobs beside it untouched (red
// team, issue 29: two processes holding 10,500 idle connections each took the agent to its
// open-files limit in 40 s, and another organization's next job on the node FAILED): the proxy
// accepts at most Sandbox.ProxyConns of one job's connections, idle ones included, so the
// agent's descriptors stay its own; the job running beside it steps on, and a job claimed while
// the connections are held starts and runs.
func TestAJobHoldingProxyConnectionsLeavesTheOthersRunning(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	// Two processes of the job, each holding 10,000 connections to the proxy, then the pipeline.
	hold := `import os, socket, sys, time
host, port = os.environ["HTTPS_PROXY"].rsplit("//", 1)[1].split(":")
socks = []
for i in range(10000):
    s = socket.socket()
    s.setblocking(False)
    try:
        s.connect((host, int(port)))
    except BlockingIOError:
        pass
    except OSError as e:
        print("connect", i, e, flush=True)
        break
    socks.append(s)
print("holding", len(socks), flush=True)
time.sleep(3600)
`
	if err := os.WriteFile(filepath.Join(bins, "hold.py"), []byte(hold), 0o644); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(bins, "hold")
	script := "#!/bin/sh\nif [ \"$HOLD\" = 1 ]; then for i in 1 2; do /usr/bin/python3 " + filepath.Join(bins, "hold.py") + " & done; fi\nexec " + emulator + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := b.agentConfig(t, "agent-p", "--emulate.step-time", "50ms")
	primeRL := cfg.Pipeline.PrimeRL
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "50ms")
	cfg.Pipeline.PrimeRL = primeRL
	cfg.Devices = gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 6}})
	cfg.Sandbox = sandboxed(t)
	cfg.Sandbox.ReadOnly = append(cfg.Sandbox.ReadOnly, emulator, bins)
	b.run(t, cfg)

	fds := func() int {
		entries, _ := os.ReadDir("/proc/self/fd")
		return len(entries)
	}
	neighbour := b.submit(t, withSteps(100000))
	b.waitFor(t, neighbour.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 1 })
	before := fds()
	hostile := b.submit(t, withSteps(100000)+"[secrets]\nHOLD = \"1\"\n")
	testwait.Until(t, 2*time.Minute, "the hostile job to hold its connections", func() bool {
		page, err := b.user.JobLogs(context.Background(), hostile.ID, client.LogOptions{Component: "pipeline", Tail: 100})
		if err != nil {
			return false
		}
		n := 0
		for _, l := range page.Items {
			if strings.Contains(l.Line, "holding") {
				n++
			}
		}
		return n == 2
	})
	if got, most := fds(), before+2*cfg.Sandbox.ProxyConns+256; got > most {
		t.Errorf("the agent holds %d descriptors (%d before the hostile job): more than its proxy's bound allows (%d)", got, before, most)
	}
	next := b.submit(t, withSteps(20))
	if done := b.waitFor(t, next.ID, "ended", terminal); done.Status != job.Completed {
		t.Fatalf("a job claimed while the connections were held: %s %q", done.Status, done.Error)
	}
	was, err := b.user.GetJob(context.Background(), neighbour.ID)
	if err != nil {
		t.Fatal(err)
	}
	now := b.waitFor(t, neighbour.ID, "stepping on", func(j *job.Job) bool { return j.Progress.Step >= was.Progress.Step+5 || j.Status.Terminal() })
	if now.Status != job.Running {
		t.Fatalf("the job beside it: %s %q", now.Status, now.Error)
	}
}

// A job that writes more than its disk fails alone (red team, issue 29: a job could fill the
// node's work disk): its folder is a file system of its own, its share of the work disk (64 MiB
// here); past it its writes fail, its failure names the disk as its own limit, and what it
// wrote takes no more of the node's disk than that.
func TestAJobPastItsDiskFailsAlone(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{MaxAttempts: 3})
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(bins, "filler")
	script := "#!/bin/sh\nif [ \"$FILL\" = 1 ]; then dd if=/dev/zero of=\"$HOME/big\" bs=1M count=200 2>&1; exit 1; fi\nexec " + emulator + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := b.agentConfig(t, "agent-d", "--emulate.step-time", "50ms")
	primeRL := cfg.Pipeline.PrimeRL
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "50ms")
	cfg.Pipeline.PrimeRL = primeRL
	cfg.Sandbox = sandboxed(t)
	cfg.Sandbox.ReadOnly = append(cfg.Sandbox.ReadOnly, emulator)
	cfg.Sandbox.DiskQuota = 64 << 20
	b.run(t, cfg)
	j := b.submit(t, withSteps(100)+"[secrets]\nFILL = \"1\"\n")
	done := b.waitFor(t, j.ID, "ended", terminal)
	a := done.FailureAnalysis
	if done.Status != job.Failed || a == nil || a.Class != job.FailResourceLimit || a.Retried || !strings.Contains(a.Summary, "disk: its file system") {
		t.Fatalf("the job past its disk: %s %q, analysis %+v; want FAILED, its own resource limit naming its disk", done.Status, done.Error, a)
	}
	images, _ := filepath.Glob(filepath.Join(cfg.WorkDir, "disks", "*.img"))
	for _, img := range images {
		var st syscall.Stat_t
		if err := syscall.Stat(img, &st); err == nil && st.Blocks*512 > 80<<20 {
			t.Errorf("%s takes %d MiB of the node's disk", img, st.Blocks*512>>20)
		}
	}
}

// A process the agent cannot start for a job is the node's failure, not the job's (red team,
// issue 29: "start pipeline: … too many open files" FAILED another organization's job, class
// unknown): node_error, retried on another node, where the job completes.
func TestAJobTheNodeCannotStartRunsElsewhere(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: time.Millisecond, RetryElsewhereFor: time.Hour})
	broken := b.agentConfig(t, "agent-x", "--emulate.step-time", "10ms")
	broken.Pipeline.RL[0] = filepath.Join(t.TempDir(), "missing", "prime-rl-emulator") // as a node whose install broke
	b.run(t, broken)
	j := b.submit(t, smallJob)
	queued := b.waitFor(t, j.ID, "retried or ended", func(j *job.Job) bool { return j.Attempt == 2 || j.Status.Terminal() })
	a := queued.FailureAnalysis
	if queued.Attempt != 2 || a == nil || a.Class != job.FailNodeError || a.Fault != job.FaultPlatform || !a.Retried {
		t.Fatalf("the job the node could not start: %s attempt %d, analysis %+v; want node_error, retried", queued.Status, queued.Attempt, a)
	}
	b.startAgent(t, "agent-y", "--emulate.step-time", "10ms")
	if done := b.waitFor(t, j.ID, "ended", terminal); done.Status != job.Completed || done.Runtime.AgentID != "agent-y" {
		t.Fatalf("after the retry: %s on %+v; want COMPLETED on agent-y", done.Status, done.Runtime)
	}
}
