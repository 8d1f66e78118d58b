package gpuagent_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
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

// A node whose runs keep failing for the platform's reasons is quarantined after
// QuarantineAfter of them: it takes no more work (the operator sees it in `admin nodes list`),
// and its jobs finish on another node. An operator's drain hands a running job back from a
// node without spending an attempt, and the job finishes elsewhere.
func TestAFailingNodeIsQuarantinedAndADrainedOneHandsBack(t *testing.T) {
	t.Parallel()
	// A backoff over at once: the second job is queued behind the first's retry, which avoids
	// agent-a, and agent-a passes over it to take the second.
	b := setup(t, queue.Config{RetryBackoff: time.Millisecond, QuarantineAfter: 2, QuarantineBucket: time.Millisecond})
	admin := client.New(b.stack.URL, b.stack.Token("ops", auth.ScopeAdmin))
	stopA := b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.crash-at-step", "3", "--emulate.fault", "nccl")
	var ids []string
	for range 2 {
		j := b.submit(t, smallJob)
		ids = append(ids, j.ID)
		got := b.waitWithin(t, 3*time.Minute, j.ID, "retried or ended", func(j *job.Job) bool { return j.Attempt == 2 || j.Status.Terminal() })
		if got.Attempt != 2 {
			t.Fatalf("job %s ended %s at attempt %d (%q, analysis %+v); want it retried after agent-a's NCCL fault",
				j.ID, got.Status, got.Attempt, got.Error, got.FailureAnalysis)
		}
	}
	nodes, err := admin.Nodes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var a *job.Node
	for i := range nodes {
		if nodes[i].ID == "agent-a" {
			a = &nodes[i]
		}
	}
	if a == nil || a.State != job.NodeQuarantined || a.RecentFaults != 2 {
		t.Fatalf("nodes %+v; want agent-a quarantined after 2 platform faults", nodes)
	}
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
