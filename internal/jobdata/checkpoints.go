package jobdata

import (
	"context"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// The parts of a prime-rl checkpoint folder (checkpoints/step_N/, src/prime_rl/trainer/ckpt.py
// and orchestrator/ckpt.py at the pinned commit): the trainer's torch.distributed.checkpoint
// save, whose .metadata file torch writes last, and the orchestrator's progress, written to a
// temporary file and renamed into place.
const (
	TrainerDone       = "trainer/.metadata"
	OrchestratorDone  = "orchestrator/progress.pt"
	checkpointsFolder = "checkpoints"
)

// Complete reports whether a step folder on disk is a whole checkpoint by prime-rl's own
// marks: the trainer's save has finished (its .metadata exists) and the orchestrator's
// progress for the step is there. prime-rl writes no other completion mark; its orchestrator
// saves up to two steps ahead of the trainer, and a trainer killed mid-save leaves a folder
// without .metadata, so "a newer folder exists" proves nothing.
func Complete(stepDir string) bool {
	for _, p := range []string{TrainerDone, OrchestratorDone} {
		if fi, err := os.Stat(filepath.Join(stepDir, filepath.FromSlash(p))); err != nil || !fi.Mode().IsRegular() {
			return false
		}
	}
	return true
}

// LocalSteps lists the step_N folders under a run's checkpoints folder, ascending.
func LocalSteps(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var steps []int
	for _, e := range entries {
		if s, ok := stepOf(e.Name()); ok && e.IsDir() {
			steps = append(steps, s)
		}
	}
	sort.Ints(steps)
	return steps
}

// StepDir is the folder of step n under a run's checkpoints folder.
func StepDir(checkpoints string, n int) string {
	return filepath.Join(checkpoints, "step_"+strconv.Itoa(n))
}

// CheckpointsDir is a prime-rl run's checkpoints folder.
func CheckpointsDir(runDir string) string { return filepath.Join(runDir, checkpointsFolder) }

// Checkpoint is one step folder of a job in storage.
type Checkpoint struct {
	Step  int
	Bytes int64
	Files int
	// Committed is true once the manifest is written; an uncommitted folder is an upload in
	// progress (or one cut short) and is never resumed from.
	Committed bool
	Time      time.Time
}

// ListCheckpoints lists a job's checkpoints in storage, ascending by step.
func ListCheckpoints(ctx context.Context, store blob.Store, jobID string) ([]Checkpoint, error) {
	objs, err := store.List(ctx, JobPrefix(jobID)+"checkpoints/")
	if err != nil {
		return nil, err
	}
	by := map[int]*Checkpoint{}
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, JobPrefix(jobID)+"checkpoints/")
		folder, file, ok := strings.Cut(rest, "/")
		step, isStep := stepOf(folder)
		if !ok || !isStep {
			continue
		}
		c := by[step]
		if c == nil {
			c = &Checkpoint{Step: step}
			by[step] = c
		}
		if file == ManifestName {
			c.Committed, c.Time = true, o.Modified
			continue
		}
		c.Bytes += o.Size
		c.Files++
		if !c.Committed && o.Modified.After(c.Time) {
			c.Time = o.Modified
		}
	}
	out := make([]Checkpoint, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}

// CommittedSteps lists the steps of a job's committed checkpoints, ascending.
func CommittedSteps(ctx context.Context, store blob.Store, jobID string) ([]int, error) {
	all, err := ListCheckpoints(ctx, store, jobID)
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, c := range all {
		if c.Committed {
			steps = append(steps, c.Step)
		}
	}
	return steps, nil
}

// DeleteCheckpoint deletes step of a job from storage: its manifest first (so a half-deleted
// checkpoint is never taken for a committed one), then every other object under its prefix.
func DeleteCheckpoint(ctx context.Context, store blob.Store, jobID string, step int) error {
	prefix := CheckpointPrefix(jobID, step)
	if err := store.Delete(ctx, prefix+ManifestName); err != nil {
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

// PinKey is the mark that keeps a job's committed checkpoint of step in storage past its
// keep_cloud: the agent never prunes a pinned step.
func PinKey(jobID string, step int) string {
	return fmt.Sprintf("%spins/step_%d", JobPrefix(jobID), step)
}

// PinnedSteps are the steps of a job's pinned checkpoints.
func PinnedSteps(ctx context.Context, store blob.Store, jobID string) (map[int]bool, error) {
	objs, err := store.List(ctx, JobPrefix(jobID)+"pins/")
	if err != nil {
		return nil, err
	}
	out := map[int]bool{}
	for _, o := range objs {
		if step, ok := stepOf(path.Base(o.Key)); ok {
			out[step] = true
		}
	}
	return out, nil
}
