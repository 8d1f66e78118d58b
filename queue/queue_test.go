package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	q     *Client
	rdb   *redis.Client
	clock *fakeClock
	ctx   context.Context
}

func setup(t *testing.T) bundle {
	t.Helper()
	rdb := redistest.Client(t)
	clock := &fakeClock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	q := New(rdb, Config{Prefix: "t", LeaseTTL: 30 * time.Second, MaxAttempts: 2, Now: clock.Now})
	t.Cleanup(func() { _ = q.Close() })
	return bundle{q: q, rdb: rdb, clock: clock, ctx: context.Background()}
}

func spec(name string) jobspec.Spec {
	return jobspec.Spec{Kind: "rl", Name: name, Model: "m", MaxSteps: 10, BatchSize: 8, RolloutsPerExample: 4,
		Env: []jobspec.Env{{ID: "primeintellect/alphabet-sort", Weight: 1}}}
}

func (b bundle) submit(t *testing.T, org, name string) *job.Job {
	t.Helper()
	j, err := b.q.Submit(b.ctx, job.Submission{Org: org, Spec: spec(name)})
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

func (b bundle) claim(t *testing.T) *job.Claim {
	t.Helper()
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "agent-1"})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	if cl == nil {
		t.Fatal("claim: got nothing, want a job")
	}
	return cl
}

func (b bundle) status(t *testing.T, id string) *job.Job {
	t.Helper()
	j, err := b.q.Get(b.ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func (b bundle) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	evs, err := b.q.Events(b.ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d, want %d", i, e.Seq, i+1)
		}
		out = append(out, e.Type)
	}
	return out
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }

func TestSubmitStoresQueuesAndRecords(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, "acme", "first")
	if j.Status != job.Queued || j.Org != "acme" || j.Attempt != 1 || j.MaxAttempts != 2 {
		t.Fatalf("got %+v", j)
	}
	if !j.CreatedAt.Equal(b.clock.Now()) {
		t.Errorf("created_at %v, want %v", j.CreatedAt, b.clock.Now())
	}
	got := b.status(t, j.ID)
	if got.Config.Name != "first" || got.Config.Env[0].ID != "primeintellect/alphabet-sort" {
		t.Errorf("config did not round-trip: %+v", got.Config)
	}
	if got.Progress.MaxSteps != 10 {
		t.Errorf("progress.max_steps %d, want 10", got.Progress.MaxSteps)
	}
	if ev := b.eventTypes(t, j.ID); !equal(ev, []string{job.EventQueued}) {
		t.Errorf("events %v", ev)
	}
	n, err := b.rdb.XLen(b.ctx, b.q.keys.outbox()).Result()
	if err != nil || n != 1 {
		t.Errorf("outbox length %d (%v), want 1", n, err)
	}
}

func TestClaimIsFIFOAndFenced(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.submit(t, "acme", "a")
	b.clock.Advance(time.Millisecond)
	second := b.submit(t, "other", "b")

	c1 := b.claim(t)
	c2 := b.claim(t)
	if c1.Job.ID != first.ID || c2.Job.ID != second.ID {
		t.Fatalf("claimed %s then %s, want %s then %s", c1.Job.ID, c2.Job.ID, first.ID, second.ID)
	}
	if c1.Job.Status != job.Pending || c1.Lease.Fence != 1 || c1.Lease.Token == "" {
		t.Errorf("claim 1: %+v lease %+v", c1.Job.Status, c1.Lease)
	}
	if c1.Job.Runtime == nil || c1.Job.Runtime.AgentID != "agent-1" {
		t.Errorf("runtime %+v, want agent-1", c1.Job.Runtime)
	}
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "agent-2"})
	if err != nil || cl != nil {
		t.Fatalf("claim of an empty queue: got %v, %v; want nothing", cl, err)
	}
}

func TestHeartbeatStartsRenewsAndRecordsCheckpoints(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, "acme", "a")
	cl := b.claim(t)

	// Still preparing: stays PENDING.
	if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	if s := b.status(t, j.ID).Status; s != job.Pending {
		t.Fatalf("status %s, want PENDING", s)
	}
	b.clock.Advance(10 * time.Second)
	prog := &job.Progress{Step: 5, MaxSteps: 10, Metrics: map[string]float64{"reward/all/mean": 0.5}, CheckpointStep: 4, Checkpoints: 2}
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
	if got.Status != job.Running || got.StartedAt == nil || got.Progress.Step != 5 || got.Progress.Metrics["reward/all/mean"] != 0.5 {
		t.Errorf("after heartbeat: %+v", got)
	}
	if got.Runtime == nil || !got.Runtime.Emulated || got.Runtime.Pipeline != "prime-rl" {
		t.Errorf("runtime %+v", got.Runtime)
	}
	// A repeated checkpoint step is not a new event.
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
}

