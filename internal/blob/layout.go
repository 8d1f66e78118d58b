package blob

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// The layout of a job's objects, shared by the agent that writes them and the API that reads
// them:
//
//	jobs/{id}/config.toml
//	jobs/{id}/metrics/{first:08d}-{last:08d}.jsonl      metrics.jsonl in chunks, by step
//	jobs/{id}/logs/attempt_{n}/{component}.log
//	jobs/{id}/checkpoints/step_{n}/...                   the step folder's files
//	jobs/{id}/checkpoints/step_{n}/manifest.json         written last: the commit mark
//	jobs/{id}/artifacts/...

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
