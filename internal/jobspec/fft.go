package jobspec

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// KindFFT is a full fine-tune: a whole prime-rl config (the `uv run rl @ rl.toml` file), as the
// prime CLI sends it down its full fine-tune path. The agent runs it as written, with its own
// output folder, run name, ports and checkpoint upload laid over it (gpuagent's fftConfig), on a
// node of its own GPUs. Its schema is prime-rl's RLConfig: the pinned prime-rl validates the
// written config on the node before any GPU time (the pipeline's preflight), and the checks here
// are the ones that must hold before it is queued.
const KindFFT = "fft"

// RunsPrimeRL says whether a kind runs prime-rl's rl launcher: checkpoints, metrics.jsonl and
// resume apply to it.
func RunsPrimeRL(kind string) bool { return kind == KindRL || kind == KindFFT }

// fftPlatformKeys are the keys of a full fine-tune file that are the service's, not prime-rl's:
// they are taken out of the config the agent writes.
var fftPlatformKeys = []string{"kind", "type", "name", "priority", "time_limit", "on_stall", "stall_factor", "max_gpu_hours", "max_cost", "image_tag", "gpu_type",
	"env_file", "env_files", "secrets"}

// fftManagedKeys are prime-rl settings the agent sets for every run (where it writes, what it
// resumes from): a file's own are dropped with a warning.
var fftManagedKeys = map[string]string{
	"output_dir": "the run writes to the job's own folder",
	"run":        "the run is named after the job",
	"resume":     "the service resumes a run from its newest stored checkpoint",
	"clean":      "each run starts in a fresh folder",
	"dry_run":    "the agent checks every config before it starts (a dry run of its own)",
}

// IsFullFinetune is the prime CLI's test (prime_cli/commands/rl.py, _is_full_finetune): a
// top-level type = "full_finetune", or a [deployment] table that sizes the run or names its
// type. Such a file is a whole prime-rl config.
func IsFullFinetune(v map[string]any) bool {
	if v["type"] == "full_finetune" {
		return true
	}
	d, ok := v["deployment"].(map[string]any)
	if !ok {
		return false
	}
	if t := d["type"]; t == "single_node" || t == "multi_node" {
		return true
	}
	for _, k := range []string{"num_train_gpus", "num_infer_gpus", "num_train_nodes", "num_infer_nodes"} {
		if _, ok := d[k]; ok {
			return true
		}
	}
	return false
}