func TestCompleteAndFail(t *testing.T) {
	t.Parallel()
	b := setup(t)
	a := b.submit(t, "acme", "a")
	f := b.submit(t, "acme", "f")
	ca := b.claim(t)
	cf := b.claim(t)

	done, err := b.q.Complete(b.ctx, a.ID, job.Outcome{Token: ca.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}, Checkpoints: []int{10}})
	if err != nil {
		t.Fatal(err)
	}
	if done.Status != job.Completed || done.FinishedAt == nil || done.Progress.Step != 10 {
		t.Errorf("completed job: %+v", done)
	}
	if _, err := b.q.Complete(b.ctx, a.ID, job.Outcome{Token: ca.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
		t.Errorf("second completion: got %v, want ErrLeaseLost", err)
	}
	if _, err := b.q.Heartbeat(b.ctx, a.ID, job.Heartbeat{Token: ca.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
		t.Errorf("heartbeat after completion: got %v, want ErrLeaseLost", err)
	}
	failed, err := b.q.Fail(b.ctx, f.ID, job.Outcome{Token: cf.Lease.Token, Reason: "trainer exited with status 1"})
	if err != nil {
		t.Fatal(err)
	}
	if failed.Status != job.Failed || failed.Error != "trainer exited with status 1" {
		t.Errorf("failed job: %+v", failed)
	}
	want := []string{job.EventQueued, job.EventPending, job.EventCheckpoint, job.EventCompleted}
	if ev := b.eventTypes(t, a.ID); !equal(ev, want) {
		t.Errorf("events %v, want %v", ev, want)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	b := setup(t)
	queued := b.submit(t, "acme", "q")
	stopped, err := b.q.Cancel(b.ctx, queued.ID)
	if err != nil || stopped.Status != job.Stopped {
		t.Fatalf("cancel queued: %v, %v", stopped, err)
	}
	if cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "a"}); cl != nil || err != nil {
		t.Fatalf("a stopped job was claimed: %v %v", cl, err)
	}
	if again, err := b.q.Cancel(b.ctx, queued.ID); err != nil || again.Status != job.Stopped {
		t.Errorf("cancel twice: %v, %v; want STOPPED again", again, err)
	}

	running := b.submit(t, "acme", "r")
	cl := b.claim(t)
	j, err := b.q.Cancel(b.ctx, running.ID)
	if err != nil || j.Status != job.Pending || !j.StopRequested {
		t.Fatalf("cancel held job: %+v, %v", j, err)
	}
	rep, err := b.q.Heartbeat(b.ctx, running.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true})
	if err != nil || rep.Action != job.Stop {
		t.Fatalf("heartbeat after stop: %+v, %v; want stop", rep, err)
	}
	end, err := b.q.Fail(b.ctx, running.ID, job.Outcome{Token: cl.Lease.Token, Reason: "terminated"})
	if err != nil || end.Status != job.Stopped || end.Error != "" {
		t.Fatalf("confirmed stop: %+v, %v; want STOPPED without an error", end, err)
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
}

func TestReapRequeuesThenFails(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, "acme", "a")
	first := b.claim(t)

	if n, err := b.q.Reap(b.ctx, 100); err != nil || n != 0 {
		t.Fatalf("reap before expiry: %d, %v", n, err)
	}
	b.clock.Advance(31 * time.Second)
	if n, err := b.q.Reap(b.ctx, 100); err != nil || n != 1 {
		t.Fatalf("reap: %d, %v; want 1", n, err)
	}
	got := b.status(t, j.ID)
	if got.Status != job.Queued || got.Attempt != 2 {
		t.Fatalf("after reap: status %s attempt %d; want QUEUED, 2", got.Status, got.Attempt)
	}
	if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: first.Lease.Token}); !errors.Is(err, job.ErrLeaseLost) {
		t.Errorf("completion under the lapsed lease: got %v, want ErrLeaseLost", err)
	}
	second := b.claim(t)
	if second.Lease.Fence <= first.Lease.Fence {
		t.Errorf("fence %d after %d: must grow", second.Lease.Fence, first.Lease.Fence)
	}
	b.clock.Advance(31 * time.Second)
	if _, err := b.q.Reap(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	got = b.status(t, j.ID)
	if got.Status != job.Failed || got.Error == "" {
		t.Fatalf("after the last attempt: %s %q; want FAILED with a reason", got.Status, got.Error)
	}
	want := []string{job.EventQueued, job.EventPending, job.EventRetrying, job.EventPending, job.EventFailed}
	if ev := b.eventTypes(t, j.ID); !equal(ev, want) {
		t.Errorf("events %v, want %v", ev, want)
	}
}

func TestReapStopsAJobWhoseStopWasNeverConfirmed(t *testing.T) {
	t.Parallel()
	b := setup(t)
	j := b.submit(t, "acme", "a")
	b.claim(t)
	if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	b.clock.Advance(31 * time.Second)
	if _, err := b.q.Reap(b.ctx, 100); err != nil {
		t.Fatal(err)
	}
	if s := b.status(t, j.ID).Status; s != job.Stopped {
		t.Errorf("status %s, want STOPPED", s)
	}
}

func TestListNewestFirstWithCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ids []string
	for i := range 5 {
		ids = append(ids, b.submit(t, "acme", fmt.Sprint(i)).ID)
		b.clock.Advance(time.Millisecond)
	}
	b.submit(t, "other", "not mine")

	var seen []string
	cursor := ""
	for page := 0; ; page++ {
		jobs, next, err := b.q.List(b.ctx, "acme", cursor, 2)
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
	want := []string{ids[4], ids[3], ids[2], ids[1], ids[0]}
	if !equal(seen, want) {
		t.Errorf("listed %v, want %v", seen, want)
	}
}

func TestWaitingClaimWakesOnSubmit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	got := make(chan *job.Claim, 1)
	errc := make(chan error, 1)
	go func() {
		cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "idle", Wait: time.Minute})
		got <- cl
		errc <- err
	}()
	testwait.Until(t, 10*time.Second, "the claim to subscribe", func() bool {
		n, err := b.rdb.PubSubNumSub(b.ctx, b.q.keys.wake()).Result()
		if err != nil {
			t.Fatal(err)
		}
		return n[b.q.keys.wake()] > 0
	})
	j := b.submit(t, "acme", "wake")
	cl := <-got
	if err := <-errc; err != nil {
		t.Fatal(err)
	}
	if cl == nil || cl.Job.ID != j.ID {
		t.Fatalf("waiting claim got %v, want %s", cl, j.ID)
	}
}
