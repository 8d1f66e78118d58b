package queue

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

func (b bundle) queued(t *testing.T, org string) int {
	t.Helper()
	st, err := b.q.GetOrg(b.ctx, org)
	if err != nil {
		t.Fatal(err)
	}
	return st.Queued
}

func wantLimit(t *testing.T, what string, err error, queued, limit int) {
	t.Helper()
	var lim *job.LimitError
	if !errors.As(err, &lim) || lim.Limit != "queued" || lim.Current != queued || lim.Max != limit || lim.Org != "acme" {
		t.Fatalf("%s: %v (%+v), want the queued limit %d of %d", what, err, lim, queued, limit)
	}
}

// Without configuration an organization may have 1000 jobs queued.
func TestQueuedLimitHasADefault(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		st, err := b.q.GetOrg(b.ctx, "acme")
		if err != nil || st.MaxQueued != DefaultMaxQueued || DefaultMaxQueued != 1000 {
			t.Fatalf("max_queued %d (%v), want %d", st.MaxQueued, err, DefaultMaxQueued)
		}
	})
}

// A restart queues a job again, so it takes a place under the queued limit as a submit does:
// a tenant at its limit gets no further by cancelling jobs and restarting them, whether they
// ended or still run.
func TestRestartCountsAgainstTheQueuedLimit(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		a := b.submit(t, "acme", "a")
		b.submit(t, "acme", "b")
		if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("c", 0)}, "", ""); err == nil {
			t.Fatal("a third submit past a limit of 2 went through")
		}
		// Cancelling frees a place; the freed place is taken; the cancelled job cannot take
		// another by restarting.
		if _, err := b.q.Cancel(b.ctx, a.ID); err != nil {
			t.Fatal(err)
		}
		b.submit(t, "acme", "c")
		_, err := b.q.Restart(b.ctx, a.ID)
		wantLimit(t, "restart of a stopped job at the limit", err, 2, 2)
		if got := b.status(t, a.ID); got.Status != job.Stopped {
			t.Errorf("a refused restart left the job %s", got.Status)
		}
		if n := b.queued(t, "acme"); n != 2 {
			t.Fatalf("%d queued, want 2", n)
		}

		// A running job's restart is refused at the limit too…
		cl := b.claim(t)
		d := b.submit(t, "acme", "d")
		_, err = b.q.Restart(b.ctx, cl.Job.ID)
		wantLimit(t, "restart of a running job at the limit", err, 2, 2)
		if got := b.status(t, cl.Job.ID); got.StopRequested {
			t.Error("a refused restart asked the running job to stop")
		}
		// …and one accepted below it finds the limit when its run has stopped: the job stops
		// instead of going over.
		if _, err := b.q.Cancel(b.ctx, d.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Restart(b.ctx, cl.Job.ID); err != nil {
			t.Fatalf("restart below the limit: %v", err)
		}
		b.submit(t, "acme", "e")
		st, err := b.q.Fail(b.ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token, Reason: "stopped"})
		if err != nil || st != job.Stopped {
			t.Fatalf("the stopped run of a job with no room to restart: %s %v, want STOPPED", st, err)
		}
		if d := b.lastDetail(t, cl.Job.ID); !strings.Contains(d, "queued limit") {
			t.Errorf("the job's last event does not say why it was not restarted: %q", d)
		}
		if n := b.queued(t, "acme"); n != 2 {
			t.Fatalf("%d queued, want 2", n)
		}
		// Submit-and-cancel-and-restart in a loop never gets past the limit.
		for range 20 {
			if _, err := b.q.Restart(b.ctx, a.ID); err == nil {
				t.Fatal("a restart past the limit went through")
			}
			if n := b.queued(t, "acme"); n > 2 {
				t.Fatalf("%d queued, past the limit of 2", n)
			}
		}
	}, func(c *Config) { c.MaxQueued = 2 })
}

func (b bundle) lastDetail(t *testing.T, id string) string {
	t.Helper()
	evs := b.events(t, id)
	if len(evs) == 0 {
		return ""
	}
	return evs[len(evs)-1].Detail
}

