package fit

import (
	"math"
	"strconv"
	"strings"
	"testing"
)

// The layouts the issue that made this package was about: the docs' 30B-A3B example on 8
// GPUs, whose vLLM copies on one card each cannot hold a sequence of the model's whole
// context (~57 GiB of weights, ~24 GiB of KV for 262,144 tokens) but can the run's own
// length; models past a node refused with what would fit; serving sized for the model.
func TestLayouts(t *testing.T) {
	t.Parallel()
	const a3b = "Qwen/Qwen3-30B-A3B-Instruct-2507"
	for _, c := range []struct {
		name           string
		run            Run
		infer, tp, err string
	}{
		{"30B-A3B, the model's whole context", Run{Model: a3b, GPUs: 8, ContextLen: 262144, SeqLen: 2048, LoRA: true}, "4", "2", ""},
		{"30B-A3B, the run's length", Run{Model: a3b, GPUs: 8, ContextLen: 4096, SeqLen: 4096, LoRA: true}, "4", "1", ""},
		{"30B-A3B, tp 4 as the job asks", Run{Model: a3b, GPUs: 8, TP: 4, ContextLen: 4096, SeqLen: 4096, LoRA: true}, "4", "4", ""},
		{"8B full fine-tune on 2 GPUs", Run{Model: "Qwen/Qwen3-8B", GPUs: 2, ContextLen: 4096, SeqLen: 4096}, "", "",
			"the trainer needs 3 GPU(s) for full fine-tuning; try num_gpus = 4 or LoRA"},
		{"30B-A3B full fine-tune", Run{Model: a3b, GPUs: 8, ContextLen: 4096, SeqLen: 4096}, "", "", "try LoRA (use_lora = true)"},
		{"235B", Run{Model: "Qwen/Qwen3-235B-A22B", GPUs: 8, ContextLen: 4096, SeqLen: 4096, LoRA: true}, "", "",
			"a vLLM replica needs 8 GPU(s) (tensor_parallel_size 8: 438 GiB of weights"},
		{"DeepSeek-V3", Run{Model: "deepseek-ai/DeepSeek-V3", GPUs: 8, ContextLen: 4096, SeqLen: 4096, LoRA: true}, "", "",
			"one vLLM replica needs more than 8 GPUs"},
		{"a fine-tune of a model in the table", Run{Model: "PrimeIntellect/Qwen3-1.7B-Wordle-SFT", GPUs: 2, ContextLen: 8192, SeqLen: 8192}, "1", "1", ""},
		{"a size from the name", Run{Model: "acme/brand-new-397B-A17B", GPUs: 8, ContextLen: 4096, SeqLen: 4096, LoRA: true}, "", "", "does not fit 8 H100s"},
		{"longer than the model takes", Run{Model: "Qwen/Qwen3-8B", GPUs: 2, ContextLen: 65536, SeqLen: 65536, LoRA: true}, "", "", "at most 40960 tokens"},
	} {
		l, known, err := RL(c.run)
		switch {
		case !known:
			t.Errorf("%s: not sized", c.name)
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%s: %+v %v; want an error containing %q", c.name, l, err, c.err)
			}
		case err != nil:
			t.Errorf("%s: %v", c.name, err)
		case itoa(l.Inference) != c.infer || itoa(l.TensorParallel) != c.tp:
			t.Errorf("%s: %+v; want %s inference GPUs at tp %s", c.name, l, c.infer, c.tp)
		case l.InferGiB > Usable*Card/gib || l.TrainGiB > Usable*Card/gib:
			t.Errorf("%s: %+v is past a card", c.name, l)
		}
	}
	if _, known, err := RL(Run{Model: "acme/mystery", GPUs: 8}); known || err != nil {
		t.Errorf("a model of no known size: known %t, %v", known, err)
	}
	for model, want := range map[string]int{"Qwen/Qwen3-4B-Instruct-2507": 1, "Qwen/Qwen3-235B-A22B": 8, "openai/gpt-oss-120b": 1, "Qwen/Qwen3-32B": 1} {
		if tp, _, err := Serve(model, 8192); err != nil || tp != want {
			t.Errorf("serve %s: tp %d %v; want %d", model, tp, err, want)
		}
	}
	if _, _, err := Serve("deepseek-ai/DeepSeek-V3", 8192); err == nil || !strings.Contains(err.Error(), "does not fit one node") {
		t.Errorf("serve DeepSeek-V3: %v", err)
	}
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestWeightsComeFromTheTableOrTheName(t *testing.T) {
	for _, c := range []struct {
		model string
		want  float64
		ok    bool
	}{
		{"Qwen/Qwen3-30B-A3B", 30.5e9 * 2, true},              // the table: bf16, every parameter
		{"openai/gpt-oss-20b", 13.8e9, true},                  // the table's size as served (MXFP4)
		{"someone/Qwen3-30B-A3B-my-sft", 30.5e9 * 2, true},    // its base model's
		{"meta-llama/Llama-3.3-70B-Instruct", 70e9 * 2, true}, // the size in its name
		{"microsoft/phi-4", 0, false},                         // nothing says
	} {
		got, ok := Weights(c.model)
		if ok != c.ok || math.Abs(got-c.want) > 1 {
			t.Errorf("Weights(%q) = %.0f, %v; want %.0f, %v", c.model, got, ok, c.want, c.ok)
		}
	}
}
