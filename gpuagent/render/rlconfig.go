package render

import (
	"bytes"
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// The rl.toml the agent writes, in the shape of prime-rl's RLConfig
// (packages/prime-rl-configs/src/prime_rl/configs/rl.py at the pinned commit): the shared
// top-level blocks (model, max_steps, seq_len, ckpt, monitors, weight_broadcast,
// rollout_transport, deployment) that prime-rl propagates to its trainer, orchestrator and
// inference, and the per-component blocks for what only one of them reads.
type rlFile struct {
	MaxSteps         int                `toml:"max_steps"`
	SeqLen           int                `toml:"seq_len"`
	Model            rlModel            `toml:"model"`
	Deployment       rlDeployment       `toml:"deployment"`
	WeightBroadcast  *rlWeightBroadcast `toml:"weight_broadcast,omitempty"`
	RolloutTransport rlTransport        `toml:"rollout_transport"`
	Ckpt             rlCkpt             `toml:"ckpt"`
	Monitors         *rlMonitors        `toml:"monitors,omitempty"`
	Trainer          rlTrainer          `toml:"trainer"`
	Orchestrator     rlOrchestrator     `toml:"orchestrator"`
	Inference        rlInference        `toml:"inference"`
}

type rlModel struct {
	Name string `toml:"name"`
}

type rlDeployment struct {
	NumTrainGPUs int `toml:"num_train_gpus"`
	NumInferGPUs int `toml:"num_infer_gpus"`
}

type rlWeightBroadcast struct {
	Type string `toml:"type"`
	Port int    `toml:"port"`
}

type rlTransport struct {
	Type string `toml:"type"`
	Port int    `toml:"port"`
}

type rlCkpt struct {
	Interval int `toml:"interval,omitempty"`
}

type rlMonitors struct {
	Wandb rlWandb `toml:"wandb"`
}

type rlWandb struct {
	Project string `toml:"project,omitempty"`
	Entity  string `toml:"entity,omitempty"`
	Name    string `toml:"name,omitempty"`
}

type rlTrainer struct {
	Optim rlOptim        `toml:"optim"`
	Model rlTrainerModel `toml:"model"`
}

type rlOptim struct {
	LR float64 `toml:"lr"`
}

type rlTrainerModel struct {
	LoRA *rlLoRA `toml:"lora,omitempty"`
}

type rlLoRA struct {
	Rank  int `toml:"rank"`
	Alpha int `toml:"alpha"`
}

type rlOrchestrator struct {
	BatchSize         int            `toml:"batch_size"`
	GroupSize         int            `toml:"group_size"`
	EnvServerBasePort int            `toml:"env_server_base_port"`
	Model             rlOrchModel    `toml:"model"`
	Algo              *rlAlgo        `toml:"algo,omitempty"`
	Renderer          map[string]any `toml:"renderer,omitempty"`
	Concurrency       *rlConcurrency `toml:"concurrency,omitempty"`
	Train             rlTrain        `toml:"train"`
	Eval              *rlEval        `toml:"eval,omitempty"`
}

type rlOrchModel struct {
	Client rlClient `toml:"client"`
}

type rlClient struct {
	BaseURL string `toml:"base_url"`
}

type rlAlgo struct {
	Type     string         `toml:"type"`
	Sampling rlAlgoSampling `toml:"sampling"`
}

type rlAlgoSampling struct {
	Source rlFrozenModel `toml:"source"`
}

type rlFrozenModel struct {
	Name      string `toml:"name"`
	BaseURL   string `toml:"base_url"`
	APIKeyVar string `toml:"api_key_var"`
}

type rlConcurrency struct {
	MaxInflight int `toml:"max_inflight"`
}

type rlTrain struct {
	// FilterZeroAdvantages: prime-rl drops zero-advantage tokens unless the job's filters
	// say otherwise.
	FilterZeroAdvantages *bool            `toml:"filter_zero_advantages,omitempty"`
	Sampling             *rlTrainSampling `toml:"sampling,omitempty"`
	Source               []rlSource       `toml:"source"`
}

type rlTrainSampling struct {
	Temperature         *float64       `toml:"temperature,omitempty"`
	MaxCompletionTokens int            `toml:"max_completion_tokens,omitempty"`
	ExtraBody           map[string]any `toml:"extra_body,omitempty"`
}

// rlSource is one [[orchestrator.train.source]] or [[orchestrator.eval.source]]: prime-rl's
// per-environment knobs (ratio, group_size, num_examples, sampling), the verifiers env
// (taskset, timeout, retries, the one agent's harness and bounds) and how its server is hosted.
type rlSource struct {
	Name        string         `toml:"name"`
	Ratio       *float64       `toml:"ratio,omitempty"`
	GroupSize   int            `toml:"group_size,omitempty"`
	NumExamples *int           `toml:"num_examples,omitempty"`
	Sampling    map[string]any `toml:"sampling,omitempty"`
	Env         map[string]any `toml:"env"` // rlSourceEnv's fields, and each seat by its name
	Serve       *rlServe       `toml:"serve,omitempty"`
}

// A source's verifiers env (rlSource.Env) holds its taskset, timeout and retries, and its
// seats (the env's agent roles, by name: `agent` for a plain taskset) beside them.

type rlEnvTimeout struct {
	Episode  float64 `toml:"episode,omitempty"`
	Finalize float64 `toml:"finalize,omitempty"`
}

type rlRetryConf struct {
	MaxRetries int      `toml:"max_retries"`
	Include    []string `toml:"include,omitempty"`
	Exclude    []string `toml:"exclude,omitempty"`
}

type rlServe struct {
	Pool rlPool `toml:"pool"`
}

type rlPool struct {
	Type       string `toml:"type"`
	NumWorkers int    `toml:"num_workers,omitempty"`
	MaxWorkers int    `toml:"max_workers,omitempty"`
	Multiplex  int    `toml:"multiplex,omitempty"`
}

type rlEval struct {
	Interval      int             `toml:"interval,omitempty"`
	NumExamples   *int            `toml:"num_examples,omitempty"`
	GroupSize     int             `toml:"group_size,omitempty"`
	SkipFirstStep bool            `toml:"skip_first_step,omitempty"`
	Sampling      *rlEvalSampling `toml:"sampling,omitempty"`
	Source        []rlSource      `toml:"source"`
}

type rlEvalSampling struct {
	Temperature         *float64       `toml:"temperature,omitempty"`
	TopP                *float64       `toml:"top_p,omitempty"`
	MaxCompletionTokens int            `toml:"max_completion_tokens,omitempty"`
	ReasoningEffort     string         `toml:"reasoning_effort,omitempty"`
	ExtraBody           map[string]any `toml:"extra_body,omitempty"`
}

type rlInference struct {
	Server      rlServer `toml:"server"`
	BackendPort int      `toml:"backend_port"`
	VLLM        rlVLLM   `toml:"vllm"`
}

type rlServer struct {
	Port int `toml:"port"`
}

type rlVLLM struct {
	// MaxModelLen is the longest sequence vLLM serves: the job's (jobspec.Spec.ContextLen),
	// not the model's whole context, which generation could otherwise fill.
	MaxModelLen        int `toml:"max_model_len,omitempty"`
	TensorParallelSize int `toml:"tensor_parallel_size,omitempty"`
	DataParallelRPC    int `toml:"data_parallel_rpc_port"`
}

// rlRun is an rl job laid out on a node: its GPUs, ports and secrets' names.
type rlRun struct {
	jobID     string
	spec      jobspec.Spec
	gpus      int
	ports     upstream.Ports
	secrets   []string
	providers map[string]upstream.Provider // where provider-hosted models are called (the SFT teacher)
	judgeURL  string                       // the service's judge (RenderInput.JudgeURL)
}

// rlConfig is the rl.toml for the run and the number of environment servers prime-rl will
// start (each on a port of the job's block).
func (r rlRun) rlConfig() ([]byte, int, *Resolved, error) {
	s := r.spec
	// The split and tensor parallelism that fit the model on these GPUs (fit.RL; prime-rl's
	// even split for a model of no known size).
	layout, _, err := s.Layout(r.gpus)
	if err != nil {
		return nil, 0, nil, err
	}
	split := layout.Split
	ck := jobspec.Checkpoints{Interval: min(jobspec.DefaultCheckpointInterval, s.MaxSteps)}
	if s.Checkpoints != nil {
		ck = *s.Checkpoints
	}
	f := rlFile{
		MaxSteps:   s.MaxSteps,
		SeqLen:     cmp.Or(s.SeqLen, jobspec.MinSeqLen), // the job's (set at submit)
		Model:      rlModel{Name: s.Model},
		Deployment: rlDeployment{NumTrainGPUs: split.Trainer, NumInferGPUs: split.Inference},
		// prime-rl's default transport, on the job's port.
		RolloutTransport: rlTransport{Type: "zmq", Port: r.ports.ZMQ()},
		// No keep_last: prime-rl keeps every step folder, and the agent deletes each once a
		// newer one is committed to storage, so none is deleted before it is stored.
		Ckpt:    rlCkpt{Interval: ck.Interval},
		Trainer: rlTrainer{Optim: rlOptim{LR: s.LearningRate}},
		Orchestrator: rlOrchestrator{
			BatchSize: s.BatchSize, GroupSize: s.RolloutsPerExample,
			EnvServerBasePort: r.ports.EnvServerBase(),
			// The launcher refuses a client whose port is not the inference server's.
			Model: rlOrchModel{Client: rlClient{BaseURL: fmt.Sprintf("http://localhost:%d/v1", r.ports.Inference())}},
		},
		Inference: rlInference{
			Server:      rlServer{Port: r.ports.Inference()},
			BackendPort: r.ports.Backend(),
			VLLM:        rlVLLM{DataParallelRPC: r.ports.DPRPC(), MaxModelLen: s.ContextLen()},
		},
	}
	if split.TensorParallel > 1 {
		f.Inference.VLLM.TensorParallelSize = split.TensorParallel
	}
	if s.LoRA != nil {
		// LoRA weights reach vLLM through the filesystem (prime-rl's default with LoRA).
		f.Trainer.Model.LoRA = &rlLoRA{Rank: s.LoRA.Rank, Alpha: s.LoRA.Alpha}
	} else {
		f.WeightBroadcast = &rlWeightBroadcast{Type: "nccl", Port: r.ports.NCCL()}
	}
	if s.Wandb != nil && slices.Contains(r.secrets, "WANDB_API_KEY") {
		f.Monitors = &rlMonitors{Wandb: rlWandb{Project: s.Wandb.Project, Entity: s.Wandb.Entity, Name: s.Wandb.Name}}
	}
	if sp := s.Sampling; sp != nil && (sp.Temperature != nil || sp.MaxTokens > 0 || len(sp.ExtraBody) > 0) {
		f.Orchestrator.Train.Sampling = &rlTrainSampling{Temperature: sp.Temperature, MaxCompletionTokens: sp.MaxTokens, ExtraBody: wholeNumbers(sp.ExtraBody)}
	}
	if s.MaxInflightRollouts > 0 {
		f.Orchestrator.Concurrency = &rlConcurrency{MaxInflight: s.MaxInflightRollouts}
	}
	if f.Orchestrator.Renderer, err = rendererTable(s); err != nil {
		return nil, 0, nil, err
	}
	if s.Loss == "sft" && s.TeacherClient != nil {
		// The teacher at the endpoint the job named, with the key its secrets hold.
		f.Orchestrator.Algo = &rlAlgo{Type: "sft", Sampling: rlAlgoSampling{Source: rlFrozenModel{
			Name: s.Teacher, BaseURL: s.TeacherClient.BaseURL, APIKeyVar: s.TeacherClient.APIKeyVar}}}
	} else if s.Loss == "sft" {
		hm, ok := upstream.ProviderModel(s.Teacher)
		if !ok {
			return nil, 0, nil, fmt.Errorf("the sft teacher %s is not a provider-hosted model", s.Teacher)
		}
		p := hm.Provider
		if o, ok := r.providers[p.Name]; ok && o.BaseURL != "" {
			p = o
		}
		f.Orchestrator.Algo = &rlAlgo{Type: "sft", Sampling: rlAlgoSampling{Source: rlFrozenModel{
			Name: hm.Name, BaseURL: p.BaseURL, APIKeyVar: p.KeyVar}}}
	}
	f.Orchestrator.Train.FilterZeroAdvantages = s.FilterZeroAdvantages
	f.Orchestrator.Train.Source = sources(s.Env, false, r.judgeURL)
	servers := len(f.Orchestrator.Train.Source)
	if ev := s.Eval; ev != nil && len(ev.Env) > 0 {
		e := &rlEval{Interval: ev.Interval, GroupSize: ev.RolloutsPerExample, SkipFirstStep: ev.SkipFirstStep,
			Source: sources(ev.Env, true, r.judgeURL)}
		if ev.NumExamples != 0 {
			e.NumExamples = &ev.NumExamples
		}
		if sp := ev.Sampling; sp != nil {
			e.Sampling = &rlEvalSampling{Temperature: sp.Temperature, TopP: sp.TopP, MaxCompletionTokens: sp.MaxTokens,
				ReasoningEffort: sp.ReasoningEffort, ExtraBody: wholeNumbers(sp.ExtraBody)}
		}
		f.Orchestrator.Eval = e
		servers += len(e.Source)
	}
	if err := upstream.CheckEnvServers(servers); err != nil {
		return nil, 0, nil, err
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# prime-rl config written by hostedtrain for job %s, for prime-rl %s; do not edit.\n",
		r.jobID, upstream.Pinned().Short().PrimeRL)
	fmt.Fprintf(&buf, "# %d GPUs: inference (vLLM) on the first %d, the trainer on the next %d. Ports %d-%d.\n",
		r.gpus, split.Inference, split.Trainer, r.ports.Inference(), r.ports.EnvServerBase()+max(servers-1, 0))
	for _, n := range rlNotes(s, r.secrets) {
		fmt.Fprintf(&buf, "# %s.\n", n)
	}
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(false)
	if err := enc.Encode(f); err != nil {
		return nil, 0, nil, fmt.Errorf("render rl.toml: %w", err)
	}
	return buf.Bytes(), servers, f.resolve(split.Inference), nil
}

// rendererTable is [orchestrator.renderer]: written when prime-rl cannot find the model's
// renderer by itself ("auto"), or when the job sets one of its thinking switches.
func rendererTable(s jobspec.Spec) (map[string]any, error) {
	choice, err := upstream.ChooseRenderer(s.Model, s.Renderer)
	if err != nil {
		return nil, err
	}
	t := map[string]any{}
	if sp := s.Sampling; sp != nil {
		if sp.EnableThinking != nil && choice.Thinking {
			t["enable_thinking"] = *sp.EnableThinking
		}
		if sp.ReasoningEffort != "" && slices.Contains(choice.ReasoningEffort, sp.ReasoningEffort) {
			t["reasoning_effort"] = sp.ReasoningEffort
		}
	}
	if choice.Auto && len(t) == 0 {
		return nil, nil
	}
	t["name"] = choice.Name
	return t, nil
}

// sources are the [[orchestrator.train.source]] (or eval) entries of a job's environments:
// each names its environment's taskset (env.taskset.id, an Environments Hub id or an
// installed taskset package) with the job's arguments as the taskset's settings, under a name
// unique in its group.
func sources(envs []jobspec.Env, eval bool, judgeURL string) []rlSource {
	out := make([]rlSource, 0, len(envs))
	used := map[string]int{}
	for _, e := range envs {
		name := e.Name
		if name == "" {
			name = envName(e.ID)
		}
		if used[name]++; used[name] > 1 {
			name += "-" + strconv.Itoa(used[name])
		}
		taskset := map[string]any{}
		for k, v := range wholeNumbers(e.Args) {
			taskset[k] = v
		}
		taskset["id"] = e.ID
		if judgeURL != "" {
			serviceJudge(taskset, judgeURL)
		}
		src := rlSource{Name: name, GroupSize: e.GroupSize, Env: map[string]any{"taskset": taskset}}
		if eval {
			src.NumExamples = e.NumExamples
		} else {
			w := e.Weight
			src.Ratio = &w
		}
		src.Sampling = sourceSampling(e.Sampling, eval)
		switch {
		case e.Retries != nil:
			src.Env["retries"] = rlRetryConf{MaxRetries: e.Retries.MaxRetries, Include: e.Retries.Include, Exclude: e.Retries.Exclude}
		case e.MaxRetries != nil:
			src.Env["retries"] = rlRetryConf{MaxRetries: *e.MaxRetries}
		}
		if t := e.Timeout; t != nil {
			src.Env["timeout"] = rlEnvTimeout{Episode: t.Episode, Finalize: t.Finalize}
		}
		for seat, t := range seatTables(e) {
			src.Env[seat] = t
		}
		if p := e.Pool; p != nil {
			src.Serve = &rlServe{Pool: rlPool{Type: p.Type, NumWorkers: p.NumWorkers, MaxWorkers: p.MaxWorkers, Multiplex: p.Multiplex}}
		}
		out = append(out, src)
	}
	return out
}

// serviceJudge writes the service's judge URL where a taskset's judges name it.
func serviceJudge(taskset map[string]any, url string) {
	task, _ := taskset["task"].(map[string]any)
	judges, _ := task["judges"].([]any)
	for _, j := range judges {
		if m, _ := j.(map[string]any); m["base_url"] == jobspec.OperatorJudgeURL {
			m["base_url"] = url
		}
	}
}

// sourceSampling is an environment's own sampling as prime-rl's per-source sampling takes it
// (train: temperature, max_completion_tokens, extra_body; eval also top_p and
// reasoning_effort); what it has no key for is in jobspec.Unsupported. nil: the group's.
func sourceSampling(sp *jobspec.Sampling, eval bool) map[string]any {
	if sp == nil {
		return nil
	}
	t := map[string]any{}
	if sp.Temperature != nil {
		t["temperature"] = *sp.Temperature
	}
	if sp.MaxTokens > 0 {
		t["max_completion_tokens"] = sp.MaxTokens
	}
	if len(sp.ExtraBody) > 0 {
		t["extra_body"] = wholeNumbers(sp.ExtraBody)
	}
	if eval {
		if sp.TopP != nil {
			t["top_p"] = *sp.TopP
		}
		if sp.ReasoningEffort != "" {
			t["reasoning_effort"] = sp.ReasoningEffort
		}
	}
	if len(t) == 0 {
		return nil
	}
	return t
}

// seatTables are the environment's agent seats (upstream.Taskset's) as prime-rl takes them
// under env.<seat>: each seat's harness, its bounds on turns and tokens, and where its program runs. Every run of a
// seat provisions a runtime box for its program (even the null harness's), and verifiers'
// default is Prime's remote sandboxes; here it is the job's own sandbox, verifiers' subprocess
// runtime, as upstream's own configs run every seat. The prime CLI's per-environment knobs
// (and its harness.runtime) apply to every seat.
func seatTables(e jobspec.Env) map[string]map[string]any {
	ts, _ := upstream.LookupTaskset(e.ID)
	out := map[string]map[string]any{}
	for _, seat := range ts.Seats() {
		out[seat] = seatTable(e, ts.SeatHarness(seat))
	}
	return out
}

// seatTable is one seat: the job's harness, else harness (upstream's for the taskset, else
// the null harness) — never left to verifiers, whose fallback is its bash coding agent.
func seatTable(e jobspec.Env, harness string) map[string]any {
	t := map[string]any{"runtime": map[string]any{"type": "subprocess"}}
	if len(e.Harness) > 0 {
		h := wholeNumbers(e.Harness)
		delete(h, "runtime")
		t["harness"] = h
	} else {
		t["harness"] = map[string]any{"id": harness}
	}
	for k, v := range map[string]int{"max_turns": e.MaxTurns, "max_input_tokens": e.MaxInputTokens,
		"max_output_tokens": e.MaxOutputTokens, "max_total_tokens": e.MaxTotalTokens} {
		if v > 0 {
			t[k] = v
		}
	}
	return t
}

// envName is an environment id's name part: "owner/name@1.0" → "name", the module
// verifiers imports for it.
func envName(id string) string {
	id, _, _ = strings.Cut(id, "@")
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	return id
}

// wholeNumbers turns the whole numbers of environment arguments back into integers: the job
// went through JSON, where every number is a float, and `max_turns = 10.0` is not what the
// user wrote (nor what a taskset's int field takes).
func wholeNumbers(args map[string]any) map[string]any {
	if args == nil {
		return nil
	}
	out := make(map[string]any, len(args))
	for k, v := range args {
		out[k] = wholeNumber(v)
	}
	return out
}

func wholeNumber(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x)
		}
	case map[string]any:
		return wholeNumbers(x)
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = wholeNumber(e)
		}
		return out
	}
	return v
}

// rlNotes are what of an rl job does not reach prime-rl: W&B without its key, and each setting
// prime-rl has no key for. They head the rl.toml and go to the job's agent log.
func rlNotes(s jobspec.Spec, secrets []string) []string {
	var out []string
	if s.Wandb != nil && !slices.Contains(secrets, "WANDB_API_KEY") {
		out = append(out, "W&B is off: the job has no WANDB_API_KEY among its secrets")
	}
	for _, is := range jobspec.Unsupported(s) {
		out = append(out, fmt.Sprintf("Not applied (%s): %s", strings.TrimPrefix(is.Pointer, "/"), is.Message))
	}
	return out
}
