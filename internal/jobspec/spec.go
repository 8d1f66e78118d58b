// Package jobspec turns the job files users write (the hosted TOML of `prime train`, its
// self-hosted prime-rl form, GEPA and eval files, or the same objects as JSON) into one
// normalized Spec, and checks the rules a schema cannot say.
//
// Schema validation happens before this package sees a value: the OpenAPI document is the
// contract for types, ranges and unknown keys. Normalize maps the aliases users bring
// (`model_name`, a single `[env]` table, `env_id`, `[checkpointing]`) onto one shape and
// fills defaults, so that what the API echoes back is what will run.
package jobspec

import (
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Job kinds.
const (
	KindRL   = "rl"
	KindGEPA = "gepa"
	KindEval = "eval"
	// KindServe is a model server of deployments (queue/deployments.go): made by a deploy,
	// never submitted.
	KindServe = "serve"
)

// Defaults. The rl ones are the public `prime` CLI's, so a file means the same here and there;
// the GEPA ones are `prime gepa run`'s (Prime Intellect's docs, "GEPA Configuration Files"); the eval ones are `prime eval run`'s.
const (
	DefaultMaxSteps           = 100
	DefaultBatchSize          = 128
	DefaultRolloutsPerExample = 8
	DefaultCheckpointInterval = 50
	DefaultKeepCloud          = 5
	DefaultLoRARank           = 32
	DefaultLoRAAlpha          = 64
	// DefaultLoRALearningRate is the hosted template's (`prime train init`: "default is
	// 1e-4"); a full-weights run takes prime-rl's own default, DefaultFullLearningRate.
	DefaultLoRALearningRate = 1e-4
	DefaultFullLearningRate = 1e-6
	// MinSeqLen is prime-rl's default sequence length (trainer.model.seq_len,
	// orchestrator.seq_len); a run's default is at least this (a job may set less).
	MinSeqLen = 2048

	DefaultGEPAMaxCalls      = 500
	DefaultGEPANumTrain      = 100
	DefaultGEPANumVal        = 50
	DefaultGEPAMinibatchSize = 3

	DefaultEvalNumExamples        = 5
	DefaultEvalRolloutsPerExample = 3

	DefaultGPUType = "H100"

	// MaxTimeLimit is the longest a single run may be given.
	MaxTimeLimit = 30 * 24 * time.Hour
)

// shortDuration renders 48h0m0s as 48h and 1h30m0s as 1h30m.
func shortDuration(d time.Duration) string {
	s := d.String()
	s = strings.TrimSuffix(s, "0s")
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Class is the GPU class a job queues in: "H100:8", or "any:0" for a job that needs no GPU.
func (s Spec) Class() string {
	if s.Resources.GPUs == 0 {
		return "any:0"
	}
	return strings.ToUpper(s.Resources.GPUType) + ":" + strconv.Itoa(s.Resources.GPUs)
}

// TimeLimitDuration is the job's own time limit, or 0.
func (s Spec) TimeLimitDuration() time.Duration {
	d, _ := time.ParseDuration(s.TimeLimit)
	return d
}

// DefaultStallFactor is how many median step times without a new step make a stall.
const DefaultStallFactor = 5

// Spec is the normalized job: every alias resolved, every default filled in. Fields that do
// not apply to the job's kind are left empty.
type Spec struct {
	Kind      string    `json:"kind"`
	Name      string    `json:"name,omitempty"`
	Model     string    `json:"model"`
	Env       []Env     `json:"env"`
	Resources Resources `json:"resources"`
	// Priority orders jobs within an organization's queue: higher first.
	Priority int `json:"priority"`
	// TimeLimit bounds one run's wall-clock time ("48h"); "" for the service's default.
	TimeLimit string `json:"time_limit,omitempty"`
	// OnStall is what a stall of an rl or fft run does: "alert" (a job.stalled event) or
	// "restart" (also hand the run back to resume from its newest checkpoint); "" for
	// kinds that do not step. StallFactor is how many median step times without a new
	// step make a stall.
	OnStall     string  `json:"on_stall,omitempty"`
	StallFactor float64 `json:"stall_factor,omitempty"`
	// MaxGPUHours and MaxCost (in the operator's currency, at its price per GPU-hour of the
	// model) bound what the job may spend over all its runs; 0 for no bound. At 100 % the run
	// is stopped (STOPPED, budget) and may be restarted once the budget is raised.
	MaxGPUHours float64 `json:"max_gpu_hours,omitempty"`
	MaxCost     float64 `json:"max_cost,omitempty"`
	// Secrets are the names of the job's secrets; their values never appear in a Spec.
	Secrets []string `json:"secrets,omitempty"`
	// EnvFiles are the secret files the job named; the CLI reads them, the server never does.
	EnvFiles []string `json:"env_files,omitempty"`

	// rl
	Loss    string `json:"loss,omitempty"`
	Teacher string `json:"teacher,omitempty"`
	// TeacherClient is where an sft run's teacher is called when the job says (the prime CLI's
	// [teacher.client]); nil: the provider the teacher's id names.
	TeacherClient *TeacherClient `json:"teacher_client,omitempty"`
	MaxSteps      int            `json:"max_steps,omitempty"`
	// SeqLen is the longest sequence (prompt and completion) the trainer takes.
	SeqLen int `json:"seq_len,omitempty"`
	// ContextLength is the longest sequence the inference server of a GEPA or eval job holds
	// (vLLM's --max-model-len): its environments' turns × per-turn budget and a prompt.
	ContextLength int `json:"context_length,omitempty"`
	// Renderer names the chat renderer prime-rl renders the model with when the model is not
	// one prime-rl finds a renderer for by itself; "" when it does.
	Renderer            string  `json:"renderer,omitempty"`
	BatchSize           int     `json:"batch_size,omitempty"`
	RolloutsPerExample  int     `json:"rollouts_per_example,omitempty"`
	MaxInflightRollouts int     `json:"max_inflight_rollouts,omitempty"`
	OversamplingFactor  float64 `json:"oversampling_factor,omitempty"`
	LearningRate        float64 `json:"learning_rate,omitempty"`
	LoRA                *LoRA   `json:"lora,omitempty"`
	// Serve is a model server's (kind serve, made by a deploy): what it serves.
	Serve               *ServeSpec           `json:"serve,omitempty"`
	DifficultyFiltering *DifficultyFiltering `json:"difficulty_filtering,omitempty"`
	Parallelism         *Parallelism         `json:"parallelism,omitempty"`
	CheckpointID        string               `json:"checkpoint_id,omitempty"`
	// WarmStart is the committed checkpoint CheckpointID names, as the API resolved it at
	// submit; the run starts from it.
	WarmStart       *WarmStart  `json:"warm_start,omitempty"`
	Sampling        *Sampling   `json:"sampling,omitempty"`
	Eval            *OnlineEval `json:"eval,omitempty"`
	Val             *Val        `json:"val,omitempty"`
	PreBatchFilters []Filter    `json:"pre_batch_filters,omitempty"`
	// FilterZeroAdvantages is prime-rl's orchestrator.train.filter_zero_advantages as the
	// job's filters decide it: false when it lists filters and none is an enforced
	// zero_advantage one (`pre_batch_filters = []`, or `enforce = false`); nil for
	// prime-rl's default (on).
	FilterZeroAdvantages *bool        `json:"filter_zero_advantages,omitempty"`
	PostBatchFilters     []Filter     `json:"post_batch_filters,omitempty"`
	Wandb                *Wandb       `json:"wandb,omitempty"`
	Checkpoints          *Checkpoints `json:"checkpoints,omitempty"`
	Adapters             *Adapters    `json:"adapters,omitempty"`

	// fft: the prime-rl config as the job wrote it, less the service's keys (see KindFFT).
	PrimeRL map[string]any `json:"prime_rl,omitempty"`

	// gepa
	GEPA *GEPA `json:"gepa,omitempty"`
	// eval
	Evaluation *Evaluation `json:"evaluation,omitempty"`
}

// Env is one Environments Hub environment; a pinned version is part of ID (`owner/name@1.0`).
// Args are its taskset's settings (the legacy `args`, or the v1 form's `taskset` table less
// its id). The rest are the prime CLI's per-environment knobs, each as verifiers and prime-rl
// name it (see gpuagent's sources for where each goes).
type Env struct {
	ID         string         `json:"id"`
	Name       string         `json:"name,omitempty"`
	Args       map[string]any `json:"args,omitempty"`
	Weight     float64        `json:"weight"`
	MaxRetries *int           `json:"max_retries,omitempty"`
	// GroupSize is this environment's rollouts per example (0: the run's).
	GroupSize       int            `json:"group_size,omitempty"`
	Harness         map[string]any `json:"harness,omitempty"`
	Pool            *Pool          `json:"pool,omitempty"`
	Timeout         *EnvTimeout    `json:"timeout,omitempty"`
	Retries         *EnvRetries    `json:"retries,omitempty"`
	Sampling        *Sampling      `json:"sampling,omitempty"`
	MaxTurns        int            `json:"max_turns,omitempty"`
	MaxInputTokens  int            `json:"max_input_tokens,omitempty"`
	MaxOutputTokens int            `json:"max_output_tokens,omitempty"`
	MaxTotalTokens  int            `json:"max_total_tokens,omitempty"`
	// NumExamples is an eval environment's examples (-1: all; nil: the eval's).
	NumExamples *int           `json:"num_examples,omitempty"` // ExtraKwargs are a GEPA environment's extra_env_kwargs (set on the loaded env).
	ExtraKwargs map[string]any `json:"extra_kwargs,omitempty"`
}

// Pool is an environment server's worker pool (verifiers' serve.pool): static, a fixed
// NumWorkers; elastic, up to MaxWorkers, adding one when Multiplex episodes per worker run.
type Pool struct {
	Type       string `json:"type"`
	NumWorkers int    `json:"num_workers,omitempty"`
	MaxWorkers int    `json:"max_workers,omitempty"`
	Multiplex  int    `json:"multiplex,omitempty"`
}

// EnvTimeout bounds an episode and its finalization, in seconds (verifiers' env timeout).
type EnvTimeout struct {
	Episode  float64 `json:"episode,omitempty"`
	Finalize float64 `json:"finalize,omitempty"`
}

// EnvRetries are whole-episode retries (verifiers' RetryConfig).
type EnvRetries struct {
	MaxRetries int      `json:"max_retries"`
	Include    []string `json:"include,omitempty"`
	Exclude    []string `json:"exclude,omitempty"`
}

// TeacherClient is an OpenAI-compatible endpoint and the secret that holds its key.
type TeacherClient struct {
	BaseURL   string `json:"base_url"`
	APIKeyVar string `json:"api_key_var"`
}

// Resources is what a job needs from one node.
type Resources struct {
	GPUs    int    `json:"gpus"`
	GPUType string `json:"gpu_type"`
}

// Sampling holds rollout sampling parameters.
type Sampling struct {
	MaxTokens       int            `json:"max_tokens,omitempty"`
	Temperature     *float64       `json:"temperature,omitempty"`
	TopP            *float64       `json:"top_p,omitempty"`
	TempScheduler   *TempScheduler `json:"temp_scheduler,omitempty"`
	ExtraBody       map[string]any `json:"extra_body,omitempty"`
	EnableThinking  *bool          `json:"enable_thinking,omitempty"`
	ReasoningEffort string         `json:"reasoning_effort,omitempty"`
}

// TempScheduler anneals the sampling temperature over the run.
type TempScheduler struct {
	Type             string   `json:"type"`
	StartTemperature *float64 `json:"start_temperature,omitempty"`
	EndTemperature   *float64 `json:"end_temperature,omitempty"`
	TotalSteps       int      `json:"total_steps,omitempty"`
}

// ServeSpec is what a model server (kind serve) serves: its base model (the spec's Model)
// with up to MaxAdapters LoRA adapters of rank up to MaxLoRARank loaded and unloaded at run
// time, or — Adapter set — one full fine-tune's weights, served as that adapter's model id.
type ServeSpec struct {
	Adapter     string `json:"adapter,omitempty"`
	MaxAdapters int    `json:"max_adapters,omitempty"`
	MaxLoRARank int    `json:"max_lora_rank,omitempty"`
}

// LoRA trains low-rank adapters instead of the full weights.
type LoRA struct {
	Rank  int `json:"rank"`
	Alpha int `json:"alpha"`
}

// DifficultyFiltering skips groups whose reward variance is below Threshold.
type DifficultyFiltering struct {
	Threshold float64 `json:"threshold"`
}

// Parallelism splits the model across GPUs.
type Parallelism struct {
	TensorParallelSize   int `json:"tensor_parallel_size"`
	PipelineParallelSize int `json:"pipeline_parallel_size"`
}

// OnlineEval evaluates during an RL run (prime's [eval]).
type OnlineEval struct {
	Interval           int       `json:"interval,omitempty"`
	NumExamples        int       `json:"num_examples,omitempty"`
	RolloutsPerExample int       `json:"rollouts_per_example,omitempty"`
	SkipFirstStep      bool      `json:"skip_first_step,omitempty"`
	Sampling           *Sampling `json:"sampling,omitempty"`
	Env                []Env     `json:"env,omitempty"`
}

// Val is prime's [val].
type Val struct {
	NumExamples        int `json:"num_examples,omitempty"`
	RolloutsPerExample int `json:"rollouts_per_example,omitempty"`
	Interval           int `json:"interval,omitempty"`
}

// Filter drops or flags rollouts before or after a batch.
type Filter struct {
	Type    string `json:"type"`
	Enforce *bool  `json:"enforce,omitempty"`
}

// Wandb says where the run logs to Weights & Biases.
type Wandb struct {
	Entity  string `json:"entity,omitempty"`
	Project string `json:"project,omitempty"`
	Name    string `json:"name,omitempty"`
}

// Checkpoints says how often the trainer saves and how many the service keeps.
type Checkpoints struct {
	Interval int `json:"interval"`
	// KeepCloud is how many of the newest checkpoints stay in object storage; -1 keeps all.
	KeepCloud int `json:"keep_cloud"`
	// BestMetric names the best checkpoint: eval_reward or reward ("": eval_reward with
	// online evaluation, else reward).
	BestMetric string `json:"best_metric,omitempty"`
}

// Best is the series that names the job's best checkpoint.
func (c *Checkpoints) Best(hasEval bool) string {
	switch {
	case c != nil && c.BestMetric != "":
		return c.BestMetric
	case hasEval:
		return "eval_reward"
	}
	return "reward"
}

// Adapters is prime's [adapters]: how often LoRA adapters are exported and how many kept.
type Adapters struct {
	Interval int `json:"interval,omitempty"`
	KeepLast int `json:"keep_last,omitempty"`
}

// GEPA holds a prompt optimization's settings.
type GEPA struct {
	ReflectionModel string   `json:"reflection_model"`
	MaxCalls        int      `json:"max_calls"`
	NumTrain        int      `json:"num_train"`
	NumVal          int      `json:"num_val"`
	MinibatchSize   int      `json:"minibatch_size"`
	PerfectScore    *float64 `json:"perfect_score,omitempty"`
	StateColumns    []string `json:"state_columns,omitempty"`
	// MaxConcurrent bounds the rollouts in flight; Seed seeds the optimization (verifiers'
	// defaults when unset).
	MaxConcurrent int  `json:"max_concurrent,omitempty"`
	Seed          *int `json:"seed,omitempty"`
	// Sampling is what every rollout is sampled with (the loader's sampling_args).
	Sampling *Sampling `json:"sampling,omitempty"`
	// Endpoints are the endpoint registry's entries for the models the job names by alias.
	Endpoints []Endpoint `json:"endpoints,omitempty"`
	// SaveResults keeps every rollout (the loader's default: true).
	NoSave bool `json:"no_save,omitempty"`
}

// Endpoint is one entry of verifiers' endpoint registry (endpoints.toml): a model alias, the
// model it names, where it is called and the variable its key is in.
type Endpoint struct {
	EndpointID string `json:"endpoint_id" toml:"endpoint_id"`
	Model      string `json:"model" toml:"model"`
	URL        string `json:"url" toml:"url"`
	Key        string `json:"key" toml:"key"`
}

// Evaluation holds an eval job's settings.
type Evaluation struct {
	NumExamples        int  `json:"num_examples"`
	RolloutsPerExample int  `json:"rollouts_per_example"`
	SaveResults        bool `json:"save_results,omitempty"`
}

// Issue is one thing wrong with, or surprising about, a job file: a JSON pointer into the
// file as written (so it can be turned into a line) and a message a person understands.
type Issue struct {
	Pointer string `json:"pointer"`
	Message string `json:"message"`
}

// Result is a normalized job and what the rules found.
type Result struct {
	Spec    Spec
	Secrets map[string]string
	// Errors refuse the job; Warnings let it run but will be shown.
	Errors   []Issue
	Warnings []Issue
}

// input is a job file as written, after schema validation.
type input struct {
	Kind        string  `json:"kind"`
	Name        string  `json:"name"`
	Priority    int     `json:"priority"`
	TimeLimit   string  `json:"time_limit"`
	OnStall     string  `json:"on_stall"`
	StallFactor float64 `json:"stall_factor"`
	MaxGPUHours float64 `json:"max_gpu_hours"`
	MaxCost     float64 `json:"max_cost"`

	Model     string            `json:"model"`
	ModelName string            `json:"model_name"`
	EnvID     string            `json:"env_id"`
	Args      map[string]any    `json:"args"`
	Env       json.RawMessage   `json:"env"`
	EnvFile   json.RawMessage   `json:"env_file"`
	EnvFiles  []string          `json:"env_files"`
	Secrets   map[string]string `json:"secrets"`

	Loss                   string           `json:"loss"`
	Teacher                json.RawMessage  `json:"teacher"`
	MaxSteps               *int             `json:"max_steps"`
	SeqLen                 int              `json:"seq_len"`
	Renderer               string           `json:"renderer"`
	BatchSize              *int             `json:"batch_size"`
	RolloutsPerExample     *int             `json:"rollouts_per_example"`
	MaxInflightRollouts    int              `json:"max_inflight_rollouts"`
	OversamplingFactor     float64          `json:"oversampling_factor"`
	LearningRate           float64          `json:"learning_rate"`
	UseLoRA                *bool            `json:"use_lora"`
	LoRARank               int              `json:"lora_rank"`
	LoRAAlpha              int              `json:"lora_alpha"`
	UseDifficultyFiltering *bool            `json:"use_difficulty_filtering"`
	DifficultyThreshold    *float64         `json:"difficulty_threshold"`
	NumGPUs                int              `json:"num_gpus"`
	TensorParallelSize     int              `json:"tensor_parallel_size"`
	PipelineParallelSize   int              `json:"pipeline_parallel_size"`
	CheckpointID           string           `json:"checkpoint_id"`
	Sampling               *Sampling        `json:"sampling"`
	Eval                   *evalInput       `json:"eval"`
	Val                    *Val             `json:"val"`
	PreBatchFilters        []map[string]any `json:"pre_batch_filters"`
	PostBatchFilters       []map[string]any `json:"post_batch_filters"`
	// The prime CLI's platform settings and deprecated keys: accepted, not applied.
	ClusterName        *string             `json:"cluster_name"`
	Infrastructure     map[string]any      `json:"infrastructure"`
	RunConfig          map[string]any      `json:"run_config"`
	Tailscale          *tailscale          `json:"tailscale"`
	TrajectoryStrategy *string             `json:"trajectory_strategy"`
	Buffer             map[string]any      `json:"buffer"`
	Wandb              *Wandb              `json:"wandb"`
	Checkpoints        *checkpointsInput   `json:"checkpoints"`
	Checkpointing      *checkpointingInput `json:"checkpointing"`
	Adapters           *Adapters           `json:"adapters"`

	ReflectionModel string   `json:"reflection_model"`
	MaxCalls        int      `json:"max_calls"`
	NumTrain        int      `json:"num_train"`
	NumVal          int      `json:"num_val"`
	MinibatchSize   int      `json:"minibatch_size"`
	PerfectScore    *float64 `json:"perfect_score"`
	StateColumns    []string `json:"state_columns"`

	NumExamples *int  `json:"num_examples"`
	SaveResults *bool `json:"save_results"`

	// GEPA in verifiers' own shape (configs/gepa/*.toml): [gepa], [execution], the endpoint
	// registry its file names (read and inlined by the CLI as endpoints), and the keys its
	// loader reads that a hosted run sets itself.
	GEPATable     *gepaTable      `json:"gepa"`
	Execution     *executionTable `json:"execution"`
	EndpointsPath string          `json:"endpoints_path"`
	Endpoints     []Endpoint      `json:"endpoints"`
	APIKeyVar     string          `json:"api_key_var"`
	APIBaseURL    string          `json:"api_base_url"`
	EnvDirPath    *string         `json:"env_dir_path"`
	RunDir        *string         `json:"run_dir"`
	Verbose       *bool           `json:"verbose"`
	TUI           *bool           `json:"tui"`
}

// evalInput is [eval] as written: OnlineEval's settings, its environments as written and the
// deprecated eval_base_model.
type evalInput struct {
	Interval           int             `json:"interval"`
	NumExamples        int             `json:"num_examples"`
	RolloutsPerExample int             `json:"rollouts_per_example"`
	SkipFirstStep      *bool           `json:"skip_first_step"`
	EvalBaseModel      *bool           `json:"eval_base_model"`
	Sampling           *Sampling       `json:"sampling"`
	Env                json.RawMessage `json:"env"`
}

// teacherTable is the prime CLI's [teacher].
type teacherTable struct {
	Model  string `json:"model"`
	Client *struct {
		BaseURL        string            `json:"base_url"`
		APIKeyVar      string            `json:"api_key_var"`
		HeadersFromEnv map[string]string `json:"headers_from_env"`
		SkipModelCheck *bool             `json:"skip_model_check"`
	} `json:"client"`
	Sampling map[string]any `json:"sampling"`
}

type tailscale struct {
	Enabled bool `json:"enabled"`
}

type checkpointsInput struct {
	Interval   int    `json:"interval"`
	KeepCloud  *int   `json:"keep_cloud"`
	BestMetric string `json:"best_metric"`
}

type checkpointingInput struct {
	SaveEveryNSteps  int  `json:"save_every_n_steps"`
	KeepNCheckpoints *int `json:"keep_n_checkpoints"`
}

type envInput struct {
	ID                 string         `json:"id"`
	Name               string         `json:"name"`
	Args               map[string]any `json:"args"`
	Taskset            map[string]any `json:"taskset"`
	Harness            map[string]any `json:"harness"`
	Pool               *Pool          `json:"pool"`
	Timeout            *EnvTimeout    `json:"timeout"`
	Retries            *EnvRetries    `json:"retries"`
	Sampling           *Sampling      `json:"sampling"`
	Weight             float64        `json:"weight"`
	Ratio              float64        `json:"ratio"`
	GroupSize          int            `json:"group_size"`
	MaxTurns           int            `json:"max_turns"`
	MaxInputTokens     int            `json:"max_input_tokens"`
	MaxOutputTokens    int            `json:"max_output_tokens"`
	MaxTotalTokens     int            `json:"max_total_tokens"`
	Multiplex          int            `json:"multiplex"`
	MaxRetries         *int           `json:"max_retries"`
	Version            string         `json:"version"`
	NumExamples        *int           `json:"num_examples"`
	RolloutsPerExample int            `json:"rollouts_per_example"`
}

// normalizer carries the issues found while normalizing one file.
type normalizer struct {
	res  *Result
	opts Options
}

func (n *normalizer) fail(ptr, format string, args ...any) {
	n.res.Errors = append(n.res.Errors, Issue{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
}

func (n *normalizer) warn(ptr, format string, args ...any) {
	n.res.Warnings = append(n.res.Warnings, Issue{Pointer: ptr, Message: fmt.Sprintf(format, args...)})
}

// Normalize turns a schema-valid job value (decoded from TOML or JSON, `kind` set) into a
// Spec and its secrets, and checks the rules the schema cannot say. The value is not modified.
// The error is for values the schema should have refused; rule violations are Result.Errors.
func Normalize(v map[string]any) (Result, error) { return NormalizeWith(v, Options{}) }

// Options are the service's settings a job is normalized under.
type Options struct {
	// OperatorJudge: the service calls judges for jobs that have no key of their own, through
	// its judge endpoint (api's /v1/judge), billed to the job.
	OperatorJudge bool
}

// NormalizeWith is Normalize under the service's options.
func NormalizeWith(v map[string]any, opts Options) (Result, error) {
	top := v
	if v["kind"] == KindFFT {
		// A full fine-tune is a prime-rl config: only the service's own keys read as the
		// other kinds' do (its `model` is a table).
		top = map[string]any{}
		for _, k := range fftPlatformKeys {
			if x, ok := v[k]; ok {
				top[k] = x
			}
		}
	}
	raw, err := json.Marshal(top)
	if err != nil {
		return Result{}, fmt.Errorf("jobspec: encode: %w", err)
	}
	var in input
	if err := json.Unmarshal(raw, &in); err != nil {
		return Result{}, fmt.Errorf("jobspec: decode: %w", err)
	}
	res := Result{Secrets: in.Secrets}
	n := &normalizer{res: &res, opts: opts}
	s := &res.Spec
	s.Kind = in.Kind
	if s.Kind == "" {
		s.Kind = KindRL
	}
	s.Name = in.Name
	s.Model = in.Model
	s.Priority = in.Priority
	s.MaxGPUHours, s.MaxCost = in.MaxGPUHours, in.MaxCost
	if RunsPrimeRL(s.Kind) {
		s.OnStall, s.StallFactor = in.OnStall, in.StallFactor
		if s.OnStall == "" {
			s.OnStall = "alert"
		}
		if s.StallFactor == 0 {
			s.StallFactor = DefaultStallFactor
		}
	}
	if in.TimeLimit != "" {
		if tl, msg := ParseTimeLimit(in.TimeLimit); msg != "" {
			n.fail("/time_limit", "%s", msg)
		} else {
			s.TimeLimit = tl
		}
	}
	n.secrets(in, s)
	if err := n.envFiles(in, s); err != nil {
		return Result{}, err
	}

	switch s.Kind {
	case KindRL:
		if err := n.rl(in, s); err != nil {
			return Result{}, err
		}
	case KindGEPA:
		if err := n.gepa(in, s); err != nil {
			return Result{}, err
		}
	case KindFFT:
		n.fft(v, in, s)
	case KindEval:
		n.envFromID(in, s)
		s.Evaluation = &Evaluation{
			NumExamples:        DefaultEvalNumExamples,
			RolloutsPerExample: DefaultEvalRolloutsPerExample,
			SaveResults:        in.SaveResults != nil && *in.SaveResults,
		}
		if in.NumExamples != nil {
			s.Evaluation.NumExamples = *in.NumExamples
		}
		if in.RolloutsPerExample != nil {
			s.Evaluation.RolloutsPerExample = *in.RolloutsPerExample
		}
		s.Sampling = in.Sampling
		n.sampling("/sampling", s.Sampling)
		n.noSchedule("/sampling/temp_scheduler", s.Sampling, "an eval")
		s.Resources = Resources{GPUs: n.servedGPUs(in, s, modelAt{s.Model, "/model"}), GPUType: DefaultGPUType}
	default:
		return Result{}, fmt.Errorf("jobspec: unknown kind %q", s.Kind)
	}
	if s.Model == "" && s.Kind != KindFFT {
		n.fail("/model", `a job needs a model: add model = "Qwen/Qwen3-4B-Instruct-2507" (or another Hugging Face id)`)
	}
	if s.Kind == KindRL {
		res.Warnings = append(res.Warnings, Unsupported(*s)...)
	}
	if in.Wandb != nil && (in.Wandb.Project != "" || in.Wandb.Entity != "") && in.Secrets["WANDB_API_KEY"] == "" {
		n.fail("/wandb", "%s", wandbKeyMissing)
	}
	n.sizes(s, in.Secrets)
	return res, nil
}

func (n *normalizer) rl(in input, s *Spec) error {
	switch {
	case in.Model != "" && in.ModelName != "":
		n.fail("/model_name", "set model or model_name, not both (model_name is the prime-rl spelling of model)")
	case in.Model == "":
		s.Model = in.ModelName
	}
	envs, err := n.envList(in.Env, "/env", false)
	if err != nil {
		return err
	}
	s.Env = envs
	if len(envs) == 0 {
		n.fail("/env", `a job needs at least one environment: add an [[env]] table with id = "owner/name"`)
	}
	n.primeOnly(in)

	s.Loss = or(in.Loss, "rl")
	if err := n.teacher(in.Teacher, s); err != nil {
		return err
	}
	switch {
	case s.Loss == "opd":
		n.fail("/loss", `loss = "opd" (on-policy distillation) is not offered for hosted runs: it scores the policy's tokens with a teacher's log-probabilities, which a provider's API does not give; use "sft" to distill a teacher's answers, or "rl"`)
	case s.Teacher != "" && s.Loss != "sft":
		n.fail("/teacher", `teacher is for distillation: it applies only with loss = "sft"`)
	case s.Loss == "sft" && s.Teacher == "":
		n.fail("/loss", `loss = "sft" distills a teacher's answers: add teacher = "<model>" (a provider-hosted model such as openai/gpt-4.1-mini)`)
	case s.Loss == "sft" && s.TeacherClient != nil:
		// The teacher is called at the user's own endpoint, with the key the job's secrets hold.
		key := s.TeacherClient.APIKeyVar
		switch {
		case ReservedEnv(key):
			n.fail("/teacher/client/api_key_var", "%s is a variable the service sets for a job; name the secret that holds the teacher's key otherwise", key)
		case in.Secrets[key] == "":
			n.fail("/teacher/client/api_key_var", "the teacher's key %s is not among the job's secrets: add it to an env_file or pass -e %s", key, key)
		}
	case s.Loss == "sft":
		// prime-rl samples an sft run's rollouts from a frozen model behind an API
		// (SFTAlgoConfig needs sampling.source with a base_url); it hosts only the policy.
		if hm, ok := upstream.ProviderModel(s.Teacher); ok {
			n.needsKey("/teacher", s.Teacher, hm, in.Secrets)
		} else {
			n.fail("/teacher", "the teacher %s would have to be served beside the policy, which hostedtrain does not do yet: "+
				"prime-rl samples an sft run from a model behind an API; choose a provider-hosted teacher (OpenAI, Anthropic or Gemini models), "+
				"or name the endpoint that serves it in [teacher.client] (base_url, api_key_var)", s.Teacher)
		}
	}
	s.MaxSteps = deref(in.MaxSteps, DefaultMaxSteps)
	s.BatchSize = deref(in.BatchSize, DefaultBatchSize)
	s.RolloutsPerExample = deref(in.RolloutsPerExample, DefaultRolloutsPerExample)
	if s.BatchSize%s.RolloutsPerExample != 0 {
		n.fail(ptrOr(in.BatchSize != nil, "/batch_size", "/rollouts_per_example"),
			"batch_size (%d) must be a multiple of rollouts_per_example (%d): each example's rollouts form one group of a batch; try batch_size = %d",
			s.BatchSize, s.RolloutsPerExample, roundUp(s.BatchSize, s.RolloutsPerExample))
	}
	s.MaxInflightRollouts = in.MaxInflightRollouts
	s.OversamplingFactor = in.OversamplingFactor
	if in.MaxInflightRollouts > 0 {
		if in.MaxInflightRollouts < s.RolloutsPerExample {
			n.fail("/max_inflight_rollouts", "max_inflight_rollouts (%d) must be at least rollouts_per_example (%d), or no group could ever complete",
				in.MaxInflightRollouts, s.RolloutsPerExample)
		}
		if in.OversamplingFactor > 0 {
			n.fail("/oversampling_factor", "set max_inflight_rollouts or oversampling_factor, not both: both bound the rollouts in flight")
		}
	}
	s.CheckpointID = in.CheckpointID

	// Hosted runs train LoRA adapters (the hosted template's default), unless the job says
	// use_lora = false; the learning rate defaults to the hosted one for adapters and to
	// prime-rl's own for full weights.
	loraFields := in.LoRARank > 0 || in.LoRAAlpha > 0
	if in.UseLoRA != nil && !*in.UseLoRA {
		if loraFields {
			n.warn(ptrOr(in.LoRARank > 0, "/lora_rank", "/lora_alpha"), "use_lora = false, so lora_rank and lora_alpha are ignored and the full model is trained")
		}
		s.LearningRate = orFloat(in.LearningRate, DefaultFullLearningRate)
	} else {
		s.LoRA = &LoRA{Rank: orInt(in.LoRARank, DefaultLoRARank), Alpha: orInt(in.LoRAAlpha, DefaultLoRAAlpha)}
		s.LearningRate = orFloat(in.LearningRate, DefaultLoRALearningRate)
	}
	switch {
	case in.UseDifficultyFiltering != nil && *in.UseDifficultyFiltering:
		s.DifficultyFiltering = &DifficultyFiltering{}
		if in.DifficultyThreshold != nil {
			s.DifficultyFiltering.Threshold = *in.DifficultyThreshold
		}
	case in.DifficultyThreshold != nil:
		n.warn("/difficulty_threshold", "difficulty_threshold is not applied: prime-rl has no difficulty filtering (and use_difficulty_filtering is not set)")
	}

	gpus := in.NumGPUs
	if gpus == 0 {
		gpus = trainingGPUs(s.Model)
	}
	s.Resources = Resources{GPUs: gpus, GPUType: DefaultGPUType}
	if in.TensorParallelSize > 0 || in.PipelineParallelSize > 0 {
		s.Parallelism = &Parallelism{TensorParallelSize: orInt(in.TensorParallelSize, 1), PipelineParallelSize: orInt(in.PipelineParallelSize, 1)}
	}
	// What prime-rl cannot run on the job's GPUs is refused here, not on a node.
	if _, err := upstream.SplitGPUs(gpus, in.TensorParallelSize); err != nil {
		// The key to change: the GPU count when it is out of a node's range, else the
		// parallelism that leaves the trainer none.
		ptr := "/num_gpus"
		if in.TensorParallelSize > 1 && gpus >= 2 && gpus <= upstream.GPUsPerNode {
			ptr = "/tensor_parallel_size"
		}
		n.fail(ptr, "%v%s", err, gpuSource(in.NumGPUs))
	}

	s.Sampling = in.Sampling
	n.sampling("/sampling", s.Sampling)
	n.model(in, s)
	n.lengths(in.SeqLen, s)
	// (A temperature schedule is not applied at all: Unsupported says so, and nothing else.)
	if in.Eval != nil {
		ev := OnlineEval{Interval: in.Eval.Interval, NumExamples: in.Eval.NumExamples,
			RolloutsPerExample: in.Eval.RolloutsPerExample, Sampling: in.Eval.Sampling}
		switch {
		case in.Eval.SkipFirstStep != nil:
			ev.SkipFirstStep = *in.Eval.SkipFirstStep
			if in.Eval.EvalBaseModel != nil {
				n.warn("/eval/eval_base_model", "eval_base_model is deprecated and ignored because skip_first_step is also set; remove eval_base_model")
			}
		case in.Eval.EvalBaseModel != nil:
			ev.SkipFirstStep = !*in.Eval.EvalBaseModel
			n.warn("/eval/eval_base_model", "eval_base_model is deprecated: prime-rl renamed it skip_first_step, with the inverse meaning; "+
				"taken as skip_first_step = %t (write that instead)", ev.SkipFirstStep)
		}
		envs, err := n.envList(in.Eval.Env, "/eval/env", true)
		if err != nil {
			return err
		}
		ev.Env = envs
		evalLengths(&ev)
		s.Eval = &ev
		n.sampling("/eval/sampling", ev.Sampling)
		if ev.Interval > s.MaxSteps {
			n.warn("/eval/interval", "eval.interval (%d) is beyond max_steps (%d): no evaluation will run during training", ev.Interval, s.MaxSteps)
		}
	}
	s.Val = in.Val
	s.PreBatchFilters = n.filters("/pre_batch_filters", in.PreBatchFilters)
	s.PostBatchFilters = n.filters("/post_batch_filters", in.PostBatchFilters)
	if in.PreBatchFilters != nil || in.PostBatchFilters != nil {
		on := false
		for _, f := range append(slices.Clone(s.PreBatchFilters), s.PostBatchFilters...) {
			on = on || f.Type == "zero_advantage" && (f.Enforce == nil || *f.Enforce)
		}
		s.FilterZeroAdvantages = &on
	}
	s.Wandb = in.Wandb
	s.Adapters = in.Adapters

	ck := Checkpoints{Interval: min(DefaultCheckpointInterval, s.MaxSteps), KeepCloud: DefaultKeepCloud}
	switch {
	case in.Checkpoints != nil && in.Checkpointing != nil:
		n.fail("/checkpointing", "set [checkpoints] or [checkpointing], not both ([checkpointing] is the prime-rl spelling)")
	case in.Checkpoints != nil:
		ck.Interval = orInt(in.Checkpoints.Interval, ck.Interval)
		ck.KeepCloud = deref(in.Checkpoints.KeepCloud, ck.KeepCloud)
		ck.BestMetric = in.Checkpoints.BestMetric
		if ck.BestMetric == "eval_reward" && in.Eval == nil {
			n.fail("/checkpoints/best_metric", "best_metric = \"eval_reward\" needs online evaluation ([eval]); without it, use reward")
		}
	case in.Checkpointing != nil:
		ck.Interval = orInt(in.Checkpointing.SaveEveryNSteps, ck.Interval)
		ck.KeepCloud = deref(in.Checkpointing.KeepNCheckpoints, ck.KeepCloud)
	}
	if ck.KeepCloud == 0 {
		n.fail(ptrOr(in.Checkpointing != nil, "/checkpointing/keep_n_checkpoints", "/checkpoints/keep_cloud"),
			"keeping 0 checkpoints would leave nothing to resume from or download; use -1 to keep all, or a positive number")
	}
	if ck.Interval > s.MaxSteps {
		n.warn(ptrOr(in.Checkpointing != nil, "/checkpointing/save_every_n_steps", "/checkpoints/interval"),
			"the checkpoint interval (%d) is beyond max_steps (%d): an interrupted run would restart from step 0", ck.Interval, s.MaxSteps)
	}
	s.Checkpoints = &ck
	n.fitRL(in, s)
	return nil
}

// noSchedule refuses a temperature schedule where there are no training steps to anneal over.
func (n *normalizer) noSchedule(ptr string, sp *Sampling, what string) {
	if sp != nil && sp.TempScheduler != nil {
		n.fail(ptr, "a temperature schedule anneals over training steps, and %s has none: set sampling.temperature instead", what)
	}
}

func (n *normalizer) sampling(ptr string, sp *Sampling) {
	if sp == nil {
		return
	}
	if sp.TempScheduler != nil && sp.TempScheduler.Type == "" {
		sp.TempScheduler.Type = "linear" // the prime CLI's default
	}
	if sp.EnableThinking != nil && sp.ReasoningEffort != "" {
		n.fail(ptr+"/reasoning_effort", "set enable_thinking or reasoning_effort, not both: reasoning_effort already turns thinking on at a level")
	}
}

// envList reads `[[env]]` (a list) or a single `[env]` table, at ptr; eval says they are
// [[eval.env]], which alone take num_examples and rollouts_per_example.
func (n *normalizer) envList(raw json.RawMessage, ptr string, eval bool) ([]Env, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var list []envInput
	var ptrs []string
	if raw[0] == '{' {
		var one envInput
		if err := json.Unmarshal(raw, &one); err != nil {
			return nil, fmt.Errorf("jobspec: env: %w", err)
		}
		list, ptrs = []envInput{one}, []string{ptr}
	} else {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, fmt.Errorf("jobspec: env: %w", err)
		}
		for i := range list {
			ptrs = append(ptrs, ptr+"/"+strconv.Itoa(i))
		}
	}
	out := make([]Env, 0, len(list))
	for i, e := range list {
		out = append(out, n.env(ptrs[i], e, eval))
	}
	return out, nil
}

// env reads one environment at ptr: the legacy form (id, args) or the prime CLI's v1 form (a
// taskset table), with its knobs.
func (n *normalizer) env(ptr string, e envInput, eval bool) Env {
	id, args := e.ID, e.Args
	if tid, ok := e.Taskset["id"].(string); ok {
		if id != "" && id != tid {
			n.fail(ptr+"/taskset/id", "id %q and taskset.id %q name different environments; keep one", id, tid)
		}
		id = tid
		settings := make(map[string]any, len(e.Taskset))
		for k, v := range e.Taskset {
			if k != "id" {
				settings[k] = v
			}
		}
		if len(settings) > 0 {
			if len(args) > 0 {
				n.fail(ptr+"/args", "the taskset's settings are both in the taskset table and in args; keep one")
			}
			args = settings
		}
	}
	if id == "" {
		n.fail(ptr+"/id", `an environment needs id = "owner/name", or taskset = { id = "owner/name" }`)
	}
	id = n.envID(ptr+"/id", id)
	if e.Version != "" {
		base, pinned, hasPin := strings.Cut(id, "@")
		if hasPin && pinned != e.Version {
			n.fail(ptr+"/version", "version %q disagrees with the version in id %q; keep one", e.Version, id)
		}
		id = base + "@" + e.Version
	}
	w := e.Weight
	switch {
	case e.Weight > 0 && e.Ratio > 0:
		n.fail(ptr+"/ratio", "set ratio or weight, not both (weight is hostedtrain's name for the prime CLI's ratio)")
	case w == 0:
		w = cmp.Or(e.Ratio, 1)
	}
	out := Env{ID: id, Name: e.Name, Args: args, Weight: w, MaxRetries: e.MaxRetries, GroupSize: e.GroupSize,
		Harness: e.Harness, Timeout: e.Timeout, Retries: e.Retries, Sampling: e.Sampling, MaxTurns: e.MaxTurns,
		MaxInputTokens: e.MaxInputTokens, MaxOutputTokens: e.MaxOutputTokens, MaxTotalTokens: e.MaxTotalTokens}
	n.sampling(ptr+"/sampling", e.Sampling)
	if e.Retries != nil && e.MaxRetries != nil && *e.MaxRetries != e.Retries.MaxRetries {
		n.fail(ptr+"/max_retries", "max_retries (%d) disagrees with retries.max_retries (%d); keep one", *e.MaxRetries, e.Retries.MaxRetries)
	}
	out.Pool = n.pool(ptr, e.Pool, e.Multiplex)
	switch {
	case !eval && e.NumExamples != nil:
		n.fail(ptr+"/num_examples", "num_examples applies to [[eval.env]] only; a training environment's examples are drawn until max_steps")
	case !eval && e.RolloutsPerExample > 0:
		n.fail(ptr+"/rollouts_per_example", "rollouts_per_example in an environment applies to [[eval.env]] only; here it is group_size")
	case e.NumExamples != nil && *e.NumExamples == 0:
		n.fail(ptr+"/num_examples", "num_examples must be -1 (all) or a positive number")
	case e.GroupSize > 0 && e.RolloutsPerExample > 0 && e.GroupSize != e.RolloutsPerExample:
		n.fail(ptr+"/group_size", "group_size (%d) and rollouts_per_example (%d) are two names of one setting and cannot differ", e.GroupSize, e.RolloutsPerExample)
	}
	if eval {
		out.NumExamples = e.NumExamples
		out.GroupSize = cmp.Or(e.GroupSize, e.RolloutsPerExample)
	}
	argsPtr := ptr + "/args"
	if len(e.Args) == 0 && len(e.Taskset) > 0 {
		argsPtr = ptr + "/taskset"
	}
	n.tasksetArgs(ptr, argsPtr, &out, eval)
	return out
}

// pool reads an environment's worker pool and its multiplex (the prime CLI keeps it beside
// the pool; verifiers in the elastic pool).
func (n *normalizer) pool(ptr string, p *Pool, multiplex int) *Pool {
	if p == nil && multiplex == 0 {
		return nil
	}
	out := Pool{Type: "elastic"}
	if p != nil {
		out = *p
		out.Type = cmp.Or(out.Type, "elastic")
	}
	switch {
	case out.Type == "static" && (out.MaxWorkers > 0 || out.Multiplex > 0 || multiplex > 0):
		n.fail(ptr+"/pool", "a static pool has a fixed num_workers; max_workers and multiplex belong to an elastic pool")
	case out.Type == "elastic" && out.NumWorkers > 0:
		n.fail(ptr+"/pool/num_workers", "an elastic pool grows up to max_workers; num_workers belongs to a static pool (type = \"static\")")
	case multiplex > 0 && out.Multiplex > 0 && multiplex != out.Multiplex:
		n.fail(ptr+"/multiplex", "multiplex (%d) disagrees with pool.multiplex (%d); keep one", multiplex, out.Multiplex)
	case multiplex > 0:
		out.Multiplex = multiplex
	}
	return &out
}

// teacher reads `teacher`: a model id, or the prime CLI's [teacher] table.
func (n *normalizer) teacher(raw json.RawMessage, s *Spec) error {
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	if raw[0] == '"' {
		return json.Unmarshal(raw, &s.Teacher)
	}
	var t teacherTable
	if err := json.Unmarshal(raw, &t); err != nil {
		return fmt.Errorf("jobspec: teacher: %w", err)
	}
	s.Teacher = t.Model
	if c := t.Client; c != nil {
		s.TeacherClient = &TeacherClient{BaseURL: c.BaseURL, APIKeyVar: c.APIKeyVar}
		if len(c.HeadersFromEnv) > 0 {
			n.warn("/teacher/client/headers_from_env", "not applied: prime-rl calls a teacher with its key alone, no further headers")
		}
	}
	if len(t.Sampling) > 0 {
		n.warn("/teacher/sampling", "not applied: prime-rl samples an sft run's teacher with the run's own [sampling]")
	}
	return nil
}

// filters reads batch filters: their type and enforce, and says which of their own settings
// (which the prime CLI passes through) go unapplied.
func (n *normalizer) filters(ptr string, raw []map[string]any) []Filter {
	if raw == nil {
		return nil
	}
	out := make([]Filter, 0, len(raw))
	for i, f := range raw {
		t, _ := f["type"].(string)
		fl := Filter{Type: t}
		if e, ok := f["enforce"].(bool); ok {
			fl.Enforce = &e
		}
		for _, k := range slices.Sorted(maps.Keys(f)) {
			if k == "type" || k == "enforce" {
				continue
			}
			n.warn(fmt.Sprintf("%s/%d/%s", ptr, i, escapePointer(k)), "not applied: prime-rl's %s filter has no setting %q", t, k)
		}
		out = append(out, fl)
	}
	return out
}

// primeOnly warns about the prime CLI's settings for Prime's own platform, and takes its
// deprecated keys with the CLI's own warnings: all are accepted and none applied.
func (n *normalizer) primeOnly(in input) {
	if in.ClusterName != nil {
		n.warn("/cluster_name", "not applied: hostedtrain places a job on a node by the GPUs it needs")
	}
	if in.Infrastructure != nil {
		n.warn("/infrastructure", "not applied: a job's GPUs come from num_gpus, or from its model")
	}
	if in.RunConfig != nil {
		n.warn("/run_config", "not applied: run_config is a setting of Prime's own service")
	}
	if in.Tailscale != nil && in.Tailscale.Enabled {
		n.warn("/tailscale", "not applied: hostedtrain's nodes take no remote logins; follow the run with its logs, metrics and checkpoints")
	}
	if in.TrajectoryStrategy != nil {
		n.warn("/trajectory_strategy", "trajectory_strategy is deprecated and ignored")
	}
	if in.Buffer != nil {
		n.warn("/buffer", "[buffer] is deprecated and ignored: the difficulty-filtering buffer was removed from the trainer "+
			"(enforce a zero_advantage filter in [[pre_batch_filters]] instead)")
	}
}

// envFromID reads the `env_id` (and `args`) of GEPA and eval files.
func (n *normalizer) envFromID(in input, s *Spec) {
	if in.EnvID == "" {
		n.fail("/env_id", `a job needs an environment: add env_id = "owner/name"`)
		return
	}
	s.Env = []Env{{ID: n.envID("/env_id", in.EnvID), Args: in.Args, Weight: 1}}
	n.legacyLoadable("/env_id", in.EnvID)
}

// legacyLoadable checks that verifiers' legacy loader — which its GEPA and eval scripts use at
// the pinned version — can load an environment: a taskset package the pinned verifiers ships
// v1-only (no load_environment) cannot. A bare id names that package, and is refused; an
// Environments Hub id of the same name may be another version of it, and gets a warning (the
// agent's env_check of the installed package stops it before its model server starts).
func (n *normalizer) legacyLoadable(ptr, id string) {
	ts, known := upstream.LookupTaskset(id)
	if !known || !ts.Vendored || ts.Legacy || upstream.PinnedRuntime().Shapes.EnvLoader != "legacy" {
		return
	}
	if !strings.Contains(id, "/") {
		n.fail(ptr, "%s is a verifiers v1 taskset (its package defines no load_environment), and GEPA and evaluations run verifiers' legacy loader at the pinned version (%s), which cannot load it: "+
			"train on it with an rl job, or name an Environments Hub version that ships load_environment", id, upstream.VerifiersCommit[:7])
		return
	}
	n.warn(ptr, "the taskset %s that verifiers %s ships is v1-only (no load_environment), and GEPA and evaluations load environments with verifiers' legacy loader: "+
		"if the Hub's %s is too, the run fails before it starts", ts.ID, upstream.VerifiersCommit[:7], id)
}

// envID checks what the schema's pattern cannot: an id must never be able to name a path.
func (n *normalizer) envID(ptr, id string) string {
	if strings.Contains(id, "..") {
		n.fail(ptr, "an environment id must not contain `..`: it is `name` or `owner/name`, optionally `@version`")
	}
	return id
}

var secretName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedPrefixes and reservedNames are the variables the service sets for a job's processes
// or that change how every program of the job is loaded and where it reaches: a secret may not
// name them. Compared without regard to case (http_proxy is HTTP_PROXY to most clients).
var (
	reservedPrefixes = []string{"CUDA_", "NVIDIA_", "LD_", "PYTHON", "HOSTEDTRAIN_", "AWS_", "UV_"}
	reservedNames    = []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "TMPDIR", "TZ", "LANG", "IFS", "ENV", "BASH_ENV",
		"GLIBC_TUNABLES", "VIRTUAL_ENV", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "VLLM_API_KEY"}
)

// ReservedEnv reports whether a variable is one the service sets for a job (CUDA_VISIBLE_DEVICES
// names the job's GPUs, PATH and LD_* what it runs, the proxies where it reaches): not a
// secret's name. The GPU agent sets its own after a job's, so they win there too.
func ReservedEnv(name string) bool {
	up := strings.ToUpper(name)
	if slices.Contains(reservedNames, up) {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(up, p) {
			return true
		}
	}
	return false
}

func (n *normalizer) secrets(in input, s *Spec) {
	for name := range in.Secrets {
		if !secretName.MatchString(name) || len(name) > 128 {
			// The name, not the value: values never appear in messages.
			n.fail("/secrets/"+escapePointer(name), "a secret's name is an environment variable name (letters, digits and _, not starting with a digit); %q is not", name)
			continue
		}
		if ReservedEnv(name) {
			n.fail("/secrets/"+escapePointer(name), "%s is reserved: the service sets it for the job's processes (its GPUs, its programs, "+
				"where it reaches), so it cannot be a secret; reserved are %s and names starting %s", name,
				strings.Join(reservedNames, ", "), strings.Join(reservedPrefixes, ", "))
			continue
		}
		s.Secrets = append(s.Secrets, name)
	}
	sort.Strings(s.Secrets)
}

func (n *normalizer) envFiles(in input, s *Spec) error {
	if len(in.EnvFile) > 0 && string(in.EnvFile) != "null" {
		if in.EnvFile[0] == '"' {
			var one string
			if err := json.Unmarshal(in.EnvFile, &one); err != nil {
				return fmt.Errorf("jobspec: env_file: %w", err)
			}
			s.EnvFiles = append(s.EnvFiles, one)
		} else {
			var list []string
			if err := json.Unmarshal(in.EnvFile, &list); err != nil {
				return fmt.Errorf("jobspec: env_file: %w", err)
			}
			s.EnvFiles = append(s.EnvFiles, list...)
		}
	}
	s.EnvFiles = append(s.EnvFiles, in.EnvFiles...)
	if len(s.EnvFiles) > 0 && len(in.Secrets) == 0 {
		n.warn(ptrOr(len(in.EnvFile) > 0, "/env_file", "/env_files"),
			"the server never reads env files, and no secrets came with the job: submit it with `hostedtrain train submit`, which reads them, or send their contents as secrets")
	}
	return nil
}

var pointerEscaper = strings.NewReplacer("~", "~0", "/", "~1")

// escapePointer escapes a key for a JSON pointer (RFC 6901).
func escapePointer(s string) string {
	if !strings.ContainsAny(s, "~/") {
		return s
	}
	return pointerEscaper.Replace(s)
}

// EscapePointer escapes a key for use as one segment of a JSON pointer (RFC 6901).
func EscapePointer(s string) string { return escapePointer(s) }

func or(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func orFloat(a, b float64) float64 {
	if a != 0 {
		return a
	}
	return b
}

func orInt(a, b int) int {
	if a != 0 {
		return a
	}
	return b
}

func deref(p *int, def int) int {
	if p != nil {
		return *p
	}
	return def
}

func ptrOr(cond bool, a, b string) string {
	if cond {
		return a
	}
	return b
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

func gpuSource(explicit int) string {
	if explicit > 0 {
		return ""
	}
	return " (the default for this model; set num_gpus to choose)"
}

var paramCount = regexp.MustCompile(`(?i)(\d+(?:\.\d+)?)B\b`)

// trainingGPUs is how many GPUs an RL run of model gets by default on one node: vLLM and the
// trainer each need at least one; larger models get the whole node.
// TrainingGPUs is how many GPUs an rl job of model takes when it does not say (num_gpus): its
// default, or more where a LoRA run at prime-rl's default length would not fit them; ok is
// false for a model of no known size or one that fits no node.
func TrainingGPUs(model string) (int, bool) {
	sp := Spec{Model: model, SeqLen: MinSeqLen, LoRA: &LoRA{Rank: DefaultLoRARank, Alpha: DefaultLoRAAlpha}}
	g := trainingGPUs(model)
	for _, n := range []int{g, 4, upstream.GPUsPerNode} {
		if n < g {
			continue
		}
		if _, known, err := sp.Layout(n); known && err == nil {
			return n, true
		}
	}
	return 0, false
}

func trainingGPUs(model string) int {
	b := modelBillions(model)
	switch {
	case b == 0:
		return 8 // unknown size: be generous rather than fail to fit
	case b <= 8:
		return 2
	default:
		return 8
	}
}

// wandbKeyMissing is what a job with W&B monitoring and no key is told: the prime CLI's own
// refusal (commands/rl.py), since a run would otherwise start and log nowhere.
const wandbKeyMissing = "WANDB_API_KEY is required when W&B monitoring is configured: provide it with env_files = [\"secrets.env\"] in the job file, " +
	"--env-file secrets.env, or -e WANDB_API_KEY=your-key (or remove [wandb])"

// modelAt is a model a job names and where it names it.
type modelAt struct{ model, ptr string }

// servedGPUs are the GPUs a GEPA or eval job needs: none when every model it calls is behind
// a provider's API, else those that serve its open-weight model (serveGPUs) for its samples.
func (n *normalizer) servedGPUs(in input, s *Spec, models ...modelAt) int {
	var sp *Sampling
	if s.GEPA != nil {
		defaultMaxTokens(&s.GEPA.Sampling, s.Env)
		sp = s.GEPA.Sampling
	} else {
		defaultMaxTokens(&s.Sampling, s.Env)
		sp = s.Sampling
	}
	open := n.serving(in.Secrets, models...)
	if open == "" {
		if in.NumGPUs > 0 || in.TensorParallelSize > 0 {
			n.warn(ptrOr(in.TensorParallelSize > 0, "/tensor_parallel_size", "/num_gpus"), "not applied: every model the job calls is served elsewhere (a provider's API or an endpoint it names), so it takes no GPU")
		}
		return 0
	}
	ctx := MinSeqLen
	for _, e := range s.Env {
		ctx = max(ctx, roundLen(budget(e, sp).tokens(), open))
	}
	s.ContextLength = ctx
	return n.serveGPUs(in, open, ctx)
}

// serving checks the models a GEPA or eval job calls and names the open-weight one it serves
// ("" when every model is behind a provider's API, called with the job's own key, which must
// be among its secrets). One job serves one open-weight model.
func (n *normalizer) serving(secrets map[string]string, models ...modelAt) string {
	open := ""
	seen := map[string]bool{}
	for _, m := range models {
		if m.model == "" || seen[m.model] {
			continue
		}
		seen[m.model] = true
		if hm, ok := upstream.ProviderModel(m.model); ok {
			n.needsKey(m.ptr, m.model, hm, secrets)
			continue
		}
		if open != "" && open != m.model {
			n.fail(m.ptr, "%s and %s are both open-weight models, and a job serves one on its GPU: use the same model for both, or a provider-hosted one (OpenAI, Anthropic or Gemini models)", open, m.model)
			continue
		}
		open = m.model
	}
	return open
}

// needsKey refuses a provider-hosted model whose key the job did not bring: the run calls the
// provider with the user's own key, never one of the service's.
func (n *normalizer) needsKey(ptr, model string, hm upstream.HostedModel, secrets map[string]string) {
	if secrets[hm.Provider.KeyVar] == "" {
		n.fail(ptr, "%s is served by %s's API and the job calls it with your key: add %s to the job's secrets (an env_file, or -e %s)",
			model, hm.Provider.Name, hm.Provider.KeyVar, hm.Provider.KeyVar)
	}
}

// model checks that prime-rl can train the job's model: open weights, and a chat renderer —
// found by prime-rl itself, named by the job, or taken from the model it was fine-tuned
// from — whose switches cover the job's thinking settings.
func (n *normalizer) model(in input, s *Spec) {
	if s.Model == "" {
		return
	}
	modelPtr := ptrOr(in.ModelName != "" && in.Model == "", "/model_name", "/model")
	if hm, ok := upstream.ProviderModel(s.Model); ok {
		n.fail(modelPtr, "%s is served by %s's API: rl trains open weights, so name a Hugging Face model such as Qwen/Qwen3-4B-Instruct-2507", s.Model, hm.Provider.Name)
		return
	}
	choice, err := upstream.ChooseRenderer(s.Model, in.Renderer)
	if err != nil {
		n.fail(ptrOr(in.Renderer != "", "/renderer", modelPtr), "%v", err)
		return
	}
	if choice.Reason != "" {
		n.warn(modelPtr, "%s", choice.Reason)
	}
	if !choice.Auto {
		s.Renderer = choice.Name
	}
	sp := s.Sampling
	if sp == nil || (sp.EnableThinking != nil && sp.ReasoningEffort != "") {
		return // no sampling settings, or both switches (refused by the sampling rules)
	}
	if sp.EnableThinking != nil && !choice.Thinking {
		n.fail("/sampling/enable_thinking", "%s is rendered with prime-rl's %q renderer, which has no thinking switch: enable_thinking applies to models such as Qwen3, Qwen3.5 and Nemotron", s.Model, choice.Name)
	}
	if sp.ReasoningEffort != "" && !slices.Contains(choice.ReasoningEffort, sp.ReasoningEffort) {
		if len(choice.ReasoningEffort) == 0 {
			n.fail("/sampling/reasoning_effort", "%s is rendered with prime-rl's %q renderer, which takes no reasoning effort: reasoning_effort applies to models such as GPT-OSS", s.Model, choice.Name)
		} else {
			n.fail("/sampling/reasoning_effort", "prime-rl's %q renderer takes reasoning_effort %s", choice.Name, strings.Join(choice.ReasoningEffort, ", "))
		}
	}
}

func modelBillions(model string) float64 {
	// "Qwen3-30B-A3B": the total, not the active, parameters decide the memory.
	m := paramCount.FindStringSubmatch(model)
	if m == nil {
		return 0
	}
	f, _ := strconv.ParseFloat(m[1], 64)
	return f
}

// WarmStart is a committed checkpoint of another job of the organization's that a run starts
// from: its weights, optimizer and progress, as a restart resumes from its own.
type WarmStart struct {
	Job  string `json:"job"`
	Step int    `json:"step"`
}

// ParseCheckpointID reads a checkpoint id as this service names checkpoints — "<job id>-step-<N>"
// (the Prime surface's ids; `train checkpoints` shows the steps) — or a bare job id, which
// names its newest committed checkpoint (step 0 here).
func ParseCheckpointID(id string) (jobID string, step int) {
	if i := strings.LastIndex(id, "-step-"); i > 0 {
		if n, err := strconv.Atoi(id[i+len("-step-"):]); err == nil && n > 0 {
			return id[:i], n
		}
	}
	return id, 0
}

// ParseTimeLimit reads a job's time_limit ("48h", "90m"): its normal form, or why it is
// refused (not a duration, or outside 1m to MaxTimeLimit).
func ParseTimeLimit(v string) (string, string) {
	d, err := time.ParseDuration(v)
	switch {
	case err != nil:
		return "", fmt.Sprintf("time_limit %q is not a duration such as \"48h\" or \"90m\"", v)
	case d < time.Minute || d > MaxTimeLimit:
		return "", fmt.Sprintf("time_limit must be between 1m and %s", shortDuration(MaxTimeLimit))
	}
	return shortDuration(d), ""
}
