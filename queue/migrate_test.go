package queue

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// move copies key from to key to (on a cluster the two are on different shards) and deletes it.
func (b bundle) move(t *testing.T, from, to string) {
	t.Helper()
	dump, err := b.rdb.Dump(b.ctx, from).Result()
	if err == redis.Nil {
		return
	}
	if err == nil {
		err = b.rdb.RestoreReplace(b.ctx, to, 0, dump).Err()
	}
	if err == nil {
		err = b.rdb.Del(b.ctx, from).Err()
	}
	if err != nil {
		t.Fatalf("move %s to %s: %v", from, to, err)
	}
}

// A store written before jobs had their own slots — every job's config and secrets at the old
// keys, the ended jobs' records in the queue's slot — reads, claims and archives as before
// while the reaper migrates it, and once it has, nothing is left at the old places.
func TestAStoreFromBeforeOwnSlotsIsMigrated(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, b bundle) {
		queued := b.submitSpec(t, "acme", jobSpec("queued", 8))
		stopped := b.submit(t, "acme", "stopped")
		if _, err := b.q.Cancel(b.ctx, stopped.ID); err != nil {
			t.Fatal(err)
		}
		// Back to the old layout, as the tree before issue 15 wrote it.
		for _, id := range []string{queued.ID, stopped.ID} {
			b.move(t, b.q.keys.own(id, "owncfg"), b.q.keys.oldConfig(id))
			b.move(t, b.q.keys.own(id, "ownsec"), b.q.keys.oldSecrets(id))
		}
		b.move(t, b.q.keys.own(stopped.ID, "ownjob"), b.q.keys.job(stopped.ID))
		b.move(t, b.q.keys.own(stopped.ID, "ownev"), b.q.keys.events(stopped.ID))
		if err := b.rdb.HDel(b.ctx, b.q.keys.meta(), "own_done").Err(); err != nil {
			t.Fatal(err)
		}
		q := New(b.rdb, b.cfg)
		defer q.Close()
		b.q = q

		// Before the reaper has run: reads and claims find the config at its old key.
		for _, id := range []string{queued.ID, stopped.ID} {
			if j := b.status(t, id); j.Config.Name == "" {
				t.Errorf("job %s reads without its config", id)
			}
		}
		if evs := b.events(t, stopped.ID); len(evs) != 2 {
			t.Errorf("the stopped job has %d events, want 2", len(evs))
		}
		cl := b.claim(t)
		if cl.Job.ID != queued.ID || cl.Job.Config.Name != "queued" {
			t.Fatalf("claimed %s with config %q", cl.Job.ID, cl.Job.Config.Name)
		}

		// The reaper migrates: the old keys are gone, the ended job is in its own slot.
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		for _, k := range []string{b.q.keys.oldConfig(queued.ID), b.q.keys.oldConfig(stopped.ID), b.q.keys.oldSecrets(stopped.ID),
			b.q.keys.job(stopped.ID), b.q.keys.events(stopped.ID)} {
			if n, _ := b.rdb.Exists(b.ctx, k).Result(); n != 0 {
				t.Errorf("%s is still there after the migration", k)
			}
		}
		if j := b.status(t, stopped.ID); j.Status != job.Stopped || j.Config.Name != "stopped" {
			t.Errorf("after the migration the stopped job reads %s, config %q", j.Status, j.Config.Name)
		}
		if done, _ := b.rdb.HGet(b.ctx, b.q.keys.meta(), "own_done").Result(); done != "1" {
			t.Errorf("own_done %q after a whole pass", done)
		}
		if _, err := b.q.Complete(b.ctx, queued.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		// And it archives as before.
		b.q.cfg.Store = store
		b.clock.Advance(b.cfg.Retention + time.Hour)
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range []string{queued.ID, stopped.ID} {
			if ks := b.jobKeys(t, id); len(ks) != 0 {
				t.Errorf("job %s left keys after archiving: %v", id, ks)
			}
			if j := b.status(t, id); j.Config.Name == "" {
				t.Errorf("archived job %s reads without its config", id)
			}
		}
	})
}
