package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/httpserver"
)

// emulation are the --emulate.* flags: pace, faults, and where the emulated world is.
type emulation struct {
	stepTime    time.Duration
	stepWork    int // MiB hashed a step instead of sleeping: a step that needs the CPU
	crashAtStep int
	fault       string // what the crash at crashAtStep is: crash (an illegal memory access), oom, nccl, reward
	stallAt     int    // the trainer hangs after this step (a hung collective): nothing more until SIGTERM
	flatFrom    int    // from this step every rollout gets the same reward (no spread)
	nanLossAt   int
	ckptBytes   int64
	ckptTime    time.Duration
	serveDelay  time.Duration
	// loraLoadTime is how long loading a LoRA adapter takes; tokenTime paces a stream's tokens.
	loraLoadTime, tokenTime time.Duration
	check                   []string // upstream's config check (the conformance kit's check.py)
	venv                    string   // the emulated prime-rl's Python environment
}

func (e *emulation) flag(name, value string) (bool, error) {
	var err error
	switch name {
	case "step-time":
		e.stepTime, err = time.ParseDuration(value)
	case "step-work":
		e.stepWork, err = strconv.Atoi(value)
	case "crash-at-step":
		e.crashAtStep, err = strconv.Atoi(value)
	case "fault":
		if _, ok := faultLines[value]; !ok {
			err = fmt.Errorf("want one of crash, oom, nccl, reward")
		}
		e.fault = value
	case "stall-at-step":
		e.stallAt, err = strconv.Atoi(value)
	case "flat-reward-from-step":
		e.flatFrom, err = strconv.Atoi(value)
	case "nan-loss-at-step":
		e.nanLossAt, err = strconv.Atoi(value)
	case "ckpt-bytes":
		e.ckptBytes, err = strconv.ParseInt(value, 10, 64)
	case "ckpt-time":
		e.ckptTime, err = time.ParseDuration(value)
	case "serve-delay":
		e.serveDelay, err = time.ParseDuration(value)
	case "lora-load-time":
		e.loraLoadTime, err = time.ParseDuration(value)
	case "token-time":
		e.tokenTime, err = time.ParseDuration(value)
	case "check":
		e.check = strings.Fields(value)
	case "venv":
		e.venv = value
	default:
		return false, nil
	}
	if err != nil {
		return true, fmt.Errorf("--emulate.%s %q: %w", name, value, err)
	}
	return true, nil
}

// flatten gives a row's reward statistics no spread: every rollout got the mean reward.
func flatten(row map[string]any) {
	for k, v := range row {
		if base, ok := strings.CutSuffix(k, "/reward/mean"); ok {
			for _, s := range []string{"min", "max", "p10", "p90"} {
				if _, has := row[base+"/reward/"+s]; has {
					row[base+"/reward/"+s] = v
				}
			}
		}
	}
}

// faultLines are the emulated crashes (--emulate.fault): the line the failing component logs,
// as PyTorch, NCCL and a Python environment word it, and the component the launcher names.
var faultLines = map[string]struct{ component, line, failed string }{
	"":      {"trainer", "RuntimeError: CUDA error: an illegal memory access was encountered", "Trainer"},
	"crash": {"trainer", "RuntimeError: CUDA error: an illegal memory access was encountered", "Trainer"},
	"oom": {"trainer", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total " +
		"capacity of 79.10 GiB of which 1.03 GiB is free. Including non-PyTorch memory, this process has 78.06 GiB memory in use.", "Trainer"},
	"nccl": {"trainer", "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:1970, " +
		"unhandled system error (run with NCCL_DEBUG=INFO for details), NCCL version 2.21.5", "Trainer"},
	"reward": {"orchestrator", `ZeroDivisionError: division by zero, raised in score (File "/env/reward.py", line 12) of the environment's reward function`, "Orchestrator"},
}

// rlArgs is `rl @ FILE ... --output-dir D --run.name N [--resume[.step N]]`.
type rlArgs struct {
	files      []string
	outputDir  string
	runName    string
	resume     bool
	resumeStep int
	dryRun     bool
	em         emulation
}

