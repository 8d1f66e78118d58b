package api

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// The default step time where no past run says better (seconds): a guess for a LoRA run of a
// small model at prime-rl's default batch on one node, wide on purpose.
var defaultStep = client.Range{Low: 20, Expected: 60, High: 180}

// estimateRuns is how many of the organization's newest ended runs an estimate reads.
const estimateRuns = 200

// estimate is what spec would take, from the step times of the organization's past runs of
// the same kind, model and GPU count (nil for a job that does not step).
func (s *Server) estimate(ctx context.Context, org string, spec jobspec.Spec) (*client.Estimate, error) {
	if !jobspec.RunsPrimeRL(spec.Kind) || spec.MaxSteps <= 0 {
		return nil, nil
	}
	past, _, err := s.cfg.Queue.List(ctx, org, job.ListFilter{Kind: spec.Kind,
		Statuses: []job.Status{job.Completed, job.Failed, job.Stopped}}, "", estimateRuns)
	if err != nil {
		return nil, err
	}
	var per []float64
	for _, j := range past {
		steps := j.Progress.Step - j.ResumeStep
		if j.Config.Model != spec.Model || j.Config.Resources.GPUs != spec.Resources.GPUs || steps <= 0 ||
			j.StartedAt == nil || j.FinishedAt == nil {
			continue
		}
		if d := j.FinishedAt.Sub(*j.StartedAt).Seconds(); d > 0 {
			per = append(per, d/float64(steps))
		}
	}
	steps := spec.MaxSteps
	if spec.WarmStart != nil {
		steps = max(0, steps-spec.WarmStart.Step)
	}
	e := &client.Estimate{Runs: len(per), Steps: steps}
	shape := fmt.Sprintf("%s on %d×%s", spec.Model, spec.Resources.GPUs, spec.Resources.GPUType)
	switch {
	case len(per) >= 3:
		slices.Sort(per)
		e.StepSeconds = client.Range{Low: percentile(per, 10), Expected: percentile(per, 50), High: percentile(per, 90)}
		e.BasedOn = fmt.Sprintf("the step times of %d past runs of %s in your organization (10th, 50th and 90th percentiles)", len(per), shape)
	case len(per) > 0:
		mean := 0.0
		for _, p := range per {
			mean += p / float64(len(per))
		}
		e.StepSeconds = client.Range{Low: 0.75 * mean, Expected: mean, High: 1.5 * mean}
		e.BasedOn = fmt.Sprintf("the step time of %d past run(s) of %s in your organization (0.75× to 1.5× their mean)", len(per), shape)
	default:
		e.StepSeconds = defaultStep
		e.BasedOn = fmt.Sprintf("no past run of %s in your organization: the service's default of 20 to 180 seconds a step (60 expected)", shape)
	}
	gpus := float64(spec.Resources.GPUs)
	step := e.StepSeconds
	scale := func(f float64) client.Range {
		return client.Range{Low: round3(step.Low * f), Expected: round3(step.Expected * f), High: round3(step.High * f)}
	}
	e.DurationSeconds = scale(float64(steps))
	e.GPUHours = scale(float64(steps) * gpus / 3600)
	e.StepSeconds = scale(1)
	if price := s.price(spec.Model); price > 0 {
		c := scale(float64(steps) * gpus / 3600 * price)
		e.Cost, e.PricePerGPUHour = &c, price
	}
	return e, nil
}

// percentile of sorted xs (nearest rank, interpolated).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 1 {
		return xs[0]
	}
	pos := p / 100 * float64(len(xs)-1)
	lo := int(math.Floor(pos))
	hi := min(lo+1, len(xs)-1)
	return xs[lo] + (xs[hi]-xs[lo])*(pos-float64(lo))
}
