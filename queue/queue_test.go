package queue

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

func TestSubmitStoresQueuesAndRecords(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "first")
		if j.Status != job.Queued || j.Org != "acme" || j.Attempt != 1 || j.MaxAttempts != 2 {
			t.Fatalf("got %+v", j)
		}
		got := b.status(t, j.ID)
		if got.Config.Name != "first" || got.Config.Env[0].ID != "primeintellect/alphabet-sort" || !got.CreatedAt.Equal(b.clock.Now()) {
			t.Errorf("stored job %+v", got)
		}
		if ev := b.eventTypes(t, j.ID); !equal(ev, []string{job.EventQueued}) {
			t.Errorf("events %v", ev)
		}
		// acme has no webhook endpoint: nothing to deliver, so nothing in the outbox.
		if n, _ := b.rdb.XLen(b.ctx, b.q.keys.outbox()).Result(); n != 0 {
			t.Errorf("outbox length %d for an organization without webhooks, want 0", n)
		}
		if err := b.q.SetHooked(b.ctx, "hooked", true); err != nil {
			t.Fatal(err)
		}
		h := b.submit(t, "hooked", "second")
		entries, err := b.rdb.XRange(b.ctx, b.q.keys.outbox(), "-", "+").Result()
		if err != nil || len(entries) != 1 || entries[0].Values["job_id"] != h.ID || entries[0].Values["seq"] != "1" ||
			entries[0].Values["type"] != job.EventQueued {
			t.Errorf("outbox %+v (%v), want job.queued of %s", entries, err, h.ID)
		}
		st, err := b.q.GetOrg(b.ctx, "acme")
		if err != nil || st.Queued != 1 || st.Running != 0 {
			t.Errorf("org status %+v (%v)", st, err)
		}
	})
}

func TestClaimFencesAndRecordsTheAgent(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "a")
		cl := b.claim(t)
		if cl.Job.ID != j.ID || cl.Job.Status != job.Pending || cl.Lease.Fence != 1 || cl.Lease.Token == "" {
			t.Errorf("claim %+v lease %+v", cl.Job, cl.Lease)
		}
		if cl.Job.Runtime == nil || cl.Job.Runtime.AgentID != "agent-1" {
			t.Errorf("runtime %+v, want agent-1", cl.Job.Runtime)
		}
		if again := b.claimFor(t, "agent-2", h100x8); again != nil {
			t.Fatalf("a claimed job was claimed again: %+v", again.Job)
		}
		st, _ := b.q.GetOrg(b.ctx, "acme")
		if st.Queued != 0 || st.Running != 1 {
			t.Errorf("org status %+v", st)
		}
	})
}

func TestHeartbeatStartsRenewsChargesAndRecordsCheckpoints(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submitSpec(t, "acme", jobSpec("a", 2))
		cl := b.claim(t)
		if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		if s := b.status(t, j.ID).Status; s != job.Pending {
			t.Fatalf("status %s, want PENDING while preparing", s)
		}
		b.clock.Advance(2 * time.Minute)
		prog := &job.Progress{Step: 5, MaxSteps: 10, Metrics: map[string]float64{"reward/all/mean": 0.5}}
		rep, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{
			Token: cl.Lease.Token, Running: true, Progress: prog,
			Runtime: &job.Runtime{Pipeline: "prime-rl", Emulated: true}, Checkpoints: []int{2, 4},
		})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Action != job.Continue || !rep.LeaseExpiresAt.Equal(b.clock.Now().Add(30*time.Second)) {
			t.Errorf("reply %+v", rep)
		}
		got := b.status(t, j.ID)
		if got.Status != job.Running || got.StartedAt == nil || got.Progress.Step != 5 || !got.Runtime.Emulated {
			t.Errorf("after heartbeat: %+v", got)
		}
		// Two GPUs for two minutes: the 60 s claimed up front plus the 60 s after it.
		st, _ := b.q.GetOrg(b.ctx, "acme")
		if d := st.UsageGPUHours*3600 - 240; d > 1 || d < -1 {
			t.Errorf("usage %.1f GPU-seconds, want 240", st.UsageGPUHours*3600)
		}
		if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true, Checkpoints: []int{4}}); err != nil {
			t.Fatal(err)
		}
		want := []string{job.EventQueued, job.EventPending, job.EventStarted, job.EventCheckpoint, job.EventCheckpoint}
		if ev := b.eventTypes(t, j.ID); !equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
		if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: "1.forged"}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("forged token: got %v, want ErrLeaseLost", err)
		}
	})
}

func TestCompleteAndFailEndTheJobAndRefund(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		a := b.submitSpec(t, "acme", jobSpec("a", 1))
		f := b.submitSpec(t, "acme", jobSpec("f", 1))
		ca, cf := b.claim(t), b.claim(t)
		b.clock.Advance(10 * time.Second)

		st, err := b.q.Complete(b.ctx, a.ID, job.Outcome{Token: ca.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}, Checkpoints: []int{10}})
		if err != nil || st != job.Completed {
			t.Fatalf("complete: %s %v", st, err)
		}
		done := b.status(t, a.ID)
		if done.Status != job.Completed || done.FinishedAt == nil || done.Progress.Step != 10 {
			t.Errorf("completed job: %+v", done)
		}
		if _, err := b.q.Complete(b.ctx, a.ID, job.Outcome{Token: ca.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("second completion: got %v, want ErrLeaseLost", err)
		}
		if _, err := b.q.Heartbeat(b.ctx, a.ID, job.Heartbeat{Token: ca.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("heartbeat after completion: got %v, want ErrLeaseLost", err)
		}
		if st, err := b.q.Fail(b.ctx, f.ID, job.Outcome{Token: cf.Lease.Token, Reason: "trainer exited with status 1"}); err != nil || st != job.Failed {
			t.Fatalf("fail: %s %v", st, err)
		}
		if failed := b.status(t, f.ID); failed.Error != "trainer exited with status 1" {
			t.Errorf("failed job: %+v", failed)
		}
		// Each ran 10 s of the 60 s charged at claim: the rest is refunded.
		org, _ := b.q.GetOrg(b.ctx, "acme")
		if org.Running != 0 || org.RunningGPUs != 0 || org.UsageGPUHours*3600 > 20.5 || org.UsageGPUHours*3600 < 19.5 {
			t.Errorf("org after both ended: %+v (usage %.1f s)", org, org.UsageGPUHours*3600)
		}
		want := []string{job.EventQueued, job.EventPending, job.EventCheckpoint, job.EventCompleted}
		if ev := b.eventTypes(t, a.ID); !equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
	})
}

func TestCancel(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		queued := b.submit(t, "acme", "q")
		stopped, err := b.q.Cancel(b.ctx, queued.ID)
		if err != nil || stopped.Status != job.Stopped {
			t.Fatalf("cancel queued: %v, %v", stopped, err)
		}
		if cl := b.claimFor(t, "a", h100x8); cl != nil {
			t.Fatalf("a stopped job was claimed: %v", cl.Job)
		}
		if again, err := b.q.Cancel(b.ctx, queued.ID); err != nil || again.Status != job.Stopped {
			t.Errorf("cancel twice: %v, %v; want STOPPED again", again, err)
		}

		confirmed := b.submit(t, "acme", "r")
		cl := b.claim(t)
		j, err := b.q.Cancel(b.ctx, confirmed.ID)
		if err != nil || j.Status != job.Pending || !j.StopRequested {
			t.Fatalf("cancel held job: %+v, %v", j, err)
		}
		rep, err := b.q.Heartbeat(b.ctx, confirmed.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true})
		if err != nil || rep.Action != job.Stop {
			t.Fatalf("heartbeat after stop: %+v, %v; want stop", rep, err)
		}
		if st, err := b.q.Fail(b.ctx, confirmed.ID, job.Outcome{Token: cl.Lease.Token, Reason: "terminated"}); err != nil || st != job.Stopped {
			t.Fatalf("confirmed stop: %s, %v; want STOPPED", st, err)
		}
		if got := b.status(t, confirmed.ID); got.Error != "" {
			t.Errorf("a stopped job shows an error: %q", got.Error)
		}

		// An agent that keeps heartbeating but never stops: STOPPED when the grace ends, and
		// its lease is no longer good.
		stubborn := b.submit(t, "acme", "s")
		cs := b.claim(t)
		if _, err := b.q.Cancel(b.ctx, stubborn.ID); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(20 * time.Second)
		b.running(t, stubborn.ID, cs)
		b.clock.Advance(45 * time.Second)
		b.running(t, stubborn.ID, cs)
		b.reap(t)
		if got := b.status(t, stubborn.ID); got.Status != job.Stopped {
			t.Errorf("after the grace: %s, want STOPPED", got.Status)
		}
		if _, err := b.q.Heartbeat(b.ctx, stubborn.ID, job.Heartbeat{Token: cs.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("heartbeat after the grace: %v, want ErrLeaseLost", err)
		}

		done := b.submit(t, "acme", "d")
		cd := b.claim(t)
		if _, err := b.q.Complete(b.ctx, done.ID, job.Outcome{Token: cd.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Cancel(b.ctx, done.ID); !errors.Is(err, job.ErrConflict) {
			t.Errorf("cancel completed: got %v, want ErrConflict", err)
		}
		if _, err := b.q.Cancel(b.ctx, "no-such-job"); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("cancel unknown: got %v, want ErrNotFound", err)
		}
		org, _ := b.q.GetOrg(b.ctx, "acme")
		if org.Queued != 0 || org.Running != 0 {
			t.Errorf("org counters after everything ended: %+v", org)
		}
	})
}

