package gpuagent

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// A checkpoint whose upload fails while storage is down is retried until it is committed; the
// node's older folders go only once a newer one is stored.
func TestCheckpointUploadsRetryUntilCommitted(t *testing.T) {
	t.Parallel()
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: dir, down: true}
	var mu sync.Mutex
	store.mu = &mu
	local := filepath.Join(t.TempDir(), "checkpoints")
	writeCheckpoint(t, local, 2, 1<<20)
	writeCheckpoint(t, local, 4, 1<<20)
	var committed []int
	u := newUploader(store, "j1", local, -1, nil, slog.New(slog.DiscardHandler), func(s int) {
		mu.Lock()
		committed = append(committed, s)
		mu.Unlock()
	}, newTelemetry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go u.run(ctx)
	u.scan()
	testwait.Until(t, 30*time.Second, "uploads to be refused", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return store.refused >= 2
	})
	if _, err := os.Stat(filepath.Join(local, "step_2")); err != nil {
		t.Fatal("a folder was deleted before it was stored")
	}
	mu.Lock()
	store.down = false
	mu.Unlock()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	u.wait(wctx)
	if got := u.committedSteps(); len(got) != 2 || got[1] != 4 {
		t.Fatalf("committed %v, want [2 4]", got)
	}
	if _, err := os.Stat(filepath.Join(local, "step_2")); err == nil {
		t.Error("step_2 is still on the node after step_4 was committed")
	}
}

// A resume takes the newest checkpoint that verifies against its manifest; a damaged one is
// passed over for the one before.
func TestRestoreSkipsACheckpointThatDoesNotVerify(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "checkpoints")
	writeCheckpoint(t, local, 10, 1<<20)
	writeCheckpoint(t, local, 20, 1<<20)
	u := newUploader(store, "j1", local, -1, nil, slog.New(slog.DiscardHandler), func(int) {}, newTelemetry())
	ctx := context.Background()
	for _, s := range []int{10, 20} {
		if _, err := u.upload(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	// Step 20's weights are damaged in storage after they were committed.
	key := jobdata.CheckpointPrefix("j1", 20) + "trainer/__0_0.distcp"
	if err := store.Put(ctx, key, strings.NewReader("not the weights")); err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "restored")
	committed, err := jobdata.CommittedSteps(ctx, store, "j1")
	if err != nil {
		t.Fatal(err)
	}
	step, err := restoreNewest(ctx, store, "j1", committed, dest, slog.New(slog.DiscardHandler))
	if err != nil || step != 10 {
		t.Fatalf("restored step %d (%v), want 10", step, err)
	}
	if _, err := os.Stat(filepath.Join(dest, "step_20")); err == nil {
		t.Error("the damaged step_20 was left on disk")
	}
	got, _ := os.ReadFile(filepath.Join(dest, "step_10", "orchestrator", "progress.pt"))
	if string(got) != `{"step":1}` {
		t.Errorf("restored progress.pt %q", got)
	}
}

// holdingStore holds the first write whose key ends with suffix until release closes.
type holdingStore struct {
	blob.Store
	suffix        string
	once          sync.Once
	held, release chan struct{}
}

func (s *holdingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasSuffix(key, s.suffix) {
		s.once.Do(func() { close(s.held); <-s.release })
	}
	return s.Store.Put(ctx, key, r)
}

// A job owns the folders under its outputs: while a checkpoint commits, it swaps its run
// folder for a link to another job's. The agent (root) deletes the node's older copies after
// the commit, and must not delete the other job's through the link (issue 14's red team).
func TestTheUploaderDeletesNothingThroughALinkTheJobPlanted(t *testing.T) {
	t.Parallel()
	work := t.TempDir()
	victim := filepath.Join(work, "jobs", "victim", "outputs", "victim", "checkpoints")
	for s := 1; s <= 4; s++ {
		writeCheckpoint(t, victim, s, 1024)
	}
	run := filepath.Join(work, "jobs", "evil", "outputs", "evil")
	local := filepath.Join(run, "checkpoints")
	writeCheckpoint(t, local, 5, 1024)
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &holdingStore{Store: dir, suffix: jobdata.ManifestName, held: make(chan struct{}), release: make(chan struct{})}
	committed := make(chan int, 1)
	u := newUploader(store, "evil", local, -1, nil, slog.New(slog.DiscardHandler), func(s int) { committed <- s }, newTelemetry())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go u.run(ctx)
	u.scan()
	<-store.held // the commit is being written
	if err := os.Rename(run, run+".real"); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(victim), run); err != nil {
		t.Fatal(err)
	}
	close(store.release)
	select {
	case <-committed:
	case <-time.After(30 * time.Second):
		t.Fatal("step 5 was not committed")
	}
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	defer wcancel()
	u.wait(wctx) // the prune after the commit has run
	for s := 1; s <= 4; s++ {
		if _, err := os.Stat(jobdata.StepDir(victim, s)); err != nil {
			t.Errorf("the other job's step %d was deleted through the link: %v", s, err)
		}
	}
}

// keep_cloud prunes the oldest committed checkpoints, but never a pinned one.
func TestTheUploaderKeepsAPinnedCheckpoint(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if err := store.Put(ctx, jobdata.PinKey("j1", 2), strings.NewReader("pinned\n")); err != nil {
		t.Fatal(err)
	}
	local := filepath.Join(t.TempDir(), "checkpoints")
	u := newUploader(store, "j1", local, 1, nil, slog.New(slog.DiscardHandler), func(int) {}, newTelemetry())
	go u.run(ctx)
	for _, step := range []int{2, 4, 6} {
		writeCheckpoint(t, local, step, 1<<10)
		u.scan()
		wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
		u.wait(wctx)
		wcancel()
	}
	steps, err := jobdata.CommittedSteps(ctx, store, "j1")
	if err != nil || fmt.Sprint(steps) != "[2 6]" {
		t.Fatalf("committed in storage: %v %v; want the pinned 2 and the newest 6", steps, err)
	}
	// Unpinned, step 2 goes at the next commit, with the others past keep.
	if err := store.Delete(ctx, jobdata.PinKey("j1", 2)); err != nil {
		t.Fatal(err)
	}
	writeCheckpoint(t, local, 8, 1<<10)
	u.scan()
	wctx, wcancel := context.WithTimeout(ctx, 30*time.Second)
	u.wait(wctx)
	wcancel()
	if steps, err = jobdata.CommittedSteps(ctx, store, "j1"); err != nil || fmt.Sprint(steps) != "[8]" {
		t.Fatalf("committed after the unpin: %v %v; want the newest, 8", steps, err)
	}
}
