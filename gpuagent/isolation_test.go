package gpuagent_test

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
	"github.com/hostedtrain/hostedtrain/queue"
)

// fullStore is object storage that has filled up once full is set: every write is refused.
type fullStore struct {
	blob.Store
	full atomic.Bool
}

func (s *fullStore) Put(ctx context.Context, key string, r io.Reader) error {
	if s.full.Load() {
		return errors.New("XMinioStorageFull: storage backend has reached its minimum free drive threshold")
	}
	return s.Store.Put(ctx, key, r)
}

// sandboxed is the agent's sandbox as a node runs it, with what the emulator's config check
// needs (the kit and its Python) shown read-only.
func sandboxed(t testing.TB) *gpuagent.Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the sandbox needs root (CI runs as root)")
	}
	var f gpuagent.SandboxFlags
	fs := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	f.Register(fs)
	if err := fs.Parse(upstreamtest.SandboxFlags(t)); err != nil {
		t.Fatal(err)
	}
	return f.Sandbox()
}

// When the job's storage fills up while it runs, the job fails with the reason after a bounded
// number of tries — it does not sit RUNNING while retries go on forever — and its pipeline is
// stopped.
func TestStorageFullFailsTheJob(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	store := &fullStore{Store: b.store}
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "50ms")
	cfg.Store, cfg.StorageTries, cfg.Sandbox = store, 3, sandboxed(t)
	b.run(t, cfg)
	j := b.submit(t, withSteps(100000))
	b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 2 })
	store.full.Store(true)
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Failed || !strings.Contains(done.Error, "storage refused its writes") || !strings.Contains(done.Error, "StorageFull") {
		t.Fatalf("got %s %q; want FAILED saying the storage refused the job's writes", done.Status, done.Error)
	}
}