// parseCommon splits args into --emulate.* flags (applied to em) and the rest.
func parseCommon(args []string, em *emulation) ([]string, error) {
	var rest []string
	for i := 0; i < len(args); i++ {
		name, ok := strings.CutPrefix(args[i], "--emulate.")
		if !ok {
			rest = append(rest, args[i])
			continue
		}
		value := ""
		if n, v, has := strings.Cut(name, "="); has {
			name, value = n, v
		} else if i+1 < len(args) {
			value = args[i+1]
			i++
		}
		known, err := em.flag(name, value)
		if err != nil {
			return nil, err
		}
		if !known {
			return nil, fmt.Errorf("unknown flag --emulate.%s", name)
		}
	}
	return rest, nil
}

func parseRL(args []string) (rlArgs, error) {
	a := rlArgs{outputDir: "outputs", em: emulation{stepTime: 200 * time.Millisecond, ckptBytes: 64 << 10}}
	rest, err := parseCommon(args, &a.em)
	if err != nil {
		return a, err
	}
	for i := 0; i < len(rest); i++ {
		arg := rest[i]
		next := func() (string, error) {
			if i+1 >= len(rest) {
				return "", fmt.Errorf("%s needs a value", arg)
			}
			i++
			return rest[i], nil
		}
		switch {
		case arg == "@":
			f, err := next()
			if err != nil {
				return a, err
			}
			a.files = append(a.files, f)
		case strings.HasPrefix(arg, "@"):
			a.files = append(a.files, arg[1:])
		case arg == "--output-dir":
			if a.outputDir, err = next(); err != nil {
				return a, err
			}
		case arg == "--run.name":
			if a.runName, err = next(); err != nil {
				return a, err
			}
		case arg == "--resume":
			a.resume = true
		case arg == "--resume.step":
			v, err := next()
			if err != nil {
				return a, err
			}
			if a.resumeStep, err = strconv.Atoi(v); err != nil || a.resumeStep < 1 {
				return a, fmt.Errorf("--resume.step %q: want a step ≥ 1", v)
			}
			a.resume = true
		case arg == "--dry-run":
			a.dryRun = true
		default:
			return a, fmt.Errorf("unrecognized argument %q", arg)
		}
	}
	if len(a.files) == 0 {
		return a, errors.New("no config: usage: rl @ rl.toml --output-dir DIR --run.name NAME")
	}
	return a, nil
}

// rlConfig is what the emulator reads of a resolved rl config (a generic TOML tree).
type rlConfig struct {
	tree       map[string]any
	maxSteps   int
	model      string
	inference  bool
	lora       bool
	ckpt       bool
	interval   int
	train      []string // source names
	eval       []string
	evalEvery  int
	batchSize  int
	groupSize  int      // rollouts of one example
	tasksets   []string // train then eval
	wbType     string
	ports      map[string]int
	infer, trn int
}

func get(tree map[string]any, path string) (any, bool) {
	var node any = tree
	for _, p := range strings.Split(path, ".") {
		m, ok := node.(map[string]any)
		if !ok {
			return nil, false
		}
		if node, ok = m[p]; !ok {
			return nil, false
		}
	}
	return node, true
}

func getInt(tree map[string]any, path string, def int) int {
	v, ok := get(tree, path)
	if !ok {
		return def
	}
	switch x := v.(type) {
	case int64:
		return int(x)
	case float64:
		return int(x)
	}
	return def
}

func getString(tree map[string]any, path string) string {
	v, _ := get(tree, path)
	s, _ := v.(string)
	return s
}

func loadTree(files []string) (map[string]any, error) {
	merged := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		var m map[string]any
		if err := toml.Unmarshal(b, &m); err != nil {
			return nil, fmt.Errorf("%s: %w", f, err)
		}
		merge(merged, m)
	}
	return merged, nil
}

func merge(dst, src map[string]any) {
	for k, v := range src {
		if sm, ok := v.(map[string]any); ok {
			if dm, ok := dst[k].(map[string]any); ok {
				merge(dm, sm)
				continue
			}
		}
		dst[k] = v
	}
}

// The fields prime-rl's RLConfig and a train/eval source take (prime_rl/configs/rl.py and
// orchestrator.py at the pinned commit): without the upstream check, a key outside them is
// refused as pydantic refuses it ("Extra inputs are not permitted").
var (
	rlTopFields = set("trainer", "orchestrator", "inference", "env_vars", "run", "output_dir", "clean", "log", "ckpt",
		"resume", "monitors", "model", "tokenizer", "max_steps", "seq_len", "weight_broadcast", "rollout_transport",
		"deployment", "slurm", "dry_run")
	sourceFields = set("env", "serve", "name", "ratio", "sampling", "group_size", "algo", "curriculum", "num_examples", "interval")
)