func TestALapsedLeaseRetriesAfterABackoffThenFails(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "a")
		first := b.claim(t)
		b.running(t, j.ID, first)
		if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: first.Lease.Token, Running: true, Checkpoints: []int{4}}); err != nil {
			t.Fatal(err)
		}
		if n := b.reap(t); n != 0 {
			t.Fatalf("reaped %d before the lease lapsed", n)
		}
		b.clock.Advance(31 * time.Second)
		if n := b.reap(t); n != 1 {
			t.Fatalf("reaped %d, want 1", n)
		}
		got := b.status(t, j.ID)
		if got.Status != job.Queued || got.Attempt != 2 || got.ResumeStep != 4 || got.RetryAt == nil {
			t.Fatalf("after reap: %+v", got)
		}
		backoff := got.RetryAt.Sub(b.clock.Now())
		if backoff < 8*time.Second || backoff > 12*time.Second {
			t.Errorf("backoff %v, want 10 s ± 20%%", backoff)
		}
		if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: first.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("completion under the lapsed lease: got %v, want ErrLeaseLost", err)
		}
		if cl := b.claimFor(t, "agent-2", h100x8); cl != nil {
			t.Fatal("claimed during the backoff")
		}
		pos, queued, err := b.q.Position(b.ctx, j.ID)
		if err != nil || !queued || !strings.Contains(pos.Reason, "retrying after a lost lease") {
			t.Errorf("position during backoff: %+v %v %v", pos, queued, err)
		}
		if a := got.FailureAnalysis; a == nil || a.Class != job.FailNodeLost || a.Fault != job.FaultPlatform || !a.Retried ||
			a.Attempt != 1 || len(a.Evidence) != 1 || !strings.Contains(a.Evidence[0], "agent-1") {
			t.Errorf("analysis %+v; want node_lost, the platform's, retried, naming agent-1", a)
		}
		b.clock.Advance(backoff)
		// The node that went silent is passed over while another can take the job.
		if cl := b.claimFor(t, "agent-1", h100x8); cl != nil {
			t.Fatal("the job went back to the agent that lost it")
		}
		second := b.claimFor(t, "agent-2", h100x8)
		if second == nil || second.Lease.Fence <= first.Lease.Fence || second.Job.ResumeStep != 4 {
			t.Fatalf("second claim %+v after fence %d", second, first.Lease.Fence)
		}
		b.clock.Advance(31 * time.Second)
		b.reap(t)
		got = b.status(t, j.ID)
		if got.Status != job.Failed || !strings.Contains(got.Error, "lease lost 2 times") {
			t.Fatalf("after the last attempt: %s %q", got.Status, got.Error)
		}
		if a := got.FailureAnalysis; a == nil || a.Class != job.FailNodeLost || a.Retried || a.Attempt != 2 {
			t.Errorf("analysis %+v; want node_lost of attempt 2, not retried", a)
		}
		want := []string{job.EventQueued, job.EventPending, job.EventStarted, job.EventCheckpoint, job.EventRetrying, job.EventPending, job.EventFailed}
		if ev := b.eventTypes(t, j.ID); !equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}
	})
}

func TestRestart(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		// A failed job is queued again at once, from its newest checkpoint, attempts reset.
		f := b.submit(t, "acme", "f")
		cf := b.claim(t)
		if _, err := b.q.Heartbeat(b.ctx, f.ID, job.Heartbeat{Token: cf.Lease.Token, Running: true, Checkpoints: []int{5}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Fail(b.ctx, f.ID, job.Outcome{Token: cf.Lease.Token, Reason: "OOM"}); err != nil {
			t.Fatal(err)
		}
		r, err := b.q.Restart(b.ctx, f.ID)
		if err != nil || r.Status != job.Queued || r.ResumeStep != 5 || r.Error != "" || r.Attempt != 1 {
			t.Fatalf("restart of a failed job: %+v %v", r, err)
		}
		again := b.claim(t)
		if again.Job.ID != f.ID || again.Lease.Fence != 2 {
			t.Errorf("claim after restart: %s fence %d", again.Job.ID, again.Lease.Fence)
		}

		// A running job stops first, then is queued again when the agent confirms.
		run := b.submit(t, "acme", "r")
		cr := b.claim(t)
		b.running(t, run.ID, cr)
		if j, err := b.q.Restart(b.ctx, run.ID); err != nil || j.Status != job.Running || !j.StopRequested {
			t.Fatalf("restart of a running job: %+v %v", j, err)
		}
		if cl := b.claimFor(t, "agent-2", h100x8); cl != nil && cl.Job.ID == run.ID {
			t.Fatal("the job was claimed again while its first run still held it")
		}
		if st, err := b.q.Fail(b.ctx, run.ID, job.Outcome{Token: cr.Lease.Token, Reason: "terminated"}); err != nil || st != job.Queued {
			t.Fatalf("the stop of a restart: %s %v, want QUEUED", st, err)
		}
		if rerun := b.claim(t); rerun.Job.ID != run.ID || rerun.Lease.Fence != 2 {
			t.Fatalf("the restarted run: claimed %s fence %d", rerun.Job.ID, rerun.Lease.Fence)
		}

		// ...or when its grace ends without the agent confirming.
		stuck := b.submit(t, "acme", "s")
		cs := b.claim(t)
		if cs.Job.ID != stuck.ID {
			t.Fatalf("claimed %s, want %s", cs.Job.ID, stuck.ID)
		}
		b.running(t, stuck.ID, cs)
		if _, err := b.q.Restart(b.ctx, stuck.ID); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(25 * time.Second)
		b.running(t, stuck.ID, cs)
		b.clock.Advance(40 * time.Second)
		b.running(t, stuck.ID, cs)
		b.reap(t)
		if got := b.status(t, stuck.ID); got.Status != job.Queued {
			t.Errorf("restart after the grace: %s, want QUEUED", got.Status)
		}

		queued := b.submit(t, "acme", "q")
		if _, err := b.q.Restart(b.ctx, queued.ID); !errors.Is(err, job.ErrConflict) {
			t.Errorf("restart of a queued job: %v, want ErrConflict", err)
		}
	})
}

func TestReleaseRequeuesWithoutSpendingAnAttempt(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "a")
		cl := b.claim(t)
		st, err := b.q.Release(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "node preempted", Checkpoints: []int{8}})
		if err != nil || st != job.Queued {
			t.Fatalf("release: %s %v", st, err)
		}
		got := b.status(t, j.ID)
		if got.Attempt != 1 || got.ResumeStep != 8 || got.RetryAt != nil {
			t.Errorf("released job %+v", got)
		}
		next := b.claimFor(t, "agent-2", h100x8)
		if next == nil || next.Job.ID != j.ID {
			t.Fatal("a released job should be claimable at once")
		}
		if _, err := b.q.Release(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "x"}); !errors.Is(err, job.ErrLeaseLost) {
			t.Errorf("release with the old token: %v", err)
		}
	})
}

func TestATimeLimitStopsThenFailsTheJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		spec := jobSpec("a", 0)
		spec.TimeLimit = "1h"
		j := b.submitSpec(t, "acme", spec)
		cl := b.claim(t)
		b.running(t, j.ID, cl)
		b.clock.Advance(59 * time.Minute)
		b.running(t, j.ID, cl)
		b.reap(t)
		if got := b.status(t, j.ID); got.StopRequested {
			t.Fatal("stopped before its time limit")
		}
		b.clock.Advance(2 * time.Minute)
		b.reap(t)
		rep, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true})
		if err != nil || rep.Action != job.Stop {
			t.Fatalf("heartbeat after the time limit: %+v %v", rep, err)
		}
		if st, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "terminated"}); err != nil || st != job.Failed {
			t.Fatalf("end at the time limit: %s %v, want FAILED", st, err)
		}
		got := b.status(t, j.ID)
		if !strings.Contains(got.Error, "time limit") {
			t.Errorf("error %q", got.Error)
		}
		// The agent reports a stop; the service reads the failure itself.
		if a := got.FailureAnalysis; a == nil || a.Class != job.FailTimeLimit || a.Fault != job.FaultUser || a.Retried {
			t.Errorf("analysis %+v; want time_limit, the user's, not retried", a)
		}
	}, func(c *Config) { c.LeaseTTL = 2 * time.Hour })
}

func TestListNewestFirstWithCursor(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		var ids []string
		for i := range 5 {
			ids = append(ids, b.submit(t, "acme", fmt.Sprint(i)).ID)
			b.clock.Advance(time.Millisecond)
		}
		b.submit(t, "other", "not mine")
		var seen []string
		cursor := ""
		for page := 0; ; page++ {
			jobs, next, err := b.q.List(b.ctx, "acme", job.ListFilter{}, cursor, 2)
			if err != nil {
				t.Fatal(err)
			}
			for _, j := range jobs {
				seen = append(seen, j.ID)
			}
			if next == "" {
				break
			}
			if page > 5 {
				t.Fatal("pagination does not end")
			}
			cursor = next
		}
		if want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}; !equal(seen, want) {
			t.Errorf("listed %v, want %v", seen, want)
		}
	})
}

// subscribers counts the subscribers of a channel across every node (PUBSUB NUMSUB is local
// to a node on a cluster).
func subscribers(b bundle, channel string) int64 {
	var mu sync.Mutex
	total := int64(0)
	count := func(ctx context.Context, c *redis.Client) error {
		n, err := c.PubSubNumSub(ctx, channel).Result()
		mu.Lock()
		total += n[channel]
		mu.Unlock()
		return err
	}
	if cc, ok := b.rdb.(*redis.ClusterClient); ok {
		_ = cc.ForEachShard(b.ctx, count)
		return total
	}
	_ = count(b.ctx, b.rdb.(*redis.Client))
	return total
}

func TestAWaitingClaimWakesOnSubmit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		got := make(chan *job.Claim, 1)
		errc := make(chan error, 1)
		go func() {
			cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "idle", GPUs: h100x8, Wait: time.Minute})
			got <- cl
			errc <- err
		}()
		testwait.Until(t, 10*time.Second, "the claim to wait", func() bool {
			return subscribers(b, b.q.wakeup.channel) > 0 && b.rdb.ZCard(b.ctx, b.q.keys.of("waitkey", "H100")).Val() > 0
		})
		j := b.submit(t, "acme", "wake")
		cl := <-got
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
		if cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("waiting claim got %v, want %s", cl, j.ID)
		}
	})
}

func TestIdempotentSubmit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		sub := job.Submission{Org: "acme", Spec: jobSpec("a", 0)}
		first, replayed, err := b.q.Submit(b.ctx, sub, "key-1", "fp-1")
		if err != nil || replayed {
			t.Fatal(err)
		}
		again, replayed, err := b.q.Submit(b.ctx, sub, "key-1", "fp-1")
		if err != nil || !replayed || again.ID != first.ID {
			t.Fatalf("replay: %v %v %v", again, replayed, err)
		}
		var conflict *job.IdempotencyConflictError
		if _, _, err := b.q.Submit(b.ctx, sub, "key-1", "fp-2"); !errors.As(err, &conflict) || conflict.JobID != first.ID {
			t.Fatalf("another body under the same key: %v", err)
		}
		// The same key in another organization is another key.
		other, replayed, err := b.q.Submit(b.ctx, job.Submission{Org: "globex", Spec: jobSpec("a", 0)}, "key-1", "fp-2")
		if err != nil || replayed || other.ID == first.ID {
			t.Fatalf("other org: %v %v %v", other, replayed, err)
		}
		org, _ := b.q.GetOrg(b.ctx, "acme")
		if org.Queued != 1 {
			t.Errorf("queued %d after a replay, want 1", org.Queued)
		}
		// Keys last 24 hours (Redis expires them in its own time; here it is the TTL we check).
		ttl, err := b.rdb.PTTL(b.ctx, b.q.keys.prefix+"idem:4:acme:key-1").Result()
		if err != nil || ttl < 23*time.Hour || ttl > 24*time.Hour {
			t.Errorf("key TTL %v (%v), want 24 h", ttl, err)
		}
	})
}

func TestHeartbeatsKeepALeaseAcrossManyPeriods(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "long")
		cl := b.claim(t)
		// Heartbeats renew the lease in the job only; the reaper finds the index entry due,
		// sees the renewal, and files it again. For ten lease periods, nothing is reaped.
		for range 40 {
			b.clock.Advance(10 * time.Second)
			b.running(t, j.ID, cl)
			if n := b.reap(t); n != 0 {
				t.Fatalf("reaped %d job(s) that heartbeat on time", n)
			}
		}
		if got := b.status(t, j.ID); got.Status != job.Running || got.Attempt != 1 {
			t.Fatalf("after 400 s of heartbeats: %s attempt %d", got.Status, got.Attempt)
		}
		score, err := b.rdb.ZScore(b.ctx, b.q.keys.leases(), j.ID).Result()
		if err != nil || int64(score) <= b.clock.Now().UnixMilli() {
			t.Errorf("the lease index entry %v (%v) is not in the future", score, err)
		}
		// Heartbeats stop: the lease lapses one TTL after the last.
		b.clock.Advance(31 * time.Second)
		if n := b.reap(t); n != 1 {
			t.Fatalf("reaped %d after heartbeats stopped, want 1", n)
		}
		if got := b.status(t, j.ID); got.Status != job.Queued || got.Attempt != 2 {
			t.Errorf("after the lapse: %s attempt %d", got.Status, got.Attempt)
		}
	})
}

// idAt is a UUIDv7 job id of time t.
func idAt(t time.Time, n int) string {
	m := uint64(t.UnixMilli())
	return fmt.Sprintf("%08x-%04x-7000-8000-%012x", m>>16, m&0xffff, n)
}

// Listing filters by status, kind and creation time, and pages through a filter that matches
// few of many jobs.
func TestListFilters(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		base := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
		var ids []string
		for i := range 30 {
			spec := jobSpec(fmt.Sprint(i), 0)
			if i%3 == 0 {
				spec.Kind = "eval"
			}
			j, _, err := b.q.Submit(b.ctx, job.Submission{ID: idAt(base.Add(time.Duration(i)*time.Minute), i), Org: "acme", Spec: spec}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
			if i%5 == 0 {
				if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
					t.Fatal(err)
				}
			}
		}
		list := func(f job.ListFilter, limit int) []string {
			var out []string
			cursor := ""
			for range 100 {
				jobs, next, err := b.q.List(b.ctx, "acme", f, cursor, limit)
				if err != nil {
					t.Fatal(err)
				}
				for _, j := range jobs {
					out = append(out, j.ID)
				}
				if next == "" {
					return out
				}
				cursor = next
			}
			t.Fatal("pagination does not end")
			return nil
		}
		want := func(keep func(i int) bool) []string {
			var out []string
			for i := len(ids) - 1; i >= 0; i-- {
				if keep(i) {
					out = append(out, ids[i])
				}
			}
			return out
		}
		if got, w := list(job.ListFilter{Statuses: []job.Status{job.Stopped}}, 2), want(func(i int) bool { return i%5 == 0 }); !equal(got, w) {
			t.Errorf("stopped: %v, want %v", got, w)
		}
		if got, w := list(job.ListFilter{Kind: "eval", Statuses: []job.Status{job.Queued}}, 3), want(func(i int) bool { return i%3 == 0 && i%5 != 0 }); !equal(got, w) {
			t.Errorf("queued evals: %v, want %v", got, w)
		}
		f := job.ListFilter{CreatedAfter: base.Add(10 * time.Minute), CreatedBefore: base.Add(20 * time.Minute)}
		if got, w := list(f, 4), want(func(i int) bool { return i >= 10 && i < 20 }); !equal(got, w) {
			t.Errorf("created in [10m, 20m): %v, want %v", got, w)
		}
		// Two statuses of one kind within a time bound, a page at a time: ranges of the index
		// merged newest first.
		f = job.ListFilter{Kind: "rl", Statuses: []job.Status{job.Queued, job.Stopped}, CreatedBefore: base.Add(25 * time.Minute)}
		if got, w := list(f, 1), want(func(i int) bool { return i%3 != 0 && i < 25 }); !equal(got, w) {
			t.Errorf("rl jobs queued or stopped before 25m: %v, want %v", got, w)
		}
		if got := list(job.ListFilter{Kind: "gepa"}, 10); len(got) != 0 {
			t.Errorf("gepa jobs: %v", got)
		}
		// Jobs created in the same millisecond page by id.
		same := base.Add(time.Hour)
		var sameIDs []string
		for i := range 5 {
			j, _, err := b.q.Submit(b.ctx, job.Submission{ID: idAt(same, 100+i), Org: "acme", Spec: jobSpec("same", 0)}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			sameIDs = append([]string{j.ID}, sameIDs...)
		}
		f = job.ListFilter{Statuses: []job.Status{job.Queued}, CreatedAfter: same}
		if got := list(f, 2); !equal(got, sameIDs) {
			t.Errorf("jobs of one millisecond: %v, want %v", got, sameIDs)
		}
	})
}

