package jobspec

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// gepaTable is verifiers' [gepa] table (the optimization's settings).
type gepaTable struct {
	MaxCalls      int      `json:"max_calls"`
	MinibatchSize int      `json:"minibatch_size"`
	NumTrain      int      `json:"num_train"`
	NumVal        int      `json:"num_val"`
	PerfectScore  *float64 `json:"perfect_score"`
	StateColumns  []string `json:"state_columns"`
	MaxConcurrent int      `json:"max_concurrent"`
	Seed          *int     `json:"seed"`
}

// executionTable is verifiers' deprecated [execution] table, which its loader still reads.
type executionTable struct {
	MaxConcurrent int       `json:"max_concurrent"`
	Seed          *int      `json:"seed"`
	SamplingArgs  *Sampling `json:"sampling_args"`
}

// gepaEnvInput is one of verifiers' [env]/[[env]] tables.
type gepaEnvInput struct {
	EnvID          string         `json:"env_id"`
	EnvArgs        map[string]any `json:"env_args"`
	ExtraEnvKwargs map[string]any `json:"extra_env_kwargs"`
}

// gepa reads a GEPA job in either shape verifiers' loader (verifiers/legacy/scripts/gepa.py,
// load_gepa_toml_config) accepts and the Prime docs write: the environment as env_id (with
// args) or as [env]/[[env]] tables (env_id, env_args, extra_env_kwargs); the optimization
// flat or in [gepa]; sampling in [sampling] or [execution].sampling_args; max_concurrent and
// seed in [gepa] or [execution]. A setting given in two places is refused. Models named by an
// alias of the endpoint registry (endpoints_path, which the CLI inlines as endpoints) are
// called where the registry says, with the key it names; the loader's keys a hosted run sets
// itself (run_dir, env_dir_path, verbose, tui) are not applied, with a warning.
func (n *normalizer) gepa(in input, s *Spec) error {
	if err := n.gepaEnvs(in, s); err != nil {
		return err
	}
	g := &GEPA{ReflectionModel: or(in.ReflectionModel, s.Model)}
	t := in.GEPATable
	if t == nil {
		t = &gepaTable{}
	}
	x := in.Execution
	if x == nil {
		x = &executionTable{}
	}
	both := func(key string, flat, table bool) {
		if flat && table {
			n.fail("/gepa/"+key, "%s is set at the top and in [gepa]; keep one", key)
		}
	}
	both("max_calls", in.MaxCalls > 0, t.MaxCalls > 0)
	both("num_train", in.NumTrain > 0, t.NumTrain > 0)
	both("num_val", in.NumVal > 0, t.NumVal > 0)
	both("minibatch_size", in.MinibatchSize > 0, t.MinibatchSize > 0)
	both("perfect_score", in.PerfectScore != nil, t.PerfectScore != nil)
	both("state_columns", in.StateColumns != nil, t.StateColumns != nil)
	g.MaxCalls = orInt(orInt(in.MaxCalls, t.MaxCalls), DefaultGEPAMaxCalls)
	g.NumTrain = orInt(orInt(in.NumTrain, t.NumTrain), DefaultGEPANumTrain)
	g.NumVal = orInt(orInt(in.NumVal, t.NumVal), DefaultGEPANumVal)
	g.MinibatchSize = orInt(orInt(in.MinibatchSize, t.MinibatchSize), DefaultGEPAMinibatchSize)
	g.PerfectScore = in.PerfectScore
	if t.PerfectScore != nil {
		g.PerfectScore = t.PerfectScore
	}
	g.StateColumns = in.StateColumns
	if t.StateColumns != nil {
		g.StateColumns = t.StateColumns
	}
	if t.MaxConcurrent > 0 && x.MaxConcurrent > 0 {
		n.fail("/execution/max_concurrent", "max_concurrent is set in [gepa] and in [execution]; keep the one in [gepa] ([execution] is deprecated)")
	}
	g.MaxConcurrent = orInt(t.MaxConcurrent, x.MaxConcurrent)
	if t.Seed != nil && x.Seed != nil {
		n.fail("/execution/seed", "seed is set in [gepa] and in [execution]; keep the one in [gepa] ([execution] is deprecated)")
	}
	g.Seed = t.Seed
	if x.Seed != nil {
		g.Seed = x.Seed
	}
	switch {
	case in.Sampling != nil && x.SamplingArgs != nil:
		n.fail("/execution/sampling_args", "sampling is set in [sampling] and in [execution].sampling_args; keep [sampling] ([execution] is deprecated)")
	case in.Sampling != nil:
		g.Sampling = in.Sampling
	default:
		g.Sampling = x.SamplingArgs
	}
	n.sampling("/sampling", g.Sampling)
	n.noSchedule(ptrOr(in.Sampling != nil, "/sampling/temp_scheduler", "/execution/sampling_args/temp_scheduler"), g.Sampling, "a GEPA run")
	if in.Execution != nil {
		n.warn("/execution", "[execution] is deprecated by verifiers (its loader says so): move max_concurrent and seed to [gepa] and sampling_args to [sampling]")
	}
	if in.SaveResults != nil {
		g.NoSave = !*in.SaveResults
	}
	for key, set := range map[string]bool{"run_dir": in.RunDir != nil, "env_dir_path": in.EnvDirPath != nil, "verbose": in.Verbose != nil, "tui": in.TUI != nil} {
		if set {
			n.warn("/"+key, "not applied: a hosted run sets %s itself (its results are the job's outputs)", key)
		}
	}
	s.GEPA = g
	n.gepaEndpoints(in, s)
	models := []modelAt{{s.Model, "/model"}, {g.ReflectionModel, ptrOr(in.ReflectionModel != "", "/reflection_model", "/model")}}
	var served []modelAt
	for _, m := range models {
		if _, ok := g.Endpoint(m.model); !ok {
			served = append(served, m)
		}
	}
	s.Resources = Resources{GPUs: n.servedGPUs(in, s, served...), GPUType: DefaultGPUType}
	return nil
}

