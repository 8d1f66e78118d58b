package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// putCheckpoint stores a committed checkpoint of step for a job, as an agent does (a file,
// then its manifest).
func putCheckpoint(t *testing.T, store blob.Store, id string, step int) {
	t.Helper()
	ctx := context.Background()
	prefix := jobdata.CheckpointPrefix(id, step)
	if err := store.Put(ctx, prefix+"trainer/.metadata", bytes.NewReader([]byte("x"))); err != nil {
		t.Fatal(err)
	}
	m, _ := json.Marshal(jobdata.Manifest{JobID: id, Step: step, Files: []jobdata.ManifestFile{{Path: "trainer/.metadata", Size: 1}}})
	if err := store.Put(ctx, prefix+jobdata.ManifestName, bytes.NewReader(m)); err != nil {
		t.Fatal(err)
	}
}

// An organization's checkpoint TTL: once it has passed since a job ended, the reaper deletes
// the job's checkpoints but its pinned ones — an archived job's too; a job restarted before
// then keeps them, and an organization without a TTL keeps everything.
func TestCheckpointsExpireWithTheOrganizationsTTL(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if err := b.q.SetOrg(ctx, "acme", job.OrgSettings{CheckpointTTLDays: 30}); err != nil {
			t.Fatal(err)
		}
		if st, err := b.q.GetOrg(ctx, "acme"); err != nil || st.CheckpointTTLDays != 30 {
			t.Fatalf("org: %+v %v", st, err)
		}
		run := func(org, name string, fail bool) string {
			t.Helper()
			j := b.submitSpec(t, org, jobSpec(name, 8))
			cl := b.claimFor(t, "agent-1", h100x8)
			if cl == nil || cl.Job.ID != j.ID {
				t.Fatalf("claim: %+v", cl)
			}
			for _, step := range []int{5, 10} {
				putCheckpoint(t, store, j.ID, step)
			}
			o := job.Outcome{Token: cl.Lease.Token, Checkpoints: []int{5, 10}, Reason: "reward function raised"}
			end := b.q.Complete
			if fail {
				end = b.q.Fail
			}
			if _, err := end(ctx, j.ID, o); err != nil {
				t.Fatal(err)
			}
			return j.ID
		}
		kept, pinned, restarted, other := run("acme", "kept", false), run("acme", "pinned", false), run("acme", "restarted", true), run("zeta", "other", false)
		if err := store.Put(ctx, jobdata.PinKey(pinned, 5), bytes.NewReader(nil)); err != nil {
			t.Fatal(err)
		}
		steps := func(id string) []int {
			t.Helper()
			s, err := jobdata.CommittedSteps(ctx, store, id)
			if err != nil {
				t.Fatal(err)
			}
			return s
		}
		// Within the TTL nothing goes; then a restart takes one job out of it.
		b.clock.Advance(29 * 24 * time.Hour)
		if n, _, err := b.q.ExpireCheckpoints(ctx, 100); err != nil || n != 0 {
			t.Fatalf("within the TTL: %d expired, %v", n, err)
		}
		if _, err := b.q.Restart(ctx, restarted); err != nil {
			t.Fatal(err)
		}
		// Past the retention the ended jobs are archived: their checkpoints still expire.
		if n, _, err := b.q.Archive(ctx, 100); err != nil || n < 2 {
			t.Fatalf("archive: %d, %v", n, err)
		}
		b.clock.Advance(2 * 24 * time.Hour)
		if n, more, err := b.q.ExpireCheckpoints(ctx, 100); err != nil || n != 2 || more {
			t.Fatalf("past the TTL: %d expired (more %v), %v; want the two ended jobs of acme", n, more, err)
		}
		if got := steps(kept); len(got) != 0 {
			t.Errorf("an expired job kept %v", got)
		}
		if got := steps(pinned); !slices.Equal(got, []int{5}) {
			t.Errorf("the job with a pin kept %v; want its pinned step 5", got)
		}
		if got := steps(restarted); !slices.Equal(got, []int{5, 10}) {
			t.Errorf("a restarted job kept %v; want all of its checkpoints", got)
		}
		if got := steps(other); !slices.Equal(got, []int{5, 10}) {
			t.Errorf("an organization without a TTL kept %v", got)
		}
		if n, _, err := b.q.ExpireCheckpoints(ctx, 100); err != nil || n != 0 {
			t.Errorf("a second pass: %d, %v", n, err)
		}
	}, func(c *Config) { c.Store = store })
}
