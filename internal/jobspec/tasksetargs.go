package jobspec

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// PrimeKeyVar is the key verifiers calls Prime's inference service with: the default of
// every judge and client a taskset builds from verifiers' defaults.
const PrimeKeyVar = "PRIME_API_KEY"

// The service's judge: a judge the job has no key for is called at OperatorJudgeURL (the
// agent writes the API's /v1/judge there) with the job's own judge token, JudgeKeyVar, which
// the claim hands out; the service calls the operator's endpoint with its key, never given to
// the job, and counts the job's tokens.
const (
	OperatorJudgeURL = "hostedtrain://judge"
	JudgeKeyVar      = "HOSTEDTRAIN_JUDGE_KEY"
)

// UsesOperatorJudge says whether any environment of the job is graded by the service's judge.
func (s Spec) UsesOperatorJudge() bool {
	envs := slices.Clone(s.Env)
	if s.Eval != nil {
		envs = append(envs, s.Eval.Env...)
	}
	for _, e := range envs {
		judges, _ := Dig(e.Args, "task", "judges").([]any)
		for _, j := range judges {
			if m, _ := j.(map[string]any); m["base_url"] == OperatorJudgeURL {
				return true
			}
		}
	}
	return false
}

// verifiersJudgeModel is verifiers' JudgeConfig's default model.
const verifiersJudgeModel = "openai/gpt-5.4-nano"

// taskKeys are a task config's own tables (verifiers' TaskConfig), beside a taskset's
// settings of its task.
var taskKeys = []string{"judges", "stops", "metrics", "rewards"}

// tasksetArgs checks an environment's taskset settings (its args) against what upstream's
// taskset takes, where the pinned verifiers ships the taskset: a setting it does not have is
// refused at its line, here rather than on a node after a claim. The legacy
// `load_environment` arguments of the prime CLI's template that have a verifiers v1
// equivalent are moved there, with a warning: `max_turns` (a seat's bound), `max_examples`
// (an eval environment's num_examples), `judge_model` (the model of the taskset's judge),
// `split` (a taskset whose setting is `dataset_split`), and a task setting written beside
// the taskset's (`power_per_turn`). Then every judge the environment's tasks are graded by
// must be callable with a key among the job's secrets (see judges).
func (n *normalizer) tasksetArgs(ptr, argsPtr string, e *Env, eval bool) {
	ts, known := upstream.LookupTaskset(e.ID)
	if !known && len(e.Harness) == 0 {
		n.warn(ptr+"/id", "%s is not a taskset upstream's examples run, so its seat runs verifiers' null harness: the model answers the task (with the taskset's own tools, if it has any), with no shell or editor; "+
			"for a coding agent, or a harness the taskset ships, set harness = { id = \"…\" }", e.ID)
	}
	if known && ts.Vendored && len(e.Args) > 0 {
		args := maps.Clone(e.Args)
		task, _ := args["task"].(map[string]any)
		task = maps.Clone(task)
		moved := func(k, to string) {
			n.warn(argsPtr+"/"+k, "%s is a legacy environment argument; verifiers v1 (which hostedtrain runs) takes it as %s: write that instead", k, to)
		}
		for _, k := range slices.Sorted(maps.Keys(e.Args)) {
			v := e.Args[k]
			if _, ok := ts.Fields[k]; ok || k == "task" || k == "system_prompt" {
				continue
			}
			delete(args, k)
			switch num, isNum := v.(float64); {
			case k == "max_turns" && isNum && num >= 1:
				if e.MaxTurns == 0 {
					e.MaxTurns = int(num)
				}
				moved(k, "the environment's max_turns (each seat's bound on turns, env.<seat>.max_turns)")
			case k == "max_examples" && eval && isNum:
				if e.NumExamples == nil {
					ne := int(num)
					e.NumExamples = &ne
				}
				moved(k, "the eval environment's num_examples")
			case k == "max_examples":
				n.fail(argsPtr+"/"+k, "max_examples (a legacy environment argument) has no verifiers v1 equivalent for training: a training environment's examples are drawn until max_steps; remove it (for [[eval.env]] it is num_examples)")
			case k == "judge_model" && len(ts.Judges) > 0:
				model, _ := v.(string)
				if _, has := task["judges"]; has || model == "" {
					n.fail(argsPtr+"/"+k, "judge_model (a legacy environment argument) is the model of the taskset's judge: give it once, as task = { judges = [{ id = %q, model = \"…\" }] }", ts.Judges[0].ID)
					continue
				}
				if task == nil {
					task = map[string]any{}
				}
				task["judges"] = []any{map[string]any{"id": ts.Judges[0].ID, "model": providerQualified(model)}}
				moved(k, fmt.Sprintf("task = { judges = [{ id = %q, model = %q }] }", ts.Judges[0].ID, providerQualified(model)))
			case k == "split" && has(ts.Fields, "dataset_split") && !has(e.Args, "dataset_split"):
				args["dataset_split"] = v
				moved(k, "dataset_split")
			case has(ts.TaskFields, k) && !has(task, k):
				if task == nil {
					task = map[string]any{}
				}
				task[k] = v
				moved(k, fmt.Sprintf("a task setting: task = { %s = … }", k))
			default:
				n.fail(argsPtr+"/"+k, "%s is not a setting of the taskset %s (verifiers %s refuses it when the run starts): its settings are %s",
					k, ts.ID, upstream.VerifiersCommit[:7], settingsList(ts))
			}
		}
		for _, k := range slices.Sorted(maps.Keys(task)) {
			if !has(ts.TaskFields, k) && !slices.Contains(taskKeys, k) {
				n.fail(argsPtr+"/task/"+k, "%s is not a task setting of the taskset %s: its task settings are %s",
					k, ts.ID, strings.Join(append(slices.Sorted(maps.Keys(ts.TaskFields)), taskKeys...), ", "))
			}
		}
		if task != nil {
			args["task"] = task
		}
		e.Args = args
	}
	n.judges(argsPtr, e, ts)
}

