package fit

import (
	"regexp"
	"strconv"
	"strings"
)

// Arch is what the memory a model takes depends on, from its Hugging Face config.json
// (num_hidden_layers, num_key_value_heads, head_dim, max_position_embeddings) and its model
// card (parameters, total for a mixture of experts: every expert is in memory).
type Arch struct {
	// ParamsB is the total parameters, in billions.
	ParamsB float64
	Layers  int
	// KVHeads and HeadDim size the KV cache: 2 (K and V) × Layers × KVHeads × HeadDim values
	// a token, in bf16. KVBytesPerToken, when set, replaces that (multi-head latent
	// attention keeps one compressed vector a layer).
	KVHeads, HeadDim int
	KVBytesPerToken  int
	// Context is the longest sequence the model takes (max_position_embeddings).
	Context int
	// ServeGB is the size of the weights vLLM loads, in GB, when the checkpoint is not bf16
	// (FP8, MXFP4); 0: ParamsB × 2 bytes.
	ServeGB float64
	// Source is where the numbers come from.
	Source string
}

// kvBytes is the KV cache of one token, over all layers.
func (a Arch) kvBytes() float64 {
	if a.KVBytesPerToken > 0 {
		return float64(a.KVBytesPerToken)
	}
	return float64(2 * a.Layers * a.KVHeads * a.HeadDim * 2)
}

// serveBytes is the weights as vLLM loads them.
func (a Arch) serveBytes() float64 {
	if a.ServeGB > 0 {
		return a.ServeGB * 1e9
	}
	return a.ParamsB * 1e9 * 2
}

// Known reports whether the table has the model's architecture (Source set), as opposed to
// an estimate from its name.
func (a Arch) Known() bool { return a.Source != "" }

func hf(id string) string { return "huggingface.co/" + id + " config.json" }

// qwen3 is a Qwen3 model's text architecture (Qwen/Qwen3-* config.json).
func qwen3(params float64, layers, kvHeads, context int, id string) Arch {
	return Arch{ParamsB: params, Layers: layers, KVHeads: kvHeads, HeadDim: 128, Context: context, Source: hf(id)}
}

// mla is DeepSeek-V3's multi-head latent attention: kv_lora_rank 512 + qk_rope_head_dim 64
// values a layer, in bf16.
const mla = (512 + 64) * 2

