package queue

import (
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// On a cluster, a job that ended is moved to its own slot by the process that ended it; if that
// process dies first, the reaper moves it, and until then it reads from the queue's slot.
func TestTheReaperSettlesWhatACrashLeft(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	j := b.submit(t, "acme", "crash")
	// The cancel function alone, as a process that died before settling would leave it.
	if err := b.q.call(b.ctx, "cancel", b.q.keys.job(j.ID), args{"id": j.ID, "grace": 1000}).Err(); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.rdb.ZCard(b.ctx, b.q.keys.settle()).Result(); n != 1 {
		t.Fatalf("%d jobs filed to settle, want 1", n)
	}
	if got := b.status(t, j.ID); got.Status != job.Stopped {
		t.Errorf("before it is settled the job reads %s", got.Status)
	}
	if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := b.rdb.Exists(b.ctx, b.q.keys.job(j.ID), b.q.keys.events(j.ID)).Result(); n != 0 {
		t.Errorf("%d keys of the job left in the queue's slot after the reaper ran", n)
	}
	if n, _ := b.rdb.ZCard(b.ctx, b.q.keys.settle()).Result(); n != 0 {
		t.Errorf("%d jobs still filed to settle", n)
	}
	if got := b.status(t, j.ID); got.Status != job.Stopped || got.Config.Name != "crash" {
		t.Errorf("after it is settled the job reads %s, config %q", got.Status, got.Config.Name)
	}
}

// A settler that read a job's record before a restart and a later end cannot write that stale
// record over the later one: a job's events only grow from one end to the next.
func TestAStaleSettlerWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, backends[1])
	j := b.submit(t, "acme", "stale")
	if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	stale, err := b.q.readRecord(b.ctx, j.ID, true)
	if err != nil || len(stale.hash) == 0 {
		t.Fatalf("the ended job's own record: %v %v", stale, err)
	}
	if _, err := b.q.Restart(b.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
		t.Fatal(err)
	}
	later := len(b.events(t, j.ID))
	if later <= len(stale.events) {
		t.Fatalf("%d events after the restart and stop, %d before", later, len(stale.events))
	}
	put, err := b.q.call(b.ctx, "put_own", b.q.keys.own(j.ID, "ownjob"), args{
		"id": j.ID, "finished_at": stale.hash["finished_at"], "progress": stale.progress, "nfields": 2 * len(stale.hash),
	}, stale.flat()...).Int()
	if err != nil || put != 0 {
		t.Fatalf("put_own of a stale record: %d %v, want 0", put, err)
	}
	if got := len(b.events(t, j.ID)); got != later {
		t.Errorf("the job has %d events after the stale write, want %d", got, later)
	}
}