func set(names ...string) map[string]bool {
	m := map[string]bool{}
	for _, n := range names {
		m[n] = true
	}
	return m
}

func sources(tree map[string]any, path string) []map[string]any {
	v, _ := get(tree, path)
	list, _ := v.([]any)
	var out []map[string]any
	for _, e := range list {
		if m, ok := e.(map[string]any); ok {
			out = append(out, m)
		}
	}
	return out
}

// resolve reads the config as prime-rl would resolve it, refusing what prime-rl's field
// names refuse.
func resolve(tree map[string]any) (*rlConfig, []string) {
	var errs []string
	for k := range tree {
		if !rlTopFields[k] {
			errs = append(errs, fmt.Sprintf("%s: Extra inputs are not permitted", k))
		}
	}
	if _, ok := tree["trainer"]; !ok {
		errs = append(errs, "trainer: Field required")
	}
	if _, ok := tree["orchestrator"]; !ok {
		errs = append(errs, "orchestrator: Field required")
	}
	c := &rlConfig{tree: tree, ports: map[string]int{}}
	c.maxSteps = getInt(tree, "max_steps", getInt(tree, "trainer.max_steps", 0))
	c.model = getString(tree, "model.name")
	_, c.inference = tree["inference"]
	_, c.lora = get(tree, "trainer.model.lora")
	_, c.ckpt = tree["ckpt"]
	if _, ok := get(tree, "trainer.ckpt"); ok {
		c.ckpt = true
	}
	c.interval = getInt(tree, "ckpt.interval", getInt(tree, "trainer.ckpt.interval", 0))
	c.batchSize = getInt(tree, "orchestrator.batch_size", 128)
	c.groupSize = max(getInt(tree, "orchestrator.group_size", 1), 1)
	c.evalEvery = getInt(tree, "orchestrator.eval.interval", 100)
	for split, path := range map[string]string{"train": "orchestrator.train.source", "eval": "orchestrator.eval.source"} {
		for i, s := range sources(tree, path) {
			for k := range s {
				if !sourceFields[k] {
					errs = append(errs, fmt.Sprintf("%s.%d.%s: Extra inputs are not permitted", path, i, k))
				}
			}
			id := getString(s, "env.taskset.id")
			if id == "" {
				errs = append(errs, fmt.Sprintf("%s.%d: Value error, no env configured — set env = { taskset = { id = \"<id>\" } }", path, i))
			}
			name, _ := s["name"].(string)
			if name == "" {
				name = id
			}
			if split == "train" {
				c.train = append(c.train, name)
			} else {
				c.eval = append(c.eval, name)
			}
			c.tasksets = append(c.tasksets, id)
		}
	}
	c.infer, c.trn = getInt(tree, "deployment.num_infer_gpus", 1), getInt(tree, "deployment.num_train_gpus", 1)
	c.wbType = getString(tree, "weight_broadcast.type")
	if c.wbType == "" {
		c.wbType = "filesystem"
		if c.inference && !c.lora {
			c.wbType = "nccl"
		}
	}
	if c.maxSteps <= 0 {
		errs = append(errs, "max_steps: the emulator needs max_steps")
	}
	// The ports prime-rl binds, from the keys that move them (traces: ports).
	serverPort := getInt(tree, "inference.server.port", 8000)
	if c.inference {
		c.ports["inference router (inference.server.port)"] = serverPort
		c.ports["vLLM engine (inference.backend_port)"] = getInt(tree, "inference.backend_port", serverPort+100)
		c.ports["vLLM data-parallel RPC (inference.vllm.data_parallel_rpc_port)"] = getInt(tree, "inference.vllm.data_parallel_rpc_port", 13345)
	}
	if c.wbType == "nccl" {
		c.ports["NCCL weight broadcast (weight_broadcast.port)"] = getInt(tree, "weight_broadcast.port", 29501)
	}
	zmq := getInt(tree, "rollout_transport.port", 5555)
	c.ports["ZMQ rollout transport (rollout_transport.port)"] = zmq
	c.ports["ZMQ ready socket (rollout_transport.port + 1)"] = zmq + 1
	base := getInt(tree, "orchestrator.env_server_base_port", 5000)
	for i, name := range append(append([]string{}, c.train...), c.eval...) {
		c.ports[fmt.Sprintf("env server %s (orchestrator.env_server_base_port + %d)", name, i)] = base + i
	}
	if base := getString(tree, "orchestrator.model.client.base_url"); base != "" && c.inference &&
		!strings.Contains(base, ":"+strconv.Itoa(serverPort)+"/") && !strings.HasSuffix(base, ":"+strconv.Itoa(serverPort)) {
		errs = append(errs, fmt.Sprintf("orchestrator.model.client.base_url (%s) does not use inference.server.port (%d)", base, serverPort))
	}
	return c, errs
}

