// Package jobdata is the format of a job's data in object storage, in one place: the object
// layout, metrics rows (parsed, merged per step, summarized), log lines (parsed from what
// prime-rl, vLLM and the agent write), and checkpoints (when a step folder is complete, its
// manifest, the committed steps). The GPU agent writes with it and the API reads with it,
// so the two cannot disagree; blob underneath only moves bytes.
//
// Layout:
//
//	jobs/{id}/metrics/{fence:06d}-{min:08d}-{max:08d}-{n:04d}.jsonl  a sealed chunk of an attempt's
//	                                           metrics.jsonl rows: steps min..max, chunk n
//	jobs/{id}/metrics/{fence:06d}-{min:08d}-open-{n:04d}.jsonl     a chunk being written (an
//	                                           attempt has two: its main run's, its late rows')
//	jobs/{id}/logs/attempt_{fence}/{component}/{offset:012d}.log   logs in chunks, by where each
//	                                           starts in its file
//	jobs/{id}/checkpoints/step_{n}/...         a step folder's files (trainer/, orchestrator/)
//	jobs/{id}/checkpoints/step_{n}/manifest.json  written last: the commit mark
//	jobs/{id}/artifacts/{name}                 GEPA and eval outputs
//	jobs/{id}/rollouts/step_{n}.json           step n's sampled episodes and reward distributions
//	jobs/{id}/pins/step_{n}                    the user keeps step n's checkpoint past keep_cloud
package jobdata

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// JobPrefix is where everything of one job lives.
func JobPrefix(jobID string) string { return blob.JobPrefix(jobID) }

// MetricsPrefix holds a job's metrics chunks.
func MetricsPrefix(jobID string) string { return JobPrefix(jobID) + "metrics/" }

// metricsChunkKey names chunk n of attempt fence, holding steps min..max; max < 0 for the open
// chunk (still growing, its upper bound unknown).
func metricsChunkKey(jobID string, fence int64, minStep, maxStep, n int) string {
	if maxStep < 0 {
		return fmt.Sprintf("%s%06d-%08d-open-%04d.jsonl", MetricsPrefix(jobID), fence, minStep, n)
	}
	return fmt.Sprintf("%s%06d-%08d-%08d-%04d.jsonl", MetricsPrefix(jobID), fence, minStep, maxStep, n)
}

// chunkName is a parsed metrics chunk key.
type chunkName struct {
	key      string
	fence    int64
	min, max int // max < 0: open
	n        int
}

func parseChunkKey(key string) (chunkName, bool) {
	i := strings.LastIndexByte(key, '/')
	name, ok := strings.CutSuffix(key[i+1:], ".jsonl")
	if !ok {
		return chunkName{}, false
	}
	parts := strings.Split(name, "-")
	if len(parts) != 4 {
		return chunkName{}, false
	}
	fence, err1 := strconv.ParseInt(parts[0], 10, 64)
	minStep, err2 := strconv.Atoi(parts[1])
	n, err3 := strconv.Atoi(parts[3])
	maxStep := -1
	var err4 error
	if parts[2] != "open" {
		maxStep, err4 = strconv.Atoi(parts[2])
	}
	if err1 != nil || err2 != nil || err3 != nil || err4 != nil {
		return chunkName{}, false
	}
	return chunkName{key: key, fence: fence, min: minStep, max: maxStep, n: n}, true
}

// LogPrefix holds the logs of one attempt (lease fence) of a job.
func LogPrefix(jobID string, fence int64) string {
	return fmt.Sprintf("%slogs/attempt_%d/", JobPrefix(jobID), fence)
}

// logChunkKey names the chunk of component's log that starts at offset.
func logChunkKey(jobID string, fence int64, component string, offset int64) string {
	return fmt.Sprintf("%s%s/%012d.log", LogPrefix(jobID, fence), component, offset)
}

// ArtifactPrefix holds a job's outputs (GEPA's prompts, an eval's results).
func ArtifactPrefix(jobID string) string { return JobPrefix(jobID) + "artifacts/" }

// CheckpointPrefix is where step n of a job is stored.
func CheckpointPrefix(jobID string, step int) string {
	return fmt.Sprintf("%scheckpoints/step_%d/", JobPrefix(jobID), step)
}

// ManifestName is the file whose presence commits a checkpoint.
const ManifestName = "manifest.json"

// WeightsDir is where in a checkpoint the step's weights, as prime-rl broadcast them to
// inference, are kept (a LoRA adapter with adapter_config.json, or the model's safetensors):
// the folder a user exports and loads elsewhere. A resume does not read it.
const WeightsDir = "weights/"

// Manifest lists a committed checkpoint's files. A step folder without one is incomplete
// and is never resumed from or offered for download.
type Manifest struct {
	JobID     string         `json:"job_id"`
	Step      int            `json:"step"`
	Files     []ManifestFile `json:"files"`
	Bytes     int64          `json:"bytes"`
	CreatedAt time.Time      `json:"created_at"`
}

// ManifestFile is one file of a checkpoint, by its path inside the step folder.
type ManifestFile struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// stepOf reads a step folder's name, "step_N" with N written as prime-rl writes it (no sign,
// no leading zero): step_05 is not step_5's folder.
func stepOf(name string) (int, bool) {
	digits, ok := strings.CutPrefix(name, "step_")
	if !ok || digits == "" || (len(digits) > 1 && digits[0] == '0') {
		return 0, false
	}
	for _, c := range digits {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(digits)
	return n, err == nil
}

// DeleteJob deletes every object of a job (jobs/{id}/...): metrics, logs, checkpoints,
// artifacts, rollouts. What fails to be deleted stays, and a second call finishes it.
func DeleteJob(ctx context.Context, store blob.Store, jobID string) (int, error) {
	objs, err := store.List(ctx, JobPrefix(jobID))
	if err != nil {
		return 0, err
	}
	keys := make(chan string)
	var deleted atomic.Int64
	var mu sync.Mutex
	var errs []error
	var wg sync.WaitGroup
	for range min(8, len(objs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for k := range keys {
				if err := store.Delete(ctx, k); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
					continue
				}
				deleted.Add(1)
			}
		}()
	}
	for _, o := range objs {
		keys <- o.Key
	}
	close(keys)
	wg.Wait()
	return int(deleted.Load()), errors.Join(errs...)
}
