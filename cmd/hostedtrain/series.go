package main

import (
	"fmt"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// The CLI names metrics by their headline series (reward, loss, entropy, ...: jobdata.Headline)
// and shows prime-rl's own names beside them; a job's progress says which of prime-rl's names
// holds each series for it.

// seriesKey is the metric a name stands for in a job: a headline series' key (the job's
// own, else the series' first), or the name itself when it is a metric's name already.
func seriesKey(series map[string]string, name string) string {
	if k, ok := series[name]; ok {
		return k
	}
	if s, ok := jobdata.SeriesByName(name); ok {
		return s.Keys[0]
	}
	return name
}

// seriesName is what a metric is called in the CLI: its headline series, else its own name.
func seriesName(series map[string]string, key string) string {
	for name, k := range series {
		if k == key {
			return name
		}
	}
	for _, s := range jobdata.Headline {
		for _, k := range s.Keys {
			if k == key {
				return s.Name
			}
		}
	}
	return key
}

// headline is the first of the named series the progress has a value for: its name and value.
func headline(p job.Progress, names ...string) (string, float64, bool) {
	for _, n := range names {
		if v, ok := p.Metrics[seriesKey(p.Series, n)]; ok {
			return n, v, true
		}
	}
	return "", 0, false
}

// reward is the job's score so far: a training reward, an eval's average reward, GEPA's best.
func reward(p job.Progress) string {
	if _, v, ok := headline(p, "reward", "eval_reward", "gepa_best"); ok {
		return fmt.Sprintf("%.4f", v)
	}
	if r := p.Result; r != nil {
		if r.GEPA != nil && r.GEPA.BestScore != nil {
			return fmt.Sprintf("%.4f", *r.GEPA.BestScore)
		}
		if len(r.Eval) > 0 && r.Eval[0].AvgReward != nil {
			return fmt.Sprintf("%.4f", *r.Eval[0].AvgReward)
		}
	}
	return "-"
}

// metricsLine is the headline series of a progress line: "  reward 0.61  loss 0.03 ...".
func metricsLine(p job.Progress) string {
	var parts []string
	for _, n := range []string{"reward", "loss", "entropy", "eval_reward", "gepa_best"} {
		if v, ok := p.Metrics[seriesKey(p.Series, n)]; ok {
			parts = append(parts, fmt.Sprintf("%s %.4f", n, v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "  " + strings.Join(parts, "  ")
}
