package gpuagent

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// uploader commits a run's checkpoints to object storage in the background, so the trainer
// never waits on it. A step folder is uploaded once it is complete — the next one exists, or
// the run ended cleanly — and committed by writing its manifest last. Only the newest keep
// committed checkpoints stay in storage (keep < 0 keeps all).
type uploader struct {
	store  blob.Store
	jobID  string
	dir    string // <output>/<run>/checkpoints
	keep   int
	logger *slog.Logger
	// onCommit hears of every step committed, including ones pruned right after.
	onCommit func(step int)

	mu        sync.Mutex
	seen      map[int]bool // queued or done
	committed []int        // ascending, including ones from earlier attempts
	pending   int
	idle      *sync.Cond

	work chan int
}

func newUploader(store blob.Store, jobID, dir string, keep int, committed []int, logger *slog.Logger, onCommit func(int)) *uploader {
	u := &uploader{
		store: store, jobID: jobID, dir: dir, keep: keep, logger: logger, onCommit: onCommit,
		seen: map[int]bool{}, committed: slices.Clone(committed), work: make(chan int, 1024),
	}
	for _, s := range committed {
		u.seen[s] = true
	}
	u.idle = sync.NewCond(&u.mu)
	return u
}

// run uploads queued steps one at a time until ctx ends.
func (u *uploader) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case step := <-u.work:
			u.uploadWithRetry(ctx, step)
			u.mu.Lock()
			u.pending--
			u.idle.Broadcast()
			u.mu.Unlock()
		}
	}
}

// scan queues every complete step folder not yet queued. final says the run ended cleanly,
// which completes the newest folder too.
func (u *uploader) scan(final bool) {
	steps := localSteps(u.dir)
	var queue []int
	u.mu.Lock()
	for i, s := range steps {
		complete := i < len(steps)-1 || final
		if complete && !u.seen[s] {
			u.seen[s] = true
			u.pending++
			queue = append(queue, s)
		}
	}
	u.mu.Unlock()
	for _, s := range queue {
		u.work <- s
	}
}

// wait blocks until every queued step is committed (or ctx ends).
func (u *uploader) wait(ctx context.Context) {
	stop := context.AfterFunc(ctx, func() {
		u.mu.Lock()
		u.idle.Broadcast()
		u.mu.Unlock()
	})
	defer stop()
	u.mu.Lock()
	defer u.mu.Unlock()
	for u.pending > 0 && ctx.Err() == nil {
		u.idle.Wait()
	}
}

// committedSteps returns the committed steps, ascending.
func (u *uploader) committedSteps() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.committed)
}

func (u *uploader) uploadWithRetry(ctx context.Context, step int) {
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := u.upload(ctx, step)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, fs.ErrNotExist) {
			u.logger.Warn("checkpoint vanished before upload", "step", step, "err", err)
			return
		}
		u.logger.Warn("checkpoint upload failed; retrying", "step", step, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

func (u *uploader) upload(ctx context.Context, step int) error {
	local := filepath.Join(u.dir, fmt.Sprintf("step_%d", step))
	prefix := blob.CheckpointPrefix(u.jobID, step)
	m := blob.Manifest{JobID: u.jobID, Step: step}
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		h := sha256.New()
		cr := &countingReader{r: io.TeeReader(f, h)}
		if err := u.store.Put(ctx, prefix+filepath.ToSlash(rel), cr); err != nil {
			return err
		}
		m.Files = append(m.Files, blob.ManifestFile{Path: filepath.ToSlash(rel), Size: cr.n, SHA256: hex.EncodeToString(h.Sum(nil))})
		m.Bytes += cr.n
		return nil
	})
	if err != nil {
		return fmt.Errorf("upload step %d: %w", step, err)
	}
	m.CreatedAt = time.Now().UTC()
	body, _ := json.MarshalIndent(m, "", "  ")
	if err := u.store.Put(ctx, prefix+blob.ManifestName, bytes.NewReader(body)); err != nil {
		return fmt.Errorf("commit step %d: %w", step, err)
	}
	u.mu.Lock()
	u.committed = append(u.committed, step)
	sort.Ints(u.committed)
	var drop []int
	if u.keep >= 0 && len(u.committed) > u.keep {
		drop = slices.Clone(u.committed[:len(u.committed)-u.keep])
		u.committed = u.committed[len(u.committed)-u.keep:]
	}
	u.mu.Unlock()
	u.onCommit(step)
	u.logger.Info("checkpoint committed", "step", step, "bytes", m.Bytes, "files", len(m.Files))
	for _, s := range drop {
		if err := deleteCheckpoint(ctx, u.store, u.jobID, s); err != nil {
			u.logger.Warn("old checkpoint not deleted", "step", s, "err", err)
		}
	}
	return nil
}

