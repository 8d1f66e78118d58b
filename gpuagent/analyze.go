package gpuagent

import (
	"bytes"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/failure"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// tailBytes is how much of the end of each log a failure's analysis reads.
const tailBytes = 64 << 10

// analyze reads why an attempt failed (failure.Classify) from where it stopped, its exit
// status and the last lines of the logs that stage wrote: the install and preflight logs, the
// pipeline's components (prime-rl's trainer, orchestrator and environment servers, the
// inference server) and the pipeline's own output.
func (r *jobRun) analyze(out outcome) job.FailureAnalysis {
	logs := []string{filepath.Join(r.dir, "install.log"), filepath.Join(r.dir, "preflight.log")}
	logs = append(logs, r.componentLogs(r.runDir)...)
	logs = append(logs, filepath.Join(r.dir, "pipeline.log"))
	in := failure.Input{Stage: out.stage, ExitCode: out.code, Reason: out.reason, Attempt: r.claim.Job.Attempt, Limits: r.limits}
	for _, path := range logs {
		name := filepath.Base(path)
		if rel, err := filepath.Rel(r.runDir, path); r.runDir != "" && err == nil && !strings.HasPrefix(rel, "..") {
			name = strings.TrimPrefix(rel, "logs/latest/") // envs/train/wordle.log, not wordle.log
		}
		for _, l := range jobdata.ParseLogLines(name, readTail(path), time.Now()) {
			in.Lines = append(in.Lines, failure.Line{Log: name, Text: l.Line})
		}
	}
	return failure.Classify(in)
}

// readTail is the last tailBytes of a file (nil if it cannot be read), from a line's start.
func readTail(path string) []byte {
	f, err := nolink.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil
	}
	from := max(0, st.Size()-tailBytes)
	data, err := io.ReadAll(io.NewSectionReader(f, from, st.Size()-from))
	if err != nil {
		return nil
	}
	if from > 0 {
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			data = data[i+1:]
		}
	}
	return data
}