// fft reads a full fine-tune: the config less the service's keys, and what the service needs
// to know of it (model, steps, GPUs, environments, checkpoints, W&B).
func (n *normalizer) fft(v map[string]any, in input, s *Spec) {
	cfg, _ := Clone(v).(map[string]any) // the value is not modified
	for _, k := range fftPlatformKeys {
		delete(cfg, k)
	}
	if t, ok := v["type"]; ok && t != "full_finetune" {
		n.fail("/type", `type is "full_finetune" (a whole prime-rl config) or absent`)
	}
	if g, ok := v["gpu_type"].(string); ok && !strings.EqualFold(g, DefaultGPUType) {
		n.fail("/gpu_type", "this service's nodes have %s GPUs; gpu_type %q cannot be placed", DefaultGPUType, g)
	}
	if _, ok := v["image_tag"]; ok {
		n.warn("/image_tag", "not applied: every run uses the prime-rl this service pins")
	}
	for _, k := range slices.Sorted(maps.Keys(fftManagedKeys)) {
		if _, ok := cfg[k]; ok {
			n.warn("/"+k, "not applied: %s", fftManagedKeys[k])
			delete(cfg, k)
		}
	}
	if _, ok := cfg["slurm"]; ok {
		n.fail("/slurm", "a run here goes to one of the service's nodes, not a SLURM cluster; remove [slurm]")
	}

	// The model: the shared [model], else the trainer's (prime-rl's default model is not a
	// choice anyone makes on purpose).
	s.Model = str(Dig(cfg, "model", "name"))
	if s.Model == "" {
		s.Model = str(Dig(cfg, "trainer", "model", "name"))
	}
	if s.Model == "" {
		n.fail("/model", `a full fine-tune names its model: add [model] name = "Qwen/Qwen3-4B-Instruct-2507"`)
	}
	if steps, ok := num(cfg["max_steps"]); ok {
		s.MaxSteps = int(steps)
	}

	// One node: the trainer's and inference's GPUs together.
	d, _ := cfg["deployment"].(map[string]any)
	if t := str(d["type"]); t == "multi_node" || d["num_train_nodes"] != nil || d["num_infer_nodes"] != nil {
		n.fail("/deployment", "a job runs on one node of up to 8 GPUs; multi-node deployments are not offered")
	}
	train, infer := 1.0, 1.0
	if x, ok := num(d["num_train_gpus"]); ok {
		train = x
	}
	if x, ok := num(d["num_infer_gpus"]); ok {
		infer = x
	}
	gpus := int(train + infer)
	if gpus > 8 || train < 1 || infer < 1 {
		n.fail("/deployment", "num_train_gpus (%d) and num_infer_gpus (%d) must each be at least 1 and together at most 8, one node's GPUs", int(train), int(infer))
	}
	s.Resources = Resources{GPUs: gpus, GPUType: DefaultGPUType}
	if _, ok := cfg["inference"].(map[string]any); !ok {
		n.fail("/inference", "a run here serves its policy on its own GPUs: add an [inference] table (prime-rl then starts vLLM on the node)")
	}
	if _, ok := Dig(cfg, "trainer", "metrics_server").(map[string]any); ok {
		n.warn("/trainer/metrics_server", "not applied: the service reads a run's metrics from metrics.jsonl")
		delete(cfg["trainer"].(map[string]any), "metrics_server")
	}
	n.envVars(cfg)
	n.runtimes(cfg)

	// The environments, to install on the node before the run (and to show).
	for i, src := range items(Dig(cfg, "orchestrator", "train", "source")) {
		if e, ok := n.fftSource(fmt.Sprintf("/orchestrator/train/source/%d", i), src); ok {
			s.Env = append(s.Env, e)
		}
	}
	if len(s.Env) == 0 {
		n.fail("/orchestrator/train/source", `a run trains on at least one environment: add [[orchestrator.train.source]] with env.taskset.id = "owner/name"`)
	}
	n.fftLengths(cfg, s)
	n.fftFit(cfg, s, int(train), int(infer))
	for i, src := range items(Dig(cfg, "orchestrator", "eval", "source")) {
		if e, ok := n.fftSource(fmt.Sprintf("/orchestrator/eval/source/%d", i), src); ok {
			if s.Eval == nil {
				s.Eval = &OnlineEval{}
			}
			s.Eval.Env = append(s.Eval.Env, e)
		}
	}

	// Checkpoints: the run's own interval (prime-rl's shared [ckpt], or its trainer's and
	// orchestrator's, which must agree), else the service's default (a run without them could
	// not resume after its node was lost). Where they go and how many stay are the service's.
	ck := Checkpoints{Interval: DefaultCheckpointInterval, KeepCloud: DefaultKeepCloud}
	if s.MaxSteps > 0 {
		ck.Interval = min(ck.Interval, s.MaxSteps)
	}
	interval := 0
	for _, at := range [][]string{{"ckpt"}, {"trainer", "ckpt"}, {"orchestrator", "ckpt"}} {
		c, _ := Dig(cfg, at...).(map[string]any)
		ptr := "/" + strings.Join(at, "/")
		if x, ok := num(c["interval"]); ok && x >= 1 {
			if interval > 0 && int(x) != interval {
				n.fail(ptr+"/interval", "the checkpoint interval is set to %d and to %d: set it once, in [ckpt]", interval, int(x))
			}
			interval = int(x)
		}
		for _, k := range []string{"output_dir", "keep_last"} {
			if _, ok := c[k]; ok {
				n.warn(ptr+"/"+k, "not applied: the service stores each checkpoint and keeps the newest %d in storage", ck.KeepCloud)
				delete(c, k)
			}
		}
	}
	if interval > 0 {
		ck.Interval = interval
	}
	s.Checkpoints = &ck
	// Monitors: W&B as the run says (refused without its key); the metrics file where the agent
	// reads it.
	for _, at := range [][]string{{}, {"trainer"}, {"orchestrator"}} {
		ptr := "/" + strings.Join(append(at, "monitors"), "/")
		m, _ := Dig(cfg, append(at, "monitors")...).(map[string]any)
		if w, ok := m["wandb"].(map[string]any); ok && s.Wandb == nil {
			s.Wandb = &Wandb{Project: str(w["project"]), Entity: str(w["entity"]), Name: str(w["name"])}
			if in.Secrets["WANDB_API_KEY"] == "" {
				n.fail(ptr+"/wandb", "%s", wandbKeyMissing)
			}
		}
		if f, ok := m["file"].(map[string]any); ok && f["path"] != nil {
			n.warn(ptr+"/file/path", "not applied: the run writes its metrics where prime-rl does by default, which the service reads")
			delete(f, "path")
		}
	}
	// The orchestrator's admin calls reach the inference backend on the job's port (prime-rl
	// derives the address from it).
	if c, ok := Dig(cfg, "orchestrator", "model", "client").(map[string]any); ok && c["admin_base_url"] != nil {
		n.warn("/orchestrator/model/client/admin_base_url", "not applied: the orchestrator reaches the inference server on the job's own ports")
		delete(c, "admin_base_url")
	}
	// The rollout transport: prime-rl takes it shared or from both sub-configs; the agent sets
	// its port in the shared block, so sub-configs that say it must agree (they are moved up).
	tr, to := Dig(cfg, "trainer", "rollout_transport"), Dig(cfg, "orchestrator", "rollout_transport")
	if tr != nil && to != nil && fmt.Sprint(tr) != fmt.Sprint(to) {
		n.fail("/trainer/rollout_transport", "the trainer's and the orchestrator's rollout_transport differ; set it once, in [rollout_transport]")
	}
	s.PrimeRL = cfg
}

