package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path/filepath"
	"strconv"
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
	// maxStep is the job's max_steps: the folders of the job's run are the job's to write, and a
	// step past it (step_9000000000000000000) is none of the run's (0: no bound).
	maxStep int
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

// ship stores the steps from next up to upTo (at most maxStep). A step whose traces file is
// not there yet stops the pass (the file monitor may write it after the trainer's row), unless
// the run is over (final): then only the step folders the run wrote are visited, and the pass
// stores every one left; otherwise it ends after about shipPass. A step that fails to be stored
// stops the pass, to be tried again; notes are what the job's log should say.
func (s *rolloutShipper) ship(ctx context.Context, upTo int, final bool) (stored int, notes []string, err error) {
	began := time.Now()
	if s.maxStep > 0 {
		upTo = min(upTo, s.maxStep)
	}
	var steps []int // final: the folders there are, in order
	if final {
		for _, n := range s.steps() {
			if n >= s.next && n <= upTo {
				steps = append(steps, n)
			}
		}
	}
	next := func() (int, bool) {
		if !final {
			return s.next, s.next <= upTo
		}
		if len(steps) == 0 {
			return 0, false
		}
		n := steps[0]
		steps = steps[1:]
		return n, true
	}
	for {
		if ctx.Err() != nil {
			return stored, notes, ctx.Err()
		}
		if !final && time.Since(began) > shipPass {
			return stored, notes, nil
		}
		step, ok := next()
		if !ok {
			break
		}
		s.next = step
		note, err := s.shipStep(ctx, step)
		if errors.Is(err, fs.ErrNotExist) && !final {
			return stored, notes, nil
		}
		if err != nil && note == "" {
			return stored, notes, err // tried again from this step
		}
		if note != "" {
			notes = append(notes, note)
		}
		if err == nil {
			stored++
		}
		s.next = step + 1
	}
	if final {
		s.next = max(s.next, upTo+1)
	}
	return stored, notes, nil
}

// shipStep stores one step's rollouts. A step that cannot be read is passed over with a note
// (err set too where it stored nothing); a step with no traces file is fs.ErrNotExist; a
// failed write is an error without a note.
func (s *rolloutShipper) shipStep(ctx context.Context, step int) (note string, err error) {
	f, err := nolink.Open(s.tracesFile(step))
	if errors.Is(err, fs.ErrNotExist) {
		return "", err
	}
	if err != nil {
		return fmt.Sprintf("rollouts of step %d not stored: %v", step, err), err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && fi.Size() > maxTraceFile {
		return fmt.Sprintf("rollouts of step %d not stored: traces.jsonl holds %d bytes, more than the %d read", step, fi.Size(), maxTraceFile), errTooBig
	}
	rs, err := jobdata.ReadTraces(step, f)
	if err != nil {
		return fmt.Sprintf("rollouts of step %d not stored: %v", step, err), err
	}
	if rs.Skipped > 0 {
		note = fmt.Sprintf("rollouts of step %d: %d trace lines were not trace records and were skipped", step, rs.Skipped)
	}
	if err := jobdata.PutRollouts(ctx, s.store, s.jobID, rs); err != nil {
		return "", err
	}
	return note, nil
}

// errTooBig is a traces file over maxTraceFile.
var errTooBig = errors.New("traces file too big")

// steps are the step folders the run wrote rollouts to (step_N as prime-rl names them, N at
// most maxStep), ascending.
func (s *rolloutShipper) steps() []int {
	var out []int
	for _, n := range jobdata.LocalSteps(s.dir) {
		if s.maxStep > 0 && n > s.maxStep {
			break
		}
		out = append(out, n)
	}
	return out
}

// lastStep is the highest step folder the run wrote rollouts to (at most maxStep).
func (s *rolloutShipper) lastStep() int {
	if steps := s.steps(); len(steps) > 0 {
		return steps[len(steps)-1]
	}
	return 0
}
