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
	"strings"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// uploader commits a run's checkpoints to object storage in the background, so the trainer
// never waits on it. A step folder is uploaded once it is complete by prime-rl's own marks
// (jobdata.Complete: the trainer's save finished, the orchestrator's progress written) —
// however the run ends — and committed by writing its manifest last. Only the newest keep
// committed checkpoints stay in storage (keep < 0 keeps all).
//
// The uploader owns the node's copies too: prime-rl is told to keep every step folder, and a
// folder is deleted here once a newer one is committed, so nothing is deleted before it is
// stored. When the trainer completes checkpoints faster than they can be stored, the oldest
// waiting ones are skipped (the newest matters for resuming) rather than letting the disk
// fill.
type uploader struct {
	store blob.Store
	jobID string
	dir   string // <output>/<run>/checkpoints
	keep  int
	// maxStep is the job's max_steps: a step folder past it is not the run's (0: no bound).
	maxStep int
	logger  *slog.Logger
	tel     *telemetry
	// onCommit hears of every step committed, including ones pruned right after.
	onCommit func(step int)
	// onSkip, when set, hears of a complete checkpoint skipped to keep the backlog short.
	onSkip func(step int)

	mu        sync.Mutex
	seen      map[int]bool // queued or done
	queue     []int        // complete steps waiting, ascending
	busy      bool         // an upload is in progress
	committed []int        // ascending, including ones from earlier attempts
	idle      *sync.Cond
	wake      chan struct{}

	// outputs is the job's outputs folder, the root of every folder the job owns: step folders
	// are deleted through it, so that a folder the job swaps for a link (to another job's
	// folder) is never followed. nil: nothing is deleted.
	outputs *os.Root

	// tries bounds the attempts at one step (0: no bound); fault hears when they run out.
	tries int
	fault *storageFault
}

// maxBacklog is how many complete checkpoints may wait for upload before the oldest is skipped.
const maxBacklog = 3

func newUploader(store blob.Store, jobID, dir string, keep int, committed []int, logger *slog.Logger, onCommit func(int), tel *telemetry) *uploader {
	u := &uploader{
		store: store, jobID: jobID, dir: dir, keep: keep, logger: logger, onCommit: onCommit, tel: tel,
		seen: map[int]bool{}, committed: slices.Clone(committed), wake: make(chan struct{}, 1),
	}
	for _, s := range committed {
		u.seen[s] = true
	}
	u.idle = sync.NewCond(&u.mu)
	// dir is <outputs>/<run>/checkpoints; <outputs> itself lies in the agent's job folder,
	// where the job cannot replace it.
	if root, err := os.OpenRoot(filepath.Dir(filepath.Dir(dir))); err == nil {
		u.outputs = root
	} else {
		logger.Warn("the outputs folder cannot be opened: node copies of committed checkpoints stay", "err", err)
	}
	return u
}

// removeLocal deletes the node's copy of a step, through the outputs root.
func (u *uploader) removeLocal(step int) {
	if u.outputs == nil {
		return
	}
	rel, err := filepath.Rel(u.outputs.Name(), jobdata.StepDir(u.dir, step))
	if err != nil {
		return
	}
	if err := u.outputs.RemoveAll(rel); err != nil {
		u.logger.Warn("delete the node's copy of a checkpoint", "step", step, "err", err)
	}
}

// run uploads waiting steps, oldest first, until ctx ends.
func (u *uploader) run(ctx context.Context) {
	if u.outputs != nil {
		defer u.outputs.Close()
	}
	for {
		u.mu.Lock()
		for len(u.queue) > maxBacklog {
			skipped := u.queue[0]
			u.queue = u.queue[1:]
			u.logger.Warn("checkpoint skipped: the trainer completes checkpoints faster than they can be stored", "step", skipped)
			if u.onSkip != nil {
				u.onSkip(skipped)
			}
			u.removeLocal(skipped)
		}
		if len(u.queue) == 0 {
			u.busy = false
			u.idle.Broadcast()
			u.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-u.wake:
			}
			continue
		}
		step := u.queue[0]
		u.queue = u.queue[1:]
		u.busy = true
		u.mu.Unlock()
		if u.uploadWithRetry(ctx, step) {
			u.pruneLocal(step)
		}
		if ctx.Err() != nil || u.gaveUp() {
			u.mu.Lock()
			u.busy = false
			u.idle.Broadcast()
			u.mu.Unlock()
			return
		}
	}
}