// upstreamCheck runs upstream's own config check (--emulate.check: the conformance kit's
// check.py) on the file as `rl` would load it; the errors it reports, if any.
func upstreamCheck(ctx context.Context, check []string, kind string, file string, extra ...string) ([]string, error) {
	argv := append(append(append([]string{}, check[1:]...), kind, file), extra...)
	out, err := execOutput(ctx, check[0], argv...)
	var ee *exitError
	if err != nil && !errors.As(err, &ee) {
		return nil, fmt.Errorf("upstream check %v: %w", check, err)
	}
	var res struct {
		OK     bool `json:"ok"`
		Errors []struct {
			Loc string `json:"loc"`
			Msg string `json:"msg"`
		} `json:"errors"`
	}
	line := strings.TrimSpace(string(out))
	if i := strings.LastIndexByte(line, '\n'); i >= 0 {
		line = line[i+1:]
	}
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		return nil, fmt.Errorf("upstream check said %q: %w", line, err)
	}
	var errs []string
	for _, e := range res.Errors {
		if e.Loc != "" {
			errs = append(errs, e.Loc+": "+e.Msg)
		} else {
			errs = append(errs, e.Msg)
		}
	}
	if !res.OK && len(errs) == 0 {
		errs = append(errs, "refused")
	}
	return errs, nil
}

// runRL emulates `uv run rl @ rl.toml ...`.
func runRL(ctx context.Context, args []string, out io.Writer) int {
	a, err := parseRL(args)
	if err != nil {
		return fail(out, 2, "error: %v", err)
	}
	fmt.Fprintln(out, banner)
	tree, err := loadTree(a.files)
	if err != nil {
		return fail(out, 1, "Config file error: %v", err)
	}
	if a.runName != "" {
		tree["run"] = map[string]any{"name": a.runName}
	}
	c, errs := resolve(tree)
	if len(a.em.check) > 0 {
		extra := []string{"--output-dir", a.outputDir}
		if a.runName != "" {
			extra = append(extra, "--run-name", a.runName)
		}
		if a.resumeStep > 0 {
			extra = append(extra, "--set", "resume.step="+strconv.Itoa(a.resumeStep))
		} else if a.resume {
			extra = append(extra, "--resume")
		}
		// upstream's own validation is the authority: it replaces the field-name check
		errs, err = upstreamCheck(ctx, a.em.check, "prime-rl", a.files[len(a.files)-1], extra...)
		if err != nil {
			return fail(out, 1, "error: %v", err)
		}
	}
	if len(errs) > 0 {
		sort.Strings(errs)
		return fail(out, 1, "Config file error (%d):\n  %s", len(errs), strings.Join(errs, "\n  "))
	}
	if a.runName == "" {
		a.runName = "run"
	}
	runDir := filepath.Join(a.outputDir, a.runName)
	if err := validateRunDir(runDir, a.resume); err != nil {
		return fail(out, 1, "%v", err)
	}
	if err := os.MkdirAll(filepath.Join(runDir, "configs"), 0o755); err != nil {
		return fail(out, 1, "error: %v", err)
	}
	if b, err := toml.Marshal(tree); err == nil {
		_ = os.WriteFile(filepath.Join(runDir, "configs", "rl.toml"), b, 0o644)
	}
	if a.dryRun {
		fmt.Fprintln(out, loguru("SUCCESS", "Dry run complete. To start an RL run locally, remove --dry-run from your command."))
		return 0
	}
	r := &rlRun{args: a, cfg: c, dir: runDir, out: out}
	return r.run(ctx)
}