// gepaEnvs reads a GEPA job's environments: env_id (and args), or [env]/[[env]].
func (n *normalizer) gepaEnvs(in input, s *Spec) error {
	if len(in.Env) == 0 || string(in.Env) == "null" {
		n.envFromID(in, s)
		return nil
	}
	if in.EnvID != "" {
		n.fail("/env_id", "set env_id or [env], not both")
	}
	if len(in.Args) > 0 {
		n.fail("/args", "args belong to env_id; with [env], give them as env_args")
	}
	var list []gepaEnvInput
	ptrs := []string{}
	if in.Env[0] == '{' {
		var one gepaEnvInput
		if err := json.Unmarshal(in.Env, &one); err != nil {
			return fmt.Errorf("jobspec: env: %w", err)
		}
		list, ptrs = []gepaEnvInput{one}, []string{"/env"}
	} else {
		if err := json.Unmarshal(in.Env, &list); err != nil {
			return fmt.Errorf("jobspec: env: %w", err)
		}
		for i := range list {
			ptrs = append(ptrs, "/env/"+strconv.Itoa(i))
		}
	}
	for i, e := range list {
		if e.EnvID == "" {
			n.fail(ptrs[i]+"/env_id", `a GEPA environment needs env_id = "owner/name"`)
			continue
		}
		s.Env = append(s.Env, Env{ID: n.envID(ptrs[i]+"/env_id", e.EnvID), Args: e.EnvArgs, ExtraKwargs: e.ExtraEnvKwargs, Weight: 1})
		n.legacyLoadable(ptrs[i]+"/env_id", e.EnvID)
	}
	if len(s.Env) == 0 && len(list) == 0 {
		n.fail("/env", `a GEPA job needs an environment: [[env]] with env_id = "owner/name"`)
	}
	return nil
}

