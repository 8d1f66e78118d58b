package main

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// banner opens the output and every log, so nobody mistakes this for a real run.
const banner = "EMULATED prime-rl: hostedtrain's stand-in for prime-rl and the prime CLI; no GPU work is done and no model is called"

type config struct {
	configFiles []string
	outputDir   string
	runName     string
	resume      bool
	maxSteps    int // from --max-steps; 0: from the config

	stepTime    time.Duration
	stepWork    int // MiB hashed a step: CPU work that a concurrent upload can slow
	crashAtStep int
	ckptBytes   int64
}

func parseArgs(args []string) (config, error) {
	var c config
	// prime-rl takes `@ file` (or `@file`) before its flags; take those off first.
	var rest []string
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "@":
			if i+1 >= len(args) {
				return c, errors.New("@ needs a config file after it")
			}
			c.configFiles = append(c.configFiles, args[i+1])
			i++
		case strings.HasPrefix(a, "@"):
			c.configFiles = append(c.configFiles, a[1:])
		default:
			rest = append(rest, a)
		}
	}
	fs := flag.NewFlagSet("rl", flag.ContinueOnError)
	fs.StringVar(&c.outputDir, "output-dir", "outputs", "where runs are written")
	fs.StringVar(&c.runName, "run.name", "run", "the run's name (its folder under --output-dir)")
	fs.BoolVar(&c.resume, "resume", false, "continue from the newest checkpoint of the run")
	fs.IntVar(&c.maxSteps, "max-steps", 0, "override max_steps")
	fs.DurationVar(&c.stepTime, "emulate.step-time", 200*time.Millisecond, "emulated time a training step takes")
	fs.IntVar(&c.stepWork, "emulate.step-work", 0, "MiB to hash each step instead of sleeping: a step that needs the CPU")
	fs.IntVar(&c.crashAtStep, "emulate.crash-at-step", 0, "exit with an error at this step (0: never)")
	fs.Int64Var(&c.ckptBytes, "emulate.ckpt-bytes", 64<<10, "bytes of emulated weights in each checkpoint")
	if err := fs.Parse(rest); err != nil {
		return c, err
	}
	if len(c.configFiles) == 0 {
		return c, errors.New("no config: usage: prime-rl-emulator @ rl.toml --output-dir DIR --run.name NAME")
	}
	return c, nil
}

// rlConfig is the part of prime-rl's rl.toml the emulator reads.
type rlConfig struct {
	MaxSteps int `toml:"max_steps"`
	Model    struct {
		Name string `toml:"name"`
	} `toml:"model"`
	Orchestrator struct {
		BatchSize int `toml:"batch_size"`
		GroupSize int `toml:"group_size"`
		Train     struct {
			Source []struct {
				Name string `toml:"name"`
			} `toml:"source"`
		} `toml:"train"`
	} `toml:"orchestrator"`
	Ckpt struct {
		Interval int `toml:"interval"`
		KeepLast int `toml:"keep_last"`
	} `toml:"ckpt"`
}

// loadConfig composes the files left to right, as prime-rl does: later files win key by key.
func loadConfig(files []string) (rlConfig, error) {
	merged := map[string]any{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return rlConfig{}, err
		}
		var m map[string]any
		if err := toml.Unmarshal(b, &m); err != nil {
			return rlConfig{}, fmt.Errorf("%s: %w", f, err)
		}
		merge(merged, m)
	}
	b, err := toml.Marshal(merged)
	if err != nil {
		return rlConfig{}, err
	}
	var c rlConfig
	if err := toml.Unmarshal(b, &c); err != nil {
		return rlConfig{}, err
	}
	return c, nil
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

type runner struct {
	cfg  config
	rl   rlConfig
	dir  string // output-dir/run-name
	logs map[string]*os.File
	out  io.Writer
	rng  *rand.Rand
	bias float64
}

