package render

import (
	"bytes"
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// RenderInput is everything a job's pipeline files and commands depend on.
type RenderInput struct {
	JobID string
	Spec  jobspec.Spec
	// Secrets are the names of the job's secrets; their values never reach a file or a
	// command line (they go into the pipeline's environment alone).
	Secrets []string
	// GPUs is how many GPUs the job was given on this node.
	GPUs int
	// Ports is the job's block of ports on the node.
	Ports upstream.Ports
	// Resume is the checkpoint step an rl run resumes from; 0 starts fresh.
	Resume int
	// Dir is the job's working folder, where the files go (absolute).
	Dir string
	// Pipeline has the command templates.
	Pipeline Pipeline
	// Endpoint, when set, serves open-weight models for GEPA and evals instead of a server
	// on the job's GPUs (an operator's OpenAI-compatible endpoint).
	Endpoint *Endpoint
	// Providers overrides where provider-hosted models are called (tests point them at a
	// local stand-in); nil uses upstream.Providers.
	Providers map[string]upstream.Provider
	// JudgeURL is the service's judge (the claim's), written where a job's judges name it
	// (jobspec.OperatorJudgeURL); "" leaves the marker (gpuagent render).
	JudgeURL string
}

// Endpoint is an OpenAI-compatible server an operator runs for open-weight models.
type Endpoint struct {
	BaseURL string
	// KeyVar names the variable of the agent's environment that holds its key: the one
	// variable of the agent's that the agent passes to a pipeline.
	KeyVar string
}

// LocalKeyVar holds the random key of the inference server the agent starts for a GEPA or
// eval job (vLLM reads VLLM_API_KEY as its --api-key).
const LocalKeyVar = "VLLM_API_KEY"

// Rendered is what the agent hands a job's pipeline.
type Rendered struct {
	// Files are written into the job's folder, by name.
	Files map[string][]byte
	// Command is the pipeline.
	Command []string
	// Preflight validates the written config with the installed upstream code before GPU
	// time is spent; empty when the pipeline has none for the job's kind.
	Preflight []string
	// EnvCheck runs after the environments are installed and before anything else of a GEPA
	// or eval job: its environments can be loaded as the pipeline loads them.
	EnvCheck []string
	// Serve starts first: an inference server for the open-weight model a GEPA or eval job
	// calls. Nil when none is needed.
	Serve *Serve
	// Notes are the job's settings that do not reach the pipeline, for the job's log.
	Notes []string
	// Resolved is what an rl run will really do (nil for the other kinds and a full
	// fine-tune, whose config is the job's own).
	Resolved *Resolved
	// RunDir is where prime-rl writes an rl run (metrics.jsonl, logs/, checkpoints/).
	RunDir string
	// OutputDir is where the pipeline writes its outputs.
	OutputDir string
	// Ports lists the ports the pipeline binds (for the agent to check they are free).
	Ports []int
}

// Serve is an OpenAI-compatible server of one open-weight model on the job's GPUs.
type Serve struct {
	Command []string
	Port    int
	Model   string
}

// BaseURL is where the server answers.
func (s *Serve) BaseURL() string { return fmt.Sprintf("http://127.0.0.1:%d/v1", s.Port) }

// Render lays out a job for its pipeline: the config files, the commands and the servers it
// needs. It is a pure function of its input, so `gpuagent render` shows exactly what a claim
// of the job would run.
func Render(in RenderInput) (*Rendered, error) {
	if in.Dir == "" || !filepath.IsAbs(in.Dir) {
		return nil, fmt.Errorf("render: the job's folder must be an absolute path, got %q", in.Dir)
	}
	out := &Rendered{Files: map[string][]byte{}, OutputDir: filepath.Join(in.Dir, "outputs")}
	vars := map[string]string{"prime_rl": in.Pipeline.PrimeRL, "output_dir": out.OutputDir}
	switch in.Spec.Kind {
	case jobspec.KindRL, jobspec.KindFFT:
		return out, renderRL(in, out, vars)
	case jobspec.KindGEPA:
		return out, renderGEPA(in, out, vars)
	case jobspec.KindEval:
		return out, renderEval(in, out, vars)
	case jobspec.KindServe:
		return out, renderServe(in, out)
	}
	return nil, fmt.Errorf("render: unknown job kind %q", in.Spec.Kind)
}

// ServeEnv is the environment a model server (kind serve) runs with beside the job's: vLLM
// takes LoRA adapters at run time only with it.
var ServeEnv = []string{"VLLM_ALLOW_RUNTIME_LORA_UPDATING=True"}

// WeightsDir is where in a serve job's folder the agent puts the weights it serves: one
// folder per adapter.
func WeightsDir(jobDir, adapter string) string { return filepath.Join(jobDir, "weights", adapter) }

// renderServe lays out a model server (kind serve, made by a deploy): vLLM serving the base
// model with LoRA adapters loaded and unloaded at run time, or one full fine-tune's weights
// (which the agent fetches into WeightsDir first) under its adapter's model id.
func renderServe(in RenderInput, out *Rendered) error {
	if len(in.Pipeline.Serve) == 0 {
		return fmt.Errorf("this agent has no command to serve %s", in.Spec.Model)
	}
	if in.GPUs < 1 {
		return fmt.Errorf("serving %s needs a GPU and the job has none", in.Spec.Model)
	}
	sv := in.Spec.Serve
	if sv == nil {
		sv = &jobspec.ServeSpec{}
	}
	port := in.Ports.Inference()
	model := in.Spec.Model
	var extra []string
	if sv.Adapter != "" {
		model = WeightsDir(in.Dir, sv.Adapter)
		extra = []string{"--served-model-name", in.Spec.Model + ":" + sv.Adapter}
	} else {
		extra = []string{"--enable-lora", "--max-loras", strconv.Itoa(max(sv.MaxAdapters, 1)),
			"--max-lora-rank", strconv.Itoa(max(sv.MaxLoRARank, 16))}
	}
	out.Serve = &Serve{Port: port, Model: in.Spec.Model,
		Command: append(Expand(in.Pipeline.Serve, map[string]string{"prime_rl": in.Pipeline.PrimeRL, "model": model,
			"port": strconv.Itoa(port), "tp": strconv.Itoa(in.GPUs)}, map[string][]string{"max_model_len": nil}), extra...)}
	out.Ports = []int{port}
	return nil
}

func renderRL(in RenderInput, out *Rendered, vars map[string]string) error {
	if len(in.Pipeline.RL) == 0 {
		return fmt.Errorf("this agent has no rl command configured")
	}
	run := rlRun{jobID: in.JobID, spec: in.Spec, gpus: in.GPUs, ports: in.Ports, secrets: in.Secrets, providers: in.Providers, judgeURL: in.JudgeURL}
	var cfg []byte
	var servers int
	var err error
	broadcasts := in.Spec.LoRA == nil // an rl job broadcasts weights over NCCL unless it trains adapters
	if in.Spec.Kind == jobspec.KindFFT {
		if in.GPUs != in.Spec.Resources.GPUs {
			return fmt.Errorf("render: the full fine-tune's deployment takes %d GPUs; it was given %d", in.Spec.Resources.GPUs, in.GPUs)
		}
		cfg, servers, broadcasts, err = run.fftConfig()
	} else {
		cfg, servers, out.Resolved, err = run.rlConfig()
	}
	if err != nil {
		return err
	}
	out.Files["rl.toml"] = cfg
	vars["config"] = filepath.Join(in.Dir, "rl.toml")
	vars["run_name"] = in.JobID
	lists := map[string][]string{"resume": nil, "resume_set": nil}
	if in.Resume > 0 {
		lists["resume"] = []string{"--resume.step", strconv.Itoa(in.Resume)}
		lists["resume_set"] = []string{"--set", "resume.step=" + strconv.Itoa(in.Resume)}
	}
	out.Command = Expand(in.Pipeline.RL, vars, lists)
	if len(in.Pipeline.Preflight) > 0 {
		out.Preflight = Expand(in.Pipeline.Preflight, vars, lists)
	}
	out.RunDir = filepath.Join(out.OutputDir, in.JobID)
	out.Ports = in.Ports.All(servers, broadcasts)
	if in.Spec.Kind == jobspec.KindFFT {
		out.Notes = rlNotesFor(in.Spec, in.Secrets)
	} else {
		out.Notes = rlNotes(in.Spec, in.Secrets)
	}
	return nil
}

// modelAccess is how a GEPA or eval job reaches one model: its name there, the base URL and
// the variable its key is in.
type modelAccess struct {
	model, baseURL, keyVar, clientType string
	// alias: the model is an entry of the job's endpoint registry, which verifiers resolves.
	alias bool
}

// access decides where each model of a GEPA or eval job is called: a provider's API with the
// job's own key, or the open-weight model served for the job (on its GPUs, or by an operator
// endpoint). At most one open-weight model is served (the API refuses more).
func access(in RenderInput, out *Rendered, models ...string) (map[string]modelAccess, error) {
	providers := in.Providers
	if providers == nil {
		providers = upstream.Providers
	}
	got := map[string]modelAccess{}
	open := ""
	for _, m := range models {
		if m == "" || got[m] != (modelAccess{}) {
			continue
		}
		if g := in.Spec.GEPA; g != nil {
			if e, ok := g.Endpoint(m); ok {
				// Named by an alias of the job's endpoint registry: called where it says.
				got[m] = modelAccess{model: m, baseURL: e.URL, keyVar: e.Key, clientType: "openai_chat_completions", alias: true}
				continue
			}
		}
		if hm, ok := upstream.ProviderModel(m); ok {
			p := providers[hm.Provider.Name]
			if p.BaseURL == "" {
				p = hm.Provider
			}
			got[m] = modelAccess{model: hm.Name, baseURL: p.BaseURL, keyVar: p.KeyVar, clientType: p.ClientType}
			continue
		}
		if open != "" {
			return nil, fmt.Errorf("a job serves one open-weight model; %s would be a second beside %s", m, open)
		}
		open = m
		if ep := in.Endpoint; ep != nil {
			got[m] = modelAccess{model: m, baseURL: ep.BaseURL, keyVar: ep.KeyVar, clientType: "openai_chat_completions"}
			continue
		}
		if len(in.Pipeline.Serve) == 0 {
			return nil, fmt.Errorf("this agent has no command to serve %s", m)
		}
		if in.GPUs < 1 {
			return nil, fmt.Errorf("serving %s needs a GPU and the job has none", m)
		}
		port := in.Ports.Inference()
		out.Serve = &Serve{
			Port: port, Model: m,
			Command: Expand(in.Pipeline.Serve, map[string]string{
				"prime_rl": in.Pipeline.PrimeRL, "model": m, "port": strconv.Itoa(port), "tp": strconv.Itoa(in.GPUs),
			}, map[string][]string{"max_model_len": maxModelLen(in.Spec)}),
		}
		out.Ports = append(out.Ports, port)
		got[m] = modelAccess{model: m, baseURL: out.Serve.BaseURL(), keyVar: LocalKeyVar, clientType: "openai_chat_completions"}
	}
	return got, nil
}

// envCheck is the command that checks a GEPA or eval job's installed environments can be
// loaded (nil when the pipeline has none).
func envCheck(in RenderInput) []string {
	if len(in.Pipeline.EnvCheck) == 0 {
		return nil
	}
	ids := make([]string, 0, len(in.Spec.Env))
	for _, e := range in.Spec.Env {
		ids = append(ids, e.ID)
	}
	return Expand(in.Pipeline.EnvCheck, map[string]string{"prime_rl": in.Pipeline.PrimeRL}, map[string][]string{"envs": ids})
}

// maxModelLen is the serve command's --max-model-len: the job's longest sequence, so that
// vLLM reserves KV cache for it rather than for the model's whole context (none for a job
// stored before submit set it).
func maxModelLen(s jobspec.Spec) []string {
	if s.ContextLength == 0 {
		return nil
	}
	return []string{"--max-model-len", strconv.Itoa(s.ContextLength)}
}

// gepaFile is the GEPA config in the shape verifiers' loader reads
// (verifiers/legacy/scripts/gepa.py, load_gepa_toml_config): run settings at the top, the
// environment in [env], the optimization in [gepa], sampling in [sampling].
type gepaFile struct {
	Model           string         `toml:"model"`
	ReflectionModel string         `toml:"reflection_model"`
	APIBaseURL      string         `toml:"api_base_url,omitempty"`
	APIKeyVar       string         `toml:"api_key_var,omitempty"`
	EndpointsPath   string         `toml:"endpoints_path,omitempty"`
	RunDir          string         `toml:"run_dir"`
	SaveResults     bool           `toml:"save_results"`
	Env             []gepaEnv      `toml:"env"`
	GEPA            gepaSettings   `toml:"gepa"`
	Sampling        map[string]any `toml:"sampling,omitempty"`
}

type gepaEnv struct {
	EnvID          string         `toml:"env_id"`
	EnvArgs        map[string]any `toml:"env_args,omitempty"`
	ExtraEnvKwargs map[string]any `toml:"extra_env_kwargs,omitempty"`
}

type gepaSettings struct {
	MaxCalls      int      `toml:"max_calls"`
	MinibatchSize int      `toml:"minibatch_size"`
	NumTrain      int      `toml:"num_train"`
	NumVal        int      `toml:"num_val"`
	PerfectScore  *float64 `toml:"perfect_score,omitempty"`
	StateColumns  []string `toml:"state_columns,omitempty"`
	MaxConcurrent int      `toml:"max_concurrent,omitempty"`
	Seed          *int     `toml:"seed,omitempty"`
}

// endpointsFile is verifiers' endpoint registry (configs/endpoints.toml: [[endpoint]] with
// endpoint_id, model, url, key), for a reflection model reached elsewhere than the model.
type endpointsFile struct {
	Endpoint []endpointEntry `toml:"endpoint"`
}

type endpointEntry struct {
	EndpointID    string `toml:"endpoint_id"`
	Model         string `toml:"model"`
	URL           string `toml:"url"`
	Key           string `toml:"key"`
	APIClientType string `toml:"api_client_type,omitempty"`
}

func renderGEPA(in RenderInput, out *Rendered, vars map[string]string) error {
	s := in.Spec
	if len(in.Pipeline.GEPA) == 0 {
		return fmt.Errorf("this agent has no gepa command configured")
	}
	if s.GEPA == nil || len(s.Env) == 0 {
		return fmt.Errorf("the GEPA job has no environment or GEPA settings")
	}
	if shape := upstream.PinnedRuntime().Shapes.GEPAConfig; shape != "legacy" {
		return fmt.Errorf("the runtime's GEPA config shape %q has no renderer here (only verifiers' legacy loader's)", shape)
	}
	g := s.GEPA
	reflection := g.ReflectionModel
	if reflection == "" {
		reflection = s.Model
	}
	acc, err := access(in, out, s.Model, reflection)
	if err != nil {
		return err
	}
	main, refl := acc[s.Model], acc[reflection]
	f := gepaFile{
		Model: main.model, ReflectionModel: refl.model,
		RunDir: filepath.Join(out.OutputDir, "gepa"), SaveResults: !g.NoSave,
		GEPA: gepaSettings{MaxCalls: g.MaxCalls, MinibatchSize: g.MinibatchSize, NumTrain: g.NumTrain, NumVal: g.NumVal,
			PerfectScore: g.PerfectScore, StateColumns: g.StateColumns, MaxConcurrent: g.MaxConcurrent, Seed: g.Seed},
		Sampling: samplingArgs(g.Sampling),
	}
	for _, e := range s.Env {
		f.Env = append(f.Env, gepaEnv{EnvID: envName(e.ID), EnvArgs: wholeNumbers(e.Args), ExtraEnvKwargs: wholeNumbers(e.ExtraKwargs)})
	}
	// Where the model is called: verifiers' api_base_url and api_key_var, unless it is an
	// alias of the registry; every other place (the reflection model's, the aliases') is an
	// entry of the registry the agent writes beside the config.
	var reg endpointsFile
	if !main.alias {
		f.APIBaseURL, f.APIKeyVar = main.baseURL, main.keyVar
	}
	for _, a := range []modelAccess{main, refl} {
		if a.alias {
			if e, ok := g.Endpoint(a.model); ok && !slices.ContainsFunc(reg.Endpoint, func(x endpointEntry) bool { return x.EndpointID == e.EndpointID }) {
				reg.Endpoint = append(reg.Endpoint, endpointEntry{EndpointID: e.EndpointID, Model: e.Model, URL: e.URL, Key: e.Key})
			}
		}
	}
	if !refl.alias && (refl.baseURL != main.baseURL || refl.keyVar != main.keyVar || refl.clientType != main.clientType) {
		// The reflection model is reached elsewhere: verifiers finds it in the registry.
		e := endpointEntry{EndpointID: refl.model, Model: refl.model, URL: refl.baseURL, Key: refl.keyVar}
		if refl.clientType != "openai_chat_completions" {
			e.APIClientType = refl.clientType
		}
		reg.Endpoint = append(reg.Endpoint, e)
	}
	if len(reg.Endpoint) > 0 {
		b, err := encodeTOML("# verifiers endpoint registry written by hostedtrain for job "+in.JobID+"\n", reg)
		if err != nil {
			return err
		}
		out.Files["endpoints.toml"] = b
		f.EndpointsPath = filepath.Join(in.Dir, "endpoints.toml")
	}
	b, err := encodeTOML(fmt.Sprintf("# GEPA config written by hostedtrain for job %s, for verifiers %s; do not edit.\n",
		in.JobID, upstream.Pinned().Short().Verifiers), f)
	if err != nil {
		return err
	}
	out.Files["gepa.toml"] = b
	vars["config"] = filepath.Join(in.Dir, "gepa.toml")
	out.Command = Expand(in.Pipeline.GEPA, vars, nil)
	if len(in.Pipeline.GEPACheck) > 0 {
		out.Preflight = Expand(in.Pipeline.GEPACheck, vars, nil)
	}
	out.EnvCheck = envCheck(in)
	return nil
}

func renderEval(in RenderInput, out *Rendered, vars map[string]string) error {
	s := in.Spec
	if len(in.Pipeline.Eval) == 0 {
		return fmt.Errorf("this agent has no eval command configured")
	}
	if len(s.Env) == 0 || s.Evaluation == nil {
		return fmt.Errorf("the eval job has no environment")
	}
	acc, err := access(in, out, s.Model)
	if err != nil {
		return err
	}
	m := acc[s.Model]
	var flags []string
	if args := s.Env[0].Args; len(args) > 0 {
		b, err := json.Marshal(wholeNumbers(args))
		if err != nil {
			return err
		}
		flags = append(flags, "-a", string(b))
	}
	if sa := samplingArgs(s.Sampling); len(sa) > 0 {
		b, err := json.Marshal(sa)
		if err != nil {
			return err
		}
		flags = append(flags, "-S", string(b))
	}
	vars["env"] = envName(s.Env[0].ID)
	vars["model"] = m.model
	vars["num_examples"] = strconv.Itoa(s.Evaluation.NumExamples)
	vars["rollouts_per_example"] = strconv.Itoa(s.Evaluation.RolloutsPerExample)
	vars["base_url"] = m.baseURL
	vars["key_var"] = m.keyVar
	out.Command = Expand(in.Pipeline.Eval, vars, map[string][]string{"eval_flags": flags})
	out.EnvCheck = envCheck(in)
	return nil
}

// samplingArgs are a GEPA or eval job's sampling as verifiers sends it with every request
// (its sampling_args): every setting the job gave; a temperature schedule has no steps to
// follow here and is refused at submit.
func samplingArgs(sp *jobspec.Sampling) map[string]any {
	if sp == nil {
		return nil
	}
	m := map[string]any{}
	if sp.MaxTokens > 0 {
		m["max_tokens"] = sp.MaxTokens
	}
	if sp.Temperature != nil {
		m["temperature"] = *sp.Temperature
	}
	if sp.TopP != nil {
		m["top_p"] = *sp.TopP
	}
	if sp.ReasoningEffort != "" {
		m["reasoning_effort"] = sp.ReasoningEffort
	}
	if len(sp.ExtraBody) > 0 {
		m["extra_body"] = wholeNumbers(sp.ExtraBody)
	}
	if sp.EnableThinking != nil {
		// A hybrid-thinking model's switch, as vLLM's chat template takes it (and the
		// provider APIs ignore): the same the renderer sets for training.
		eb, _ := m["extra_body"].(map[string]any)
		if eb == nil {
			eb = map[string]any{}
		}
		ctk, _ := eb["chat_template_kwargs"].(map[string]any)
		if ctk == nil {
			ctk = map[string]any{}
		}
		ctk["enable_thinking"] = *sp.EnableThinking
		eb["chat_template_kwargs"] = ctk
		m["extra_body"] = eb
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

func encodeTOML(header string, v any) ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteString(header)
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	return buf.Bytes(), nil
}

// FileNames lists the rendered files, sorted.
func (r *Rendered) FileNames() []string {
	names := make([]string, 0, len(r.Files))
	for n := range r.Files {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