// A filter reads the jobs that pass it, not the ones that do not: a status no job has reads
// nothing, however many jobs the organization has.
func TestListWithAFilterReadsOnlyWhatPasses(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		for i := range 3000 {
			if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec(fmt.Sprint(i), 0)}, "", ""); err != nil {
				t.Fatal(err)
			}
		}
		// A client of its own, so that only this test's commands are counted.
		own := privateClient(b)
		defer own.Close()
		counted := &commandCounter{}
		own.AddHook(counted)
		q := New(own, b.cfg)
		defer q.Close()
		jobs, next, err := q.List(b.ctx, "acme", job.ListFilter{Statuses: []job.Status{job.Failed}}, "", 50)
		if err != nil || len(jobs) != 0 || next != "" {
			t.Fatalf("failed jobs: %d, next %q, %v", len(jobs), next, err)
		}
		if read := counted.count("hgetall"); read != 0 {
			t.Errorf("listing a status no job has read %d jobs", read)
		}
	}, func(c *Config) { c.MaxQueued = 5000 })
}

// commandCounter counts the commands a client sends (a go-redis hook); total leaves out a
// connection's greeting.
type commandCounter struct {
	mu sync.Mutex
	by map[string]int
}

func (c *commandCounter) note(cmds ...redis.Cmder) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.by == nil {
		c.by = map[string]int{}
	}
	for _, cmd := range cmds {
		c.by[cmd.Name()]++
	}
}

func (c *commandCounter) total() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for name, k := range c.by {
		if name != "hello" && name != "client" { // a new connection's greeting
			n += k
		}
	}
	return n
}

func (c *commandCounter) count(name string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.by[name]
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.note(cmd)
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.note(cmds...)
		return next(ctx, cmds)
	}
}

// GPU time is counted per job and per organization: GPUs × time held, while it runs and after.
func TestGPUSecondsAreCounted(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submitSpec(t, "acme", jobSpec("two", 2))
		cl := b.claim(t)
		b.clock.Advance(30 * time.Minute)
		if got := b.status(t, j.ID).GPUSeconds; got != 3600 {
			t.Errorf("half an hour on 2 GPUs: %v GPU-seconds, want 3600", got)
		}
		if st, _ := b.q.GetOrg(b.ctx, "acme"); st.GPUSeconds != 3600 {
			t.Errorf("org while running: %v", st.GPUSeconds)
		}
		b.clock.Advance(30 * time.Minute)
		if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Hour) // nothing runs: nothing more is counted
		if got := b.status(t, j.ID).GPUSeconds; got != 7200 {
			t.Errorf("after an hour on 2 GPUs: %v GPU-seconds, want 7200", got)
		}
		b.submitSpec(t, "acme", jobSpec("one", 1))
		b.claim(t)
		b.clock.Advance(time.Hour)
		if st, _ := b.q.GetOrg(b.ctx, "acme"); st.GPUSeconds != 7200+3600 {
			t.Errorf("org: %v GPU-seconds, want %v", st.GPUSeconds, 7200+3600)
		}
	})
}

// A job not yet submitted (a preview) stands behind every queued job of its rank, those
// submitted in the same millisecond included.
func TestAPreviewStandsBehindJobsOfTheSameMillisecond(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		b.submitSpec(t, "acme", jobSpec("x", 2))
		b.submitSpec(t, "acme", jobSpec("y", 2)) // the fake clock stands still: the same ms
		p, err := b.q.RunsAhead(b.ctx, "acme", jobSpec("preview", 0))
		if err != nil || p.RunsAhead != 2 {
			t.Errorf("runs ahead %d (%v), want 2", p.RunsAhead, err)
		}
	})
}

// An organization's name and idempotency key cannot spell another's (issue 14: "orgd" with
// key "x:k1" replayed to "orgd:x" with key "k1"). The API refuses such organization names
// too; the queue does not rely on it.
func TestIdempotencyKeysOfTwoOrganizationsNeverMeet(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		first, _, err := b.q.Submit(b.ctx, job.Submission{Org: "orgd", Spec: jobSpec("a", 0)}, "x:k1", "fp")
		if err != nil {
			t.Fatal(err)
		}
		other, replayed, err := b.q.Submit(b.ctx, job.Submission{Org: "orgd:x", Spec: jobSpec("a", 0)}, "k1", "fp")
		if err != nil || replayed || other.ID == first.ID || other.Org != "orgd:x" {
			t.Fatalf("orgd:x's submit: %+v replayed=%v %v; want a job of its own", other, replayed, err)
		}
	})
}

// A revocation lasts as long as the token would: past its expiry and the verifier's leeway,
// with no cap (issue 14: a revoked token worked again in the leeway, and a token living
// over 366 days came back).
func TestARevocationOutlivesItsToken(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		for _, life := range []time.Duration{time.Second, time.Hour, 3 * 365 * 24 * time.Hour} {
			jti := fmt.Sprintf("t-%d", life)
			if err := b.q.RevokeToken(b.ctx, jti, time.Now().Add(life)); err != nil {
				t.Fatal(err)
			}
			ttl, err := b.rdb.PTTL(b.ctx, b.q.keys.revoked(jti)).Result()
			if err != nil || ttl < life+auth.Leeway {
				t.Errorf("a token living %v: revocation kept %v (%v), want at least %v", life, ttl, err, life+auth.Leeway)
			}
		}
	})
}

// A job's GPU time ends when its agent gave the GPUs back, not when the report arrives: the
// uploads and retries after the pipeline (issue 14: storage full, minutes of them) are not
// GPU time. A time before the hold began, or after the report, counts as the hold's start or
// the report.
func TestGPUTimeEndsWhenTheGPUsAreGivenBack(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		for _, c := range []struct {
			name   string
			freed  time.Duration // after the claim
			report time.Duration // after the claim
			want   float64       // GPU-seconds on 2 GPUs
		}{
			{"freed after 10 min, reported after 40", 10 * time.Minute, 40 * time.Minute, 1200},
			{"freed before the claim", -time.Hour, 10 * time.Minute, 0},
			{"freed after the report", 2 * time.Hour, 10 * time.Minute, 1200},
		} {
			j := b.submitSpec(t, "acme", jobSpec(c.name, 2))
			cl := b.claim(t)
			freed := b.clock.Now().Add(c.freed)
			b.clock.Advance(c.report)
			if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, GPUsFreedAt: &freed}); err != nil {
				t.Fatal(err)
			}
			if got := b.status(t, j.ID).GPUSeconds; got != c.want {
				t.Errorf("%s: %v GPU-seconds, want %v", c.name, got, c.want)
			}
		}
	})
}

// Each process checks tokens against its own copy of the revocations, refreshed at most every
// RevocationStaleness: a revocation made elsewhere is refused within that, one made here at
// once, and a token that was never revoked costs no round trip per check.
func TestRevocationsReachEveryProcessWithinTheStaleness(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		other := New(b.rdb, b.cfg)
		defer other.Close()
		if revoked, err := other.TokenRevoked(b.ctx, "t1"); err != nil || revoked {
			t.Fatalf("before: %v %v", revoked, err)
		}
		if err := b.q.RevokeToken(b.ctx, "t1", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		if revoked, _ := b.q.TokenRevoked(b.ctx, "t1"); !revoked {
			t.Error("the process that revoked it does not refuse it")
		}
		if revoked, _ := other.TokenRevoked(b.ctx, "t1"); revoked {
			t.Error("another process refused it before its copy was due for a refresh")
		}
		b.clock.Advance(b.cfg.RevocationStaleness)
		if revoked, _ := other.TokenRevoked(b.ctx, "t1"); !revoked {
			t.Error("another process still takes it after the staleness")
		}
		// A process that starts later loads every revocation, and then checks a hundred
		// requests within the staleness with no round trip.
		own := privateClient(b)
		defer own.Close()
		counted := &commandCounter{}
		own.AddHook(counted)
		late := New(own, b.cfg)
		defer late.Close()
		for range 100 {
			if revoked, _ := late.TokenRevoked(b.ctx, "t1"); !revoked {
				t.Fatal("a new process takes a revoked token")
			}
			if revoked, _ := late.TokenRevoked(b.ctx, "t2"); revoked {
				t.Fatal("a new process refuses a token never revoked")
			}
		}
		if n := counted.total(); n > 1 {
			t.Errorf("200 checks within the staleness took %d round trips", n)
		}
	})
}

