package api

import (
	"context"
	"fmt"
	"math"
	"slices"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// The default step time where no past run says better (seconds): a guess for a LoRA run of a
// small model at prime-rl's default batch on one node, wide on purpose.
var defaultStep = wire.Range{Low: 20, Expected: 60, High: 180}

// estimateRuns is how many of the organization's newest ended runs an estimate reads.
const estimateRuns = 200

// estimate is what spec would take, from the step times of the organization's past runs of
// the same kind, model and GPU count (nil for a job that does not step).
func (s *Server) estimate(ctx context.Context, org string, spec jobspec.Spec) (*wire.Estimate, error) {
	if !jobspec.RunsPrimeRL(spec.Kind) || spec.MaxSteps <= 0 {
		return nil, nil
	}
	past, _, err := s.cfg.Queue.List(ctx, org, job.ListFilter{Kind: spec.Kind,
		Statuses: []job.Status{job.Completed, job.Failed, job.Stopped}}, "", estimateRuns)
	if err != nil {
		return nil, err
	}
	var runs []pastRun
	for _, j := range past {
		steps := j.Progress.Step - j.ResumeStep
		if j.Config.Model != spec.Model || j.Config.Resources.GPUs != spec.Resources.GPUs || steps <= 0 ||
			j.StartedAt == nil || j.FinishedAt == nil {
			continue
		}
		if d := j.FinishedAt.Sub(*j.StartedAt).Seconds(); d > 0 {
			runs = append(runs, pastRun{steps: float64(steps), secs: d})
		}
	}
	steps := spec.MaxSteps
	if spec.WarmStart != nil {
		steps = max(0, steps-spec.WarmStart.Step)
	}
	e := &wire.Estimate{Runs: len(runs), Steps: steps}
	shape := fmt.Sprintf("%s on %d×%s", spec.Model, spec.Resources.GPUs, spec.Resources.GPUType)
	n := float64(steps)
	var dur wire.Range
	switch {
	case len(runs) >= 3:
		// A line through the past runs' durations (a start-up, then a time a step), and their
		// spread about it: the 10th and 90th percentiles of each run's duration over the line's.
		startup, per := fitRuns(runs)
		ratios := make([]float64, len(runs))
		for i, r := range runs {
			ratios[i] = r.secs / (startup + per*r.steps)
		}
		slices.Sort(ratios)
		expected := startup + per*n
		dur = wire.Range{Low: expected * percentile(ratios, 10), Expected: expected, High: expected * percentile(ratios, 90)}
		e.BasedOn = fmt.Sprintf("%d past runs of %s in your organization: a start-up of %.0f s and %.1f s a step fitted to their durations, "+
			"low and high from how far they fell from it (10th and 90th percentiles)", len(runs), shape, startup, per)
	case len(runs) > 0:
		mean := 0.0
		for _, r := range runs {
			mean += r.secs / r.steps / float64(len(runs))
		}
		dur = wire.Range{Low: 0.75 * mean * n, Expected: mean * n, High: 1.5 * mean * n}
		e.BasedOn = fmt.Sprintf("the step time of %d past run(s) of %s in your organization (0.75× to 1.5× their mean)", len(runs), shape)
	default:
		dur = wire.Range{Low: defaultStep.Low * n, Expected: defaultStep.Expected * n, High: defaultStep.High * n}
		e.BasedOn = fmt.Sprintf("no past run of %s in your organization: the service's default of 20 to 180 seconds a step (60 expected)", shape)
	}
	gpus := float64(spec.Resources.GPUs)
	scale := func(f float64) wire.Range {
		return wire.Range{Low: round3(dur.Low * f), Expected: round3(dur.Expected * f), High: round3(dur.High * f)}
	}
	e.DurationSeconds = scale(1)
	e.GPUHours = scale(gpus / 3600)
	if steps > 0 {
		e.StepSeconds = scale(1 / n)
	}
	if price := s.price(spec.Model); price > 0 {
		c := scale(gpus / 3600 * price)
		e.Cost, e.PricePerGPUHour = &c, price
	}
	return e, nil
}

// pastRun is one ended run an estimate learns from: the steps it took and its wall time.
type pastRun struct{ steps, secs float64 }

// fitRuns fits secs = startup + per × steps to runs by least squares, with a start-up of at
// least zero; where the runs' step counts are (nearly) all alike, or the line would slope
// down, it is the runs' median time a step and no start-up.
func fitRuns(runs []pastRun) (startup, per float64) {
	var sx, sy, sxx, sxy float64
	for _, r := range runs {
		sx, sy, sxx, sxy = sx+r.steps, sy+r.secs, sxx+r.steps*r.steps, sxy+r.steps*r.secs
	}
	k := float64(len(runs))
	if d := k*sxx - sx*sx; d > 1e-9*k*sxx {
		per = (k*sxy - sx*sy) / d
		startup = (sy - per*sx) / k
		if startup < 0 { // through the origin instead
			startup, per = 0, sxy/sxx
		}
		if per > 0 {
			return startup, per
		}
	}
	each := make([]float64, len(runs))
	for i, r := range runs {
		each[i] = r.secs / r.steps
	}
	slices.Sort(each)
	return 0, percentile(each, 50)
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
