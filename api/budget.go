package api

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net/http"
	"time"

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

// budgetProblem refuses a job file whose budget cannot be priced, at its line in b.
func budgetProblem(b *body, fe *FieldError) *Problem {
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

// monthlyBudget is an organization's monthly budget as a submit last read it.
type monthlyBudget struct {
	gpuHours float64
	read     time.Time
}

// monthlyBudgetTTL is how long a submit trusts the monthly budget it read: a budget set or
// removed reaches submits within it (a job submitted meanwhile is not held for its estimate,
// but is still stopped with the rest once the budget is spent).
const monthlyBudgetTTL = 30 * time.Second

// estimateGPUMs is the GPU time a job is expected to take, where its organization has a
// monthly budget (0 where it has none, or the job does not step): the claim holds a job
// expected to take more than what is left of the budget. The estimate reads the
// organization's past runs, so it is only made where a budget is set.
func (s *Server) estimateGPUMs(ctx context.Context, org string, spec jobspec.Spec) (int64, error) {
	b, ok := s.budgets.Load(org)
	if !ok || time.Since(b.(monthlyBudget).read) > monthlyBudgetTTL {
		st, err := s.cfg.Queue.GetOrg(ctx, org)
		if err != nil {
			return 0, err
		}
		b = monthlyBudget{gpuHours: st.MonthlyGPUHours, read: time.Now()}
		s.budgets.Store(org, b)
	}
	if b.(monthlyBudget).gpuHours <= 0 {
		return 0, nil
	}
	est, err := s.estimate(ctx, org, spec)
	if err != nil || est == nil {
		return 0, err
	}
	return int64(math.Round(est.GPUHours.Expected * 3.6e6)), nil
}
