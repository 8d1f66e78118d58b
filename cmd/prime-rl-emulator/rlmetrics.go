package main

import (
	"math"
	"math/rand/v2"
	"time"
)

// The rows prime-rl appends to metrics.jsonl, as the upstream kit's traces/metrics-keys.json
// records them for prime-rl 559b447: the trainer writes five rows a step (perf, optim, tensor
// statistics, time, disk), the orchestrator one a shipped batch and one per evaluation.

func dist(row map[string]any, prefix string, v float64, rng *rand.Rand) {
	spread := math.Abs(v)*0.2 + 0.01
	row[prefix+"/mean"] = round(v)
	row[prefix+"/min"] = round(v - spread)
	row[prefix+"/max"] = round(v + spread)
	row[prefix+"/p10"] = round(v - spread*0.8*rng.Float64())
	row[prefix+"/p90"] = round(v + spread*0.8*rng.Float64())
}

// episodeKeys fills the episode metrics of one subset (all or effective) under prefix
// (train/agg/all, train/<env>/effective, eval/<env>/all ...), for the single agent `agent`,
// one reward function and one metric, as orchestrator/metrics.py names them.
func episodeKeys(row map[string]any, prefix string, all bool, eval bool, reward float64, x float64, rng *rand.Rand) {
	a := prefix + "/agent"
	rates := []string{"is_completed", "is_truncated"}
	if !eval {
		rates = append([]string{"is_admitted"}, append(rates, "is_trainable")...)
	}
	if all {
		rates = append([]string{"cancelled", "has_error"}, rates...)
	}
	for _, k := range rates {
		v := 0.0
		switch k {
		case "is_admitted", "is_completed", "is_trainable":
			v = 1 - 0.05*rng.Float64()
		case "is_truncated":
			v = 0.05 * rng.Float64()
		}
		row[a+"/"+k+"/mean"] = round(v)
	}
	dist(row, a+"/metrics/format", 0.7+0.2*x, rng)
	tokens := 300 + 200*x
	dist(row, a+"/num_branches", 1, rng)
	dist(row, a+"/num_input_tokens", 180, rng)
	dist(row, a+"/num_output_tokens", tokens, rng)
	dist(row, a+"/num_total_tokens", 180+tokens, rng)
	dist(row, a+"/num_turns", 1, rng)
	dist(row, a+"/reward", reward, rng)
	dist(row, a+"/rewards/correct", reward, rng)
	if all {
		row[a+"/solved_all"] = round(reward * 0.5)
		row[a+"/solved_none"] = round((1 - reward) * 0.5)
		row[a+"/solved_some"] = round(0.5)
	}
	row[a+"/stop_condition/completed"] = round(0.95)
	row[a+"/stop_condition/generation_truncated"] = round(0.05)
	for _, t := range []string{"timing/agent/harness", "timing/agent", "timing/agent/model", "timing/finalize", "timing/scoring", "timing/setup", "timing/total"} {
		dist(row, a+"/"+t, 0.5+rng.Float64(), rng)
	}
	if eval {
		row[a+"/avg@1"] = round(reward)
		if !all {
			row[a+"/pass@1"] = round(reward)
		}
	}
	if all {
		row[prefix+"/cancelled/mean"] = round(0)
		row[prefix+"/has_error/mean"] = round(0)
	}
	dist(row, prefix+"/num_branches", 1, rng)
	dist(row, prefix+"/num_input_tokens", 180, rng)
	dist(row, prefix+"/num_output_tokens", tokens, rng)
	dist(row, prefix+"/num_total_tokens", 180+tokens, rng)
	dist(row, prefix+"/num_turns", 1, rng)
}

// progressCurve is a plausible run: reward climbs towards a plateau, entropy falls.
type progressCurve struct {
	bias     float64
	maxSteps int
	rng      *rand.Rand
}

func (c progressCurve) x(step int) float64 { return float64(step) / float64(max(c.maxSteps, 1)) }

func (c progressCurve) reward(step int) float64 {
	x := c.x(step)
	return c.bias + (0.85-c.bias)*(1-math.Exp(-3*x)) + (c.rng.Float64()-0.5)*0.04
}