// pruneLocal deletes the node's step folders older than step, which is committed.
func (u *uploader) pruneLocal(step int) {
	for _, s := range jobdata.LocalSteps(u.dir) {
		if s < step {
			u.removeLocal(s)
		}
	}
}

// scan queues every complete step folder not yet queued and reports whether it found one.
func (u *uploader) scan() bool {
	found := false
	u.mu.Lock()
	for _, s := range jobdata.LocalSteps(u.dir) {
		if u.maxStep > 0 && s > u.maxStep {
			break // the job's own folder: a step past max_steps is none of the run's
		}
		if !u.seen[s] && jobdata.Complete(jobdata.StepDir(u.dir, s)) {
			u.seen[s] = true
			u.queue = append(u.queue, s)
			found = true
		}
	}
	sort.Ints(u.queue)
	u.mu.Unlock()
	if found {
		select {
		case u.wake <- struct{}{}:
		default:
		}
	}
	return found
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
	for (u.busy || len(u.queue) > 0) && ctx.Err() == nil {
		u.idle.Wait()
	}
}

// gaveUp reports whether the storage fault is set: nothing more is uploaded.
func (u *uploader) gaveUp() bool { return u.fault != nil && u.fault.get() != nil }

// committedSteps returns the committed steps, ascending.
func (u *uploader) committedSteps() []int {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.committed)
}

// uploadWithRetry uploads step until it is committed (true) or cannot be: ctx ended, or the
// folder is gone.
func (u *uploader) uploadWithRetry(ctx context.Context, step int) bool {
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		began := time.Now()
		n, err := u.upload(ctx, step)
		if err == nil {
			u.tel.uploads.WithLabelValues("committed").Inc()
			u.tel.uploadBytes.Add(float64(n))
			u.tel.uploadSeconds.Observe(time.Since(began).Seconds())
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		if errors.Is(err, fs.ErrNotExist) {
			u.logger.Warn("checkpoint vanished before upload", "step", step, "err", err)
			return false
		}
		if u.tries > 0 && attempt >= u.tries {
			u.logger.Warn("checkpoint upload failed; giving up", "step", step, "attempts", attempt, "err", err)
			if u.fault != nil {
				u.fault.set(fmt.Sprintf("the checkpoint of step %d", step), attempt, err)
			}
			u.mu.Lock()
			u.queue = nil
			u.mu.Unlock()
			return false
		}
		u.tel.uploads.WithLabelValues("retried").Inc()
		u.logger.Warn("checkpoint upload failed; retrying", "step", step, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
			return false
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
}

// upload stores step's folder, then its manifest; it returns the bytes stored.
func (u *uploader) upload(ctx context.Context, step int) (int64, error) {
	local := jobdata.StepDir(u.dir, step)
	prefix := jobdata.CheckpointPrefix(u.jobID, step)
	m := jobdata.Manifest{JobID: u.jobID, Step: step}
	add := func(root, under string, skip func(rel string) bool) error {
		return filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, err := filepath.Rel(root, p)
			if err != nil || skip(rel) {
				return err
			}
			name := under + filepath.ToSlash(rel)
			f, err := nolink.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			size, sum, err := u.put(ctx, prefix+name, f)
			if err != nil {
				return err
			}
			m.Files = append(m.Files, jobdata.ManifestFile{Path: name, Size: size, SHA256: sum})
			m.Bytes += size
			return nil
		})
	}
	err := add(local, "", func(string) bool { return false })
	// The step's weights as prime-rl broadcast them to inference (broadcasts/step_N, kept for
	// checkpoint steps): a LoRA adapter with its config, or the model's safetensors — what a
	// user loads elsewhere (the export, jobdata.WeightsDir). Taken once the trainer marked them
	// STABLE; the mark itself is prime-rl's, not the user's.
	if weights := filepath.Join(filepath.Dir(u.dir), "broadcasts", fmt.Sprintf("step_%d", step)); err == nil {
		if _, serr := os.Stat(filepath.Join(weights, "STABLE")); serr == nil {
			err = add(weights, jobdata.WeightsDir, func(rel string) bool { return rel == "STABLE" })
		}
	}
	if err != nil {
		return 0, fmt.Errorf("upload step %d: %w", step, err)
	}
	m.CreatedAt = time.Now().UTC()
	body, _ := json.MarshalIndent(m, "", "  ")
	if err := u.store.Put(ctx, prefix+jobdata.ManifestName, bytes.NewReader(body)); err != nil {
		return 0, fmt.Errorf("commit step %d: %w", step, err)
	}
	u.mu.Lock()
	u.committed = append(u.committed, step)
	sort.Ints(u.committed)
	over := u.keep >= 0 && len(u.committed) > u.keep
	u.mu.Unlock()
	u.onCommit(step)
	u.logger.Info("checkpoint committed", "step", step, "bytes", m.Bytes, "files", len(m.Files))
	if over {
		u.prune(ctx)
	}
	return m.Bytes, nil
}

