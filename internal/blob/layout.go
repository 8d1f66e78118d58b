package blob

import (
	"fmt"
	"path"
	"strconv"
	"strings"
	"time"
)

// The layout of a job's objects, shared by the agent that writes them and the API that reads
// them:
//
//	jobs/{id}/metrics/{fence:06d}-{first:08d}.jsonl         metrics.jsonl in chunks: the attempt
//	                                                         (lease fence) and the chunk's first step
//	jobs/{id}/logs/attempt_{fence}/{component}/{offset:012d}.log   logs in chunks, by where
//	                                                         each starts in its file
//	jobs/{id}/checkpoints/step_{n}/...                       the step folder's files
//	jobs/{id}/checkpoints/step_{n}/manifest.json             written last: the commit mark
//	jobs/{id}/artifacts/{name}                               GEPA and eval outputs

// KindOf is what a job's object is — checkpoints, metrics, logs or artifacts — from its key
// (jobs/{id}/{kind}/...); "" for any other key.
func KindOf(key string) string {
	rest, ok := strings.CutPrefix(key, "jobs/")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 {
		return ""
	}
	switch parts[1] {
	case "checkpoints", "metrics", "logs", "artifacts":
		return parts[1]
	}
	return ""
}

// MetricsPrefix holds a job's metrics chunks.
func MetricsPrefix(jobID string) string { return JobPrefix(jobID) + "metrics/" }

// MetricsChunkKey names the metrics chunk of attempt fence that starts at step first.
func MetricsChunkKey(jobID string, fence int64, first int) string {
	return fmt.Sprintf("%s%06d-%08d.jsonl", MetricsPrefix(jobID), fence, first)
}

// parseMetricsChunk reads a chunk key's fence and first step.
func parseMetricsChunk(key string) (fence int64, first int, ok bool) {
	name := path.Base(key)
	name, ok = strings.CutSuffix(name, ".jsonl")
	if !ok {
		return 0, 0, false
	}
	f, s, ok := strings.Cut(name, "-")
	if !ok {
		return 0, 0, false
	}
	fence, err1 := strconv.ParseInt(f, 10, 64)
	first, err2 := strconv.Atoi(s)
	return fence, first, err1 == nil && err2 == nil
}

// LogPrefix holds the logs of one attempt (lease fence) of a job.
func LogPrefix(jobID string, fence int64) string {
	return fmt.Sprintf("%slogs/attempt_%d/", JobPrefix(jobID), fence)
}

// ArtifactPrefix holds a job's outputs (GEPA's prompts, an eval's results).
func ArtifactPrefix(jobID string) string { return JobPrefix(jobID) + "artifacts/" }

// CheckpointPrefix is where step n of a job is stored.
func CheckpointPrefix(jobID string, step int) string {
	return fmt.Sprintf("%scheckpoints/step_%d/", JobPrefix(jobID), step)
}

// ManifestName is the file whose presence commits a checkpoint.
const ManifestName = "manifest.json"

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

// ManifestStep returns the step of a manifest key (jobs/{id}/checkpoints/step_N/manifest.json).
func ManifestStep(key string) (int, bool) {
	rest, ok := strings.CutSuffix(key, "/"+ManifestName)
	if !ok {
		return 0, false
	}
	i := strings.LastIndex(rest, "/step_")
	if i < 0 {
		return 0, false
	}
	n, err := strconv.Atoi(rest[i+len("/step_"):])
	return n, err == nil
}