// privateClient is a Redis client of the test's own on b's server or cluster, for counting
// only the test's commands.
func privateClient(b bundle) redis.UniversalClient {
	switch c := b.rdb.(type) {
	case *redis.Client:
		return redis.NewClient(c.Options())
	case *redis.ClusterClient:
		return redis.NewClusterClient(c.Options())
	}
	panic("queue test: unknown client")
}

// Errors of Redis calls that say it cannot serve now carry ErrUnavailable (what the API turns
// into 503); a request Redis refused does not, and neither does any error that did not come
// from Redis.
func TestAnUnavailableStoreIsNamed(t *testing.T) {
	t.Parallel()
	// A port nothing listens on: taken and given back.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	q := New(rdb, Config{})
	defer q.Close()
	if _, err := q.Get(context.Background(), "x"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("Redis out of reach: %v, want ErrUnavailable", err)
	}
	each(t, func(t *testing.T, b bundle) {
		_, err := b.q.Cancel(b.ctx, "no-such-job")
		if err == nil || errors.Is(err, ErrUnavailable) {
			t.Errorf("a request Redis refused: %v", err)
		}
	})
	if errors.Is(&net.OpError{Op: "dial", Err: errors.New("refused")}, ErrUnavailable) {
		t.Error("a network error of something else reads as the job store's")
	}
}

// A store written before the fair order was kept per GPU class: its queued jobs are claimable
// after the first reaper pass, which files their organizations in the per-class orders.
func TestQueuedJobsOfTheOneFairOrderAreClaimedAfterAnUpgrade(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submitSpec(t, "acme", jobSpec("old", 8))
		// What the old layout left: one order of orgs, no per-class ones, no per-class counts.
		class := "H100:8"
		score, err := b.rdb.ZScore(b.ctx, b.q.keys.of("fairkey", class), "acme").Result()
		if err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.ZAdd(b.ctx, b.q.keys.prefix+"fair", redis.Z{Score: score, Member: "acme"}).Err(); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{b.q.keys.of("fairkey", class), b.q.keys.fixed("CLASSES"), b.q.keys.fixed("READY")} {
			if err := b.rdb.Del(b.ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if cl := b.claimFor(t, "a", h100x8); cl != nil {
			t.Fatalf("claimed %s before the upgrade's pass", cl.Job.ID)
		}
		b.reap(t)
		if cl := b.claimFor(t, "a", h100x8); cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("after the reaper's pass: %v", cl)
		}
		if n, _ := b.rdb.Exists(b.ctx, b.q.keys.prefix+"fair").Result(); n != 0 {
			t.Error("the old order is still there")
		}
	})
}

// Jobs stored before List's index existed are filed in it by the reaper, a batch a pass, so
// filters find them after an upgrade.
func TestJobsOfBeforeTheIndexAreFiledInIt(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		for i := range 250 {
			b.submitSpec(t, []string{"acme", "globex", "initech"}[i%3], jobSpec(fmt.Sprint(i), 0))
		}
		// What the old layout left: no index, and no mark that it was made.
		for _, org := range []string{"acme", "globex", "initech"} {
			if err := b.rdb.Del(b.ctx, b.q.keys.orgIndex(org)).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.rdb.HDel(b.ctx, b.q.keys.meta(), "indexed").Err(); err != nil {
			t.Fatal(err)
		}
		queued := func(org string) int {
			jobs, _, err := b.q.List(b.ctx, org, job.ListFilter{Statuses: []job.Status{job.Queued}}, "", 100)
			if err != nil {
				t.Fatal(err)
			}
			return len(jobs)
		}
		if n := queued("acme"); n != 0 {
			t.Fatalf("%d queued jobs listed before the filing", n)
		}
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil { // batches until done
			t.Fatal(err)
		}
		for org, want := range map[string]int{"acme": 84, "globex": 83, "initech": 83} {
			if n := queued(org); n != want {
				t.Errorf("%s: %d queued jobs listed after the filing, want %d", org, n, want)
			}
		}
		if v, _ := b.rdb.HGet(b.ctx, b.q.keys.meta(), "indexed").Result(); v != "1" {
			t.Errorf("indexed = %q after the filing", v)
		}
	}, func(c *Config) { c.MaxQueued = 1000 })
}

// The running limit that holds is the one in force when a job ends, whatever it was when the
// organization was last filed in the fair orders: a lowered limit is kept to, and a raised
// one (the organization's own, or the service's default in the calling process) lets its
// queued jobs run.
func TestTheRunningLimitInForceIsFollowed(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MaxRunning: 10}); err != nil {
			t.Fatal(err)
		}
		var running []*job.Claim
		for i := range 8 {
			b.submitSpec(t, "acme", jobSpec(fmt.Sprint(i), 1))
		}
		for range 5 {
			running = append(running, b.claimFor(t, "a", h100x8))
		}
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MaxRunning: 2}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Complete(b.ctx, running[0].Job.ID, job.Outcome{Token: running[0].Lease.Token}); err != nil {
			t.Fatal(err)
		}
		if cl := b.claimFor(t, "a", h100x8); cl != nil {
			t.Fatalf("claimed %s with 4 running and a limit of 2", cl.Job.ID)
		}
	})
	each(t, func(t *testing.T, b bundle) {
		b.submitSpec(t, "acme", jobSpec("first", 1))
		b.submitSpec(t, "acme", jobSpec("second", 1))
		held := b.claimFor(t, "a", h100x8)
		if cl := b.claimFor(t, "a", h100x8); cl != nil {
			t.Fatalf("claimed %s at the default limit of 1", cl.Job.ID)
		}
		// A process with a higher default (a deploy that raised it) ends the running job.
		cfg := b.cfg
		cfg.MaxRunning = 5
		raised := New(b.rdb, cfg)
		defer raised.Close()
		if _, err := raised.Complete(b.ctx, held.Job.ID, job.Outcome{Token: held.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		if cl, err := raised.Claim(b.ctx, job.ClaimRequest{AgentID: "a", GPUs: h100x8}); err != nil || cl == nil {
			t.Fatalf("with the default raised and nothing running: %v %v", cl, err)
		}
	}, func(c *Config) { c.MaxRunning = 1 })
}

// A writer whose clock runs ahead does not hide later revocations from writers whose clocks
// are right.
func TestARevocationFromASkewedClockHidesNoOther(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ahead := b.cfg
		ahead.Now = func() time.Time { return b.clock.Now().Add(40 * time.Second) }
		fast := New(b.rdb, ahead)
		defer fast.Close()
		reader := New(b.rdb, b.cfg)
		defer reader.Close()
		if _, err := reader.TokenRevoked(b.ctx, "t0"); err != nil { // the reader's first, full load
			t.Fatal(err)
		}
		if err := fast.RevokeToken(b.ctx, "t1", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(b.cfg.RevocationStaleness)
		if revoked, _ := reader.TokenRevoked(b.ctx, "t1"); !revoked {
			t.Fatal("the skewed writer's revocation was not seen")
		}
		if err := b.q.RevokeToken(b.ctx, "t2", time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(b.cfg.RevocationStaleness)
		if revoked, _ := reader.TokenRevoked(b.ctx, "t2"); !revoked {
			t.Error("a revocation made after a skewed writer's was never seen")
		}
	})
}

// A fair order that names an organization with nothing ready (a drift the functions do not
// make, but must survive) is mended by the claim that meets it, which goes on to the next.
func TestAClaimMendsAFairOrderAndGoesOn(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submitSpec(t, "globex", jobSpec("real", 8))
		// acme, with nothing queued, first in the order of H100:8.
		if err := b.rdb.ZAdd(b.ctx, b.q.keys.of("fairkey", "H100:8"), redis.Z{Score: -1, Member: "acme"}).Err(); err != nil {
			t.Fatal(err)
		}
		if cl := b.claimFor(t, "a", h100x8); cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("claimed %v, want globex's job", cl)
		}
		if _, err := b.rdb.ZScore(b.ctx, b.q.keys.of("fairkey", "H100:8"), "acme").Result(); !errors.Is(err, redis.Nil) {
			t.Errorf("acme is still in the order: %v", err)
		}
	})
}