// orchestratorRow is the orchestrator's row for shipped batch step.
func (c progressCurve) orchestratorRow(step int, envs []string, batch int) map[string]any {
	x := c.x(step)
	row := map[string]any{"step": step, "time": now()}
	r := c.reward(step)
	for _, sub := range []string{"all", "effective"} {
		episodeKeys(row, "train/agg/"+sub, sub == "all", false, r, x, c.rng)
		for _, e := range envs {
			episodeKeys(row, "train/"+e+"/"+sub, sub == "all", false, r+(c.rng.Float64()-0.5)*0.02, x, c.rng)
		}
	}
	tokens := float64(batch) * (480 + 200*x)
	row["progress/tokens"] = round(tokens)
	row["progress/input_tokens"] = round(float64(batch) * 180)
	row["progress/output_tokens"] = round(tokens - float64(batch)*180)
	row["progress/rollouts"] = batch
	row["progress/tasks"] = batch / 8
	row["progress/total_tokens"] = round(tokens * float64(step))
	row["progress/total_rollouts"] = batch * step
	row["progress/total_tasks"] = batch / 8 * step
	row["time/step"] = round(1 + c.rng.Float64())
	row["time/pack"] = round(0.01 + 0.01*c.rng.Float64())
	row["time/save_ckpt"] = round(0)
	row["time/wait_for_policy"] = round(0.2 * c.rng.Float64())
	if step > 1 {
		row["off_policy/mean"] = round(0.5 + 0.5*c.rng.Float64())
		row["off_policy/max"] = 1
		row["off_policy/in_flight/mean"] = round(0.4)
		row["off_policy/in_flight/max"] = 1
		row["off_policy/in_queue/mean"] = round(0.1)
		row["off_policy/in_queue/max"] = 1
		row["off_policy/dropped"] = 0
	}
	for _, e := range envs {
		row["batch/"+e] = round(1 / float64(len(envs)))
	}
	return row
}

// evalRow is the orchestrator's row for one evaluation of env at step.
func (c progressCurve) evalRow(step int, env string) map[string]any {
	row := map[string]any{"step": step, "time": now(), "eval/" + env + "/policy_version": max(step-1, 0)}
	r := c.reward(step) - 0.05
	for _, sub := range []string{"all", "effective"} {
		episodeKeys(row, "eval/"+env+"/"+sub, sub == "all", true, r, c.x(step), c.rng)
	}
	return row
}

// trainerRows are the trainer's five rows for trained step: perf, optim, tensor statistics
// (for each environment too), time, disk. With dropLoss, loss/* is missing from the tensor
// row, as when prime-rl drops a non-finite value (it warns and writes the rest).
func (c progressCurve) trainerRows(step int, envs []string, dropLoss bool) []map[string]any {
	x := c.x(step)
	noise := func(s float64) float64 { return (c.rng.Float64() - 0.5) * s }
	t := now()
	perf := map[string]any{"step": step, "time": t, "perf/throughput": round(5000 + noise(400)), "perf/throughput_per_gpu": round(2500 + noise(200)),
		"perf/mfu": round(30 + noise(4)), "perf/peak_memory": round(40 + noise(2))}
	optim := map[string]any{"step": step, "time": t, "optim/lr": 1e-4, "optim/grad_norm": round(0.4 - 0.2*x + noise(0.05))}
	tensor := map[string]any{"step": step, "time": t}
	if !dropLoss {
		loss := 0.05 - 0.03*x + noise(0.01)
		for _, s := range []string{"mean", "median", "std", "min", "max"} {
			tensor["loss/"+s] = round(loss + map[string]float64{"mean": 0, "median": 0.001, "std": 0.02, "min": -0.03, "max": 0.04}[s])
		}
	}
	ent := 1.2 - 0.6*x + noise(0.03)
	kl := 0.002 + noise(0.001)
	for _, scope := range append([]string{"all"}, envs...) {
		for _, s := range []string{"mean", "std", "max"} {
			tensor["entropy/"+scope+"/"+s] = round(ent * map[string]float64{"mean": 1, "std": 0.2, "max": 1.8}[s])
			tensor["mismatch_kl/"+scope+"/"+s] = round(kl * map[string]float64{"mean": 1, "std": 0.5, "max": 3}[s])
		}
	}
	for _, k := range []string{"masked_mismatch_kl", "unmasked_mismatch_kl", "is_masked", "is_masked_low", "is_masked_high",
		"masked_advantage_positive", "masked_advantage_negative"} {
		tensor[k+"/mean"] = round(0.01 * c.rng.Float64())
		tensor[k+"/max"] = round(0.05 * c.rng.Float64())
	}
	tensor["kl_ent_ratio/mean"] = round(kl / ent)
	timing := map[string]any{"step": step, "time": t, "time/step": round(2 + noise(0.2)), "time/wait_for_batch": round(0.1),
		"time/load_data": round(0.05), "time/broadcast_weights": round(0.3), "time/save_ckpt": round(0), "time/forward_backward": round(1.5)}
	disk := map[string]any{"step": step, "time": t, "system/ckpt_disk_free_gib": 500, "system/ckpt_disk_used_gib": 20,
		"system/ckpt_disk_total_gib": 520, "system/ckpt_disk_free_ratio": round(500.0 / 520)}
	return []map[string]any{perf, optim, tensor, timing, disk}
}

func round(f float64) float64 { return math.Round(f*1e5) / 1e5 }

func now() float64 { return float64(time.Now().UnixMicro()) / 1e6 }
