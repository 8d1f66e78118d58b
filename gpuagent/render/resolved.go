package render

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Resolved is what an rl run will really do once prime-rl and verifiers have applied their
// defaults to the config the agent wrote: each source's taskset, the harness of each seat,
// what every request is sampled with and the judges its tasks are graded by; the lengths; the
// vLLM layout. `gpuagent render -o json` prints it and the agent logs it before a run
// starts; TestConformance checks it against upstream's own resolution (check.py's
// details.resolved) for every job it renders.
type Resolved struct {
	SeqLen  int              `json:"seq_len"`
	VLLM    ResolvedVLLM     `json:"vllm"`
	Sources []ResolvedSource `json:"sources"`
}

// ResolvedVLLM is the inference server's layout.
type ResolvedVLLM struct {
	TensorParallelSize int `json:"tensor_parallel_size"`
	DataParallelSize   int `json:"data_parallel_size"`
	MaxModelLen        int `json:"max_model_len"`
	// GPUs and TrainerGPUs are the node's split.
	GPUs        int `json:"gpus"`
	TrainerGPUs int `json:"trainer_gpus"`
}

// ResolvedSource is one train or eval source.
type ResolvedSource struct {
	Group    string            `json:"group"` // train or eval
	Name     string            `json:"name"`
	Taskset  string            `json:"taskset"`
	Harness  map[string]string `json:"harness"`
	Sampling map[string]any    `json:"sampling,omitempty"`
	Judges   []ResolvedJudge   `json:"judges,omitempty"`
}

// ResolvedJudge is a judge and where it is called.
type ResolvedJudge struct {
	Model     string `json:"model"`
	BaseURL   string `json:"base_url,omitempty"`
	APIKeyVar string `json:"api_key_var,omitempty"`
}

// resolve reads the resolution of the rl.toml the agent wrote (f): prime-rl's defaults for
// what the file leaves out (tensor parallelism 1; a source's sampling is its group's with its
// own on top), the taskset's judges unless the job's args replace them.
func (f rlFile) resolve(split int) *Resolved {
	r := &Resolved{SeqLen: f.SeqLen}
	tp := max(f.Inference.VLLM.TensorParallelSize, 1)
	r.VLLM = ResolvedVLLM{TensorParallelSize: tp, DataParallelSize: split / tp, MaxModelLen: f.Inference.VLLM.MaxModelLen,
		GPUs: f.Deployment.NumInferGPUs, TrainerGPUs: f.Deployment.NumTrainGPUs}
	group := func(name string, srcs []rlSource, base map[string]any) {
		for _, s := range srcs {
			rs := ResolvedSource{Group: name, Name: s.Name, Harness: map[string]string{}, Sampling: maps.Clone(base)}
			if rs.Sampling == nil {
				rs.Sampling = map[string]any{}
			}
			maps.Copy(rs.Sampling, s.Sampling)
			ts, _ := s.Env["taskset"].(map[string]any)
			rs.Taskset, _ = ts["id"].(string)
			for seat, v := range s.Env {
				t, ok := v.(map[string]any)
				if !ok {
					continue
				}
				if h, ok := t["harness"].(map[string]any); ok {
					rs.Harness[seat], _ = h["id"].(string)
				}
			}
			rs.Judges = judgesOf(rs.Taskset, ts)
			r.Sources = append(r.Sources, rs)
		}
	}
	var train map[string]any
	if sp := f.Orchestrator.Train.Sampling; sp != nil {
		train = map[string]any{}
		if sp.Temperature != nil {
			train["temperature"] = *sp.Temperature
		}
		if sp.MaxCompletionTokens > 0 {
			train["max_completion_tokens"] = sp.MaxCompletionTokens
		}
		if len(sp.ExtraBody) > 0 {
			train["extra_body"] = sp.ExtraBody
		}
	}
	group("train", f.Orchestrator.Train.Source, train)
	if ev := f.Orchestrator.Eval; ev != nil {
		var base map[string]any
		if sp := ev.Sampling; sp != nil {
			base = map[string]any{}
			if sp.Temperature != nil {
				base["temperature"] = *sp.Temperature
			}
			if sp.TopP != nil {
				base["top_p"] = *sp.TopP
			}
			if sp.MaxCompletionTokens > 0 {
				base["max_completion_tokens"] = sp.MaxCompletionTokens
			}
			if sp.ReasoningEffort != "" {
				base["reasoning_effort"] = sp.ReasoningEffort
			}
		}
		group("eval", ev.Source, base)
	}
	return r
}

// judgesOf are the judges a source's tasks are graded by: the job's (its args'
// task.judges, resolved at submit), else the taskset's own.
func judgesOf(id string, taskset map[string]any) []ResolvedJudge {
	ts, _ := upstream.LookupTaskset(id)
	task, _ := taskset["task"].(map[string]any)
	given, ok := task["judges"].([]any)
	if !ok {
		var out []ResolvedJudge
		for _, j := range ts.Judges {
			out = append(out, ResolvedJudge{Model: j.Model, BaseURL: j.BaseURL, APIKeyVar: j.APIKeyVar})
		}
		return out
	}
	var out []ResolvedJudge
	for _, g := range given {
		j, _ := g.(map[string]any)
		// What the entry leaves out is its judge class's: the taskset's judge of that id,
		// else verifiers' JudgeConfig defaults.
		def := upstream.Judge{Model: "openai/gpt-5.4-nano", BaseURL: "https://api.pinference.ai/api/v1", APIKeyVar: "PRIME_API_KEY"}
		for _, d := range ts.Judges {
			if d.ID == j["id"] {
				def = d
			}
		}
		str := func(k, or string) string {
			if v, _ := j[k].(string); v != "" {
				return v
			}
			return or
		}
		out = append(out, ResolvedJudge{Model: str("model", def.Model), BaseURL: str("base_url", def.BaseURL), APIKeyVar: str("api_key_var", def.APIKeyVar)})
	}
	return out
}

// Lines are the resolution as the agent logs it, a line each.
func (r *Resolved) Lines() []string {
	out := []string{fmt.Sprintf("resolved: seq_len %d; vLLM on %d GPU(s) (tensor parallel %d × data parallel %d, max_model_len %d), the trainer on %d",
		r.SeqLen, r.VLLM.GPUs, r.VLLM.TensorParallelSize, r.VLLM.DataParallelSize, r.VLLM.MaxModelLen, r.VLLM.TrainerGPUs)}
	for _, s := range r.Sources {
		var seats []string
		for _, seat := range slices.Sorted(maps.Keys(s.Harness)) {
			seats = append(seats, seat+": "+s.Harness[seat])
		}
		line := fmt.Sprintf("resolved: %s source %s (taskset %s): harness %s; sampling %v", s.Group, s.Name, s.Taskset, strings.Join(seats, ", "), s.Sampling)
		for _, j := range s.Judges {
			line += fmt.Sprintf("; judge %s at %s with %s", j.Model, j.BaseURL, j.APIKeyVar)
		}
		out = append(out, line)
	}
	return out
}
