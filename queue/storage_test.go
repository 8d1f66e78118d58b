package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
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

// completedWithData runs a job of org to completion as an agent would, having stored 300 bytes
// of metrics and a committed checkpoint of step 5, and returns its id.
func completedWithData(t *testing.T, b bundle, store blob.Store, org, name string) string {
	t.Helper()
	j := b.submitSpec(t, org, jobSpec(name, 8))
	cl := b.claimFor(t, "agent-1", h100x8)
	if cl == nil || cl.Job.ID != j.ID {
		t.Fatalf("claim: %+v", cl)
	}
	putBytes(t, store, j.ID, "metrics/000001-00000001-00000002-0000.jsonl", 300)
	putCheckpoint(t, store, j.ID, 5)
	if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Checkpoints: []int{5}}); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// flakyStore is a real store whose listings of some jobs fail while told to: an object store
// that refuses a job's folder. (One store serves both backends' subtests at once, so each
// refuses its own job.)
type flakyStore struct {
	blob.Store
	mu   sync.Mutex
	fail map[string]bool // job ids
}

func (f *flakyStore) refuse(id string, on bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail == nil {
		f.fail = map[string]bool{}
	}
	f.fail[id] = on
}

func (f *flakyStore) List(ctx context.Context, prefix string) ([]blob.Object, error) {
	f.mu.Lock()
	fail := false
	for id, on := range f.fail {
		fail = fail || (on && strings.HasPrefix(prefix, jobdata.JobPrefix(id)))
	}
	f.mu.Unlock()
	if fail {
		return nil, errors.New("AccessDenied")
	}
	return f.Store.List(ctx, prefix)
}

// storageCheck meters a bundle's storage and checks its figures.
type storageCheck struct {
	t *testing.T
	b bundle
}

// meter runs the meter until nothing due is left, in small batches, and reports how many
// jobs could not be listed.
func (s storageCheck) meter() (failed int) {
	s.t.Helper()
	for {
		m, err := s.b.q.MeterStorage(s.b.ctx, 2)
		if err != nil {
			s.t.Fatal(err)
		}
		failed += m.Failed
		if !m.More {
			return failed
		}
	}
}

// want checks each job's bytes as measured, and that the organization's total is their sum
// (jobs lists all the organization's measured jobs).
func (s storageCheck) want(org string, jobs map[string]int64) {
	s.t.Helper()
	st, err := s.b.q.GetOrg(s.b.ctx, org)
	if err != nil {
		s.t.Fatal(err)
	}
	ids := make([]string, 0, len(jobs))
	var sum int64
	for id, n := range jobs {
		ids = append(ids, id)
		sum += n
	}
	got, err := s.b.q.StoredBytes(s.b.ctx, org, ids)
	if err != nil {
		s.t.Fatal(err)
	}
	for id, n := range jobs {
		if got[id] != n {
			s.t.Errorf("%s: job %s keeps %d bytes as measured; want %d", org, id, got[id], n)
		}
	}
	if st.StorageBytes != sum {
		s.t.Errorf("%s keeps %d bytes as measured; want %d", org, st.StorageBytes, sum)
	}
}

