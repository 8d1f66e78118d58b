package gpuagent

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// watchdog reads an rl or fft run's steps as they arrive for the signs of a run gone wrong
// that do not end it (prime #784: hangs nobody noticed):
//   - a stall: no new step for the job's stall_factor times its median step time (at least
//     the agent's StallFloor) — a hung collective, a dead environment server, a wedged
//     inference server. Raised once per stall (job.stalled); a new step ends it.
//   - the reward spread at zero: every rollout of collapseSteps steps in a row got the same
//     reward (prime-rl's reward min equals its max), so the advantages are zero and the policy
//     learns nothing (job.alert, once).
//   - entropy collapse: the mean entropy fell below entropyFloor of its first steps' (the
//     policy went deterministic; job.alert, once).
type watchdog struct {
	factor float64
	floor  time.Duration

	lastStep  int       // the newest step of any row (the orchestrator's run ahead)
	trained   int       // the newest step the trainer finished
	lastAt    time.Time // when the newest step arrived (or the pipeline started)
	intervals []time.Duration
	stalled   bool

	rewardStep  int // the newest step whose rewards were read
	flat        int
	flatRaised  bool
	entropyStep int
	entropyBase []float64
	entropyDone bool
}

const (
	collapseSteps = 5   // steps in a row with no reward spread before an alert
	entropyFloor  = 0.1 // of the first steps' entropy
	entropyBaseN  = 3   // steps whose entropy is the baseline
	maxIntervals  = 64  // step intervals the median is taken over
)

func newWatchdog(factor float64, floor time.Duration, started time.Time) *watchdog {
	return &watchdog{factor: factor, floor: floor, lastAt: started}
}

// rows takes the new metric rows; it returns the alerts they raise. prime-rl's orchestrator
// writes its row of a step (the rewards) up to two steps ahead of the trainer's (the entropy),
// so each sign is read from the rows that carry it, and a step from any row.
func (w *watchdog) rows(rows []jobdata.Row, now time.Time) []job.Alert {
	var out []job.Alert
	newSteps, seen := 0, w.lastStep > 0
	for _, r := range rows {
		f, ok := r.Float("step")
		if !ok {
			continue
		}
		step := int(f)
		if step > w.lastStep {
			newSteps += step - w.lastStep
			w.lastStep = step
		}
		if _, trainer := r.Float("loss/mean"); trainer && step > w.trained {
			w.trained = step
		}
		lo, okLo := r.Float("train/agg/all/agent/reward/min")
		hi, okHi := r.Float("train/agg/all/agent/reward/max")
		if okLo && okHi && step > w.rewardStep {
			w.rewardStep = step
			if lo == hi {
				w.flat++
			} else {
				w.flat = 0
			}
			if w.flat >= collapseSteps && !w.flatRaised {
				w.flatRaised = true
				out = append(out, job.Alert{Type: job.EventAlert, Detail: fmt.Sprintf(
					"reward spread at zero: every rollout of steps %d-%d got reward %g, so the advantages are zero and the policy learns nothing (make the task harder or easier, or raise rollouts_per_example)",
					step-w.flat+1, step, lo)})
			}
		}
		if e, ok := r.Float("entropy/all/mean"); ok && !w.entropyDone && step > w.entropyStep {
			w.entropyStep = step
			if len(w.entropyBase) < entropyBaseN {
				w.entropyBase = append(w.entropyBase, e)
			} else if base := median(w.entropyBase); base > 0 && e < entropyFloor*base {
				w.entropyDone = true
				out = append(out, job.Alert{Type: job.EventAlert, Detail: fmt.Sprintf(
					"entropy collapse: mean entropy %.4g at step %d, below %d %% of the first steps' %.4g (the policy went near-deterministic; consider a lower learning rate or a higher temperature)",
					e, step, int(entropyFloor*100), base)})
			}
		}
	}
	if newSteps > 0 {
		// Steps read in one poll arrived over the time since the last: each took its share.
		if seen {
			per := now.Sub(w.lastAt) / time.Duration(newSteps)
			for range min(newSteps, maxIntervals) {
				w.intervals = append(w.intervals, per)
			}
			if n := len(w.intervals); n > maxIntervals {
				w.intervals = w.intervals[n-maxIntervals:]
			}
		}
		w.lastAt, w.stalled = now, false
	}
	return out
}

// stall says whether the run has stalled now (once per stall), with the alert.
func (w *watchdog) stall(now time.Time) (job.Alert, bool) {
	if w.stalled || len(w.intervals) < 2 {
		return job.Alert{}, false // no step time to judge by yet
	}
	med := time.Duration(median(durations(w.intervals)))
	limit := max(w.floor, time.Duration(w.factor*float64(med)))
	waited := now.Sub(w.lastAt)
	if waited < limit {
		return job.Alert{}, false
	}
	w.stalled = true
	return job.Alert{Type: job.EventStalled, Detail: fmt.Sprintf(
		"no new step for %s after step %d (a step takes %s at the median; a stall is %g× that, at least %s)",
		waited.Round(time.Second), max(w.trained, 1), med.Round(time.Millisecond), w.factor, w.floor)}, true
}

func durations(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d)
	}
	return out
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return math.NaN()
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