func run(ctx context.Context, cfg config, out io.Writer) int {
	fmt.Fprintln(out, banner)
	rl, err := loadConfig(cfg.configFiles)
	if err != nil {
		fmt.Fprintln(out, "error: config:", err)
		return 2
	}
	if cfg.maxSteps > 0 {
		rl.MaxSteps = cfg.maxSteps
	}
	if rl.MaxSteps <= 0 {
		fmt.Fprintln(out, "error: max_steps must be set and positive")
		return 2
	}
	r := &runner{cfg: cfg, rl: rl, dir: filepath.Join(cfg.outputDir, cfg.runName), out: out}
	if err := r.run(ctx); err != nil {
		if errors.Is(err, context.Canceled) {
			r.logAt("trainer", "WARNING", "received SIGTERM: shutting down")
			fmt.Fprintln(out, "terminated")
			return 143
		}
		r.logAt("trainer", "ERROR", err.Error())
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	return 0
}

func (r *runner) run(ctx context.Context) error {
	first := 1
	if r.cfg.resume {
		if s := newestCheckpoint(filepath.Join(r.dir, "checkpoints")); s > 0 {
			first = s + 1
		}
	}
	if err := r.openLogs(); err != nil {
		return err
	}
	defer r.closeLogs()

	seed := fnv.New64a()
	seed.Write([]byte(r.cfg.runName))
	r.rng = rand.New(rand.NewPCG(seed.Sum64(), 42))
	r.bias = 0.1 + 0.2*r.rng.Float64()
	r.log("trainer", fmt.Sprintf("model=%s max_steps=%d batch_size=%d group_size=%d start_step=%d",
		r.rl.Model.Name, r.rl.MaxSteps, r.rl.Orchestrator.BatchSize, r.rl.Orchestrator.GroupSize, first))
	r.log("inference", "vLLM server ready (emulated)")

	metrics, err := os.OpenFile(filepath.Join(r.dir, "metrics.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer metrics.Close()

	tick := time.NewTicker(r.cfg.stepTime)
	defer tick.Stop()
	work := newWork(r.cfg.stepWork)
	for step := first; step <= r.rl.MaxSteps; step++ {
		began := time.Now()
		if work != nil {
			if err := ctx.Err(); err != nil {
				return err
			}
			work.do()
		} else {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-tick.C:
			}
		}
		if r.cfg.crashAtStep > 0 && step == r.cfg.crashAtStep {
			return fmt.Errorf("RuntimeError: CUDA error: an illegal memory access was encountered (emulated crash at step %d)", step)
		}
		m := r.metrics(step)
		if work != nil {
			m["time/step"] = time.Since(began).Seconds()
		}
		line, _ := json.Marshal(m)
		if _, err := metrics.Write(append(line, '\n')); err != nil {
			return err
		}
		r.log("orchestrator", fmt.Sprintf("step %d | reward %.4f | seq_len %.0f", step, m["reward/all/mean"], m["seq_len/mean"]))
		r.log("trainer", fmt.Sprintf("step %d | loss %.4f | grad_norm %.4f | entropy %.4f", step, m["loss/mean"], m["optim/grad_norm"], m["entropy/mean"]))
		for _, s := range r.rl.Orchestrator.Train.Source {
			r.log(envLog(s.Name), fmt.Sprintf("step %d | %d rollouts scored", step, max(1, r.rl.Orchestrator.BatchSize)))
		}
		if r.rl.Ckpt.Interval > 0 && step%r.rl.Ckpt.Interval == 0 {
			if err := r.checkpoint(step); err != nil {
				return err
			}
		}
	}
	r.log("trainer", fmt.Sprintf("training finished after step %d", r.rl.MaxSteps))
	fmt.Fprintln(r.out, "done")
	return nil
}

// metrics makes a plausible step: reward climbs towards a plateau, entropy falls.
func (r *runner) metrics(step int) map[string]any {
	x := float64(step) / float64(max(r.rl.MaxSteps, 1))
	noise := func(s float64) float64 { return (r.rng.Float64() - 0.5) * s }
	reward := r.bias + (0.85-r.bias)*(1-math.Exp(-3*x)) + noise(0.04)
	return map[string]any{
		"step":             step,
		"time":             float64(time.Now().UnixMilli()) / 1000,
		"reward/all/mean":  round(reward),
		"reward/all/std":   round(0.25 - 0.1*x + noise(0.02)),
		"entropy/mean":     round(1.2 - 0.6*x + noise(0.03)),
		"mismatch_kl/mean": round(0.002 + noise(0.001)),
		"loss/mean":        round(0.05 - 0.03*x + noise(0.01)),
		"optim/grad_norm":  round(0.4 - 0.2*x + noise(0.05)),
		"perf/throughput":  round(5000 + noise(400)),
		"seq_len/mean":     round(400 + 200*x + noise(30)),
	}
}

func round(f float64) float64 { return math.Round(f*1e4) / 1e4 }

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

// checkpoint writes step_N/{trainer,orchestrator}; like prime-rl it writes in place, so the
// folder is complete only once the next one exists or the run has ended.
func (r *runner) checkpoint(step int) error {
	base := filepath.Join(r.dir, "checkpoints", fmt.Sprintf("step_%d", step))
	for _, d := range []string{"trainer", "orchestrator"} {
		if err := os.MkdirAll(filepath.Join(base, d), 0o755); err != nil {
			return err
		}
	}
	f, err := os.Create(filepath.Join(base, "trainer", "model.safetensors"))
	if err != nil {
		return err
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(step + i)
	}
	for left := r.cfg.ckptBytes; left > 0; {
		n := min(left, int64(len(buf)))
		if _, err := f.Write(buf[:n]); err != nil {
			f.Close()
			return err
		}
		left -= n
	}
	if err := f.Close(); err != nil {
		return err
	}
	prog, _ := json.Marshal(map[string]any{"step": step, "emulated": true})
	if err := os.WriteFile(filepath.Join(base, "orchestrator", "progress.json"), prog, 0o644); err != nil {
		return err
	}
	r.log("trainer", fmt.Sprintf("saved checkpoint step_%d", step))
	if k := r.rl.Ckpt.KeepLast; k > 0 {
		steps := checkpointSteps(filepath.Join(r.dir, "checkpoints"))
		for len(steps) > k {
			_ = os.RemoveAll(filepath.Join(r.dir, "checkpoints", fmt.Sprintf("step_%d", steps[0])))
			steps = steps[1:]
		}
	}
	return nil
}

func checkpointSteps(dir string) []int {
	entries, _ := os.ReadDir(dir)
	var steps []int
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "step_"); ok && e.IsDir() {
			if s, err := strconv.Atoi(n); err == nil {
				steps = append(steps, s)
			}
		}
	}
	sort.Ints(steps)
	return steps
}