// fftSource reads one source of a full fine-tune: its taskset id (the environment to install).
// Its environment server runs on the node, as the launcher starts it.
func (n *normalizer) fftSource(ptr string, src any) (Env, bool) {
	m, _ := src.(map[string]any)
	if Dig(m, "serve", "address") != nil {
		n.fail(ptr+"/serve/address", "a run's environment servers run on its node, where the launcher starts them; remove serve.address")
	}
	id := str(Dig(m, "env", "taskset", "id"))
	if id == "" {
		id = str(Dig(m, "env", "id"))
	}
	if id == "" {
		n.fail(ptr+"/env/taskset/id", `a source names its environment: env.taskset.id = "owner/name"`)
		return Env{}, false
	}
	if !envIDPattern.MatchString(id) {
		n.fail(ptr+"/env/taskset/id", "an environment id is `name` or `owner/name`, optionally `@version` (letters, digits, `.`, `_`, `-`), e.g. primeintellect/alphabet-sort@0.1.5")
		return Env{}, false
	}
	w := 1.0
	if x, ok := num(m["ratio"]); ok && x > 0 {
		w = x
	}
	return Env{ID: n.envID(ptr+"/env/taskset/id", id), Name: str(m["name"]), Weight: w}, true
}

// envVars refuses, anywhere in a config, an env_vars table that names a variable the service
// sets for a job's processes (the GPUs it sees, what it loads, where it reaches).
func (n *normalizer) envVars(cfg map[string]any) {
	walkTables(cfg, "", "env_vars", func(ptr string, vars map[string]any) {
		for _, name := range slices.Sorted(maps.Keys(vars)) {
			if ReservedEnv(name) {
				n.fail(ptr+"/"+escapePointer(name), "%s is a variable the service sets for a job's processes; a run may not set it", name)
			}
		}
	})
}

// runtimes refuses, anywhere in a config, a verifiers runtime other than the subprocess one: a
// job's programs run in its own sandbox on the node (Prime's remote sandboxes, Docker and Modal
// are not there).
func (n *normalizer) runtimes(cfg map[string]any) {
	walkTables(cfg, "", "runtime", func(ptr string, rt map[string]any) {
		if t, _ := rt["type"].(string); t != "subprocess" {
			n.fail(ptr+"/type", `a run's programs run in its own sandbox here: runtime type "subprocess" (not %q)`, t)
		}
	})
}