// What each organization keeps in object storage is measured by the reaper's storage meter: a
// live job at once and every StorageEvery, a job that ended soon after and once more later
// (what a cut-off agent wrote late); the checkpoint TTL's deletions are measured again,
// archived job or not; a deleted job counts no more, and a measurement that finishes after the
// delete writes nothing back. The organization's total is always the sum of its jobs'.
func TestStorageIsMeasuredPerOrganization(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		s := storageCheck{t, b}
		if err := b.q.SetOrg(ctx, "acme", job.OrgSettings{CheckpointTTLDays: 30}); err != nil {
			t.Fatal(err)
		}
		// acme: one job running, one ended with a checkpoint, one cancelled before it ran;
		// zeta: one ended.
		ended := func(org, name string) string { return completedWithData(t, b, store, org, name) }
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
		otherBytes := 300 + 1 + manifestSize(other, 5)

		// At once: the live job is measured, the ended ones are not yet (their last uploads
		// may still be landing).
		s.meter()
		s.want("acme", map[string]int64{live.ID: 1000, done: 0})
		s.want("zeta", map[string]int64{other: 0})
		b.clock.Advance(storedAfterEnd)
		s.meter()
		s.want("acme", map[string]int64{live.ID: 1000, done: doneBytes, queued.ID: 0})
		s.want("zeta", map[string]int64{other: otherBytes})

		// The live job writes more: measured again once StorageEvery has passed, not before.
		// An agent cut off from the ended job writes to it late: measured once more, later.
		putBytes(t, store, live.ID, "logs/attempt_1/trainer/000000001000.log", 500)
		putBytes(t, store, done, "logs/attempt_1/trainer/000000000000.log", 40)
		b.clock.Advance(b.cfg.StorageEvery / 2)
		s.meter()
		s.want("acme", map[string]int64{live.ID: 1000, done: doneBytes})
		b.clock.Advance(b.cfg.StorageEvery / 2)
		s.meter()
		s.want("acme", map[string]int64{live.ID: 1500, done: doneBytes})
		b.clock.Advance(storedLate)
		s.meter()
		doneBytes += 40
		s.want("acme", map[string]int64{live.ID: 1500, done: doneBytes})
		// Nothing is due for the ended jobs any more; the live job stays filed.
		if n, err := b.rdb.ZCard(ctx, b.q.keys.storedDue()).Result(); err != nil || n != 1 {
			t.Errorf("due to be measured: %d entries, %v; want the live job's alone", n, err)
		}

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
		s.want("acme", map[string]int64{live.ID: 1500, done: 340})

		// Deleted with its data, the job counts no more, and a measurement that lands after the
		// delete writes nothing back.
		if _, err := jobdata.DeleteJob(ctx, store, done); err != nil {
			t.Fatal(err)
		}
		if err := b.q.Delete(ctx, done); err != nil {
			t.Fatal(err)
		}
		s.want("acme", map[string]int64{live.ID: 1500, done: 0})
		if err := b.q.fileStored(ctx, "acme", done, "set", 300); err != nil {
			t.Fatal(err)
		}
		s.want("acme", map[string]int64{live.ID: 1500, done: 0})
		putBytes(t, store, done, "metrics/000001-00000003-00000004-0000.jsonl", 10) // a late writer
		if err := b.q.remeasure(ctx, "acme", done); err != nil {
			t.Fatal(err)
		}
		s.want("acme", map[string]int64{live.ID: 1500, done: 0})
		s.want("zeta", map[string]int64{other: otherBytes})
	}, func(c *Config) { c.Store = store; c.StorageEvery = time.Minute })
}

// The meter does not stall: many jobs that end in the same millisecond are all measured, a
// job whose objects cannot be listed holds up none of the others and is measured once it can
// be, and the jobs of a store from before the meter are filed for it once.
func TestStorageMeterKeepsGoing(t *testing.T) {
	t.Parallel()
	s3, _ := s3test.Store(t)
	store := &flakyStore{Store: s3}
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		s := storageCheck{t, b}
		// Five jobs end in one millisecond (the clock stands still): more than a batch.
		var ids []string
		var tokens []string
		for i := range 5 {
			j := b.submitSpec(t, "acme", jobSpec("same-ms", 8))
			cl := b.claimFor(t, "agent-1", h100x8)
			if cl == nil || cl.Job.ID != j.ID {
				t.Fatalf("claim: %+v", cl)
			}
			putBytes(t, store, j.ID, "metrics/000001-00000001-00000002-0000.jsonl", 100*(i+1))
			ids, tokens = append(ids, j.ID), append(tokens, cl.Lease.Token)
		}
		for i, id := range ids {
			if _, err := b.q.Complete(ctx, id, job.Outcome{Token: tokens[i]}); err != nil {
				t.Fatal(err)
			}
		}
		store.refuse(ids[2], true)
		b.clock.Advance(storedAfterEnd)
		if failed := s.meter(); failed != 1 {
			t.Errorf("%d jobs failed to be listed; want the one refused", failed)
		}
		want := map[string]int64{ids[0]: 100, ids[1]: 200, ids[2]: 0, ids[3]: 400, ids[4]: 500}
		s.want("acme", want)
		// Listed again a minute later, once the store lets it.
		store.refuse(ids[2], false)
		s.meter()
		s.want("acme", want)
		b.clock.Advance(time.Minute)
		s.meter()
		want[ids[2]] = 300
		s.want("acme", want)

		// A store from before the meter: nothing of its jobs was filed, nor their bytes.
		for _, k := range []string{b.q.keys.storedDue(), b.q.keys.orgStored("acme")} {
			if err := b.rdb.Del(ctx, k).Err(); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.rdb.HDel(ctx, b.q.keys.org("acme"), "stored").Err(); err != nil {
			t.Fatal(err)
		}
		if err := b.rdb.HDel(ctx, b.q.keys.meta(), "stored_filed").Err(); err != nil {
			t.Fatal(err)
		}
		b.q.storedFiled.Store(false)
		s.meter()
		s.want("acme", want)
	}, func(c *Config) { c.Store = store })
}
