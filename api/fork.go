package api

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
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
	var req wire.ForkRequest
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
	// as a submit is checked and queued: the model still offered, the checkpoint, the budget;
	// the source's secrets sealed again for the new job
	seal := func(id string) (string, *Problem, error) {
		if len(src.Config.Secrets) == 0 {
			return "", nil, nil
		}
		sealed, err := s.cfg.Queue.SealedSecrets(r.Context(), src.ID)
		if err != nil {
			return "", nil, err
		}
		if sealed == "" {
			return "", newProblem(http.StatusConflict, "cannot-fork", fmt.Sprintf(
				"job %s's secrets (%v) are no longer kept (it ended longer ago than jobs are kept ready to run); "+
					"submit its job file with checkpoint_id = %q and its secrets instead", src.ID, src.Config.Secrets, spec.CheckpointID)), nil
		}
		plain, err := s.cfg.Secrets.Open(sealed, src.ID)
		if err != nil {
			return "", nil, err
		}
		sealed, err = s.cfg.Secrets.Seal(plain, id)
		return sealed, nil, err
	}
	j, _, prob := s.enqueue(r, &admitted{spec: spec, gpusSaid: true, body: requestBody(r)}, map[string]string{"/checkpoint_id": "/step"}, seal, "", "")
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}
