package api

import (
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// resolveWarmStart resolves a job's checkpoint_id to a committed checkpoint of another job of
// the organization's — one that trains the same model the same way (LoRA or not) — and sets
// the job to start from it. A checkpoint that is not there, or that the job cannot start from,
// is refused naming checkpoint_id (or max_steps, when the run would have nothing left to do),
// the pointers renamed by rename (nil: as they are): a fork names its step.
func (s *Server) resolveWarmStart(r *http.Request, a *admitted, rename map[string]string) *Problem {
	if a.spec.CheckpointID == "" || a.spec.Kind != jobspec.KindRL {
		return nil
	}
	refuse := func(ptr, format string, args ...any) *Problem {
		if to, ok := rename[ptr]; ok {
			ptr = to
		}
		fe := FieldError{Pointer: ptr, Message: fmt.Sprintf(format, args...)}
		a.body.place(&fe)
		return invalidJob([]FieldError{fe}, a.body)
	}
	id, step := jobspec.ParseCheckpointID(a.spec.CheckpointID)
	src, err := s.cfg.Queue.Get(r.Context(), id)
	switch {
	case errors.Is(err, job.ErrNotFound) || (err == nil && src.Org != principal(r).Org):
		return refuse("/checkpoint_id", "no job %s in your organization: a checkpoint id is <job id>-step-<N> (`hostedtrain train checkpoints JOB` lists the steps), or a job id for its newest checkpoint", id)
	case err != nil:
		return s.failure(r, err)
	case !jobspec.RunsPrimeRL(src.Kind):
		return refuse("/checkpoint_id", "job %s is a %s job: it has no checkpoints", src.ID, src.Kind)
	case src.Kind != jobspec.KindRL:
		return refuse("/checkpoint_id", "job %s is a full fine-tune; an rl job starts only from an rl job's checkpoint", src.ID)
	case src.Config.Model != a.spec.Model:
		return refuse("/checkpoint_id", "the checkpoints of job %s are of %s; this job trains %s (a warm start keeps the model)", src.ID, src.Config.Model, a.spec.Model)
	case (src.Config.LoRA == nil) != (a.spec.LoRA == nil):
		return refuse("/checkpoint_id", "job %s trained %s and this job %s: its checkpoint holds the other kind of weights", src.ID, loraWord(src.Config.LoRA != nil), loraWord(a.spec.LoRA != nil))
	case src.Config.LoRA != nil && src.Config.LoRA.Rank != a.spec.LoRA.Rank:
		return refuse("/checkpoint_id", "job %s trained a LoRA adapter of rank %d; this job's lora_rank is %d (a checkpoint's adapter keeps its rank)", src.ID, src.Config.LoRA.Rank, a.spec.LoRA.Rank)
	}
	if s.cfg.Store == nil {
		return newProblem(http.StatusServiceUnavailable, "no-object-storage", "this deployment has no object storage configured, so checkpoints cannot be read")
	}
	committed, err := jobdata.CommittedSteps(r.Context(), s.cfg.Store, src.ID)
	if err != nil {
		return s.failure(r, err)
	}
	switch {
	case len(committed) == 0:
		return refuse("/checkpoint_id", "job %s has no committed checkpoint to start from", src.ID)
	case step == 0:
		step = committed[len(committed)-1]
	case !slices.Contains(committed, step):
		return refuse("/checkpoint_id", "job %s has no committed checkpoint of step %d; it has %s", src.ID, step, stepList(committed))
	}
	if a.spec.MaxSteps <= step {
		return refuse("/max_steps", "max_steps (%d) must be more than the step the run starts from (%d, %s)", a.spec.MaxSteps, step, a.spec.CheckpointID)
	}
	a.spec.WarmStart = &jobspec.WarmStart{Job: src.ID, Step: step}
	return nil
}

func loraWord(lora bool) string {
	if lora {
		return "a LoRA adapter"
	}
	return "all weights"
}

// stepList names steps briefly: all of a few, else the first and last few.
func stepList(steps []int) string {
	parts := make([]string, 0, len(steps))
	for i, st := range steps {
		if len(steps) > 8 && i == 3 {
			parts = append(parts, "…")
		}
		if len(steps) > 8 && i >= 3 && i < len(steps)-3 {
			continue
		}
		parts = append(parts, strconv.Itoa(st))
	}
	return "steps " + strings.Join(parts, ", ")
}
