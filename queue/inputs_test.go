package queue

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// rbytes is what org holds in Redis by its count.
func (b bundle) rbytes(t *testing.T, org string) int64 {
	t.Helper()
	v, _ := b.rdb.HGet(b.ctx, b.q.keys.org(org), "rbytes").Result()
	n, _ := strconv.ParseInt(v, 10, 64)
	return n
}

// An ended job's inputs leave Redis at once (red team, issue 29: a job's config and secrets
// stayed for the retention, 1.18 MB a submit-and-cancel): its sealed secrets, and its config
// where it is big; what its organization holds shrinks by as much. They read back from their
// copy in object storage — the job's config, its secrets for a fork — and a restart puts them
// back (counted again), so the job runs as it was submitted. The archive gives back the rest.
func TestAnEndedJobsInputsLeaveRedis(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		spec := jobSpec("big", 0)
		spec.Env[0].Args = map[string]any{"prompt": strings.Repeat("x", 3*KeepConfigBytes)}
		sealed := strings.Repeat("s", 20000)
		j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec, SealedSecrets: sealed}, "", "")
		if err != nil {
			t.Fatal(err)
		}
		live := b.rbytes(t, "acme")
		if live < int64(3*KeepConfigBytes+20000) {
			t.Fatalf("a live job with a %d-byte config and %d bytes of secrets counts %d bytes", 3*KeepConfigBytes, len(sealed), live)
		}
		if _, err := b.q.Cancel(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		b.settleAll(t)
		ks := b.jobKeys(t, j.ID)
		if slices.Contains(ks, b.q.keys.own(j.ID, "ownsec")) {
			t.Errorf("the ended job's secrets are in Redis: %v", ks)
		}
		if cfg, _ := b.rdb.Get(b.ctx, b.q.keys.own(j.ID, "owncfg")).Result(); cfg != "" {
			t.Errorf("the ended job's big config is in Redis (%d bytes)", len(cfg))
		}
		if ended := b.rbytes(t, "acme"); ended > live-int64(3*KeepConfigBytes+20000)+100 {
			t.Errorf("the ended job still counts %d bytes of %d", ended, live)
		}
		got := b.status(t, j.ID)
		if got.Config.Env[0].Args["prompt"] != spec.Env[0].Args["prompt"] {
			t.Errorf("the ended job's config does not read back from its copy")
		}
		if sec, err := b.q.SealedSecrets(b.ctx, j.ID); err != nil || sec != sealed {
			t.Errorf("its secrets from their copy: %d bytes, %v", len(sec), err)
		}
		// A restart puts them back: the claim hands the agent the job as submitted.
		if _, err := b.q.Restart(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if back := b.rbytes(t, "acme"); back < live {
			t.Errorf("a restarted job counts %d bytes, %d as first submitted", back, live)
		}
		cl := b.claim(t)
		if cl == nil || cl.Job.ID != j.ID || cl.SealedSecrets != sealed || cl.Job.Config.Env[0].Args["prompt"] != spec.Env[0].Args["prompt"] {
			t.Fatalf("the restarted job's claim lacks its inputs: %+v", cl)
		}
		if _, err := b.q.Fail(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Reason: "x"}); err != nil {
			t.Fatal(err)
		}
		b.settleAll(t)
		if ks := b.jobKeys(t, j.ID); slices.Contains(ks, b.q.keys.own(j.ID, "ownsec")) {
			t.Errorf("after its second end the job's secrets are in Redis: %v", ks)
		}
		// Deleted (as the archiver would): nothing of it is counted.
		if err := b.q.BeginDelete(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if err := b.q.Delete(b.ctx, j.ID); err != nil {
			t.Fatal(err)
		}
		if left := b.rbytes(t, "acme"); left != 0 {
			t.Errorf("after the delete the org counts %d bytes", left)
		}
		if sec, err := b.q.SealedSecrets(b.ctx, j.ID); err != nil || sec != "" {
			t.Errorf("a deleted job's secrets: %d bytes, %v", len(sec), err)
		}
	}, func(c *Config) { c.Store = store })
}

// What one organization holds in Redis is bounded: a submit past MaxOrgBytes is refused
// (Limit "bytes"), another organization's is not, and a job that ends gives back its inputs
// and makes room.
func TestAnOrganizationsJobStoreBytesAreBounded(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	each(t, func(t *testing.T, b bundle) {
		sealed := strings.Repeat("s", 40000)
		var ids []string
		var limit *job.LimitError
		for i := range 10 {
			j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec(strconv.Itoa(i), 0), SealedSecrets: sealed}, "", "")
			if errors.As(err, &limit) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			ids = append(ids, j.ID)
		}
		if limit == nil || limit.Limit != "bytes" || limit.Max != 150000 || len(ids) != 3 {
			t.Fatalf("after %d submits: %+v; want the fourth refused at the 150,000-byte limit", len(ids), limit)
		}
		if n := b.rbytes(t, "acme"); n > 150000 {
			t.Errorf("acme counts %d bytes, over its limit", n)
		}
		if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "globex", Spec: jobSpec("g", 0), SealedSecrets: sealed}, "", ""); err != nil {
			t.Fatalf("another organization's submit: %v", err)
		}
		if _, err := b.q.Cancel(b.ctx, ids[0]); err != nil {
			t.Fatal(err)
		}
		if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("after", 0), SealedSecrets: sealed}, "", ""); err != nil {
			t.Fatalf("a submit once a job ended: %v", err)
		}
	}, func(c *Config) { c.Store, c.MaxOrgBytes = store, 150000 })
}

// settleAll moves what ended to its own slot (on a cluster; nothing on a single server).
func (b bundle) settleAll(t *testing.T) {
	t.Helper()
	if err := b.q.settleAll(b.ctx); err != nil {
		t.Fatal(err)
	}
}
