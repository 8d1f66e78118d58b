package gpuagent_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A CUDA out-of-memory error is the job's (its batch does not fit its GPUs): the attempt is
// read as such from the trainer's log, with the line as evidence, and the job FAILS at once —
// no GPU hours spent on trying the same thing again.
func TestAnOutOfMemoryFailsWithoutARetry(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: 50 * time.Millisecond})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.crash-at-step", "3", "--emulate.fault", "oom")
	j := b.submit(t, smallJob)
	done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal)
	a := done.FailureAnalysis
	if done.Status != job.Failed || done.Attempt != 1 || a == nil {
		t.Fatalf("got %s, attempt %d, analysis %+v; want FAILED at attempt 1 with an analysis", done.Status, done.Attempt, a)
	}
	if a.Class != job.FailCUDAOOM || a.Fault != job.FaultUser || a.Retried || a.Attempt != 1 {
		t.Errorf("analysis %+v; want cuda_oom, the user's fault, not retried, attempt 1", a)
	}
	if ev := strings.Join(a.Evidence, "\n"); !strings.Contains(ev, "trainer.log: ") || !strings.Contains(ev, "CUDA out of memory") {
		t.Errorf("evidence %q does not quote the trainer's line", a.Evidence)
	}
	if types := b.eventTypes(t, j.ID); slices.Contains(types, "job.retrying") {
		t.Errorf("events %v: a user fault was retried", types)
	}
}

// An NCCL error is the platform's: the attempt is retried, on another node — the agent whose
// attempt failed does not get the job back while another can take it — and the job completes
// there, from the checkpoint the failed attempt committed.
func TestAnNCCLErrorIsRetriedOnAnotherNode(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: 50 * time.Millisecond, RetryElsewhereFor: time.Hour})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.crash-at-step", "3", "--emulate.fault", "nccl")
	j := b.submit(t, smallJob)
	queued := b.waitWithin(t, 3*time.Minute, j.ID, "queued again", func(j *job.Job) bool { return j.Status == job.Queued && j.Attempt == 2 })
	a := queued.FailureAnalysis
	if a == nil || a.Class != job.FailNCCLNetwork || a.Fault != job.FaultPlatform || !a.Retried || a.Attempt != 1 {
		t.Fatalf("analysis %+v; want nccl_network, the platform's fault, retried, attempt 1", a)
	}
	evs, err := b.user.Events(context.Background(), j.ID, 0)
	if err != nil {
		t.Fatal(err)
	}
	last := evs[len(evs)-1]
	if last.Type != "job.retrying" || !strings.Contains(last.Detail, "platform fault on agent-a") || !strings.Contains(last.Detail, "on another node") {
		t.Errorf("last event %s %q; want job.retrying naming the fault and the node", last.Type, last.Detail)
	}
	// agent-a waits, and is passed over: the job stays queued until another node comes.
	b.waitWithin(t, 3*time.Minute, j.ID, "its backoff over", func(j *job.Job) bool { return j.Status == job.Queued && j.RetryAt == nil })
	if got, err := b.user.GetJob(context.Background(), j.ID); err != nil || got.Status != job.Queued {
		t.Fatalf("the job went back to the node it failed on: %v %v", got.Status, err)
	}
	b.startAgent(t, "agent-b", "--emulate.step-time", "10ms")
	done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Attempt != 2 || done.Runtime == nil || done.Runtime.AgentID != "agent-b" {
		t.Fatalf("got %s at attempt %d on %+v; want COMPLETED at attempt 2 on agent-b", done.Status, done.Attempt, done.Runtime)
	}
	if done.ResumeStep != 2 {
		t.Errorf("the retry resumed from step %d; the failed attempt committed step 2", done.ResumeStep)
	}
}

// driver stands in for the GPU driver's answers to the agent's health query (nvidia-smi's CSV
// lines), on a file the test writes: as a node's driver, out of any job's reach.
type driver struct{ file string }

func newDriver(t *testing.T, gpus int) *driver {
	d := &driver{file: filepath.Join(t.TempDir(), "driver.csv")}
	d.set(t, gpus, -1)
	return d
}

