package main

import (
	"context"
	"encoding/hex"
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
	"regexp"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// faults are the --emulate.* flags the `prime` subcommands share.
type faults struct {
	stepTime    time.Duration
	crashAtStep int
}

func (f *faults) register(fs *flag.FlagSet, stepTime time.Duration) {
	fs.DurationVar(&f.stepTime, "emulate.step-time", stepTime, "emulated time one iteration takes")
	fs.IntVar(&f.crashAtStep, "emulate.crash-at-step", 0, "exit with an error at this iteration (0: never)")
}

// steps runs n emulated iterations, calling each one's work, and stops early on a signal
// (status 143, like a program that shut down on SIGTERM) or an emulated crash.
func (f *faults) steps(ctx context.Context, out io.Writer, n int, each func(i int)) int {
	tick := time.NewTicker(f.stepTime)
	defer tick.Stop()
	for i := 1; i <= n; i++ {
		select {
		case <-ctx.Done():
			fmt.Fprintln(out, "terminated")
			return 143
		case <-tick.C:
		}
		if f.crashAtStep == i {
			fmt.Fprintf(out, "ERROR RuntimeError: emulated crash at iteration %d\n", i)
			return 1
		}
		each(i)
	}
	return 0
}

func seeded(s string) *rand.Rand {
	h := fnv.New64a()
	h.Write([]byte(s))
	return rand.New(rand.NewPCG(h.Sum64(), 7))
}

// gepaConfig is `prime gepa run`'s config file (seed 004, "GEPA Configuration Files").
type gepaConfig struct {
	EnvID           string         `toml:"env_id"`
	EnvArgs         map[string]any `toml:"env_args"`
	Model           string         `toml:"model"`
	ReflectionModel string         `toml:"reflection_model"`
	MaxCalls        int            `toml:"max_calls"`
	NumTrain        int            `toml:"num_train"`
	NumVal          int            `toml:"num_val"`
	MinibatchSize   int            `toml:"minibatch_size"`
	PerfectScore    *float64       `toml:"perfect_score"`
	StateColumns    []string       `toml:"state_columns"`
}

// runGEPA emulates `prime gepa run CONFIG`: a few rounds of proposing prompts, then the
// outputs under environments/<env>/outputs/gepa/.
func runGEPA(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("gepa run", flag.ContinueOnError)
	var f faults
	f.register(fs, 200*time.Millisecond)
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(out, "error: usage: gepa run CONFIG.toml")
		return 2
	}
	file := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fmt.Fprintln(out, banner)
	b, err := os.ReadFile(file)
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 2
	}
	var c gepaConfig
	dec := toml.NewDecoder(strings.NewReader(string(b)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&c); err != nil {
		fmt.Fprintf(out, "error: %s: %v\n", file, err)
		return 2
	}
	if c.EnvID == "" || c.Model == "" || c.MaxCalls <= 0 {
		fmt.Fprintln(out, "error: env_id, model and max_calls are required")
		return 2
	}
	rng := seeded(c.EnvID + c.Model)
	rounds := max(1, min(10, c.MaxCalls/100))
	best := 0.2 + 0.2*rng.Float64()
	prompt := "You are a helpful assistant."
	code := f.steps(ctx, out, rounds, func(i int) {
		best = math.Min(1, best+0.05+0.05*rng.Float64())
		prompt = fmt.Sprintf("You are a careful solver for %s. Think step by step, check your answer, and reply in the requested format. (round %d)", envName(c.EnvID), i)
		fmt.Fprintf(out, "iteration %d/%d | calls %d/%d | best validation score %.3f\n", i, rounds, i*c.MaxCalls/rounds, c.MaxCalls, best)
	})
	if code != 0 {
		return code
	}
	dir := filepath.Join("environments", envName(c.EnvID), "outputs", "gepa")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	var frontier strings.Builder
	for i := range min(c.NumVal, 20) {
		fmt.Fprintf(&frontier, `{"example_id":%d,"prompt_index":%d,"score":%.3f}`+"\n", i, rng.IntN(rounds)+1, math.Min(1, best+0.1*rng.Float64()))
	}
	meta, _ := json.MarshalIndent(map[string]any{
		"emulated": true, "env_id": c.EnvID, "model": c.Model, "reflection_model": c.ReflectionModel,
		"max_calls": c.MaxCalls, "num_train": c.NumTrain, "num_val": c.NumVal, "rounds": rounds, "best_score": round(best),
	}, "", "  ")
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, "system_prompt.txt"), []byte(prompt+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "pareto_frontier.jsonl"), []byte(frontier.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "metadata.json"), append(meta, '\n'), 0o644),
	)
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	fmt.Fprintf(out, "done: best validation score %.3f; results saved to %s\n", best, dir)
	return 0
}