// judges resolves the judges an environment's tasks are graded by — the job's
// (args.task.judges, each over the taskset's judge of the same id) or the taskset's own —
// and makes sure each can be called: one that names its key (api_key_var) needs that key
// among the secrets; one whose model is a provider's (openai/…, anthropic/…, google/…) is
// called at the provider with the job's key for it, when the job has that key; any other is
// called where verifiers' default sends it, Prime's inference service, with PRIME_API_KEY.
// Without the key, the service's judge calls it where the operator has one (Options), else
// the job is refused: every reward of the run would fail. The resolved
// judges are written into the environment's args, so the node runs what was checked.
func (n *normalizer) judges(argsPtr string, e *Env, ts upstream.Taskset) {
	task, _ := e.Args["task"].(map[string]any)
	given, isList := task["judges"].([]any)
	if task["judges"] != nil && !isList {
		n.fail(argsPtr+"/task/judges", "judges is a list of tables ([[...task.judges]], or judges = [{ id = ..., model = ... }])")
		return
	}
	if len(given) == 0 && len(ts.Judges) == 0 {
		return
	}
	secrets := n.res.Secrets
	var out []any
	changed := false
	list := given
	if len(list) == 0 {
		for range ts.Judges {
			list = append(list, map[string]any{})
		}
	}
	for i, g := range list {
		j, _ := g.(map[string]any)
		j = maps.Clone(j)
		if j == nil {
			j = map[string]any{}
		}
		ptr := fmt.Sprintf("%s/task/judges/%d", argsPtr, i)
		if len(given) == 0 {
			ptr = strings.TrimSuffix(argsPtr, "/args") + "/id" // the taskset's own judge: at its id (taskset.id in the v1 form)
			if strings.HasSuffix(argsPtr, "/taskset") {
				ptr = argsPtr + "/id"
			}
		}
		// The taskset's judge this one configures: the same id, else the taskset's i-th.
		var def upstream.Judge
		id, _ := j["id"].(string)
		for k, d := range ts.Judges {
			if d.ID == id || id == "" && k == i {
				def = d
			}
		}
		if id == "" && len(given) > 0 {
			hint := ""
			if def.ID != "" {
				hint = fmt.Sprintf(" (the taskset's own is id = %q)", def.ID)
			}
			n.fail(ptr+"/id", "each judges entry needs an id: a judge plugin (reference, rubric) or an installed package%s; verifiers refuses one without", hint)
			continue
		}
		model := cmp.Or(str(j["model"]), def.Model, verifiersJudgeModel)
		baseURL, keyVar := str(j["base_url"]), str(j["api_key_var"])
		where := fmt.Sprintf("the judge %s of the taskset %s", cmp.Or(id, def.ID, model), ts.ID)
		if ts.ID == "" {
			where = fmt.Sprintf("the judge %s of %s", cmp.Or(id, model), e.ID)
		}
		switch hm, provider := upstream.ProviderModel(model); {
		case keyVar != "" || baseURL != "":
			keyVar = cmp.Or(keyVar, def.APIKeyVar, PrimeKeyVar)
			if secrets[keyVar] == "" {
				n.fail(ptr, "%s is called at %s with %s, which is not among the job's secrets: add it (an env_file, or -e %s)",
					where, cmp.Or(baseURL, def.BaseURL), keyVar, keyVar)
			}
		case provider && secrets[hm.Provider.KeyVar] != "":
			j["model"], j["base_url"], j["api_key_var"] = hm.Name, judgeURL(hm.Provider), hm.Provider.KeyVar
			if id == "" && def.ID != "" {
				j["id"] = def.ID // the taskset's judge class, with its prompt
			}
			changed = true
		case secrets[PrimeKeyVar] != "" || secrets[cmp.Or(def.APIKeyVar, PrimeKeyVar)] != "":
			// verifiers' default: Prime's inference service, with the key the job holds.
		case n.opts.OperatorJudge:
			// No key of the job's: the service's judge, called for the job and billed to it.
			j["model"] = providerQualified(model)
			j["base_url"], j["api_key_var"] = OperatorJudgeURL, JudgeKeyVar
			if id == "" && def.ID != "" {
				j["id"] = def.ID
			}
			changed = true
		case provider:
			n.fail(ptr, "%s (%s) grades every rollout, and the job has no key to call it with: add %s to the job's secrets to call %s's API (or %s for Prime's inference service, where verifiers sends it by default)",
				where, model, hm.Provider.KeyVar, hm.Provider.Name, PrimeKeyVar)
		default:
			n.fail(ptr, "%s (%s) grades every rollout at %s, called with %s, which is not among the job's secrets: add %s, or give the judge a provider model you hold the key for (task = { judges = [{ id = %q, model = \"openai/gpt-4.1-mini\" }] } with OPENAI_API_KEY)",
				where, model, cmp.Or(def.BaseURL, "Prime's inference service"), PrimeKeyVar, PrimeKeyVar, cmp.Or(id, def.ID))
		}
		out = append(out, j)
	}
	if !changed {
		return // the job's judges as written, or the taskset's own: verifiers resolves them alike
	}
	args := maps.Clone(e.Args)
	if args == nil {
		args = map[string]any{}
	}
	task = maps.Clone(task)
	if task == nil {
		task = map[string]any{}
	}
	task["judges"] = out
	args["task"] = task
	e.Args = args
}

// judgeURL is where a judge of a provider's model is called: verifiers' judges speak
// OpenAI's chat completions, which Anthropic serves under /v1.
func judgeURL(p upstream.Provider) string {
	if p.ClientType == "anthropic_messages" {
		return strings.TrimSuffix(p.BaseURL, "/") + "/v1"
	}
	return p.BaseURL
}

// providerQualified names a provider model with its provider ("gpt-4.1-mini" →
// "openai/gpt-4.1-mini"), as verifiers' judges name models.
func providerQualified(model string) string {
	if hm, ok := upstream.ProviderModel(model); ok && !strings.Contains(model, "/") {
		return hm.Provider.Name + "/" + model
	}
	return model
}

func settingsList(ts upstream.Taskset) string {
	s := slices.Sorted(maps.Keys(ts.Fields))
	s = append(s, "system_prompt", "task")
	return strings.Join(s, ", ")
}

func has[V any](m map[string]V, k string) bool {
	_, ok := m[k]
	return ok
}
