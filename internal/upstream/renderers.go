package upstream

import (
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"
)

// Renderer is a chat renderer of the renderers package and the switches its config has
// (renderers' RendererConfig union): whether it takes enable_thinking, and the
// reasoning_effort values it takes.
type Renderer struct {
	Name            string
	Thinking        bool
	ReasoningEffort []string
}

// renderers lists every renderer config of the RendererConfig union with its switches.
// "default" renders with the model's own chat template (apply_chat_template).
var renderers = map[string]Renderer{
	"default":          {Name: "default"},
	"qwen3":            {Name: "qwen3", Thinking: true},
	"prime-qwen3":      {Name: "prime-qwen3"},
	"qwen3.5":          {Name: "qwen3.5", Thinking: true},
	"qwen3.6":          {Name: "qwen3.6", Thinking: true},
	"qwen3.8":          {Name: "qwen3.8", Thinking: true, ReasoningEffort: []string{"xhigh", "medium", "low"}},
	"qwen3-vl":         {Name: "qwen3-vl"},
	"gemma4":           {Name: "gemma4", Thinking: true},
	"glm-5":            {Name: "glm-5", Thinking: true},
	"glm-5.1":          {Name: "glm-5.1", Thinking: true},
	"glm-4.5":          {Name: "glm-4.5", Thinking: true},
	"gpt-oss":          {Name: "gpt-oss", ReasoningEffort: []string{"low", "medium", "high"}},
	"hy3":              {Name: "hy3", ReasoningEffort: []string{"no_think", "low", "high"}},
	"inkling":          {Name: "inkling", ReasoningEffort: []string{"none", "minimal", "low", "medium", "high", "max"}},
	"kimi-k2":          {Name: "kimi-k2", Thinking: true},
	"kimi-k2.5":        {Name: "kimi-k2.5"},
	"laguna-xs.2":      {Name: "laguna-xs.2", Thinking: true},
	"laguna-m.1":       {Name: "laguna-m.1", Thinking: true},
	"laguna-xs-2.1":    {Name: "laguna-xs-2.1", Thinking: true},
	"laguna-s-2.1":     {Name: "laguna-s-2.1", Thinking: true},
	"llama-3":          {Name: "llama-3"},
	"minimax-m2":       {Name: "minimax-m2"},
	"nemotron-3":       {Name: "nemotron-3", Thinking: true},
	"nemotron-3-ultra": {Name: "nemotron-3-ultra", Thinking: true},
	"nemotron-3.5":     {Name: "nemotron-3.5", Thinking: true},
	"deepseek-v3":      {Name: "deepseek-v3"},
	"deepseek-r1":      {Name: "deepseek-r1"},
}

// RendererNames lists the renderer names a job may choose, sorted.
func RendererNames() []string {
	names := make([]string, 0, len(renderers))
	for n := range renderers {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

// RenderedModels lists the models prime-rl finds a renderer for by itself (MODEL_RENDERER_MAP),
// sorted: the ones a job may name without a renderer.
func RenderedModels() []string { return slices.Sorted(maps.Keys(modelRenderers)) }

// RendererChoice is the chat renderer a run of a model uses.
type RendererChoice struct {
	Renderer
	// Auto means prime-rl finds it itself (orchestrator.renderer.name = "auto"): the model is
	// in MODEL_RENDERER_MAP. Otherwise the config must name it.
	Auto bool
	// Reason says how it was chosen when the model is not in the map (for a warning).
	Reason string
}

// ChooseRenderer picks the renderer for model. explicit, when set, is the job's choice and
// must be a known renderer name. Otherwise a model in MODEL_RENDERER_MAP gets its renderer;
// a model whose name extends one in the map (a fine-tune that keeps its base model's name,
// such as willcb/Qwen3-0.6B or PrimeIntellect/Qwen3-0.6B-Reverse-Text-SFT) gets its base
// model's renderer, preferring a base of the same owner; any other model has none, which is
// an error: prime-rl refuses "auto" for it.
func ChooseRenderer(model, explicit string) (RendererChoice, error) {
	if explicit != "" {
		r, ok := renderers[explicit]
		if !ok {
			return RendererChoice{}, fmt.Errorf("renderer %q is not one of prime-rl's: %s", explicit, strings.Join(RendererNames(), ", "))
		}
		return RendererChoice{Renderer: r, Auto: model != "" && modelRenderers[model] == explicit}, nil
	}
	if name, ok := modelRenderers[model]; ok {
		return RendererChoice{Renderer: renderers[name], Auto: true}, nil
	}
	base, name := baseModel(model)
	if base != "" {
		return RendererChoice{Renderer: renderers[name], Reason: fmt.Sprintf(
			"%s is not in prime-rl's renderer map; it is taken for a fine-tune of %s and rendered with %q (set renderer to choose another, or \"default\" for the model's own chat template)",
			model, base, name)}, nil
	}
	return RendererChoice{}, fmt.Errorf(
		"prime-rl has no chat renderer for %s (it is not in renderers' MODEL_RENDERER_MAP, nor named after a model that is): "+
			"set renderer = \"default\" to render with the model's own chat template, or the renderer of the model it was fine-tuned from (e.g. \"qwen3\")",
		model)
}

// baseModel finds the model of the map whose name (after its owner) the given model's name
// starts with: the longest such, of the same owner if there is one.
func baseModel(model string) (base, renderer string) {
	owner, name, ok := strings.Cut(model, "/")
	if !ok {
		owner, name = "", model
	}
	name = strings.ToLower(name)
	bestLen, bestSameOwner := 0, false
	for m, r := range modelRenderers {
		mOwner, mName, _ := strings.Cut(m, "/")
		mName = strings.ToLower(mName)
		if !strings.HasPrefix(name, mName) {
			continue
		}
		// The base's name must end where a word ends: Qwen3-0.6B is not the base of Qwen3-0.6Bx,
		// and a version goes on past a dot: DeepSeek-V3 is not the base of DeepSeek-V3.1,
		// whose chat template differs.
		if rest := name[len(mName):]; rest != "" &&
			(!strings.ContainsAny(rest[:1], "-_.") || rest[0] == '.' && len(rest) > 1 && rest[1] >= '0' && rest[1] <= '9') {
			continue
		}
		same := strings.EqualFold(owner, mOwner)
		better := len(mName) > bestLen || (len(mName) == bestLen && same && !bestSameOwner) ||
			(len(mName) == bestLen && same == bestSameOwner && preferred(r, m, renderer, base))
		if better {
			base, renderer, bestLen, bestSameOwner = m, r, len(mName), same
		}
	}
	return base, renderer
}

// preferred breaks a tie between two bases of a model: the renderer more models of the map
// use (the family's own, say qwen3 over a fine-tuner's prime-qwen3), then the base's name.
func preferred(r, base, bestRenderer, bestBase string) bool {
	if bestBase == "" {
		return true
	}
	count := func(name string) int {
		n := 0
		for _, x := range modelRenderers {
			if x == name {
				n++
			}
		}
		return n
	}
	if a, b := count(r), count(bestRenderer); a != b {
		return a > b
	}
	return base < bestBase
}