// set makes the driver list gpus GPUs, with uncorrectable ECC errors on GPU bad (-1: none).
func (d *driver) set(t *testing.T, gpus, bad int) {
	t.Helper()
	var b strings.Builder
	for i := range gpus {
		ecc := 0
		if i == bad {
			ecc = 2
		}
		fmt.Fprintf(&b, "%d, 00000000:%02X:00.0, %d\n", i, 0x3b+i, ecc)
	}
	if err := os.WriteFile(d.file, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

func (d *driver) query() []string { return []string{"cat", d.file} }

// nodeOf is the operator's view of one node ("" state and no faults where it is not listed).
func nodeOf(t *testing.T, admin *client.Client, id string) job.Node {
	t.Helper()
	nodes, err := admin.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range nodes {
		if n.ID == id {
			return n
		}
	}
	return job.Node{ID: id}
}

// A job that prints the driver's Xid lines cannot take a node out of service (red team, issue
// 29: two such jobs, and a node was quarantined, and another organization's job waited for an
// operator). Each time the node checks itself — the driver says its GPUs are well — and the
// reading is left unconfirmed: the job FAILS, not retried, nothing held against the node, and
// the next organization's job runs on it.
func TestATenantPrintingXidLinesLeavesTheNodeInService(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: time.Millisecond})
	admin := client.New(b.stack.URL, b.stack.Token("ops", auth.ScopeAdmin))
	bins := t.TempDir()
	if err := os.Chmod(bins, 0o755); err != nil {
		t.Fatal(err)
	}
	wrapper := filepath.Join(bins, "xid")
	script := "#!/bin/sh\nif [ \"$FAKE_XID\" = 1 ]; then echo 'NVRM: Xid (PCI:0000:3b:00): 79, pid=1234, GPU has fallen off the bus.' >&2; exit 1; fi\nexec " + emulator + " \"$@\"\n"
	if err := os.WriteFile(wrapper, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms")
	primeRL := cfg.Pipeline.PrimeRL
	cfg.Pipeline = emulated(t, wrapper, "--emulate.step-time", "10ms")
	cfg.Pipeline.PrimeRL = primeRL
	cfg.HealthQuery = newDriver(t, 2).query()
	b.run(t, cfg)
	for i := range 3 {
		j := b.submit(t, smallJob+"[secrets]\nFAKE_XID = \"1\"\n")
		done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal)
		a := done.FailureAnalysis
		if done.Status != job.Failed || a == nil || a.Retried || a.Fault == job.FaultPlatform || a.NodeCheck == nil || a.NodeCheck.Failed {
			t.Fatalf("job %d printing an Xid line: %s, analysis %+v; want FAILED, not retried, the node's check passed", i, done.Status, a)
		}
	}
	if n := nodeOf(t, admin, "agent-a"); n.State != "" && n.State != job.NodeOK || n.RecentFaults != 0 {
		t.Fatalf("agent-a after three jobs printing Xid lines: %+v; want in service with no fault", n)
	}
	other := client.New(b.stack.URL, b.stack.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite))
	s, err := other.SubmitJob(context.Background(), []byte(smallJob), "application/toml", "")
	if err != nil {
		t.Fatal(err)
	}
	var done *job.Job
	testwait.Until(t, 3*time.Minute, "another organization's job to end", func() bool {
		done, err = other.GetJob(context.Background(), s.Job.ID)
		return err == nil && done.Status.Terminal()
	})
	if done.Status != job.Completed || done.Runtime == nil || done.Runtime.AgentID != "agent-a" {
		t.Fatalf("another organization's job: %s on %+v; want COMPLETED on agent-a", done.Status, done.Runtime)
	}
}

// A node whose own check fails — its driver reports uncorrectable ECC errors on a GPU — is
// quarantined with the attempt that made it look: it takes no more work (the operator sees the
// driver's words in admin nodes list), the job is retried and finishes on another node. An
// operator's drain hands a running job back from a node without spending an attempt, and the
// job finishes elsewhere.
func TestAFailingNodeIsQuarantinedAndADrainedOneHandsBack(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: time.Millisecond})
	admin := client.New(b.stack.URL, b.stack.Token("ops", auth.ScopeAdmin))
	drv := newDriver(t, 2)
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.crash-at-step", "3", "--emulate.fault", "nccl")
	cfg.HealthQuery = drv.query()
	_, stopA := b.run(t, cfg)
	j := b.submit(t, smallJob)
	b.waitWithin(t, 3*time.Minute, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running || j.Status.Terminal() })
	drv.set(t, 2, 1) // GPU 1 goes bad under the run
	got := b.waitWithin(t, 3*time.Minute, j.ID, "retried or ended", func(j *job.Job) bool { return j.Attempt == 2 || j.Status.Terminal() })
	a := got.FailureAnalysis
	if got.Attempt != 2 || a == nil || !a.Retried || a.NodeCheck == nil || !a.NodeCheck.Failed ||
		!strings.Contains(strings.Join(a.NodeCheck.Evidence, " "), "uncorrectable ECC") {
		t.Fatalf("job %s: %s attempt %d, analysis %+v; want retried on the node's failed check", j.ID, got.Status, got.Attempt, a)
	}
	n := nodeOf(t, admin, "agent-a")
	if n.State != job.NodeQuarantined || !strings.Contains(n.Reason, "uncorrectable ECC") {
		t.Fatalf("agent-a: %+v; want quarantined with the driver's words", n)
	}
	ids := []string{j.ID}
	stopA()
	b.startAgent(t, "agent-b", "--emulate.step-time", "100ms")
	for _, id := range ids {
		done := b.waitWithin(t, 3*time.Minute, id, "ended", terminal)
		if done.Status != job.Completed || done.Runtime == nil || done.Runtime.AgentID != "agent-b" {
			t.Errorf("job %s: %s on %+v; want COMPLETED on agent-b", id, done.Status, done.Runtime)
		}
	}

	// agent-b is drained while it runs a long job: the job goes back to the queue, attempt
	// unspent, and agent-c finishes it.
	long := b.submit(t, withSteps(60))
	b.waitWithin(t, 3*time.Minute, long.ID, "running on agent-b", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 2 })
	if n, err := admin.SetNode(context.Background(), "agent-b", job.NodeDraining, "kernel update"); err != nil || n.State != job.NodeDraining {
		t.Fatalf("drain: %+v %v", n, err)
	}
	back := b.waitWithin(t, 3*time.Minute, long.ID, "handed back", func(j *job.Job) bool { return j.Status == job.Queued })
	if back.Attempt != 1 {
		t.Errorf("a drain spent an attempt: %d", back.Attempt)
	}
	b.startAgent(t, "agent-c", "--emulate.step-time", "10ms")
	done := b.waitWithin(t, 3*time.Minute, long.ID, "ended", terminal)
	if done.Status != job.Completed || done.Runtime == nil || done.Runtime.AgentID != "agent-c" {
		t.Errorf("the drained job: %s on %+v; want COMPLETED on agent-c", done.Status, done.Runtime)
	}
}