// validateRunDir is prime-rl's guard: without a resume, a run folder that holds anything but
// configs/ (and SLURM files) is refused.
func validateRunDir(dir string, resuming bool) error {
	entries, err := os.ReadDir(dir)
	if err != nil || resuming {
		return nil
	}
	for _, e := range entries {
		n := e.Name()
		if n == "configs" || n == "rl.sbatch" || n == "sft.sbatch" || (strings.HasPrefix(n, "job_") && strings.HasSuffix(n, ".log")) {
			continue
		}
		return fmt.Errorf("FileExistsError: run directory %s already exists and holds %s; resume it (--resume) or set clean = true", dir, n)
	}
	return nil
}

// rlRun is one emulated `rl` launch.
type rlRun struct {
	args  rlArgs
	cfg   *rlConfig
	dir   string
	out   io.Writer
	logs  *componentLogs
	curve progressCurve
}

func (r *rlRun) run(ctx context.Context) int {
	a, c := r.args, r.cfg
	var err error
	if r.logs, err = openLogs(r.dir, c); err != nil {
		return fail(r.out, 1, "error: %v", err)
	}
	defer r.logs.close()
	r.logs.log("orchestrator", "INFO", banner)
	r.logs.log("trainer", "INFO", banner)

	start := 0
	if a.resume {
		step, err := resumeStep(filepath.Join(r.dir, "checkpoints"), a.resumeStep)
		if err != nil {
			r.logs.log("trainer", "ERROR", err.Error())
			fmt.Fprintln(r.out, loguru("ERROR", "Trainer failed with exit code 1"))
			return 1
		}
		start = step
		fmt.Fprintln(r.out, loguru("INFO", fmt.Sprintf("Resuming from step %d, cleaning future rollouts and broadcasts", step)))
	} else {
		fmt.Fprintln(r.out, loguru("INFO", "Training from scratch, cleaning any stale rollouts and broadcasts"))
	}
	cleanRollouts(r.dir, start)
	if !c.inference {
		fmt.Fprintln(r.out, loguru("WARNING", "No [inference] block configured - the policy inference server will not be started here."))
	}

	// The processes come up: each binds its ports. A port another run holds is the failure
	// prime-rl meets.
	listeners, err := bindPorts(c.ports)
	if err != nil {
		r.logs.log("orchestrator", "ERROR", err.Error())
		fmt.Fprintln(r.out, loguru("ERROR", "Orchestrator failed with exit code 1"))
		return 1
	}
	defer closeAll(listeners)
	if c.inference {
		r.logs.vllm("INFO", fmt.Sprintf("Starting vLLM API server on http://0.0.0.0:%d", c.ports["vLLM engine (inference.backend_port)"]))
		if err := torchCompile(r.logs, c.model, getInt(c.tree, "inference.vllm.tensor_parallel_size", 1)); err != nil {
			r.logs.vllm("WARNING", fmt.Sprintf("torch.compile cache not saved: %v", err))
		}
		go serveHealth(listeners[c.ports["inference router (inference.server.port)"]], c.model, "")
	}
	for _, name := range c.train {
		r.logs.log(envLog("train", name), "INFO", "env server listening")
	}
	for _, name := range c.eval {
		r.logs.log(envLog("eval", name), "INFO", "env server listening")
	}
	// Tasksets are imported from prime-rl's Python: a Hub environment must have been
	// installed there; a bare name is one of prime-rl's own.
	for _, id := range c.tasksets {
		if !installed(r.args.em.venv, id) {
			msg := fmt.Sprintf("ModuleNotFoundError: taskset %q not found (tried to import %q). A taskset is a package exporting its Taskset subclass via `__all__` — any other package must already be installed.", id, moduleName(id))
			r.logs.log("orchestrator", "ERROR", msg)
			fmt.Fprintln(r.out, loguru("ERROR", "Orchestrator failed with exit code 1"))
			return 1
		}
	}
	if !c.inference {
		// The orchestrator waits for a policy server that nobody starts.
		r.logs.log("orchestrator", "INFO", "Waiting for the inference pool at http://localhost:8000/v1 to be ready")
		<-ctx.Done()
		return r.sigterm()
	}

	seed := fnv.New64a()
	seed.Write([]byte(a.runName))
	rng := rand.New(rand.NewPCG(seed.Sum64(), 42))
	r.curve = progressCurve{bias: 0.1 + 0.2*rng.Float64(), maxSteps: c.maxSteps, rng: rng}
	metrics, err := os.OpenFile(filepath.Join(r.dir, "metrics.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fail(r.out, 1, "error: %v", err)
	}
	defer metrics.Close()
	write := func(row map[string]any) error {
		if step, _ := row["step"].(int); a.em.flatFrom > 0 && step >= a.em.flatFrom {
			flatten(row)
		}
		b, err := json.Marshal(row)
		if err != nil {
			return err
		}
		_, err = metrics.Write(append(b, '\n'))
		return err
	}

	// The orchestrator ships batches ahead of the trainer: batch N goes once the trainer has
	// published policy v(N-2) (traces: orchestrator_lead).
	shipped, trained := start, start
	// Each process saves a step's checkpoint before it writes that step's row, as upstream
	// does (orchestrator.py: maybe_save_ckpt before the row; trainer/rl/train.py: the save
	// before the step is logged).
	ship := func() error {
		shipped++
		if c.ckpt && c.interval > 0 && shipped%c.interval == 0 && shipped < c.maxSteps {
			if err := r.orchestratorCheckpoint(shipped); err != nil {
				return err
			}
		}
		if err := r.writeEpisodes(shipped, "train", c.batchSize, c.groupSize, r.curve.reward(shipped), rng); err != nil {
			return err
		}
		if err := write(r.curve.orchestratorRow(shipped, c.train, c.batchSize)); err != nil {
			return err
		}
		r.logs.log("orchestrator", "INFO", fmt.Sprintf("Shipped batch %d (%d rollouts)", shipped, c.batchSize))
		for _, name := range c.train {
			r.logs.log(envLog("train", name), "INFO", fmt.Sprintf("step %d: %d rollouts scored", shipped, c.batchSize))
		}
		if len(c.eval) > 0 && shipped%c.evalEvery == 0 {
			for _, name := range c.eval {
				if err := r.writeEpisodes(shipped, "eval", c.groupSize, c.groupSize, r.curve.reward(shipped)-0.05, rng); err != nil {
					return err
				}
				if err := write(r.curve.evalRow(shipped, name)); err != nil {
					return err
				}
				r.logs.log(envLog("eval", name), "INFO", fmt.Sprintf("eval at step %d done", shipped))
			}
		}
		return nil
	}
	for shipped < min(start+2, c.maxSteps) {
		if err := ship(); err != nil {
			return fail(r.out, 1, "error: %v", err)
		}
	}
	tick := time.NewTicker(a.em.stepTime)
	defer tick.Stop()
	work := newWork(a.em.stepWork)
	for trained < c.maxSteps {
		began := time.Now()
		if work != nil {
			if ctx.Err() != nil {
				return r.sigterm()
			}
			work.do()
		} else {
			select {
			case <-ctx.Done():
				return r.sigterm()
			case <-tick.C:
			}
		}
		trained++
		if a.em.crashAtStep == trained {
			f := faultLines[a.em.fault]
			r.logs.log(f.component, "ERROR", fmt.Sprintf("%s (emulated crash at step %d)", f.line, trained))
			fmt.Fprintln(r.out, loguru("ERROR", f.failed+" failed with exit code 1"))
			return 1
		}
		if c.ckpt && c.interval > 0 && trained%c.interval == 0 && trained < c.maxSteps {
			if code, stop := r.trainerCheckpoint(ctx, trained); stop {
				return code
			}
		}
		if c.wbType == "filesystem" {
			if err := r.broadcast(trained); err != nil {
				return fail(r.out, 1, "error: %v", err)
			}
		}
		drop := a.em.nanLossAt == trained
		rows := r.curve.trainerRows(trained, c.train, drop)
		if work != nil {
			rows[3]["time/step"] = time.Since(began).Seconds()
		}
		if drop {
			r.logs.log("trainer", "WARNING", "Dropping non-finite metric values from the metrics row: loss/mean, loss/median, loss/std, loss/min, loss/max")
		}
		for _, row := range rows {
			if err := write(row); err != nil {
				return fail(r.out, 1, "error: %v", err)
			}
		}
		if a.em.stallAt == trained {
			// A hung collective: the processes live on and write nothing more.
			<-ctx.Done()
			return r.sigterm()
		}
		loss, _ := rows[2]["loss/mean"].(float64)
		r.logs.log("trainer", "SUCCESS", fmt.Sprintf("Step %d | %5.1fs | Loss %.4f | Entropy %.4f | Grad. Norm %.4f | LR 1.00e-04 | Throughput %.0f tokens/s",
			trained, time.Since(began).Seconds(), loss, rows[2]["entropy/all/mean"], rows[1]["optim/grad_norm"], rows[0]["perf/throughput"]))
		if shipped < c.maxSteps {
			if err := ship(); err != nil {
				return fail(r.out, 1, "error: %v", err)
			}
		}
	}
	if c.ckpt {
		if code, stop := r.trainerCheckpoint(ctx, c.maxSteps); stop {
			return code
		}
		// At a clean shutdown the orchestrator saves its progress for the last step.
		if err := r.orchestratorCheckpoint(c.maxSteps); err != nil {
			return fail(r.out, 1, "error: %v", err)
		}
	}
	r.logs.log("trainer", "SUCCESS", fmt.Sprintf("Training finished after step %d", c.maxSteps))
	fmt.Fprintln(r.out, loguru("SUCCESS", "RL training finished!"))
	return 0
}

// sigterm is prime-rl's launcher on SIGTERM: it terminates every child (which die at once,
// writing no checkpoint) and exits 1.
func (r *rlRun) sigterm() int {
	fmt.Fprintln(r.out, loguru("WARNING", "Received SIGTERM, terminating all processes..."))
	return 1
}

// resumeStep is the step a resume starts from: the one asked for, else the highest step_N
// folder (prime-rl checks nothing more); its trainer part must exist.
func resumeStep(ckptDir string, want int) (int, error) {
	step := want
	if step == 0 {
		entries, _ := os.ReadDir(ckptDir)
		for _, e := range entries {
			if n, ok := strings.CutPrefix(e.Name(), "step_"); ok {
				if s, err := strconv.Atoi(n); err == nil && s > step {
					step = s
				}
			}
		}
	}
	trainer := filepath.Join(ckptDir, fmt.Sprintf("step_%d", step), "trainer")
	if fi, err := os.Stat(trainer); step == 0 || err != nil || !fi.IsDir() {
		return 0, fmt.Errorf("FileNotFoundError: Checkpoint not found at %s", trainer)
	}
	if _, err := os.Stat(filepath.Join(filepath.Dir(trainer), "orchestrator", "progress.pt")); err != nil {
		return 0, fmt.Errorf("FileNotFoundError: Orchestrator checkpoint not found at %s", filepath.Join(filepath.Dir(trainer), "orchestrator"))
	}
	return step, nil
}

// trainerCheckpoint writes checkpoints/step_N/trainer as torch.distributed.checkpoint does:
// the shard files, then .metadata last. A SIGTERM meanwhile leaves it without .metadata.
func (r *rlRun) trainerCheckpoint(ctx context.Context, step int) (int, bool) {
	dir := filepath.Join(r.dir, "checkpoints", fmt.Sprintf("step_%d", step), "trainer")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(r.out, 1, "error: %v", err), true
	}
	f, err := os.Create(filepath.Join(dir, "__0_0.distcp"))
	if err != nil {
		return fail(r.out, 1, "error: %v", err), true
	}
	buf := make([]byte, 1<<20) // bytes step, step+1, …: 256 of them, then copies of those
	for i := range 256 {
		buf[i] = byte(step + i)
	}
	for n := 256; n < len(buf); n *= 2 {
		copy(buf[n:], buf[:n])
	}
	for left := r.args.em.ckptBytes; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return fail(r.out, 1, "error: %v", err), true
		}
		left -= n
	}
	f.Close()
	if d := r.args.em.ckptTime; d > 0 {
		select {
		case <-ctx.Done():
			return r.sigterm(), true
		case <-time.After(d):
		}
	}
	meta, _ := json.Marshal(map[string]any{"emulated": true, "step": step, "state": []string{"app.model", "app.optimizers", "app.scheduler", "app.progress"}})
	if err := os.WriteFile(filepath.Join(dir, ".metadata"), meta, 0o644); err != nil {
		return fail(r.out, 1, "error: %v", err), true
	}
	r.logs.log("trainer", "INFO", fmt.Sprintf("Saved checkpoint to %s", filepath.Dir(dir)))
	return 0, false
}

