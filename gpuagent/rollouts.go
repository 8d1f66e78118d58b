package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// rolloutShipper stores the episodes prime-rl's file monitor keeps, a step at a time:
// <run_dir>/rollouts/step_N/train/effective/traces.jsonl becomes jobs/{id}/rollouts/step_N.json
// (jobdata.ReadTraces: a bounded sample and the reward distributions). A step is stored once
// the trainer has written its row (so its batch was shipped and the file is whole), and every
// step left is stored when the run ends. A resumed run stores its steps again over what an
// earlier attempt stored: the newest attempt's episodes are the ones that trained.
type rolloutShipper struct {
	store blob.Store
	jobID string
	dir   string // <run_dir>/rollouts
	next  int    // the lowest step not stored yet
}

// maxTraceFile is the largest traces file read; a step with a bigger one keeps none.
const maxTraceFile = 1 << 30

func (s *rolloutShipper) tracesFile(step int) string {
	return filepath.Join(s.dir, "step_"+strconv.Itoa(step), "train", "effective", "traces.jsonl")
}

// shipPass is about the longest a pass of a running job stores rollouts: the rest wait for
// the next flush, so that a backlog (a run stepping faster than its rollouts are stored) never
// holds up the metrics and logs stored after them.
const shipPass = time.Second

// ship stores the steps from next up to upTo. A step whose traces file is not there yet stops
// the pass (the file monitor may write it after the trainer's row), unless the run is over
// (final): then it has none and is passed over, and the pass stores every step left; otherwise
// it ends after about shipPass. A step that fails to be stored stops the pass, to be tried
// again; notes are what the job's log should say.
func (s *rolloutShipper) ship(ctx context.Context, upTo int, final bool) (stored int, notes []string, err error) {
	began := time.Now()
	for ; s.next <= upTo; s.next++ {
		if ctx.Err() != nil {
			return stored, notes, ctx.Err()
		}
		if !final && time.Since(began) > shipPass {
			return stored, notes, nil
		}
		f, err := nolink.Open(s.tracesFile(s.next))
		if errors.Is(err, fs.ErrNotExist) {
			if !final {
				return stored, notes, nil
			}
			continue
		}
		if err != nil {
			notes = append(notes, fmt.Sprintf("rollouts of step %d not stored: %v", s.next, err))
			continue
		}
		if fi, err := f.Stat(); err == nil && fi.Size() > maxTraceFile {
			f.Close()
			notes = append(notes, fmt.Sprintf("rollouts of step %d not stored: traces.jsonl holds %d bytes, more than the %d read", s.next, fi.Size(), maxTraceFile))
			continue
		}
		rs, err := jobdata.ReadTraces(s.next, f)
		f.Close()
		if err != nil {
			notes = append(notes, fmt.Sprintf("rollouts of step %d not stored: %v", s.next, err))
			continue
		}
		if rs.Skipped > 0 {
			notes = append(notes, fmt.Sprintf("rollouts of step %d: %d trace lines were not trace records and were skipped", s.next, rs.Skipped))
		}
		if err := jobdata.PutRollouts(ctx, s.store, s.jobID, rs); err != nil {
			return stored, notes, err
		}
		stored++
	}
	return stored, notes, nil
}

// lastStep is the highest step folder the run wrote rollouts to.
func (s *rolloutShipper) lastStep() int {
	entries, _ := os.ReadDir(s.dir)
	last := 0
	for _, e := range entries {
		if n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "step_")); err == nil && strings.HasPrefix(e.Name(), "step_") {
			last = max(last, n)
		}
	}
	return last
}
