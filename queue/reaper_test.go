package queue

import (
	"context"
	"errors"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// archiveFailingStore is a real store that refuses every write of an archived record: an
// object store whose archive prefix is out of reach.
type archiveFailingStore struct{ blob.Store }

func (s archiveFailingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasPrefix(key, "archive/jobs/") {
		return errors.New("AccessDenied")
	}
	return s.Store.Put(ctx, key, r)
}

// One duty's failure never skips another: with the archive out of reach, a pass still expires
// checkpoints past the organization's TTL and meters storage; the failure is returned, logged
// and counted against the archive duty alone.
func TestAFailingDutySkipsNoOther(t *testing.T) {
	t.Parallel()
	s3, _ := s3test.Store(t)
	store := archiveFailingStore{s3}
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if err := b.q.SetOrg(ctx, "acme", job.OrgSettings{CheckpointTTLDays: 1}); err != nil {
			t.Fatal(err)
		}
		id := completedWithData(t, b, store, "acme", "ended")
		// Past the retention (the archive is due), the TTL (expiry is due) and the meter's wait.
		b.clock.Advance(b.cfg.Retention + 2*24*time.Hour)
		r := NewReaper(b.q, time.Second, nil)
		_, err := r.RunOnce(ctx)
		if err == nil || !strings.Contains(err.Error(), "archive: ") || !strings.Contains(err.Error(), "AccessDenied") {
			t.Fatalf("the pass: %v; want the archive's failure", err)
		}
		if steps, err := jobdata.CommittedSteps(ctx, store, id); err != nil || len(steps) != 0 {
			t.Errorf("checkpoints after the pass: %v %v; want them expired", steps, err)
		}
		if got, err := b.q.StoredBytes(ctx, "acme", []string{id}); err != nil || got[id] != 300 {
			t.Errorf("stored bytes after the pass: %v %v; want the metrics file's 300 measured", got, err)
		}
		if f := r.Failures(); f["archive"] != 1 || f["expire"]+f["meter"]+f["reap"]+f["delete"]+f["migrate"] != 0 {
			t.Errorf("failures %v; want the archive's one", f)
		}
		if _, err := store.Get(ctx, archiveKey(id)); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("an archived record was written: %v", err)
		}
	}, func(c *Config) { c.Store = store; c.StorageEvery = time.Minute })
}