// prune deletes the oldest committed checkpoints past keep, never a pinned one: pinned steps
// stay committed and do not count against keep (so a step unpinned is pruned at the next
// commit). Pins that cannot be read prune nothing this time.
func (u *uploader) prune(ctx context.Context) {
	pinned, err := jobdata.PinnedSteps(ctx, u.store, u.jobID)
	if err != nil {
		u.logger.Warn("old checkpoints kept this time: the pins could not be read", "err", err)
		return
	}
	u.mu.Lock()
	var unpinned []int
	for _, s := range u.committed {
		if !pinned[s] {
			unpinned = append(unpinned, s)
		}
	}
	var drop []int
	if len(unpinned) > u.keep {
		drop = unpinned[:len(unpinned)-u.keep]
		u.committed = slices.DeleteFunc(u.committed, func(s int) bool { return slices.Contains(drop, s) })
	}
	u.mu.Unlock()
	for _, s := range drop {
		if err := jobdata.DeleteCheckpoint(ctx, u.store, u.jobID, s); err != nil {
			u.logger.Warn("old checkpoint not deleted", "step", s, "err", err)
		}
	}
}

// put stores one file of a checkpoint and returns its size and sha256. A store that uploads
// from an io.ReaderAt (S3) reads the parts at their offsets, several at once, while the
// file is hashed beside it; any other reads the file once, hashing as it goes. A checkpoint's
// files are complete before it is uploaded (upstream's marks); one that changed size under the
// upload is an error, and one that changed its bytes fails its manifest's check at restore.
func (u *uploader) put(ctx context.Context, key string, f *os.File) (int64, string, error) {
	at, ok := u.store.(blob.AtPutter)
	if !ok {
		h := sha256.New()
		cr := &countingReader{r: io.TeeReader(f, h)}
		if err := u.store.Put(ctx, key, cr); err != nil {
			return 0, "", err
		}
		return cr.n, hex.EncodeToString(h.Sum(nil)), nil
	}
	st, err := f.Stat()
	if err != nil {
		return 0, "", err
	}
	size := st.Size()
	type hashed struct {
		n   int64
		sum []byte
		err error
	}
	hc := make(chan hashed, 1)
	go func() {
		h := sha256.New()
		// Large reads: a checkpoint file is gigabytes, and io.Copy's 32 KiB would be a
		// system call each.
		n, err := io.CopyBuffer(h, io.NewSectionReader(f, 0, size+1), make([]byte, min(1<<20, max(32<<10, size+1))))
		hc <- hashed{n, h.Sum(nil), err}
	}()
	err = at.PutAt(ctx, key, f, size)
	got := <-hc
	switch {
	case err != nil:
		return 0, "", err
	case got.err != nil:
		return 0, "", got.err
	case got.n != size:
		return 0, "", fmt.Errorf("%s changed size while it was uploaded (%d bytes, then %d)", key, size, got.n)
	}
	return size, hex.EncodeToString(got.sum), nil
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

// restoreNewest downloads the newest of the committed steps (ascending, as listed) that
// verifies against its manifest into dir/step_N and returns N; 0 when none does.
func restoreNewest(ctx context.Context, store blob.Store, jobID string, steps []int, dir string, logger *slog.Logger) (int, error) {
	for i := len(steps) - 1; i >= 0; i-- {
		step := steps[i]
		err := restore(ctx, store, jobID, step, jobdata.StepDir(dir, step))
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
	prefix := jobdata.CheckpointPrefix(jobID, step)
	rc, err := store.Get(ctx, prefix+jobdata.ManifestName)
	if err != nil {
		return err
	}
	var m jobdata.Manifest
	err = json.NewDecoder(rc).Decode(&m)
	rc.Close()
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	_ = os.RemoveAll(dest)
	for _, f := range m.Files {
		if strings.HasPrefix(f.Path, jobdata.WeightsDir) {
			continue // the export's copy of the weights: prime-rl resumes from the trainer's state
		}
		if err := restoreFile(ctx, store, prefix+f.Path, dest, f); err != nil {
			_ = os.RemoveAll(dest)
			return err
		}
	}
	return nil
}

func restoreFile(ctx context.Context, store blob.Store, key, dest string, f jobdata.ManifestFile) error {
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
