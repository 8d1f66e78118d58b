package api

import (
	"errors"
	"fmt"
	"math"
	"net/http"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// A job's budget is GPU time: max_gpu_hours as written, max_cost at the operator's price per
// GPU-hour of its model (the lower of the two where both are set). The queue holds it in
// GPU-milliseconds and stops the job when its GPU time reaches it (heartbeat.lua), with
// job.budget events at 50, 80 and 100 %.

// budgetOf is the GPU time spec may use, in GPU-milliseconds (0: no budget), or the field
// that cannot be priced.
func (s *Server) budgetOf(spec jobspec.Spec) (int64, *FieldError) {
	if spec.Resources.GPUs == 0 && (spec.MaxGPUHours > 0 || spec.MaxCost > 0) {
		ptr := "/max_gpu_hours"
		if spec.MaxGPUHours == 0 {
			ptr = "/max_cost"
		}
		return 0, &FieldError{Pointer: ptr, Message: "this job takes no GPU, so a budget of GPU time would never bind: leave it out"}
	}
	limit := math.Inf(1)
	if spec.MaxGPUHours > 0 {
		limit = spec.MaxGPUHours * 3.6e6
	}
	if spec.MaxCost > 0 {
		price := s.price(spec.Model)
		if price <= 0 {
			return 0, &FieldError{Pointer: "/max_cost", Message: fmt.Sprintf(
				"the operator has no price per GPU-hour for %s, so a cost cannot be bounded here: set max_gpu_hours instead", spec.Model)}
		}
		limit = min(limit, spec.MaxCost/price*3.6e6)
	}
	if math.IsInf(limit, 1) {
		return 0, nil
	}
	return max(1, int64(limit)), nil
}

// price is the operator's price per GPU-hour of model (0: none).
func (s *Server) price(model string) float64 {
	for _, m := range s.cfg.Models {
		if m.Name == model {
			return m.PricePerGPUHour
		}
	}
	return 0
}

// invalidBudget refuses a budget that cannot be priced, in a request that is not a job file.
func invalidBudget(fe *FieldError) *Problem {
	p := newProblem(http.StatusUnprocessableEntity, "invalid-budget", fe.Message)
	p.Errors = []FieldError{*fe}
	return p
}

// budgetProblem refuses a job file whose budget cannot be priced, at its line.
func budgetProblem(r *http.Request, fe *FieldError) *Problem {
	b := requestBody(r)
	b.place(fe)
	return invalidJob([]FieldError{*fe}, b)
}

type budgetRequest struct {
	MaxGPUHours float64 `json:"max_gpu_hours"`
	MaxCost     float64 `json:"max_cost"`
}

// setBudget sets a job's budget anew (PUT /v1/jobs/{id}/budget): raised, a job its budget
// stopped can be restarted; lowered below what it used, a running job is stopped at its next
// heartbeat. Both values absent removes the budget.
func (s *Server) setBudget(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	var req budgetRequest
	if !decodeBody(w, r, &req) {
		return
	}
	spec := j.Config
	spec.MaxGPUHours, spec.MaxCost = req.MaxGPUHours, req.MaxCost
	budget, fe := s.budgetOf(spec)
	if fe != nil {
		writeProblem(w, r, invalidBudget(fe))
		return
	}
	err := s.cfg.Queue.SetBudget(r.Context(), j.ID, budget)
	if errors.Is(err, job.ErrNotFound) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "job-not-found", "no job "+j.ID+" in your organization"))
		return
	}
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	after, err := s.cfg.Queue.Get(r.Context(), j.ID)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, after)
}

// budgetSpent says whether a job has used all of its budget.
func budgetSpent(j *job.Job) bool {
	return j.BudgetGPUSeconds > 0 && j.GPUSeconds >= j.BudgetGPUSeconds
}
