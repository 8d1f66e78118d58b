package queue

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// keysMatching lists the keys that match a SCAN pattern, on every master of a cluster.
func (b bundle) keysMatching(t *testing.T, pattern string) []string {
	t.Helper()
	keys, err := redistest.AllKeys(b.ctx, b.rdb, pattern)
	if err != nil {
		t.Fatalf("scan %s: %v", pattern, err)
	}
	return keys
}

// jobKeys are the keys in Redis that belong to job id.
func (b bundle) jobKeys(t *testing.T, id string) []string {
	t.Helper()
	return append(b.keysMatching(t, b.q.keys.prefix+"*"+id+"*"), b.keysMatching(t, rediskeys.OwnTag(b.q.keys.tag, id)+"*")...)
}

func (b bundle) events(t *testing.T, id string) []job.Event {
	t.Helper()
	evs, err := b.q.Events(b.ctx, id, 0, 1000)
	if err != nil {
		t.Fatal(err)
	}
	return evs
}

func (b bundle) listIDs(t *testing.T, org string) []string {
	t.Helper()
	jobs, _, err := b.q.List(b.ctx, org, job.ListFilter{}, "", 100)
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, j := range jobs {
		ids = append(ids, j.ID)
	}
	slices.Sort(ids)
	return ids
}

func sorted(ids ...string) []string {
	return slices.Sorted(slices.Values(ids))
}

// A job that ended leaves Redis once the retention has passed — every key of it — and reads
// back from its record in object storage exactly as it read before: state, config, progress,
// events. Live jobs and jobs that ended within the retention stay.
func TestArchiveAfterRetention(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		spec := jobSpec("done", 8)
		done := b.submitSpec(t, "acme", spec)
		cl := b.claim(t)
		if _, err := b.q.Heartbeat(b.ctx, done.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true, Checkpoints: []int{5}}); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Complete(b.ctx, done.ID, job.Outcome{Token: cl.Lease.Token,
			Progress: &job.Progress{Step: 10, MaxSteps: 10, Checkpoints: 2, CheckpointStep: 10}, Checkpoints: []int{10}}); err != nil {
			t.Fatal(err)
		}
		failed := b.submit(t, "acme", "failed")
		cf := b.claimFor(t, "agent-2", h100x8)
		if _, err := b.q.Fail(b.ctx, failed.ID, job.Outcome{Token: cf.Lease.Token, Reason: "CUDA out of memory"}); err != nil {
			t.Fatal(err)
		}
		stopped, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("stopped", 0), SealedSecrets: "sealed-secret-bytes"}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.Cancel(b.ctx, stopped.ID); err != nil {
			t.Fatal(err)
		}
		live := b.submit(t, "acme", "live")
		ended := []string{done.ID, failed.ID, stopped.ID}
		before := map[string]*job.Job{}
		beforeEvents := map[string][]job.Event{}
		for _, id := range ended {
			before[id] = b.status(t, id)
			beforeEvents[id] = b.events(t, id)
			if len(b.jobKeys(t, id)) == 0 {
				t.Fatalf("job %s has no keys before archiving", id)
			}
		}
		// Its secrets left Redis when it ended; their copy in object storage is what a fork reads.
		if ks := b.jobKeys(t, stopped.ID); slices.Contains(ks, b.q.keys.own(stopped.ID, "ownsec")) {
			t.Fatalf("the stopped job's secrets are still in Redis: %v", ks)
		}
		if sec, err := b.q.SealedSecrets(b.ctx, stopped.ID); err != nil || sec != "sealed-secret-bytes" {
			t.Fatalf("the stopped job's secrets from their copy: %q %v", sec, err)
		}

		// Within the retention, nothing moves.
		b.clock.Advance(b.cfg.Retention - time.Minute)
		reaper := NewReaper(b.q, time.Second, nil)
		if _, err := reaper.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		for _, id := range ended {
			if len(b.jobKeys(t, id)) == 0 {
				t.Fatalf("job %s left Redis before its retention", id)
			}
		}
		b.clock.Advance(2 * time.Minute)
		recent := b.submit(t, "acme", "recent")
		if _, err := b.q.Cancel(b.ctx, recent.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := reaper.RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}

		for _, id := range ended {
			if ks := b.jobKeys(t, id); len(ks) != 0 {
				t.Errorf("job %s still has keys in Redis after archiving: %v", id, ks)
			}
			got, err := b.q.Get(b.ctx, id)
			if err != nil {
				t.Fatalf("get archived %s: %v", id, err)
			}
			if a, w := mustJSON(t, got), mustJSON(t, before[id]); a != w {
				t.Errorf("archived job reads\n%s\nwant\n%s", a, w)
			}
			if a, w := mustJSON(t, b.events(t, id)), mustJSON(t, beforeEvents[id]); a != w {
				t.Errorf("archived events read\n%s\nwant\n%s", a, w)
			}
			page, err := b.q.Events(b.ctx, id, 1, 1)
			if err != nil || len(page) != 1 || page[0].Seq != 2 {
				t.Errorf("a page of an archived job's events: %+v %v", page, err)
			}
		}
		if got := before[done.ID]; got.Status != job.Completed || got.Progress.CheckpointStep != 10 {
			t.Errorf("the completed job read %s at checkpoint %d", got.Status, got.Progress.CheckpointStep)
		}
		if got := b.status(t, failed.ID); got.Error != "CUDA out of memory" {
			t.Errorf("the failed job's error reads %q", got.Error)
		}
		// Live jobs and jobs within their retention stay; lists show what is in Redis.
		for _, id := range []string{live.ID, recent.ID} {
			if len(b.jobKeys(t, id)) == 0 {
				t.Errorf("job %s left Redis", id)
			}
		}
		if got, want := b.listIDs(t, "acme"), sorted(live.ID, recent.ID); !equal(got, want) {
			t.Errorf("list: %v, want %v", got, want)
		}
		if n, _ := b.rdb.ZCard(b.ctx, b.q.keys.ended()).Result(); n != 1 {
			t.Errorf("%d jobs in the index of ended jobs, want the recent one", n)
		}

		// The record is outside the job's own prefix (its agent's credentials reach that) and
		// never holds the job's sealed secrets.
		rc, err := store.Get(b.ctx, archiveKey(stopped.ID))
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(rc)
		rc.Close()
		if strings.Contains(string(raw), "sealed-secret-bytes") {
			t.Error("the record holds the job's secrets")
		}
		if strings.HasPrefix(archiveKey(stopped.ID), "jobs/") {
			t.Error("the record is under jobs/, which the job's agent may write")
		}
		// The copy of its inputs went with it: an archived job's secrets are kept nowhere.
		if sec, err := b.q.SealedSecrets(b.ctx, stopped.ID); err != nil || sec != "" {
			t.Errorf("an archived job's secrets: %q %v", sec, err)
		}

		// An archived job cannot change: a restart is a conflict, stopping a stopped job is
		// the no-op it always is, stopping a failed one a conflict.
		if _, err := b.q.Restart(b.ctx, failed.ID); !errors.Is(err, ErrArchived) || !errors.Is(err, job.ErrConflict) {
			t.Errorf("restart of an archived job: %v, want ErrArchived", err)
		}
		if j, err := b.q.Cancel(b.ctx, stopped.ID); err != nil || j.Status != job.Stopped {
			t.Errorf("cancel of an archived stopped job: %v %v", j, err)
		}
		if _, err := b.q.Cancel(b.ctx, failed.ID); !errors.Is(err, job.ErrConflict) {
			t.Errorf("cancel of an archived failed job: %v", err)
		}
		if _, err := b.q.Get(b.ctx, "0190a0a0-0000-7000-8000-000000000000"); !errors.Is(err, job.ErrNotFound) {
			t.Errorf("a job that never was: %v", err)
		}
	}, func(c *Config) { c.Store = store })
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// The record is written before the job leaves Redis, and the job leaves only as recorded: with
// object storage down the job stays in Redis (and reads as before), and a job that changed
// after it was read (restarted) is not removed.
func TestArchiveNeverLosesAJob(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		store, srv := s3test.Store(t)
		b.q.cfg.Store = store
		j := b.submit(t, "acme", "a")
		if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(b.cfg.Retention + time.Hour)

		srv.Stop()
		ctx, cancel := context.WithTimeout(b.ctx, 30*time.Second)
		defer cancel()
		if _, _, err := b.q.Archive(ctx, 10); err == nil {
			t.Fatal("archive with object storage down: no error")
		}
		if len(b.jobKeys(t, j.ID)) == 0 {
			t.Fatal("the job left Redis though its record was never written")
		}
		if got := b.status(t, j.ID); got.Status != job.Stopped {
			t.Errorf("status %s", got.Status)
		}

		// The job changed after the archiver read it: the function removes nothing.
		n, err := b.q.call(b.ctx, "archive", b.q.keys.job(j.ID), args{"id": j.ID, "finished_at": "1", "org": "acme", "bytes": 0}).Int()
		if err != nil || n != 0 {
			t.Fatalf("archive of a job unlike its record: %d %v", n, err)
		}
		if len(b.jobKeys(t, j.ID)) == 0 {
			t.Fatal("a job unlike its record left Redis")
		}
		// A restarted job is no longer due for archiving.
		if _, err := b.q.Restart(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if n, _ := b.rdb.ZCard(b.ctx, b.q.keys.ended()).Result(); n != 0 {
			t.Errorf("a restarted job is still in the index of ended jobs")
		}
	})
}