// One report emits at most MaxCheckpointEvents checkpoint events (and outbox entries), however
// many steps it lists: the rest wait, oldest first, for the next reports (and the job's end),
// up to MaxStepBacklog of them. The newest step is the job's checkpoint at once. Steps are
// recorded ascending, once each.
func TestCheckpointReportsAreBounded(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		if err := b.q.SetHooked(b.ctx, "acme", true); err != nil {
			t.Fatal(err)
		}
		spec := jobSpec("long", 0)
		spec.MaxSteps = MaxStep
		j := b.submitSpec(t, "acme", spec)
		cl := b.claim(t)
		b.running(t, j.ID, cl)
		checkpointEvents := func() []string {
			var out []string
			for from := int64(0); ; from += 100 {
				evs, err := b.q.Events(b.ctx, j.ID, from, 100)
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range evs {
					if e.Type == job.EventCheckpoint {
						out = append(out, e.Detail)
					}
				}
				if len(evs) < 100 {
					return out
				}
			}
		}
		outboxBefore, _ := b.rdb.XLen(b.ctx, b.q.keys.outbox()).Result()
		steps := make([]int, 10000)
		for i := range steps {
			steps[i] = i + 1
		}
		heartbeat := func(steps []int) {
			t.Helper()
			if _, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true, Checkpoints: steps}); err != nil {
				t.Fatal(err)
			}
		}
		heartbeat(steps)
		got := checkpointEvents()
		first := 10000 - MaxStepBacklog + 1
		if len(got) != MaxCheckpointEvents || got[0] != fmt.Sprintf("step %d", first) {
			t.Fatalf("10,000 steps in a heartbeat: %d checkpoint events from %v, want %d from step %d", len(got), got[:min(len(got), 1)], MaxCheckpointEvents, first)
		}
		outbox, _ := b.rdb.XLen(b.ctx, b.q.keys.outbox()).Result()
		if outbox-outboxBefore != int64(MaxCheckpointEvents) {
			t.Errorf("%d outbox entries, want %d", outbox-outboxBefore, MaxCheckpointEvents)
		}
		if step, _ := b.rdb.HGet(b.ctx, b.q.keys.job(j.ID), "checkpoint_step").Int(); step != 10000 {
			t.Errorf("checkpoint_step %d, want 10000", step)
		}
		// The next heartbeats announce the rest, a bounded number each, then nothing more.
		for i := 2; i <= MaxStepBacklog/MaxCheckpointEvents+1; i++ {
			heartbeat(nil)
			if n := len(checkpointEvents()); n != min(i*MaxCheckpointEvents, MaxStepBacklog) {
				t.Fatalf("after heartbeat %d: %d checkpoint events", i, n)
			}
		}
		got = checkpointEvents()
		for i, d := range got {
			if d != fmt.Sprintf("step %d", first+i) {
				t.Fatalf("event %d is %q, want step %d: %v", i, d, first+i, got)
			}
		}
		if outbox, _ = b.rdb.XLen(b.ctx, b.q.keys.outbox()).Result(); outbox-outboxBefore != MaxStepBacklog {
			t.Errorf("%d outbox entries in all, want %d", outbox-outboxBefore, MaxStepBacklog)
		}
		// Out of order and repeated: recorded ascending, once each, older ones ignored.
		heartbeat([]int{10002, 5, 10001, 10002})
		got = checkpointEvents()
		if tail := got[len(got)-2:]; !equal(tail, []string{"step 10001", "step 10002"}) {
			t.Errorf("last events %v", tail)
		}
		// At the job's end, every step waiting is announced, before the end.
		more := make([]int, 40)
		for i := range more {
			more[i] = 10003 + i
		}
		heartbeat(more[:20])
		if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Checkpoints: more[20:]}); err != nil {
			t.Fatal(err)
		}
		got = checkpointEvents()
		if tail := got[len(got)-40:]; tail[0] != "step 10003" || tail[39] != "step 10042" {
			t.Errorf("the job ended with checkpoint events %v…%v, want steps 10003 to 10042", tail[0], tail[39])
		}
		if evs := b.events(t, j.ID); evs[len(evs)-1].Type != job.EventCompleted {
			t.Errorf("the last event is %s", evs[len(evs)-1].Type)
		}
	})
}

// A step no job can have, or past the job's max_steps, refuses the whole report: nothing of it
// is recorded — not the progress, not the lease, not an event.
func TestCheckpointStepsBeyondMaxStepsAreRefused(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		j := b.submit(t, "acme", "a") // max_steps 10
		cl := b.claim(t)
		b.running(t, j.ID, cl)
		b.clock.Advance(5 * time.Second)
		state := func() string {
			h, _ := b.rdb.HGetAll(b.ctx, b.q.keys.job(j.ID)).Result()
			p, _ := b.rdb.Get(b.ctx, b.q.keys.progress(j.ID)).Result()
			n, _ := b.rdb.LLen(b.ctx, b.q.keys.events(j.ID)).Result()
			return mustJSON(t, []any{h, p, n})
		}
		was := state()
		cases := []struct {
			steps []int
			index int
		}{
			{[]int{math.MaxInt64}, 0},
			{[]int{-1}, 0},
			{[]int{2, 4, 11}, 2},
			{[]int{2, 12, 4}, 1},
			{[]int{MaxStep + 1}, 0},
		}
		for _, c := range cases {
			reports := map[string]func() error{
				"heartbeat": func() error {
					_, err := b.q.Heartbeat(b.ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true,
						Progress: &job.Progress{Step: 9, MaxSteps: 10}, Checkpoints: c.steps})
					return err
				},
				"complete": func() error {
					_, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}, Checkpoints: c.steps})
					return err
				},
				"fail": func() error {
					_, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "x", Checkpoints: c.steps})
					return err
				},
				"release": func() error {
					_, err := b.q.Release(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "x", Checkpoints: c.steps})
					return err
				},
			}
			for name, report := range reports {
				var se *StepError
				if err := report(); !errors.As(err, &se) || se.Index != c.index || se.Step != c.steps[c.index] {
					t.Errorf("%s with steps %v: %v, want a StepError at index %d", name, c.steps, err, c.index)
				}
				if now := state(); now != was {
					t.Fatalf("%s with steps %v changed the job:\n%s\nwas\n%s", name, c.steps, now, was)
				}
			}
		}
		// Within max_steps all is well.
		if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Checkpoints: []int{5, 10}}); err != nil {
			t.Fatal(err)
		}
	})
}