// With Redis out of reach, a process that has a copy of the revocations answers from it (a
// revoked token stays refused) instead of failing every check; only with no copy yet is a
// check an error.
func TestRevocationChecksAnswerFromTheCopyWhileRedisIsDown(t *testing.T) {
	t.Parallel()
	rs := redistest.StartRestartable(t)
	clock := &fakeClock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	q := New(rs.Client, Config{Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), Now: clock.Now})
	defer q.Close()
	ctx := context.Background()
	if err := q.RevokeToken(ctx, "t1", time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if revoked, err := q.TokenRevoked(ctx, "t1"); err != nil || !revoked {
		t.Fatalf("before: %v %v", revoked, err)
	}
	fresh := New(rs.Client, Config{Prefix: q.cfg.Prefix, Now: clock.Now})
	defer fresh.Close()
	rs.Stop()
	clock.Advance(time.Minute)
	if revoked, err := q.TokenRevoked(ctx, "t1"); err != nil || !revoked {
		t.Errorf("with Redis down and a copy: %v %v, want the revocation from the copy", revoked, err)
	}
	if _, err := fresh.TokenRevoked(ctx, "t1"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("with Redis down and no copy: %v, want ErrUnavailable", err)
	}
}

// A failure the agent read as the platform's is retried after a backoff, on another agent
// while the avoid window lasts, with the analysis kept on the job; the same failure read as
// the user's ends the job at once; and a platform fault on the last attempt fails it.
func TestAPlatformFaultIsRetriedElsewhere(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		nccl := &job.FailureAnalysis{Class: job.FailNCCLNetwork, Fault: job.FaultPlatform, Confidence: 0.85, Attempt: 1,
			Summary: "the processes of the run lost each other", Evidence: []string{"trainer.log: NCCL error"}}
		j := b.submit(t, "acme", "a")
		first := b.claim(t)
		b.running(t, j.ID, first)
		st, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: first.Lease.Token, Reason: "pipeline exited with status 1", Failure: nccl, Checkpoints: []int{3}})
		if err != nil || st != job.Queued {
			t.Fatalf("fail: %s %v; want QUEUED", st, err)
		}
		got := b.status(t, j.ID)
		if got.Attempt != 2 || got.ResumeStep != 3 || got.RetryAt == nil || got.FailureAnalysis == nil ||
			!got.FailureAnalysis.Retried || got.FailureAnalysis.Class != job.FailNCCLNetwork || got.Error != "" {
			t.Fatalf("after the fault: %+v", got)
		}
		if org, _ := b.q.GetOrg(b.ctx, "acme"); org.Running != 0 || org.Queued != 1 {
			t.Errorf("org counters %+v", org)
		}
		b.clock.Advance(got.RetryAt.Sub(b.clock.Now()))
		if cl := b.claimFor(t, "agent-1", h100x8); cl != nil {
			t.Fatal("the retry went back to the agent it failed on")
		}
		second := b.claimFor(t, "agent-2", h100x8)
		if second == nil || second.Job.ID != j.ID {
			t.Fatalf("another agent got %+v", second)
		}
		b.running(t, j.ID, second)
		// The last attempt: the same fault fails the job, analysis kept, not retried.
		nccl.Attempt = 2
		if st, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: second.Lease.Token, Reason: "pipeline exited with status 1", Failure: nccl}); err != nil || st != job.Failed {
			t.Fatalf("fail on the last attempt: %s %v", st, err)
		}
		got = b.status(t, j.ID)
		if a := got.FailureAnalysis; a == nil || a.Retried || a.Attempt != 2 {
			t.Errorf("analysis %+v; want attempt 2's, not retried", a)
		}
		want := []string{job.EventQueued, job.EventPending, job.EventStarted, job.EventCheckpoint, job.EventRetrying, job.EventPending,
			job.EventStarted, job.EventFailed}
		if ev := b.eventTypes(t, j.ID); !equal(ev, want) {
			t.Errorf("events %v, want %v", ev, want)
		}

		// A retried attempt's analysis does not outlive it: a last attempt that fails without
		// one (an older agent) leaves none rather than the earlier attempt's.
		k := b.submit(t, "acme", "k")
		ck := b.claimFor(t, "agent-3", h100x8)
		if _, err := b.q.Fail(b.ctx, k.ID, job.Outcome{Token: ck.Lease.Token, Reason: "NCCL", Failure: nccl}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(time.Minute)
		ck = b.claimFor(t, "agent-4", h100x8)
		if ck == nil || ck.Job.ID != k.ID {
			t.Fatalf("the retry: %+v", ck)
		}
		if _, err := b.q.Fail(b.ctx, k.ID, job.Outcome{Token: ck.Lease.Token, Reason: "gone"}); err != nil {
			t.Fatal(err)
		}
		if got := b.status(t, k.ID); got.Status != job.Failed || got.FailureAnalysis != nil {
			t.Errorf("after a last attempt without an analysis: %s %+v", got.Status, got.FailureAnalysis)
		}

		// The user's fault: FAILED at once, whatever attempts are left.
		u := b.submit(t, "acme", "u")
		cu := b.claimFor(t, "agent-1", h100x8)
		oom := &job.FailureAnalysis{Class: job.FailCUDAOOM, Fault: job.FaultUser, Confidence: 0.95, Attempt: 1, Summary: "out of memory"}
		if st, err := b.q.Fail(b.ctx, u.ID, job.Outcome{Token: cu.Lease.Token, Reason: "OOM", Failure: oom}); err != nil || st != job.Failed {
			t.Fatalf("a user fault: %s %v; want FAILED", st, err)
		}
		// A restart starts clean: no analysis, no node avoided.
		r, err := b.q.Restart(b.ctx, u.ID)
		if err != nil || r.FailureAnalysis != nil {
			t.Fatalf("restart: %+v %v", r, err)
		}
		if cl := b.claimFor(t, "agent-1", h100x8); cl == nil || cl.Job.ID != u.ID {
			t.Errorf("after a restart agent-1 got %+v", cl)
		}
	})
}

// A claim passes over the jobs that avoid its agent — in the same organization, and an
// organization that has nothing else ready — to the work behind them: a node whose attempt
// failed is not kept idle while its retried job waits for another node.
func TestAClaimPassesOverJobsThatAvoidIt(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		nccl := &job.FailureAnalysis{Class: job.FailNCCLNetwork, Fault: job.FaultPlatform, Confidence: 0.85, Attempt: 1, Summary: "NCCL"}
		var avoided []string
		for _, org := range []string{"acme", "zeta"} {
			j := b.submit(t, org, "retried")
			cl := b.claimFor(t, "agent-1", h100x8)
			if cl == nil || cl.Job.ID != j.ID {
				t.Fatalf("claim of %s's job: %+v", org, cl)
			}
			b.running(t, j.ID, cl)
			if st, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "NCCL", Failure: nccl}); err != nil || st != job.Queued {
				t.Fatalf("fail: %s %v", st, err)
			}
			avoided = append(avoided, j.ID)
		}
		b.clock.Advance(time.Minute) // both backoffs over, both avoid windows on
		behind := map[string]bool{b.submit(t, "acme", "behind").ID: true, b.submit(t, "acme", "behind-2").ID: true, b.submit(t, "zeta", "behind").ID: true}
		for range len(behind) {
			cl := b.claimFor(t, "agent-1", h100x8)
			if cl == nil || !behind[cl.Job.ID] {
				t.Fatalf("agent-1 got %+v; want a job queued behind the ones that avoid it", cl)
			}
			delete(behind, cl.Job.ID)
		}
		if cl := b.claimFor(t, "agent-1", h100x8); cl != nil {
			t.Fatalf("agent-1 got %s back while it is avoided", cl.Job.ID)
		}
		for range avoided {
			if cl := b.claimFor(t, "agent-2", h100x8); cl == nil || !slices.Contains(avoided, cl.Job.ID) {
				t.Fatalf("agent-2 got %+v; want a retried job", cl)
			}
		}
	})
}

