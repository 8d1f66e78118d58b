package jobspec

import (
	"slices"
	"strconv"
	"strings"
)

// HubEnvironments are the job's Environments Hub environments (train and eval), each once:
// the ids with an owner (owner/name[@version]). A bare id names a taskset prime-rl's Python
// already has (verifiers' built-in tasksets and the environments of prime-rl's workspace),
// as the prime CLI reads it (`prime train` checks Hub refs only; `prime env install NAME`
// would look for a local folder ./environments/NAME).
func HubEnvironments(s Spec) []string {
	var ids []string
	seen := map[string]bool{}
	add := func(envs []Env) {
		for _, e := range envs {
			if strings.Contains(e.ID, "/") && !seen[e.ID] {
				seen[e.ID] = true
				ids = append(ids, e.ID)
			}
		}
	}
	add(s.Env)
	if s.Eval != nil {
		add(s.Eval.Env)
	}
	return ids
}

// Cache needs: what a node may already hold for a job before it starts, written as the queue
// compares them with what an agent says it holds ("m:" a model's weights, "e:" an installed
// environment, "c:" a compile cache).
const (
	NeedModel   = "m:"
	NeedEnv     = "e:"
	NeedCompile = "c:"
)

// CacheNeeds is what a node can hold for a job of org ahead of its start: the weights of its
// model when it runs the model on the node's GPUs ("m:MODEL", shared by every organization), and
// the install of its Hub environments, as installed for that organization
// ("e:ORG:OWNER/ENV@VERSION[,…]": an install runs with the organization's own settings and
// credentials, so it is never another organization's). The environments are one need, as the
// node cache keeps them: one install of the job's whole set, which serves only a job with the
// same set. A node that holds them starts the job without downloading or installing them (the
// agent's node cache). And the compile cache the organization's last run of the model on as
// many GPUs of the kind left there ("c:ORG:MODEL|GPU|N", CompileNeed): vLLM and torch.compile
// load it instead of compiling. Names carry no spaces (the queue keeps them space-separated).
func CacheNeeds(org string, s Spec) []string {
	var needs []string
	if s.Model != "" && s.Resources.GPUs > 0 && !strings.ContainsAny(s.Model, " \t\n") {
		needs = append(needs, NeedModel+s.Model)
		if !strings.ContainsAny(org+s.Resources.GPUType, " \t\n") {
			needs = append(needs, CompileNeed(org, s.Model, s.Resources.GPUType, s.Resources.GPUs))
		}
	}
	if ids := HubEnvironments(s); len(ids) > 0 && !strings.ContainsAny(org+strings.Join(ids, ""), " \t\n") {
		needs = append(needs, EnvSetNeed(org, ids))
	}
	return needs
}

// CompileNeed names the compile cache of org's runs of model on gpus GPUs of gpuType, as
// CacheNeeds does and the agent says it holds.
func CompileNeed(org, model, gpuType string, gpus int) string {
	return NeedCompile + org + ":" + model + "|" + strings.ToUpper(gpuType) + "|" + strconv.Itoa(gpus)
}

// EnvNeed names the install of the one Hub environment id for org, as CacheNeeds does.
func EnvNeed(org, id string) string { return EnvSetNeed(org, []string{id}) }

// EnvSetNeed names the install of the Hub environments ids (in any order) for org, as
// CacheNeeds does: their ids sorted, joined by commas.
func EnvSetNeed(org string, ids []string) string {
	return NeedEnv + org + ":" + strings.Join(slices.Sorted(slices.Values(ids)), ",")
}
