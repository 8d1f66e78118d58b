package jobspec

import "strings"

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
// environment).
const (
	NeedModel = "m:"
	NeedEnv   = "e:"
)

// CacheNeeds is what a node can hold for a job of org ahead of its start: the weights of its
// model when it runs the model on the node's GPUs ("m:MODEL", shared by every organization), and
// each Hub environment it installs, as installed for that organization ("e:ORG:OWNER/ENV@VERSION":
// an install runs with the organization's own settings and credentials, so it is never another
// organization's). A node that holds them starts the job without downloading or installing them
// (the agent's node cache). Names carry no spaces (the queue keeps them space-separated).
func CacheNeeds(org string, s Spec) []string {
	var needs []string
	if s.Model != "" && s.Resources.GPUs > 0 && !strings.ContainsAny(s.Model, " \t\n") {
		needs = append(needs, NeedModel+s.Model)
	}
	for _, id := range HubEnvironments(s) {
		if !strings.ContainsAny(org+id, " \t\n") {
			needs = append(needs, EnvNeed(org, id))
		}
	}
	return needs
}

// EnvNeed names the install of the Hub environment id for org, as CacheNeeds does.
func EnvNeed(org, id string) string { return NeedEnv + org + ":" + id }