// models are the architectures hostedtrain sizes runs with, by Hugging Face id. A model
// offered for training must be here or carry its size in its name (see Lookup).
var models = map[string]Arch{
	"Qwen/Qwen3-0.6B":                  qwen3(0.75, 28, 8, 40960, "Qwen/Qwen3-0.6B"),
	"Qwen/Qwen3-1.7B":                  qwen3(2.03, 28, 8, 40960, "Qwen/Qwen3-1.7B"),
	"Qwen/Qwen3-4B":                    qwen3(4.02, 36, 8, 40960, "Qwen/Qwen3-4B"),
	"Qwen/Qwen3-4B-Instruct-2507":      qwen3(4.02, 36, 8, 262144, "Qwen/Qwen3-4B-Instruct-2507"),
	"Qwen/Qwen3-4B-Thinking-2507":      qwen3(4.02, 36, 8, 262144, "Qwen/Qwen3-4B-Thinking-2507"),
	"Qwen/Qwen3-8B":                    qwen3(8.19, 36, 8, 40960, "Qwen/Qwen3-8B"),
	"Qwen/Qwen3-14B":                   qwen3(14.8, 40, 8, 40960, "Qwen/Qwen3-14B"),
	"Qwen/Qwen3-32B":                   qwen3(32.8, 64, 8, 40960, "Qwen/Qwen3-32B"),
	"Qwen/Qwen3-30B-A3B":               qwen3(30.5, 48, 4, 40960, "Qwen/Qwen3-30B-A3B"),
	"Qwen/Qwen3-30B-A3B-Instruct-2507": qwen3(30.5, 48, 4, 262144, "Qwen/Qwen3-30B-A3B-Instruct-2507"),
	"Qwen/Qwen3-30B-A3B-Thinking-2507": qwen3(30.5, 48, 4, 262144, "Qwen/Qwen3-30B-A3B-Thinking-2507"),
	"Qwen/Qwen3-235B-A22B":             qwen3(235, 94, 4, 40960, "Qwen/Qwen3-235B-A22B"),
	"PrimeIntellect/Qwen3-0.6B":        qwen3(0.75, 28, 8, 40960, "Qwen/Qwen3-0.6B"),
	"PrimeIntellect/Qwen3-1.7B":        qwen3(2.03, 28, 8, 40960, "Qwen/Qwen3-1.7B"),
	"Qwen/Qwen3-VL-4B-Instruct":        qwen3(4.44, 36, 8, 262144, "Qwen/Qwen3-VL-4B-Instruct"),
	"Qwen/Qwen3-VL-8B-Instruct":        qwen3(8.77, 36, 8, 262144, "Qwen/Qwen3-VL-8B-Instruct"),
	"Qwen/Qwen3-VL-30B-A3B-Instruct":   qwen3(31.1, 48, 4, 262144, "Qwen/Qwen3-VL-30B-A3B-Instruct"),
	"meta-llama/Llama-3.2-1B-Instruct": {ParamsB: 1.24, Layers: 16, KVHeads: 8, HeadDim: 64, Context: 131072, Source: hf("meta-llama/Llama-3.2-1B-Instruct")},
	"meta-llama/Llama-3.2-3B-Instruct": {ParamsB: 3.21, Layers: 28, KVHeads: 8, HeadDim: 128, Context: 131072, Source: hf("meta-llama/Llama-3.2-3B-Instruct")},
	// gpt-oss ships its experts in MXFP4, which vLLM serves as they are; the trainer holds bf16.
	"openai/gpt-oss-20b":  {ParamsB: 20.9, Layers: 24, KVHeads: 8, HeadDim: 64, Context: 131072, ServeGB: 13.8, Source: hf("openai/gpt-oss-20b")},
	"openai/gpt-oss-120b": {ParamsB: 116.8, Layers: 36, KVHeads: 8, HeadDim: 64, Context: 131072, ServeGB: 65.3, Source: hf("openai/gpt-oss-120b")},
	"zai-org/GLM-4.5-Air": {ParamsB: 110, Layers: 46, KVHeads: 8, HeadDim: 128, Context: 131072, Source: hf("zai-org/GLM-4.5-Air")},
	"THUDM/GLM-4.5-Air":   {ParamsB: 110, Layers: 46, KVHeads: 8, HeadDim: 128, Context: 131072, Source: hf("zai-org/GLM-4.5-Air")},
	// FP8 checkpoints: a byte a parameter served.
	"MiniMaxAI/MiniMax-M2":         {ParamsB: 230, Layers: 62, KVHeads: 8, HeadDim: 128, Context: 196608, ServeGB: 230, Source: hf("MiniMaxAI/MiniMax-M2")},
	"deepseek-ai/DeepSeek-V3":      {ParamsB: 671, Layers: 61, KVBytesPerToken: 61 * mla, Context: 163840, ServeGB: 688, Source: hf("deepseek-ai/DeepSeek-V3")},
	"deepseek-ai/DeepSeek-V3-Base": {ParamsB: 671, Layers: 61, KVBytesPerToken: 61 * mla, Context: 163840, ServeGB: 688, Source: hf("deepseek-ai/DeepSeek-V3-Base")},
	"deepseek-ai/DeepSeek-R1":      {ParamsB: 671, Layers: 61, KVBytesPerToken: 61 * mla, Context: 163840, ServeGB: 688, Source: hf("deepseek-ai/DeepSeek-R1")},
	"deepseek-ai/DeepSeek-R1-0528": {ParamsB: 671, Layers: 61, KVBytesPerToken: 61 * mla, Context: 163840, ServeGB: 688, Source: hf("deepseek-ai/DeepSeek-R1-0528")},
	"moonshotai/Kimi-K2-Instruct":  {ParamsB: 1040, Layers: 61, KVBytesPerToken: 61 * mla, Context: 131072, ServeGB: 1030, Source: hf("moonshotai/Kimi-K2-Instruct")},
}

// paramCount finds a size in a model's name: "30B" in "Qwen3-30B-A3B" (the total, not the
// active parameters), "0.6B", "550B".
var paramCount = regexp.MustCompile(`(?i)(?:^|[-_/])(\d+(?:\.\d+)?)b(?:$|[-_.])`)

// Lookup is the architecture of a model: the table's, else the table's for the model it is
// fine-tuned from (its name part begins with a model's of the table: "willcb/Qwen3-0.6B",
// "PrimeIntellect/Qwen3-1.7B-Wordle-SFT"), else an estimate from the size in its name (its
// weights only: the KV cache is not known). ok is false when neither says.
func Lookup(model string) (Arch, bool) {
	if a, ok := models[model]; ok {
		return a, true
	}
	name := model[strings.LastIndexByte(model, '/')+1:]
	best, bestLen := Arch{}, 0
	for id, a := range models {
		base := id[strings.LastIndexByte(id, '/')+1:]
		if strings.HasPrefix(strings.ToLower(name), strings.ToLower(base)) && len(base) > bestLen {
			best, bestLen = a, len(base)
		}
	}
	if bestLen > 0 {
		return best, true
	}
	if m := paramCount.FindStringSubmatch(name); m != nil {
		b, _ := strconv.ParseFloat(m[1], 64)
		return Arch{ParamsB: b}, b > 0
	}
	return Arch{}, false
}
