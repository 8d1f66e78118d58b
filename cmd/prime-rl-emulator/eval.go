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
	"strings"
	"time"
)

// runEval emulates `prime eval run ENV` as the verifiers eval command it hands over to
// (verifiers.cli.commands.eval): flags -m -n -r -b -k -s -o -a -S; the model is called at
// -b with the key in $(-k), Prime's inference with PRIME_API_KEY when neither is given; with
// -s the rollouts and metadata go to <-o>/evals/<env>--<model>/<id>/ (results.jsonl,
// metadata.json).
func runEval(ctx context.Context, args []string, out io.Writer) int {
	em := emulation{stepTime: 20 * time.Millisecond}
	rest, err := parseCommon(args, &em)
	if err != nil || len(rest) == 0 || strings.HasPrefix(rest[0], "-") {
		return fail(out, 2, "error: usage: eval ENV -m MODEL [-n N] [-r R] [-b URL] [-k VAR] [-s] [-o DIR] [-a JSON] [-S JSON]")
	}
	env := rest[0]
	fs := flag.NewFlagSet("eval", flag.ContinueOnError)
	fs.SetOutput(out)
	model := fs.String("m", "openai/gpt-4.1-mini", "model")
	n := fs.Int("n", 5, "examples")
	r := fs.Int("r", 3, "rollouts per example")
	base := fs.String("b", "", "API base URL")
	keyVar := fs.String("k", "", "API key variable")
	save := fs.Bool("s", false, "save results")
	outDir := fs.String("o", "", "output folder")
	envArgs := fs.String("a", "", "environment arguments (JSON)")
	sampling := fs.String("S", "", "sampling arguments (JSON)")
	if err := fs.Parse(rest[1:]); err != nil {
		return 2
	}
	fmt.Fprintln(out, banner)
	for name, js := range map[string]string{"-a": *envArgs, "-S": *sampling} {
		if js != "" && !json.Valid([]byte(js)) {
			return fail(out, 2, "error: argument %s: invalid loads value: %s", name, js)
		}
	}
	if !installed(em.venv, env) {
		return fail(out, 1, "ValueError: Could not import '%s' environment. Ensure the package for the '%s' environment is installed.", env, env)
	}
	// No check before the rollouts: a model call that fails is stored on its rollout as its
	// error and the eval goes on (verifiers' ModelError); only a refused key ends the run.
	client := newModelClient(*base, *keyVar, *model)
	h := fnv.New64a()
	h.Write([]byte(env + *model))
	rng := rand.New(rand.NewPCG(h.Sum64(), 7))
	mean := 0.2 + 0.5*rng.Float64()
	var results strings.Builder
	total, count, errs := 0.0, 0, 0
	tick := time.NewTicker(em.stepTime)
	defer tick.Stop()
	examples := max(*n, 1)
	for ex := range examples {
		select {
		case <-ctx.Done():
			return fail(out, 143, "terminated")
		case <-tick.C:
		}
		for k := range *r {
			reward := math.Round(math.Min(1, math.Max(0, mean+0.3*(rng.Float64()-0.5)))*1e3) / 1e3
			row := map[string]any{"example_id": ex, "rollout": k, "prompt": []any{}, "completion": []any{},
				"timing": map[string]float64{"total": 0.1}, "is_completed": true, "is_truncated": false}
			if err := client.complete(ctx, fmt.Sprintf("example %d", ex)); err != nil {
				var auth errAuth
				if errors.As(err, &auth) {
					return fail(out, 1, "%v", err)
				}
				reward, errs = 0, errs+1
				row["error"] = "ModelError: " + err.Error()
			}
			row["reward"], row["metrics"] = reward, map[string]float64{"correct": reward}
			total += reward
			count++
			b, _ := json.Marshal(row)
			results.Write(append(b, '\n'))
		}
		fmt.Fprintf(out, "example %d/%d scored\n", ex+1, examples)
	}
	avg := total / float64(max(count, 1))
	fmt.Fprintf(out, "reward: avg %.3f over %d rollouts\n", avg, count)
	if !*save {
		return 0
	}
	var id [4]byte
	for i := range id {
		id[i] = byte(rng.IntN(256))
	}
	dir := filepath.Join(*outDir, "evals", env+"--"+strings.ReplaceAll(*model, "/", "--"), hex.EncodeToString(id[:]))
	if *outDir == "" {
		dir = filepath.Join("outputs", "evals", env+"--"+strings.ReplaceAll(*model, "/", "--"), hex.EncodeToString(id[:]))
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(out, 1, "error: %v", err)
	}
	meta, _ := json.MarshalIndent(map[string]any{"env_id": env, "env_args": map[string]any{}, "model": *model, "base_url": client.baseURL,
		"num_examples": *n, "rollouts_per_example": *r, "sampling_args": map[string]any{}, "date": time.Now().UTC().Format("2006-01-02"),
		"time": float64(count) * 0.1, "avg_reward": math.Round(avg*1e4) / 1e4, "avg_metrics": map[string]float64{"correct": math.Round(avg*1e4) / 1e4},
		"avg_error": float64(errs) / float64(max(count, 1)), "pass_at_k": map[string]float64{}, "usage": map[string]int{}, "state_columns": []string{}, "path_to_save": dir,
		"emulated": true}, "", "  ")
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, "results.jsonl"), []byte(results.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "metadata.json"), meta, 0o644),
	)
	if err != nil {
		return fail(out, 1, "error: %v", err)
	}
	fmt.Fprintf(out, "results saved to %s\n", dir)
	return 0
}
