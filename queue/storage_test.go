package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// putBytes stores n bytes under a job's key.
func putBytes(t *testing.T, store blob.Store, id, rest string, n int) {
	t.Helper()
	if err := store.Put(context.Background(), jobdata.JobPrefix(id)+rest, bytes.NewReader([]byte(strings.Repeat("x", n)))); err != nil {
		t.Fatal(err)
	}
}

// manifestSize is the size of the manifest putCheckpoint writes for step of job id.
func manifestSize(id string, step int) int64 {
	m, _ := json.Marshal(jobdata.Manifest{JobID: id, Step: step, Files: []jobdata.ManifestFile{{Path: "trainer/.metadata", Size: 1}}})
	return int64(len(m))
}

// What each organization keeps in object storage is measured by the reaper's storage meter: a
// live job every StorageEvery, a job that ended once, soon after; the checkpoint TTL's
// deletions are measured again, archived job or not; a deleted job counts no more, and a
// measurement that finishes after the delete writes nothing back. The organization's total is
// always the sum of its jobs'.
func TestStorageIsMeasuredPerOrganization(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if err := b.q.SetOrg(ctx, "acme", job.OrgSettings{CheckpointTTLDays: 30}); err != nil {
			t.Fatal(err)
		}
		// acme: one job running, one ended with checkpoints, one cancelled before it ran;
		// zeta: one ended.
		ended := func(org, name string) string {
			t.Helper()
			j := b.submitSpec(t, org, jobSpec(name, 8))
			cl := b.claimFor(t, "agent-1", h100x8)
			if cl == nil || cl.Job.ID != j.ID {
				t.Fatalf("claim: %+v", cl)
			}
			putBytes(t, store, j.ID, "metrics/000001-00000001-00000002-0000.jsonl", 300)
			putCheckpoint(t, store, j.ID, 5)
			if _, err := b.q.Complete(ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Checkpoints: []int{5}}); err != nil {
				t.Fatal(err)
			}
			return j.ID
		}
		done, other := ended("acme", "done"), ended("zeta", "other")
		queued := b.submitSpec(t, "acme", jobSpec("cancelled", 8))
		if _, err := b.q.Cancel(ctx, queued.ID); err != nil {
			t.Fatal(err)
		}
		live := b.submitSpec(t, "acme", jobSpec("live", 8))
		if cl := b.claimFor(t, "agent-2", h100x8); cl == nil || cl.Job.ID != live.ID {
			t.Fatalf("claim of the live job: %+v", cl)
		}
		putBytes(t, store, live.ID, "logs/attempt_1/trainer/000000000000.log", 1000)
		doneBytes := 300 + 1 + manifestSize(done, 5)

		meter := func() {
			t.Helper()
			for {
				_, more, err := b.q.MeterStorage(ctx, 2) // small batches: the cursor moves between them
				if err != nil {
					t.Fatal(err)
				}
				if !more {
					return
				}
			}
		}
		want := func(org string, jobs map[string]int64) {
			t.Helper()
			st, err := b.q.GetOrg(ctx, org)
			if err != nil {
				t.Fatal(err)
			}
			ids := make([]string, 0, len(jobs))
			var sum int64
			for id, n := range jobs {
				ids = append(ids, id)
				sum += n
			}
			got, err := b.q.StoredBytes(ctx, org, ids)
			if err != nil {
				t.Fatal(err)
			}
			for id, n := range jobs {
				if got[id] != n {
					t.Errorf("%s: job %s keeps %d bytes as measured; want %d", org, id, got[id], n)
				}
			}
			if st.StorageBytes != sum {
				t.Errorf("%s keeps %d bytes as measured; want %d", org, st.StorageBytes, sum)
			}
		}

		// At once: the live job is measured (a cycle over live jobs is due), the ended ones are
		// not yet (their last uploads may still be landing).
		meter()
		want("acme", map[string]int64{live.ID: 1000, done: 0})
		want("zeta", map[string]int64{other: 0})
		b.clock.Advance(storageLag + time.Millisecond)
		meter()
		want("acme", map[string]int64{live.ID: 1000, done: doneBytes, queued.ID: 0})
		want("zeta", map[string]int64{other: 300 + 1 + manifestSize(other, 5)})

		// The live job writes more: measured again once StorageEvery has passed, not before.
		putBytes(t, store, live.ID, "logs/attempt_1/trainer/000000001000.log", 500)
		b.clock.Advance(b.cfg.StorageEvery / 2)
		meter()
		want("acme", map[string]int64{live.ID: 1000, done: doneBytes})
		b.clock.Advance(b.cfg.StorageEvery / 2)
		meter()
		want("acme", map[string]int64{live.ID: 1500, done: doneBytes})

		// Past the retention the ended job is archived, and past the TTL its checkpoint goes:
		// measured again, what is left of it counts.
		b.clock.Advance(8 * 24 * time.Hour)
		if n, _, err := b.q.Archive(ctx, 100); err != nil || n < 1 {
			t.Fatalf("archive: %d, %v", n, err)
		}
		b.clock.Advance(23 * 24 * time.Hour)
		if n, _, err := b.q.ExpireCheckpoints(ctx, 100); err != nil || n != 2 {
			t.Fatalf("expire: %d, %v; want acme's two ended jobs", n, err)
		}
		want("acme", map[string]int64{live.ID: 1500, done: 300})

		// Deleted with its data, the job counts no more, and a measurement that lands after the
		// delete writes nothing back.
		if _, err := jobdata.DeleteJob(ctx, store, done); err != nil {
			t.Fatal(err)
		}
		if err := b.q.Delete(ctx, done); err != nil {
			t.Fatal(err)
		}
		want("acme", map[string]int64{live.ID: 1500, done: 0})
		if err := b.q.fileStored(ctx, "acme", done, "set", 300); err != nil {
			t.Fatal(err)
		}
		want("acme", map[string]int64{live.ID: 1500, done: 0})
		putBytes(t, store, done, "metrics/000001-00000003-00000004-0000.jsonl", 10) // a late writer
		if err := b.q.remeasure(ctx, "acme", done); err != nil {
			t.Fatal(err)
		}
		want("acme", map[string]int64{live.ID: 1500, done: 0})
		want("zeta", map[string]int64{other: 300 + 1 + manifestSize(other, 5)})
	}, func(c *Config) { c.Store = store; c.StorageEvery = time.Minute })
}