// runEval emulates `prime eval run ENV -m MODEL -n N -r R`: one scored rollout a line in
// results.jsonl and a summary in metadata.json.
func runEval(ctx context.Context, args []string, out io.Writer) int {
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(out, "error: usage: eval run ENV -m MODEL [-n N] [-r R] [-a JSON] [-S JSON] [-s]")
		return 2
	}
	env := args[0]
	fs := flag.NewFlagSet("eval run", flag.ContinueOnError)
	model := fs.String("m", "", "model")
	n := fs.Int("n", 5, "examples")
	r := fs.Int("r", 3, "rollouts per example")
	envArgs := fs.String("a", "", "environment arguments (JSON)")
	sampling := fs.String("S", "", "sampling arguments (JSON)")
	fs.Bool("s", false, "save results")
	var f faults
	f.register(fs, 20*time.Millisecond)
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	fmt.Fprintln(out, banner)
	if *model == "" {
		fmt.Fprintln(out, "error: -m MODEL is required")
		return 2
	}
	for name, js := range map[string]string{"-a": *envArgs, "-S": *sampling} {
		if js != "" && !json.Valid([]byte(js)) {
			fmt.Fprintf(out, "error: %s is not JSON: %s\n", name, js)
			return 2
		}
	}
	rng := seeded(env + *model)
	base := 0.2 + 0.5*rng.Float64()
	var results strings.Builder
	total, count := 0.0, 0
	code := f.steps(ctx, out, max(*n, 1), func(ex int) {
		for k := range *r {
			reward := math.Round(math.Min(1, math.Max(0, base+0.3*(rng.Float64()-0.5)))*1e3) / 1e3
			total += reward
			count++
			fmt.Fprintf(&results, `{"example_id":%d,"rollout":%d,"reward":%g}`+"\n", ex-1, k, reward)
		}
		fmt.Fprintf(out, "example %d/%d scored\n", ex, *n)
	})
	if code != 0 {
		return code
	}
	var id [4]byte
	for i := range id {
		id[i] = byte(rng.IntN(256))
	}
	dir := filepath.Join("outputs", "evals", envName(env)+"--"+strings.ReplaceAll(*model, "/", "--"), hex.EncodeToString(id[:]))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	avg := total / float64(max(count, 1))
	meta, _ := json.MarshalIndent(map[string]any{
		"emulated": true, "env_id": env, "model": *model, "num_examples": *n, "rollouts_per_example": *r, "avg_reward": round(avg),
	}, "", "  ")
	err := errors.Join(
		os.WriteFile(filepath.Join(dir, "results.jsonl"), []byte(results.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "metadata.json"), append(meta, '\n'), 0o644),
	)
	if err != nil {
		fmt.Fprintln(out, "error:", err)
		return 1
	}
	fmt.Fprintf(out, "reward: avg %.3f over %d rollouts; results saved to %s\n", avg, count, dir)
	return 0
}

var envIDPattern = regexp.MustCompile(`^([a-z0-9][a-z0-9._-]*/)?[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9._+-]+)?$`)

// runInstall emulates `prime env install ID`.
func runInstall(ctx context.Context, args []string, out io.Writer) int {
	fs := flag.NewFlagSet("env install", flag.ContinueOnError)
	wait := fs.Duration("emulate.install-time", 0, "emulated time an install takes")
	if len(args) == 0 {
		fmt.Fprintln(out, "error: usage: env install OWNER/NAME[@VERSION]")
		return 2
	}
	id := args[0]
	if err := fs.Parse(args[1:]); err != nil {
		return 2
	}
	if !envIDPattern.MatchString(strings.ToLower(id)) {
		fmt.Fprintf(out, "error: %q is not an environment id\n", id)
		return 2
	}
	select {
	case <-ctx.Done():
		return 143
	case <-time.After(*wait):
	}
	fmt.Fprintf(out, "Installed %s (EMULATED: nothing was downloaded)\n", id)
	return 0
}

// envName is an environment id's name part: "owner/name@1.0" → "name".
func envName(id string) string {
	id, _, _ = strings.Cut(id, "@")
	if i := strings.LastIndex(id, "/"); i >= 0 {
		id = id[i+1:]
	}
	return id
}
