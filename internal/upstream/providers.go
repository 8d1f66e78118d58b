package upstream

import "strings"

// Provider is a model API that serves models hostedtrain cannot run itself (closed weights):
// its OpenAI-compatible base URL, the environment variable its key is read from, and the
// client verifiers talks to it with. The URLs and key names are verifiers' own provider
// shorthands (verifiers/legacy/scripts/eval.py, PROVIDER_CONFIGS) where it has one.
type Provider struct {
	Name    string
	BaseURL string
	KeyVar  string
	// ClientType is verifiers' api_client_type: "openai_chat_completions" or, for Anthropic,
	// "anthropic_messages".
	ClientType string
}

// Providers are the model APIs a job may use, by name.
var Providers = map[string]Provider{
	"openai":    {Name: "openai", BaseURL: "https://api.openai.com/v1", KeyVar: "OPENAI_API_KEY", ClientType: "openai_chat_completions"},
	"anthropic": {Name: "anthropic", BaseURL: "https://api.anthropic.com", KeyVar: "ANTHROPIC_API_KEY", ClientType: "anthropic_messages"},
	"google":    {Name: "google", BaseURL: "https://generativelanguage.googleapis.com/v1beta/openai", KeyVar: "GEMINI_API_KEY", ClientType: "openai_chat_completions"},
}

// HostedModel is a model behind a provider's API: the provider, and the model's name there.
type HostedModel struct {
	Provider Provider
	// Name is the model as the provider knows it ("gpt-4.1-mini" for "openai/gpt-4.1-mini").
	Name string
}

// ProviderModel reports whether model is served by a provider's API rather than from open
// weights, and by which. Closed models are recognised by their family, with or without the
// provider's prefix: OpenAI's gpt-3.5/4/5 and o-series, Anthropic's Claude, Google's Gemini.
// Open-weight models of the same companies (openai/gpt-oss-*, google/gemma-*) are not.
func ProviderModel(model string) (HostedModel, bool) {
	m := strings.ToLower(model)
	prefix, name, hasPrefix := strings.Cut(m, "/")
	if !hasPrefix {
		prefix, name = "", m
	}
	orig := model
	if hasPrefix {
		orig = model[len(prefix)+1:]
	}
	family := func(p string) bool {
		switch p {
		case "openai":
			return strings.HasPrefix(name, "gpt-") && !strings.HasPrefix(name, "gpt-oss") ||
				strings.HasPrefix(name, "chatgpt") || isOSeries(name)
		case "anthropic":
			return strings.HasPrefix(name, "claude")
		case "google":
			return strings.HasPrefix(name, "gemini")
		}
		return false
	}
	switch prefix {
	case "openai", "anthropic", "google":
		if family(prefix) {
			return HostedModel{Provider: Providers[prefix], Name: orig}, true
		}
		return HostedModel{}, false
	case "":
		for _, p := range []string{"openai", "anthropic", "google"} {
			if family(p) {
				return HostedModel{Provider: Providers[p], Name: orig}, true
			}
		}
	}
	return HostedModel{}, false
}

// isOSeries matches OpenAI's reasoning models: o1, o3-mini, o4-mini, ...
func isOSeries(name string) bool {
	if len(name) < 2 || name[0] != 'o' || name[1] < '1' || name[1] > '9' {
		return false
	}
	return len(name) == 2 || name[2] == '-'
}
