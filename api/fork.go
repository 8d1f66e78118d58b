package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// forkJob starts a new rl job from a committed checkpoint of one of the organization's jobs,
// in any state: the job's config with the request's changes, its secrets sealed again for the
// new job, and its warm start — the checkpoint_id a job file would name — resolved as a
// submit resolves it. The new job's warm_start is its lineage: parent and step.
func (s *Server) forkJob(w http.ResponseWriter, r *http.Request) {
	src, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	var req client.ForkRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if src.Kind != jobspec.KindRL {
		writeProblem(w, r, newProblem(http.StatusConflict, "cannot-fork",
			fmt.Sprintf("job %s is a %s job; only an rl job's checkpoints start another run", src.ID, src.Kind)))
		return
	}
	var spec jobspec.Spec // a deep copy: nothing of the source's is shared
	if b, err := json.Marshal(src.Config); err != nil || json.Unmarshal(b, &spec) != nil {
		s.internalError(w, r, fmt.Errorf("fork %s: copy the config: %v", src.ID, err))
		return
	}
	spec.WarmStart, spec.CheckpointID = nil, src.ID
	if req.Step > 0 {
		spec.CheckpointID = fmt.Sprintf("%s-step-%d", src.ID, req.Step)
	}
	if req.MaxSteps > 0 {
		spec.MaxSteps = req.MaxSteps
	}
	if req.Name != "" {
		spec.Name = req.Name
	}
	if req.LearningRate > 0 {
		spec.LearningRate = req.LearningRate
	}
	if req.Priority != nil {
		spec.Priority = *req.Priority
	}
	if req.TimeLimit != "" {
		tl, msg := jobspec.ParseTimeLimit(req.TimeLimit)
		if msg != "" {
			writeProblem(w, r, invalidBody([]FieldError{{Pointer: "/time_limit", Message: msg}}))
			return
		}
		spec.TimeLimit = tl
	}
	// as a submit is checked: the model still offered, then the checkpoint
	a := &admitted{spec: spec, gpusSaid: true}
	prob := s.offered(r, a)
	if prob == nil {
		prob = s.resolveWarmStart(r, a, map[string]string{"/checkpoint_id": "/step"})
	}
	budget, fe := s.budgetOf(a.spec)
	if prob == nil && fe != nil {
		prob = invalidBudget(fe)
	}
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	id, err := job.NewID()
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	sub := job.Submission{ID: id, Org: principal(r).Org, Spec: a.spec, BudgetGPUMs: budget,
		CreatedBy: principal(r).Subject, TokenID: principal(r).TokenID, PricePerGPUHour: s.price(a.spec.Model)}
	if sub.EstimateGPUMs, err = s.estimateGPUMs(r.Context(), sub.Org, a.spec); err != nil {
		s.internalError(w, r, err)
		return
	}
	if len(src.Config.Secrets) > 0 {
		sealed, err := s.cfg.Queue.SealedSecrets(r.Context(), src.ID)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if sealed == "" {
			writeProblem(w, r, newProblem(http.StatusConflict, "cannot-fork", fmt.Sprintf(
				"job %s's secrets (%v) are no longer kept (it ended longer ago than jobs are kept ready to run); "+
					"submit its job file with checkpoint_id = %q and its secrets instead", src.ID, src.Config.Secrets, a.spec.CheckpointID)))
			return
		}
		plain, err := s.cfg.Secrets.Open(sealed, src.ID)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if sub.SealedSecrets, err = s.cfg.Secrets.Seal(plain, id); err != nil {
			s.internalError(w, r, err)
			return
		}
	}
	j, _, err := s.cfg.Queue.Submit(r.Context(), sub, "", "")
	var limit *job.LimitError
	switch {
	case errors.As(err, &limit):
		writeProblem(w, r, limitProblem(limit))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}