// gepaEndpoints resolves the models a GEPA job names through the endpoint registry (verifiers
// looks a model up there before calling it), or through api_base_url and api_key_var (where
// the model is called): each is called with the key its entry names, which the job's secrets
// must hold. A model that is neither a Hugging Face id nor a provider's, with no entry, is
// refused: verifiers could not call it.
func (n *normalizer) gepaEndpoints(in input, s *Spec) {
	g := s.GEPA
	for i, e := range in.Endpoints {
		ptr := fmt.Sprintf("/endpoints/%d", i)
		switch {
		case e.EndpointID == "" || e.Model == "" || e.URL == "":
			n.fail(ptr, "an endpoint needs endpoint_id, model and url")
			continue
		case e.Key == "":
			e.Key = PrimeKeyVar
		}
		if !strings.HasPrefix(e.URL, "https://") {
			n.fail(ptr+"/url", "an endpoint is called over https; %q is not", e.URL)
		}
		g.Endpoints = append(g.Endpoints, e)
	}
	if in.APIBaseURL != "" {
		// verifiers calls the model there (before any registry entry of the same name), and
		// a reflection model the registry does not name too.
		key := or(in.APIKeyVar, PrimeKeyVar)
		if !strings.HasPrefix(in.APIBaseURL, "https://") {
			n.fail("/api_base_url", "the model is called over https; %q is not", in.APIBaseURL)
		}
		at := []Endpoint{{EndpointID: s.Model, Model: s.Model, URL: in.APIBaseURL, Key: key}}
		if _, alias := g.Endpoint(g.ReflectionModel); !alias && g.ReflectionModel != s.Model {
			at = append(at, Endpoint{EndpointID: g.ReflectionModel, Model: g.ReflectionModel, URL: in.APIBaseURL, Key: key})
		}
		g.Endpoints = append(at, g.Endpoints...)
	} else if in.APIKeyVar != "" {
		n.warn("/api_key_var", "not applied without api_base_url: each model is called where it is served, with the key that place needs")
	}
	if in.EndpointsPath != "" && len(in.Endpoints) == 0 {
		for _, m := range []string{s.Model, g.ReflectionModel} {
			if !strings.Contains(m, "/") {
				if _, provider := upstream.ProviderModel(m); !provider {
					n.fail("/endpoints_path", "%s is an alias of the endpoint registry %s, which the service cannot read: submit the file with the hostedtrain CLI (it sends the registry's entries along), or name the model by its Hugging Face id", m, in.EndpointsPath)
					break
				}
			}
		}
	}
	for i, at := range []modelAt{{s.Model, "/model"}, {g.ReflectionModel, ptrOr(in.ReflectionModel != "", "/reflection_model", "/model")}} {
		if i == 1 && at.model == s.Model {
			break // the same model: said once
		}
		_, alias := g.Endpoint(at.model)
		if _, provider := upstream.ProviderModel(at.model); !alias && !provider && !strings.Contains(at.model, "/") && in.EndpointsPath == "" {
			n.fail(at.ptr, "%s is neither a Hugging Face id (owner/name), a provider's model, nor an alias of the endpoint registry: verifiers could not call it", at.model)
			continue
		} else if !alias && !provider && !strings.Contains(at.model, "/") {
			if len(in.Endpoints) > 0 {
				n.fail(at.ptr, "%s is not an alias of the endpoint registry %s (its aliases: %s), nor a Hugging Face id or a provider's model", at.model, in.EndpointsPath, aliases(g.Endpoints))
			}
			continue
		}
		if e, ok := g.Endpoint(at.model); ok && n.res.Secrets[e.Key] == "" {
			n.fail(at.ptr, "%s is called at %s with %s (its endpoint entry), which is not among the job's secrets: add it (an env_file, or -e %s)", at.model, e.URL, e.Key, e.Key)
		}
	}
}

func aliases(es []Endpoint) string {
	var out []string
	for _, e := range es {
		out = append(out, e.EndpointID)
	}
	return strings.Join(out, ", ")
}

// Endpoint is the registry's entry for a model the job names by its alias.
func (g *GEPA) Endpoint(model string) (Endpoint, bool) {
	for _, e := range g.Endpoints {
		if e.EndpointID == model {
			return e, true
		}
	}
	return Endpoint{}, false
}