// loraTargets are prime-rl's default LoRA target modules (LoRAConfig.target_modules).
var loraTargets = []string{"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj", "experts", "fc1_latent_proj", "fc2_latent_proj"}

// broadcast writes broadcasts/step_N as prime-rl's filesystem weight broadcast does (traces:
// checkpoints-and-process.json, broadcasts): a LoRA run's adapter (adapter_model.safetensors,
// adapter_config.json), else the model's weights (model.safetensors, then its index, written
// last), then the STABLE mark; and deletes step N-2's folder unless N-2 is a checkpoint step.
func (r *rlRun) broadcast(step int) error {
	c := r.cfg
	dir := filepath.Join(r.dir, "broadcasts", fmt.Sprintf("step_%d", step))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	weights := make([]byte, 4096)
	for i := range weights {
		weights[i] = byte(step*31 + i)
	}
	var files [][2]any
	if c.lora {
		rank := getInt(c.tree, "trainer.model.lora.rank", 16)
		alpha, ok := get(c.tree, "trainer.model.lora.alpha")
		if !ok {
			alpha = 32.0
		}
		cfg, _ := json.MarshalIndent(map[string]any{"peft_type": "LORA", "task_type": "CAUSAL_LM", "base_model_name_or_path": c.model,
			"r": rank, "lora_alpha": alpha, "lora_dropout": 0.0, "target_modules": loraTargets, "emulated": true}, "", "  ")
		files = [][2]any{{"adapter_model.safetensors", weights}, {"adapter_config.json", cfg}}
	} else {
		index, _ := json.MarshalIndent(map[string]any{"metadata": map[string]any{"total_size": len(weights)},
			"weight_map": map[string]string{"model.embed_tokens.weight": "model.safetensors"}, "emulated": true}, "", "  ")
		files = [][2]any{{"model.safetensors", weights}, {"model.safetensors.index.json", index}}
	}
	files = append(files, [2]any{"STABLE", []byte{}})
	for _, f := range files {
		if err := os.WriteFile(filepath.Join(dir, f[0].(string)), f[1].([]byte), 0o644); err != nil {
			return err
		}
	}
	if old := step - 2; old > 0 && !(c.interval > 0 && old%c.interval == 0) {
		_ = os.RemoveAll(filepath.Join(r.dir, "broadcasts", fmt.Sprintf("step_%d", old)))
	}
	return nil
}

