package upstream

import (
	"strings"
	"testing"
)

// The GPU split is what prime-rl can run on one node: inference and the trainer on GPUs of
// their own, inference a multiple of its tensor parallelism; what cannot be split says what
// would work.
func TestSplitGPUs(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		gpus, tp        int
		infer, trainer  int
		err, suggestion string
	}{
		{gpus: 2, infer: 1, trainer: 1},
		{gpus: 8, infer: 4, trainer: 4},
		{gpus: 5, infer: 2, trainer: 3},
		{gpus: 8, tp: 2, infer: 4, trainer: 4},
		{gpus: 6, tp: 4, infer: 4, trainer: 2},
		{gpus: 8, tp: 3, infer: 3, trainer: 5},
		{gpus: 1, err: "at least 2 GPUs", suggestion: "num_gpus = 2"},
		{gpus: 16, err: "at most 8 GPUs", suggestion: "num_gpus = 8 or fewer"},
		{gpus: 2, tp: 4, err: "leaves no GPU for the trainer out of 2", suggestion: "num_gpus = 5 or tensor_parallel_size ≤ 1"},
		{gpus: 8, tp: 8, err: "on a node of 8", suggestion: "tensor_parallel_size ≤ 7"},
	} {
		got, err := SplitGPUs(c.gpus, c.tp)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) || !strings.Contains(err.Error(), c.suggestion) {
				t.Errorf("%d GPUs, tp %d: %v; want %q and %q", c.gpus, c.tp, err, c.err, c.suggestion)
			}
			continue
		}
		if err != nil || got.Inference != c.infer || got.Trainer != c.trainer {
			t.Errorf("%d GPUs, tp %d: %+v %v; want inference %d, trainer %d", c.gpus, c.tp, got, err, c.infer, c.trainer)
		}
	}
}

// A model in prime-rl's map renders with "auto"; a fine-tune named after a model of the map
// gets its base's renderer, with a reason; a new version of a model does not; anything else
// is refused with what to set.
func TestChooseRenderer(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		model, explicit, want string
		auto                  bool
		err                   string
	}{
		{model: "Qwen/Qwen3-4B-Instruct-2507", want: "qwen3", auto: true},
		{model: "willcb/Qwen3-0.6B", want: "qwen3"},
		{model: "PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT", explicit: "prime-qwen3", want: "prime-qwen3"},
		{model: "deepseek-ai/DeepSeek-V3-0324-finetune", want: "deepseek-v3"},
		{model: "deepseek-ai/DeepSeek-V3.1", err: "no chat renderer"},
		{model: "acme/totally-new-model", err: `set renderer = "default"`},
		{model: "Qwen/Qwen3-4B-Instruct-2507", explicit: "no-such", err: "is not one of prime-rl's"},
	} {
		got, err := ChooseRenderer(c.model, c.explicit)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v %v; want an error saying %q", c.model, got, err, c.err)
			}
			continue
		}
		if err != nil || got.Name != c.want || got.Auto != c.auto || (!c.auto && c.explicit == "" && got.Reason == "") {
			t.Errorf("%s (%q): %+v %v; want %s, auto %v", c.model, c.explicit, got, err, c.want, c.auto)
		}
	}
}

// The runtime description loads, names every part's command and a shape the agent renders.
func TestPinnedRuntime(t *testing.T) {
	t.Parallel()
	rt := PinnedRuntime()
	c := rt.Commands
	for name, cmd := range map[string][]string{"rl": c.RL, "preflight": c.Preflight, "gepa": c.GEPA, "gepa_check": c.GEPACheck, "eval": c.Eval, "serve": c.Serve, "install": c.Install} {
		if len(cmd) == 0 {
			t.Errorf("runtime.toml has no %s command", name)
		}
	}
	if rt.Shapes.GEPAConfig != "legacy" || rt.Shapes.EnvLoader != "legacy" || !strings.Contains(rt.Name, PrimeRLCommit[:7]) {
		t.Errorf("runtime %+v", rt)
	}
}
