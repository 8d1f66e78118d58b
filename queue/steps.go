package queue

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Agents report the checkpoint steps committed since their last acknowledged report, and each
// new one becomes an event (and, for an organization with a webhook endpoint, an outbox entry
// and a delivery). What one report may add is bounded here, so an agent — honest after a long
// outage, or not — cannot flood a job's events, the outbox or the receivers.

// MaxCheckpointEvents is how many job.checkpoint events one report (heartbeat, completion,
// failure, release) emits. The agent reports the steps committed since its last acknowledged
// report: usually none or one, more after an outage. The newest step is the job's checkpoint
// (what a restart resumes from) at once; steps past this many wait for the next reports, oldest
// first, and a job's end emits all that wait (prelude.lua's checkpoints).
const MaxCheckpointEvents = 16

// MaxStepBacklog is how many reported steps may wait for their event: of a longer list only
// the newest this many get one.
const MaxStepBacklog = 256

// MaxStep bounds any checkpoint step: the largest max_steps a job may have (the schema's).
const MaxStep = 100000

// StepError is a report of checkpoint steps the queue refuses, naming the first step at fault:
// one no job can have (negative, or past MaxStep) or one past the job's max_steps. Nothing of
// the report is recorded, and the lease is not renewed.
type StepError struct {
	Index int // its place in the report's checkpoints
	Step  int
	Why   string
}

func (e *StepError) Error() string {
	return fmt.Sprintf("checkpoints[%d] = %d: %s", e.Index, e.Step, e.Why)
}

// reportedSteps checks a report's steps (each within 0..MaxStep) and returns the newest
// MaxStepBacklog of them, ascending and each once, as script arguments. Agents send them
// ascending; the order is not theirs to get wrong, so it is not refused but made.
func reportedSteps(steps []int) ([]any, error) {
	for i, s := range steps {
		if s < 0 || s > MaxStep {
			return nil, &StepError{Index: i, Step: s, Why: fmt.Sprintf("a checkpoint step is between 0 and %d", MaxStep)}
		}
	}
	steps = slices.Compact(slices.Sorted(slices.Values(steps)))
	steps = steps[max(0, len(steps)-MaxStepBacklog):]
	args := make([]any, len(steps))
	for i, s := range steps {
		args[i] = s
	}
	return args, nil
}

// stepsErr maps a script's error for a report of steps: STEP_BEYOND names the first step past
// the job's max_steps; any other goes to scriptErr.
func stepsErr(op string, steps []int, err error) error {
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	rest, ok := strings.CutPrefix(msg, "STEP_BEYOND ")
	if !ok {
		return scriptErr(op, err)
	}
	maxSteps, perr := strconv.Atoi(strings.TrimSpace(rest))
	if perr != nil {
		return scriptErr(op, errors.Join(err, perr))
	}
	for i, s := range steps {
		if s > maxSteps {
			return &StepError{Index: i, Step: s, Why: fmt.Sprintf("beyond the job's max_steps (%d)", maxSteps)}
		}
	}
	return scriptErr(op, err)
}