// deleteCheckpoint uncommits a step (manifest first) and then removes its files.
func deleteCheckpoint(ctx context.Context, store blob.Store, jobID string, step int) error {
	prefix := blob.CheckpointPrefix(jobID, step)
	if err := store.Delete(ctx, prefix+blob.ManifestName); err != nil {
		return err
	}
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return err
	}
	for _, o := range objs {
		if err := store.Delete(ctx, o.Key); err != nil {
			return err
		}
	}
	return nil
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// localSteps lists the step_N folders under dir, ascending.
func localSteps(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var steps []int
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "step_"); ok && e.IsDir() {
			if s, err := strconv.Atoi(n); err == nil {
				steps = append(steps, s)
			}
		}
	}
	sort.Ints(steps)
	return steps
}

// committedSteps lists a job's committed checkpoints in storage, ascending.
func committedSteps(ctx context.Context, store blob.Store, jobID string) ([]int, error) {
	objs, err := store.List(ctx, blob.JobPrefix(jobID)+"checkpoints/")
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, o := range objs {
		if s, ok := blob.ManifestStep(o.Key); ok {
			steps = append(steps, s)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// restoreNewest downloads the newest committed checkpoint that verifies against its manifest
// into dir/step_N and returns N; 0 when there is none to resume from.
func restoreNewest(ctx context.Context, store blob.Store, jobID, dir string, logger *slog.Logger) (int, error) {
	steps, err := committedSteps(ctx, store, jobID)
	if err != nil {
		return 0, err
	}
	for i := len(steps) - 1; i >= 0; i-- {
		step := steps[i]
		err := restore(ctx, store, jobID, step, filepath.Join(dir, fmt.Sprintf("step_%d", step)))
		if err == nil {
			return step, nil
		}
		if ctx.Err() != nil {
			return 0, ctx.Err()
		}
		logger.Warn("checkpoint does not verify; trying an older one", "step", step, "err", err)
	}
	return 0, nil
}

func restore(ctx context.Context, store blob.Store, jobID string, step int, dest string) error {
	prefix := blob.CheckpointPrefix(jobID, step)
	rc, err := store.Get(ctx, prefix+blob.ManifestName)
	if err != nil {
		return err
	}
	var m blob.Manifest
	err = json.NewDecoder(rc).Decode(&m)
	rc.Close()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	_ = os.RemoveAll(dest)
	for _, f := range m.Files {
		if err := restoreFile(ctx, store, prefix+f.Path, dest, f); err != nil {
			_ = os.RemoveAll(dest)
			return err
		}
	}
	return nil
}

func restoreFile(ctx context.Context, store blob.Store, key, dest string, f blob.ManifestFile) error {
	if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
		return fmt.Errorf("manifest names a path outside the checkpoint: %q", f.Path)
	}
	p := filepath.Join(dest, filepath.FromSlash(f.Path))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	rc, err := store.Get(ctx, key)
	if err != nil {
		return err
	}
	defer rc.Close()
	out, err := os.Create(p)
	if err != nil {
		return err
	}
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(out, h), rc)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if n != f.Size || hex.EncodeToString(h.Sum(nil)) != f.SHA256 {
		return fmt.Errorf("%s: %d bytes, sha256 %x; manifest says %d bytes, %s", f.Path, n, h.Sum(nil), f.Size, f.SHA256)
	}
	return nil
}
