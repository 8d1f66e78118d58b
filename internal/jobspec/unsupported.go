package jobspec

import "fmt"

// Unsupported lists the settings of an rl job that the pinned prime-rl has no key for, so
// the run goes without them: each is a warning at submit, a comment at the top of the
// generated rl.toml and a line of the job's agent log, never dropped in silence. The
// pointers name the key as the hosted format spells it.
func Unsupported(s Spec) []Issue {
	var out []Issue
	add := func(ptr, format string, args ...any) {
		out = append(out, Issue{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
	}
	if sp := s.Sampling; sp != nil {
		if sp.TopP != nil {
			add("/sampling/top_p", "prime-rl samples training rollouts with top_p = 1 (its logprobs must be the policy's own), so top_p is not applied")
		}
		if sp.TempScheduler != nil {
			add("/sampling/temp_scheduler", "prime-rl has no temperature schedule; the run samples at a constant temperature (sampling.temperature, or 1.0)")
		}
	}
	if s.OversamplingFactor > 0 {
		add("/oversampling_factor", "prime-rl has no oversampling factor; bound the rollouts in flight with max_inflight_rollouts instead")
	}
	if s.DifficultyFiltering != nil {
		add("/use_difficulty_filtering", "prime-rl has no variance threshold filter; groups whose rewards are all equal are dropped (zero advantage) by default")
	}
	if p := s.Parallelism; p != nil && p.PipelineParallelSize > 1 {
		add("/pipeline_parallel_size", "prime-rl's inference config has no pipeline parallelism; vLLM runs with tensor and data parallelism only")
	}
	if s.Val != nil {
		add("/val", "prime-rl runs online evaluation ([eval]) but no separate validation; [val] is not applied")
	}
	for i, f := range s.PreBatchFilters {
		if f.Type != "zero_advantage" {
			add(fmt.Sprintf("/pre_batch_filters/%d", i), "prime-rl has no %s filter; only zero-advantage filtering, which is on by default", f.Type)
		}
	}
	for i, f := range s.PostBatchFilters {
		if f.Type != "zero_advantage" {
			add(fmt.Sprintf("/post_batch_filters/%d", i), "prime-rl has no %s filter; only zero-advantage filtering, which is on by default", f.Type)
		}
	}
	if s.Adapters != nil {
		add("/adapters", "adapter exports are not built yet; the LoRA adapters are in every checkpoint")
	}
	for i, e := range s.Env {
		envSampling(add, fmt.Sprintf("/env/%d/sampling", i), e.Sampling, false)
	}
	if ev := s.Eval; ev != nil {
		for i, e := range ev.Env {
			envSampling(add, fmt.Sprintf("/eval/env/%d/sampling", i), e.Sampling, true)
		}
		if ev.Sampling != nil && ev.Sampling.EnableThinking != nil {
			add("/eval/sampling/enable_thinking", "prime-rl's eval sampling has no thinking switch; evaluations render as training does")
		}
		if ev.Sampling != nil && ev.Sampling.TempScheduler != nil {
			add("/eval/sampling/temp_scheduler", "prime-rl has no temperature schedule")
		}
		if len(ev.Env) == 0 {
			add("/eval", "[eval] names no environment ([[eval.env]]), so no evaluation runs")
		}
	}
	return out
}

// envSampling says which of an environment's own sampling settings prime-rl's per-source
// sampling has no key for (train: temperature, max_tokens, extra_body; eval also top_p and
// reasoning_effort).
func envSampling(add func(string, string, ...any), ptr string, sp *Sampling, eval bool) {
	if sp == nil {
		return
	}
	if sp.TopP != nil && !eval {
		add(ptr+"/top_p", "prime-rl samples training rollouts with top_p = 1, so an environment's top_p is not applied")
	}
	if sp.ReasoningEffort != "" && !eval {
		add(ptr+"/reasoning_effort", "prime-rl sets the reasoning effort of training rollouts for the whole run ([sampling]), not per environment")
	}
	if sp.EnableThinking != nil {
		add(ptr+"/enable_thinking", "prime-rl switches thinking for the whole run ([sampling]), not per environment")
	}
	if sp.TempScheduler != nil {
		add(ptr+"/temp_scheduler", "prime-rl has no temperature schedule")
	}
}
