package queue

import (
	"errors"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// Delete forgets a job that ended — every key of it, its place in its organization's lists
// and counts, and its archived record — and refuses a live one; the organization's usage is
// kept.
func TestDeleteForgetsAnEndedJob(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		done := b.submitSpec(t, "acme", jobSpec("done", 8))
		cl := b.claim(t)
		if err := b.q.Delete(b.ctx, done.ID); !errors.Is(err, job.ErrConflict) {
			t.Fatalf("delete of a running job: %v, want a conflict", err)
		}
		live := b.submit(t, "acme", "live")
		if err := b.q.Delete(b.ctx, live.ID); !errors.Is(err, job.ErrConflict) {
			t.Fatalf("delete of a queued job: %v, want a conflict", err)
		}
		b.clock.Advance(time.Minute)
		if _, err := b.q.Complete(b.ctx, done.ID, job.Outcome{Token: cl.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}}); err != nil {
			t.Fatal(err)
		}
		usage := func() float64 {
			st, err := b.q.GetOrg(b.ctx, "acme")
			if err != nil {
				t.Fatal(err)
			}
			return st.GPUSeconds
		}
		before := usage()
		if before == 0 {
			t.Fatal("the completed job used no GPU time")
		}
		if err := b.q.Delete(b.ctx, done.ID); err != nil {
			t.Fatal(err)
		}
		if ks := b.jobKeys(t, done.ID); len(ks) != 0 {
			t.Errorf("keys left after the delete: %v", ks)
		}
		if _, err := b.q.Get(b.ctx, done.ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("get after the delete: %v", err)
		}
		if got := b.listIDs(t, "acme"); !equal(got, []string{live.ID}) {
			t.Errorf("list after the delete: %v", got)
		}
		if after := usage(); after != before {
			t.Errorf("usage %v after the delete, %v before", after, before)
		}
		if err := b.q.Delete(b.ctx, done.ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("a second delete: %v", err)
		}

		// An archived job: its record goes.
		old := b.submit(t, "acme", "old")
		if _, err := b.q.Cancel(b.ctx, old.ID); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(b.cfg.Retention + time.Minute)
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get(b.ctx, archiveKey(old.ID)); err != nil {
			t.Fatalf("the old job was not archived: %v", err)
		}
		if err := b.q.Delete(b.ctx, old.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get(b.ctx, archiveKey(old.ID)); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("the archived record after the delete: %v", err)
		}
		if _, err := b.q.Get(b.ctx, old.ID); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("get of the deleted archived job: %v", err)
		}
	}, func(c *Config) { c.Store = store })
}

// A delete of a live job that asks to stop it first: a queued job is stopped at once; a
// running one is deleted by the reaper once it has stopped; and a restart after the mark takes
// the delete back, so the restarted run is never deleted when it ends.
func TestStopThenDelete(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		queued := b.submit(t, "acme", "queued")
		if done, err := b.q.StopThenDelete(b.ctx, queued.ID); err != nil || !done {
			t.Fatalf("stop then delete of a queued job: %t %v", done, err)
		}

		running := b.submitSpec(t, "acme", jobSpec("running", 8))
		b.claim(t)
		if done, err := b.q.StopThenDelete(b.ctx, running.ID); err != nil || done {
			t.Fatalf("stop then delete of a running job: %t %v, want it stopping", done, err)
		}
		// The queued one (which the API deletes at once; the mark finishes it if that fails)
		// goes, the running one stays until it has stopped.
		if n, err := b.q.DeleteEnded(b.ctx, 100); err != nil || n != 1 {
			t.Fatalf("deleted %d (%v); want the queued job alone", n, err)
		}
		if j, err := b.q.Get(b.ctx, running.ID); err != nil || j.Status.Terminal() {
			t.Fatalf("the running job after a pass: %+v %v", j, err)
		}
		// Its agent never confirms: the stop's grace ends, the reaper stops it and deletes it.
		b.clock.Advance(b.cfg.StopGrace + time.Minute)
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Get(b.ctx, running.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("the stopped job after the reaper: %v, want it deleted", err)
		}

		again := b.submitSpec(t, "acme", jobSpec("again", 8))
		b.claim(t)
		if _, err := b.q.StopThenDelete(b.ctx, again.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Restart(b.ctx, again.ID); err != nil {
			t.Fatalf("restart after a stop-then-delete: %v", err)
		}
		b.clock.Advance(b.cfg.StopGrace + time.Minute)
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		cl := b.claim(t)
		if cl.Job.ID != again.ID {
			t.Fatalf("claimed %s, want the restarted %s", cl.Job.ID, again.ID)
		}
		if _, err := b.q.Complete(b.ctx, again.ID, job.Outcome{Token: cl.Lease.Token, Progress: &job.Progress{Step: 10, MaxSteps: 10}}); err != nil {
			t.Fatal(err)
		}
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if j, err := b.q.Get(b.ctx, again.ID); err != nil || j.Status != job.Completed {
			t.Errorf("the restarted run once it completed: %+v %v, want it kept", j, err)
		}
	})
}