// Node health counts only what the agent's own check of its node found (red team, issue 29: a
// tenant's printed Xid lines quarantined nodes). Failures its logs read as the platform's —
// with no failed check — count for nothing; lost leases are recorded but never quarantine; a
// failed check of one organization's jobs counts once; QuarantineAfter failed checks take the
// node out of rotation until an operator puts it back, as a claim that carries a failed check
// does. An operator's drain makes the heartbeats of its jobs answer release.
func TestNodeHealth(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		nodeOf := func(id string) *job.Node {
			nodes, err := b.q.Nodes(b.ctx)
			if err != nil {
				t.Fatal(err)
			}
			for i := range nodes {
				if nodes[i].ID == id {
					return &nodes[i]
				}
			}
			return nil
		}
		fail := func(org, name, node string, a *job.FailureAnalysis) {
			t.Helper()
			j := b.submit(t, org, name)
			cl := b.claimFor(t, node, h100x8)
			if cl == nil || cl.Job.ID != j.ID {
				t.Fatalf("claim of %s on %s: %+v", name, node, cl)
			}
			if _, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: a.Summary, Failure: a}); err != nil {
				t.Fatal(err)
			}
		}
		// The job's own logs said Xid, three times: the node is not even suspected.
		printed := &job.FailureAnalysis{Class: job.FailGPUHardware, Fault: job.FaultPlatform, Confidence: 0.9, Summary: "Xid 79",
			NodeCheck: &job.NodeCheck{Failed: false, Evidence: []string{"nvidia-smi: every GPU answers"}}}
		for i := range 3 {
			fail("mallory", fmt.Sprintf("x%d", i), "node-a", printed)
		}
		if n := nodeOf("node-a"); n != nil && (n.State != job.NodeOK || n.RecentFaults != 0) {
			t.Fatalf("node-a after faults its jobs printed: %+v", n)
		}
		// Failed checks: one organization's count once; another's make two, the limit here.
		checked := &job.FailureAnalysis{Class: job.FailGPUHardware, Fault: job.FaultPlatform, Confidence: 0.95, Summary: "ECC",
			NodeCheck: &job.NodeCheck{Failed: true, Evidence: []string{"nvidia-smi: GPU 3 has 2 uncorrectable ECC errors"}}}
		fail("acme", "f1", "node-a", checked)
		fail("acme", "f2", "node-a", checked)
		if n := nodeOf("node-a"); n == nil || n.State != job.NodeOK || n.RecentFaults != 1 {
			t.Fatalf("node-a after two failed checks of one organization's jobs: %+v; want in rotation, one fault", n)
		}
		fail("other", "f3", "node-a", checked)
		n := nodeOf("node-a")
		if n == nil || n.State != job.NodeQuarantined || n.RecentFaults != 2 || !strings.Contains(n.Reason, "health check failed") {
			t.Fatalf("node-a after a second organization's failed check: %+v; want quarantined", n)
		}
		b.submit(t, "acme", "next")
		if cl := b.claimFor(t, "node-a", h100x8); cl != nil {
			t.Fatal("a quarantined node claimed a job")
		}
		// Back in rotation: it claims, and its faults are forgotten.
		if err := b.q.SetNode(b.ctx, "node-a", job.NodeOK, ""); err != nil {
			t.Fatal(err)
		}
		cl := b.claimFor(t, "node-a", h100x8)
		if cl == nil {
			t.Fatal("an uncordoned node claims nothing")
		}
		if n := nodeOf("node-a"); n == nil || n.State != job.NodeOK || n.RecentFaults != 0 {
			t.Errorf("after uncordon: %+v", n)
		}
		// A drain: the node's job hears release on its next heartbeat; the node claims nothing.
		if err := b.q.SetNode(b.ctx, "node-a", job.NodeDraining, "kernel update"); err != nil {
			t.Fatal(err)
		}
		rep, err := b.q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true})
		if err != nil || rep.Action != job.Release {
			t.Fatalf("heartbeat on a draining node: %+v %v", rep, err)
		}
		b.submit(t, "acme", "another")
		if got := b.claimFor(t, "node-a", h100x8); got != nil {
			t.Fatal("a draining node claimed a job")
		}
		// A claim that carries a failed check takes nothing, and its node is out (two
		// organizations' worth: the claim's own check and a job's).
		for range 5 { // the jobs queued meanwhile go to a healthy node
			if cl := b.claimFor(t, "node-z", h100x8); cl == nil {
				break
			}
		}
		fail("acme", "g1", "node-b", checked)
		b.submit(t, "acme", "h")
		if got, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-b", GPUs: h100x8,
			Health: &job.NodeCheck{Failed: true, Evidence: []string{"kernel: NVRM: Xid (PCI:0000:3b:00): 79, GPU has fallen off the bus"}}}); err != nil || got != nil {
			t.Fatalf("a claim with a failed check: %+v %v; want nothing", got, err)
		}
		if n := nodeOf("node-b"); n == nil || n.State != job.NodeQuarantined || !strings.Contains(n.Reason, "fallen off the bus") {
			t.Fatalf("node-b after a claim with a failed check: %+v", n)
		}
		if cl := b.claimFor(t, "node-z", h100x8); cl == nil { // h, which node-b did not take
			t.Fatal("node-z claimed nothing")
		}
		// A user fault counts for nothing.
		for i := range 3 {
			oom := &job.FailureAnalysis{Class: job.FailCUDAOOM, Fault: job.FaultUser, Confidence: 0.95, Summary: "OOM"}
			fail("user", fmt.Sprintf("u%d", i), "node-d", oom)
		}
		if n := nodeOf("node-d"); n != nil && n.RecentFaults != 0 {
			t.Errorf("node-d after user faults alone: %+v", n)
		}
		// Lost leases of many organizations' jobs: recorded, never a quarantine.
		for i, org := range []string{"o1", "o2", "o3", "o4"} {
			b.submit(t, org, fmt.Sprintf("l%d", i))
			if cl := b.claimFor(t, "node-c", h100x8); cl == nil {
				t.Fatalf("node-c claim %d: nothing", i)
			}
			b.clock.Advance(2 * time.Minute) // every lease lapses, node-c's among them
			if _, _, err := b.q.Reap(b.ctx, 100); err != nil {
				t.Fatal(err)
			}
		}
		if n := nodeOf("node-c"); n == nil || n.State != job.NodeOK || n.RecentFaults < 2 {
			t.Fatalf("node-c after four lost leases: %+v; want in rotation, its faults recorded", n)
		}
	}, func(c *Config) { c.QuarantineAfter = 2 })
}

// A budget, on the queue's clock: job.budget at 50, 80 and 100 % of it as the GPU time grows,
// each once; at 100 % the heartbeat answers stop, and the job the agent then reports ends
// STOPPED for its budget. SetBudget raised, the marks go on from the use reached.
func TestABudgetOnTheQueuesClock(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		// 2 GPUs, 100 GPU-seconds: 50 s of wall time.
		j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("b", 2), BudgetGPUMs: 100_000}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		cl := b.claim(t)
		beat := func() job.Action { t.Helper(); return b.beat(t, j.ID, cl) }
		beat()
		for _, step := range []struct {
			after time.Duration
			want  job.Action
		}{{20 * time.Second, job.Continue}, {8 * time.Second, job.Continue}, {14 * time.Second, job.Continue}, {10 * time.Second, job.Stop}} {
			b.clock.Advance(step.after)
			if got := beat(); got != step.want {
				t.Fatalf("after %s more: %s, want %s", step.after, got, step.want)
			}
		}
		var marks []string
		evs, err := b.q.Events(b.ctx, j.ID, 0, 100)
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range evs {
			if e.Type == job.EventBudget {
				marks = append(marks, strings.Fields(e.Detail)[0])
			}
		}
		if strings.Join(marks, ",") != "50,80,100" {
			t.Errorf("budget events at %v %%; want 50, 80, 100", marks)
		}
		if st, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "stopped on request"}); err != nil || st != job.Stopped {
			t.Fatalf("the agent's report after the stop: %s %v", st, err)
		}
		got := b.status(t, j.ID)
		if got.BudgetGPUSeconds != 100 || got.GPUSeconds < 100 {
			t.Errorf("after the stop: budget %v, used %v", got.BudgetGPUSeconds, got.GPUSeconds)
		}
		if err := b.q.SetBudget(b.ctx, j.ID, 1_000_000); err != nil {
			t.Fatal(err)
		}
		if got := b.status(t, j.ID); got.BudgetGPUSeconds != 1000 {
			t.Errorf("raised: %v", got.BudgetGPUSeconds)
		}
	})
}