// An organization that submits and cancels in a loop keeps at most MaxEnded ended jobs in
// Redis, however short the loop: the archiver moves its oldest ones early, and they read by id.
func TestEndedJobsPerOrganizationAreCapped(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	each(t, func(t *testing.T, b bundle) {
		live := b.submit(t, "acme", "live") // the oldest job, and live: the walk passes it
		var ids []string
		for range 23 {
			j := b.submit(t, "acme", "flood")
			if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		other := b.submit(t, "globex", "x")
		if _, err := b.q.Cancel(b.ctx, other.ID); err != nil {
			t.Fatal(err)
		}
		if _, err := NewReaper(b.q, time.Second, nil).RunOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		if got, want := b.listIDs(t, "acme"), sorted(append([]string{live.ID}, ids[18:]...)...); !equal(got, want) {
			t.Errorf("acme keeps %v, want the live job and its 5 newest ended ones %v", got, want)
		}
		for _, id := range ids[:18] {
			if ks := b.jobKeys(t, id); len(ks) != 0 {
				t.Fatalf("job %s past the cap still in Redis: %v", id, ks)
			}
			if got := b.status(t, id); got.Status != job.Stopped {
				t.Errorf("archived job %s reads %s", id, got.Status)
			}
		}
		if n, _ := b.rdb.HGet(b.ctx, b.q.keys.org("acme"), "ended").Int(); n != 5 {
			t.Errorf("acme counts %d ended jobs, want 5", n)
		}
		if len(b.jobKeys(t, other.ID)) == 0 {
			t.Error("another organization's job under the cap was archived")
		}
	}, func(c *Config) { c.Store, c.MaxEnded = store, 5 })
}