// orchestratorCheckpoint writes checkpoints/step_N/orchestrator/progress.pt atomically (a
// temporary file renamed into place), as the orchestrator does.
func (r *rlRun) orchestratorCheckpoint(step int) error {
	dir := filepath.Join(r.dir, "checkpoints", fmt.Sprintf("step_%d", step), "orchestrator")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	b, _ := json.Marshal(map[string]any{"emulated": true, "progress": map[string]int{"step": step}})
	tmp := filepath.Join(dir, ".progress.pt.tmp")
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "progress.pt")); err != nil {
		return err
	}
	r.logs.log("orchestrator", "INFO", fmt.Sprintf("Saved orchestrator checkpoint for step %d", step))
	return nil
}

// bindPorts listens on each port the run's processes bind; the first that is taken fails the
// run as "Address already in use" fails the process that meets it.
func bindPorts(ports map[string]int) (map[int]net.Listener, error) {
	names := make([]string, 0, len(ports))
	for n := range ports {
		names = append(names, n)
	}
	sort.Slice(names, func(i, j int) bool { return ports[names[i]] < ports[names[j]] })
	out := map[int]net.Listener{}
	for _, n := range names {
		p := ports[n]
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(p))
		if err != nil {
			closeAll(out)
			return nil, fmt.Errorf("OSError: [Errno 98] Address already in use: port %d, the %s", p, n)
		}
		out[p] = ln
	}
	return out, nil
}

func closeAll(ls map[int]net.Listener) {
	for _, l := range ls {
		l.Close()
	}
}

// serveHealth answers like vLLM's OpenAI server on ln: /health, /v1/models and a canned
// /v1/chat/completions, requiring key when it is set.
func serveHealth(ln net.Listener, model, key string) {
	if ln == nil {
		return
	}
	_ = httpserver.New(openAIHandler(model, key, nil)).Serve(ln)
}

// work is a fixed amount of CPU work: hashing a buffer, the stand-in for a trainer step's
// compute when a benchmark wants to see what else competes for the machine.
type work struct{ buf []byte }

func newWork(mib int) *work {
	if mib <= 0 {
		return nil
	}
	w := &work{buf: make([]byte, mib<<20)}
	for i := range w.buf {
		w.buf[i] = byte(i * 31)
	}
	return w
}

func (w *work) do() { _ = sha256.Sum256(w.buf) }