// walkTables calls f, in key order, with every table under v named key (and its pointer); it
// does not look inside those tables.
func walkTables(v any, ptr, key string, f func(ptr string, t map[string]any)) {
	switch x := v.(type) {
	case map[string]any:
		for _, k := range slices.Sorted(maps.Keys(x)) {
			p := ptr + "/" + escapePointer(k)
			if t, ok := x[k].(map[string]any); ok && k == key {
				f(p, t)
				continue
			}
			walkTables(x[k], p, key, f)
		}
	case []any:
		for i, e := range x {
			walkTables(e, fmt.Sprintf("%s/%d", ptr, i), key, f)
		}
	}
}

// envIDPattern is the contract's EnvID pattern (openapi.yaml), for ids inside a prime-rl config,
// which the schema leaves to prime-rl.
var envIDPattern = regexp.MustCompile(`^([A-Za-z0-9][A-Za-z0-9_.-]*/)?[A-Za-z0-9][A-Za-z0-9_.-]*(@[A-Za-z0-9][A-Za-z0-9.+_-]*)?$`)

// Clone copies a decoded TOML or JSON value, so that changing the copy changes nothing else.
func Clone(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = Clone(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = Clone(e)
		}
		return out
	}
	return v
}

// Dig is the value at a path of tables in a decoded TOML or JSON value, or nil.
func Dig(v any, path ...string) any {
	for _, k := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

func num(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	}
	return 0, false
}

func items(v any) []any {
	l, _ := v.([]any)
	return l
}

// fftLengths reads a full fine-tune's sequence length (the shared seq_len, else the trainer's,
// else prime-rl's default) and warns — the config is run as written — where a source's samples
// would not fit it: its turns (the taskset's max_turns, else its default) × its per-turn
// completion limit, or no completion limit at all (vLLM's context is then bounded to seq_len by
// the agent).
func (n *normalizer) fftLengths(cfg map[string]any, s *Spec) {
	s.SeqLen = MinSeqLen
	if x, ok := num(cfg["seq_len"]); ok {
		s.SeqLen = int(x)
	} else if x, ok := num(Dig(cfg, "trainer", "model", "seq_len")); ok {
		s.SeqLen = int(x)
	}
	group, _ := num(Dig(cfg, "orchestrator", "train", "sampling", "max_completion_tokens"))
	for i, src := range items(Dig(cfg, "orchestrator", "train", "source")) {
		m, _ := src.(map[string]any)
		ptr := fmt.Sprintf("/orchestrator/train/source/%d", i)
		perTurn, ok := num(Dig(m, "sampling", "max_completion_tokens"))
		if !ok {
			perTurn = group
		}
		if perTurn <= 0 {
			continue
		}
		e := Env{ID: str(Dig(m, "env", "taskset", "id"))}
		if x, ok := num(Dig(m, "env", "taskset", "max_turns")); ok {
			e.MaxTurns = int(x)
		}
		e.Sampling = &Sampling{MaxTokens: int(perTurn)}
		b := budget(e, nil)
		if b.tokens() > s.SeqLen {
			n.warn(ptr, "a sample of %s may take %d turn(s) (%s) × %d tokens and %d for the prompt, longer than seq_len (%d): longer samples are truncated for training; set seq_len = %d",
				e.ID, b.turns, b.turnsFrom, b.perTurn, PromptRoom, s.SeqLen, powerOfTwoAtLeast(b.tokens()))
		}
	}
}

// fftFit checks that a full fine-tune's own deployment fits its model (fit.Check): its
// inference GPUs at its tensor parallelism with vLLM's max_model_len (its own, else seq_len,
// which the agent sets), its trainer GPUs for LoRA or full fine-tuning.
func (n *normalizer) fftFit(cfg map[string]any, s *Spec, train, infer int) {
	model := str(Dig(cfg, "model", "name"))
	if model == "" || train < 1 || infer < 1 {
		return
	}
	tp := 1
	if x, ok := num(Dig(cfg, "inference", "vllm", "tensor_parallel_size")); ok && x >= 1 {
		tp = int(x)
	}
	ctx := s.SeqLen
	if x, ok := num(Dig(cfg, "inference", "vllm", "max_model_len")); ok && x >= 1 {
		ctx = int(x)
	}
	_, lora := Dig(cfg, "trainer", "model", "lora").(map[string]any)
	if err := fit.Check(model, upstream.Split{Inference: infer, Trainer: train, TensorParallel: tp}, ctx, s.SeqLen, lora); err != nil {
		n.fail("/deployment", "%v", err)
	}
}