// An organization's monthly budget, on the queue's clock: job.budget at 50, 80 and 100 % of it
// as its jobs' GPU time is charged; at 100 % the running job is told to stop (STOPPED for the
// organization's budget) and the organization is held: its queued jobs are claimed by no one,
// and say why. A raised budget lets them run; so does the month's end (the reaper), with the
// month's spending starting again from zero.
func TestAnOrganizationsMonthlyBudget(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		// 0.1 GPU-hours = 360 GPU-seconds; a 2-GPU job prepays 120 at its claim (the quantum).
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MonthlyGPUHours: 0.1}); err != nil {
			t.Fatal(err)
		}
		j := b.submitSpec(t, "acme", jobSpec("first", 2))
		cl := b.claimFor(t, "agent-1", h100x8)
		if cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("claim: %+v", cl)
		}
		beat := func() job.Action { t.Helper(); return b.beat(t, j.ID, cl) }
		beat()
		// Charged from the quantum's end on: 180, 240, 300, 360 GPU-seconds.
		b.clock.Advance(90 * time.Second)
		for i, want := range []job.Action{job.Continue, job.Continue, job.Continue, job.Stop} {
			if i > 0 {
				b.clock.Advance(30 * time.Second)
			}
			if got := beat(); got != want {
				t.Fatalf("beat %d: %s, want %s", i, got, want)
			}
		}
		var marks []string
		for _, e := range b.events(t, j.ID) {
			if e.Type == job.EventBudget {
				marks = append(marks, strings.Fields(e.Detail)[0])
				if !strings.Contains(e.Detail, "organization's monthly budget") {
					t.Errorf("budget event %q does not name the organization's budget", e.Detail)
				}
			}
		}
		if strings.Join(marks, ",") != "50,80,100" {
			t.Errorf("budget events at %v %%; want 50, 80, 100", marks)
		}
		st, err := b.q.GetOrg(b.ctx, "acme")
		if err != nil || !st.BudgetHeld || math.Abs(st.MonthGPUHours-0.1) > 1e-9 || st.MonthlyGPUHours != 0.1 {
			t.Fatalf("org after the budget: %+v %v", st, err)
		}
		if s, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "stopped on request"}); err != nil || s != job.Stopped {
			t.Fatalf("the agent's report after the stop: %s %v", s, err)
		}
		if got := b.lastDetail(t, j.ID); !strings.Contains(got, "organization's monthly budget is spent") {
			t.Errorf("the stopped job says %q", got)
		}

		// Held: another job of the org waits, and says why; another org's job runs.
		k := b.submitSpec(t, "acme", jobSpec("second", 2))
		other := b.submitSpec(t, "zeta", jobSpec("other", 2))
		if cl := b.claimFor(t, "agent-2", h100x8); cl == nil || cl.Job.ID != other.ID {
			t.Fatalf("with acme held, agent-2 got %+v; want zeta's job", cl)
		}
		if cl := b.claimFor(t, "agent-3", h100x8); cl != nil {
			t.Fatalf("a held organization's job was claimed: %s", cl.Job.ID)
		}
		if p, ok, err := b.q.Position(b.ctx, k.ID); err != nil || !ok || !strings.Contains(p.Reason, "monthly budget is spent (0.10 of 0.10 GPU-hours)") {
			t.Errorf("the held job's queue reason: %+v %v %v", p, ok, err)
		}

		// Raised: it runs.
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MonthlyGPUHours: 1}); err != nil {
			t.Fatal(err)
		}
		if cl := b.claimFor(t, "agent-3", h100x8); cl == nil || cl.Job.ID != k.ID {
			t.Fatalf("after the raise: %+v", cl)
		}
		// Lowered below what the month spent: held at once.
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MonthlyGPUHours: 0.05}); err != nil {
			t.Fatal(err)
		}
		last := b.submitSpec(t, "acme", jobSpec("third", 2))
		if cl := b.claimFor(t, "agent-4", h100x8); cl != nil {
			t.Fatalf("claimed under a lowered budget: %s", cl.Job.ID)
		}
		// The month ends: the reaper lets the organization run again, its spending from zero.
		now := b.clock.Now()
		b.clock.Advance(time.Date(now.Year(), now.Month()+1, 1, 0, 0, 0, 0, time.UTC).Sub(now))
		b.reap(t)
		if cl := b.claimFor(t, "agent-4", h100x8); cl == nil || cl.Job.ID != last.ID {
			t.Fatalf("in the new month: %+v", cl)
		}
		if st, err := b.q.GetOrg(b.ctx, "acme"); err != nil || st.BudgetHeld || math.Abs(st.MonthGPUHours-120.0/3600) > 1e-9 {
			t.Errorf("org in the new month: %+v %v (want the one claim's quantum spent)", st, err)
		}
	})
}

// A job expected to take more than what is left of its organization's monthly budget is held
// (a claim passes over it to the next), says so, and runs once the budget is raised.
func TestAJobOverItsOrganizationsBudgetIsHeld(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MonthlyGPUHours: 1}); err != nil {
			t.Fatal(err)
		}
		submit := func(name string, hours float64) *job.Job {
			t.Helper()
			j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec(name, 2), EstimateGPUMs: int64(hours * 3.6e6)}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			return j
		}
		big, small := submit("big", 2), submit("small", 0.5)
		if cl := b.claimFor(t, "agent-1", h100x8); cl == nil || cl.Job.ID != small.ID {
			t.Fatalf("agent-1 got %+v; want the small job, past the big one", cl)
		}
		if cl := b.claimFor(t, "agent-2", h100x8); cl != nil {
			t.Fatalf("the job over the budget was claimed: %s", cl.Job.ID)
		}
		// The small job's claim prepaid 2 GPUs × 60 s: 0.97 GPU-hours are left.
		p, ok, err := b.q.Position(b.ctx, big.ID)
		if err != nil || !ok || !strings.Contains(p.Reason, "its estimate (2.00 GPU-hours) is more than what is left of its organization's monthly budget (0.97 GPU-hours)") {
			t.Errorf("the held job's queue reason: %+v %v %v", p, ok, err)
		}
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MonthlyGPUHours: 5}); err != nil {
			t.Fatal(err)
		}
		if cl := b.claimFor(t, "agent-2", h100x8); cl == nil || cl.Job.ID != big.ID {
			t.Fatalf("after the raise: %+v", cl)
		}
	})
}

// An organization's GPU time by the user and the token that submitted its jobs: ended holds
// from the counters (with their cost at each job's price), a live hold as it stands.
func TestUsageByUserAndToken(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		submit := func(by, token string, price float64) *job.Job {
			t.Helper()
			j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec(by, 2), CreatedBy: by, TokenID: token, PricePerGPUHour: price}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if j.CreatedBy != by || j.TokenID != token {
				t.Fatalf("submitted by %q with %q; the job says %q, %q", by, token, j.CreatedBy, j.TokenID)
			}
			return j
		}
		// ana runs 2 GPUs for 30 min at $2/GPU-hour with token t1; bo 2 GPUs for 15 min, unpriced,
		// with t2, then again 2 GPUs with t1, still running after 6 min.
		for _, r := range []struct {
			by, token string
			price     float64
			run       time.Duration
		}{{"ana", "t1", 2, 30 * time.Minute}, {"bo", "t2", 0, 15 * time.Minute}} {
			j := submit(r.by, r.token, r.price)
			cl := b.claimFor(t, "agent-1", h100x8)
			b.running(t, j.ID, cl)
			b.clock.Advance(r.run)
			if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
				t.Fatal(err)
			}
		}
		live := submit("bo", "t1", 0)
		cl := b.claimFor(t, "agent-1", h100x8)
		b.running(t, live.ID, cl)
		b.clock.Advance(6 * time.Minute)
		running, _, err := b.q.List(b.ctx, "acme", job.ListFilter{Statuses: []job.Status{job.Running}}, "", 10)
		if err != nil {
			t.Fatal(err)
		}
		users, tokens, err := b.q.UsageBy(b.ctx, "acme", running, func(string) float64 { return 1 })
		if err != nil {
			t.Fatal(err)
		}
		// The live hold is priced by the function given: 2 GPUs × 6 min = 0.2 GPU-hours, $0.20.
		wantUsers := []job.UsageShare{{Who: "ana", GPUSeconds: 3600, CostUSD: 2}, {Who: "bo", GPUSeconds: 1800 + 720, CostUSD: 0.2}}
		wantTokens := []job.UsageShare{{Who: "t1", GPUSeconds: 3600 + 720, CostUSD: 2.2}, {Who: "t2", GPUSeconds: 1800}}
		if !slices.Equal(users, wantUsers) || !slices.Equal(tokens, wantTokens) {
			t.Errorf("by user %+v\nwant %+v\nby token %+v\nwant %+v", users, wantUsers, tokens, wantTokens)
		}
	})
}
