package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// memory is what Redis reports it uses for every key of the test's prefix (MEMORY USAGE,
// every element counted).
func (b bundle) memory(t *testing.T) int64 {
	t.Helper()
	var total int64
	// The queue's keys, and every job's own ("{<tag>:<id>}:...").
	ks := append(b.keysMatching(t, b.q.keys.prefix+"*"), b.keysMatching(t, "{"+b.q.keys.tag+":*")...)
	for _, k := range ks {
		n, err := b.rdb.MemoryUsage(b.ctx, k, 0).Result()
		if err != nil {
			t.Fatalf("memory usage %s: %v", k, err)
		}
		total += n
	}
	return total
}

// What a job costs in Redis while it is live, once it ended, and once the archiver moved it
// out: a tenant that submits and cancels in a loop holds memory for the retention only, and
// after it no more than before. The figures go to docs/operations.md.
func TestRedisMemoryPerJobIsBounded(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const n = 100
	each(t, func(t *testing.T, b bundle) {
		reaper := NewReaper(b.q, time.Second, nil)
		archiveAll := func() {
			b.clock.Advance(b.cfg.Retention + time.Minute)
			if _, err := reaper.RunOnce(b.ctx); err != nil {
				t.Fatal(err)
			}
		}
		// The organization's own keys exist once it has had a job.
		first := b.submit(t, "acme", "warm-up")
		if _, err := b.q.Cancel(b.ctx, first.ID); err != nil {
			t.Fatal(err)
		}
		archiveAll()
		base := b.memory(t)

		ids := make([]string, 0, 2*n)
		for i := range n {
			j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("live", 0), SealedSecrets: sealedSample}, "", "")
			if err != nil {
				t.Fatalf("submit %d: %v", i, err)
			}
			ids = append(ids, j.ID)
		}
		live := b.memory(t)
		for _, id := range ids {
			if _, err := b.q.Cancel(b.ctx, id); err != nil {
				t.Fatal(err)
			}
		}
		ended := b.memory(t)
		// Submit-and-cancel, the loop a tenant could run to fill Redis.
		for range n {
			j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("cycle", 0), SealedSecrets: sealedSample}, "", "")
			if err != nil {
				t.Fatal(err)
			}
			if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		cycled := b.memory(t)
		archiveAll()
		after := b.memory(t)

		perLive := (live - base) / n
		perEnded := (ended - base) / n
		perCycle := (cycled - ended) / n
		t.Logf("Redis bytes per job: live %d, ended before the retention %d (submit-and-cancel: %d); after it %d in all for %d jobs",
			perLive, perEnded, perCycle, after-base, 2*n)
		// Bounds with room over what was measured (1.3 to 1.8 KB a job: docs/operations.md),
		// so a regression that keeps a large value per job fails.
		if perLive > 3072 || perEnded > 3072 || perCycle > 3072 {
			t.Errorf("bytes per job: live %d, ended %d, submit-and-cancel %d; want at most 3072", perLive, perEnded, perCycle)
		}
		// After the retention nothing of the jobs is left: the org's counters only.
		if after > base {
			t.Errorf("after archiving %d jobs Redis holds %d bytes more than before them", 2*n, after-base)
		}
		for _, id := range ids[:3] {
			if ks := b.jobKeys(t, id); len(ks) != 0 {
				t.Errorf("job %s left keys: %v", id, ks)
			}
		}
		if _, err := b.q.Get(b.ctx, ids[len(ids)-1]); err != nil {
			t.Errorf("an archived job does not read: %v", err)
		}
	}, func(c *Config) { c.Store = store })
}

// sealedSample stands for a job's sealed secrets: a few hundred bytes, as a small [secrets]
// table seals to.
var sealedSample = "v1.test." + strings.Repeat("x", 200)