func newestCheckpoint(dir string) int {
	s := checkpointSteps(dir)
	if len(s) == 0 {
		return 0
	}
	return s[len(s)-1]
}

// openLogs starts logs/attempt_N (N one above the last) and points logs/latest at it.
func (r *runner) openLogs() error {
	logs := filepath.Join(r.dir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	attempt := 1
	entries, _ := os.ReadDir(logs)
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "attempt_"); ok {
			if a, err := strconv.Atoi(n); err == nil && a >= attempt {
				attempt = a + 1
			}
		}
	}
	name := fmt.Sprintf("attempt_%d", attempt)
	if err := os.MkdirAll(filepath.Join(logs, name, "envs"), 0o755); err != nil {
		return err
	}
	latest := filepath.Join(logs, "latest")
	_ = os.Remove(latest)
	if err := os.Symlink(name, latest); err != nil {
		return err
	}
	r.logs = map[string]*os.File{}
	comps := []string{"trainer", "orchestrator", "inference"}
	for _, s := range r.rl.Orchestrator.Train.Source {
		comps = append(comps, envLog(s.Name))
	}
	for _, c := range comps {
		f, err := os.OpenFile(filepath.Join(logs, name, c+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		r.logs[c] = f
		fmt.Fprintf(f, "%s INFO %s\n", time.Now().UTC().Format(time.RFC3339), banner)
	}
	return nil
}

func (r *runner) log(component, msg string) { r.logAt(component, "INFO", msg) }

func (r *runner) logAt(component, level, msg string) {
	if f := r.logs[component]; f != nil {
		fmt.Fprintf(f, "%s %s %s\n", time.Now().UTC().Format(time.RFC3339Nano), level, msg)
	}
}

// envLog is the log component of an environment; ids like owner/name become owner_name.
func envLog(source string) string { return "envs/" + strings.ReplaceAll(source, "/", "_") }

func (r *runner) closeLogs() {
	for _, f := range r.logs {
		f.Close()
	}
}
