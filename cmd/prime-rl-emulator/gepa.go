package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/pelletier/go-toml/v2"
)

// gepaRun is a GEPA config as verifiers' loader reads it (verifiers/legacy/scripts/gepa.py,
// load_gepa_toml_config): [env] or [[env]] with env_id, the run settings at the top, the
// optimization in [gepa]. Keys it does not read are ignored, as there.
type gepaRun struct {
	envID, model, reflection            string
	baseURL, keyVar, endpoints, runDir  string
	save                                bool
	maxCalls, numTrain, numVal, minibat int
}

func loadGEPA(path string) (*gepaRun, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("TOML config file not found: %s", path)
	}
	var raw map[string]any
	if err := toml.Unmarshal(b, &raw); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	var envs []map[string]any
	switch e := raw["env"].(type) {
	case map[string]any:
		envs = []map[string]any{e}
	case []any:
		for _, x := range e {
			m, ok := x.(map[string]any)
			if !ok {
				return nil, errors.New("env entries must be tables")
			}
			envs = append(envs, m)
		}
	default:
		//lint:ignore ST1005 verifiers' message, word for word
		return nil, fmt.Errorf("Config file must contain an [env] or [[env]] table: %s", path)
	}
	g := &gepaRun{model: "openai/gpt-4.1-mini", save: true, maxCalls: 500, numTrain: 100, numVal: 50, minibat: 3}
	for i, e := range envs {
		id, _ := e["env_id"].(string)
		if strings.TrimSpace(id) == "" {
			return nil, fmt.Errorf("env entry %d must contain a non-empty env_id string", i)
		}
		if i == 0 {
			g.envID = id
		}
	}
	str := func(k string, dst *string) {
		if v, ok := raw[k].(string); ok {
			*dst = v
		}
	}
	str("model", &g.model)
	str("reflection_model", &g.reflection)
	str("api_base_url", &g.baseURL)
	str("api_key_var", &g.keyVar)
	str("endpoints_path", &g.endpoints)
	str("run_dir", &g.runDir)
	if v, ok := raw["save_results"]; ok {
		s, ok := v.(bool)
		if !ok {
			//lint:ignore ST1005 verifiers' message, word for word
			return nil, errors.New("'save_results' must be a boolean.")
		}
		g.save = s
	}
	if t, ok := raw["gepa"]; ok {
		gt, ok := t.(map[string]any)
		if !ok {
			return nil, errors.New("[gepa] must be a table")
		}
		num := func(k string, dst *int) {
			if v, ok := gt[k].(int64); ok {
				*dst = int(v)
			}
		}
		num("max_calls", &g.maxCalls)
		num("num_train", &g.numTrain)
		num("num_val", &g.numVal)
		num("minibatch_size", &g.minibat)
	}
	dir := filepath.Dir(path)
	for _, p := range []*string{&g.runDir, &g.endpoints} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
	if g.reflection == "" {
		g.reflection = g.model
	}
	return g, nil
}

// reflectionClient finds the reflection model in the endpoint registry ([[endpoint]] with
// endpoint_id, model, url, key), else calls it where the model is.
func (g *gepaRun) reflectionClient() *modelClient {
	if g.endpoints != "" {
		var reg struct {
			Endpoint []struct {
				ID    string `toml:"endpoint_id"`
				Model string `toml:"model"`
				URL   string `toml:"url"`
				Key   string `toml:"key"`
			} `toml:"endpoint"`
		}
		if b, err := os.ReadFile(g.endpoints); err == nil && toml.Unmarshal(b, &reg) == nil {
			for _, e := range reg.Endpoint {
				if e.ID == g.reflection {
					return newModelClient(e.URL, e.Key, e.Model)
				}
			}
		}
	}
	return newModelClient(g.baseURL, g.keyVar, g.reflection)
}

// runGEPA emulates `prime gepa run CONFIG` (verifiers.cli.commands.gepa): the loader, the
// model calls (rollouts with the model, proposals with the reflection model), then the
// outputs GEPA saves at the end (verifiers/legacy/gepa/gepa_utils.py, save_gepa_results).
func runGEPA(ctx context.Context, args []string, out io.Writer) int {
	em := emulation{stepTime: 100 * time.Millisecond}
	rest, err := parseCommon(args, &em)
	if err != nil || len(rest) != 1 {
		return fail(out, 2, "error: usage: gepa CONFIG.toml")
	}
	fmt.Fprintln(out, banner)
	file := rest[0]
	if len(em.check) > 0 {
		errs, err := upstreamCheck(ctx, em.check, "gepa", file)
		if err != nil {
			return fail(out, 1, "error: %v", err)
		}
		if len(errs) > 0 {
			return fail(out, 1, "%s", strings.Join(errs, "; "))
		}
	}
	g, err := loadGEPA(file)
	if err != nil {
		return fail(out, 1, "%v", err)
	}
	if !installed(em.venv, g.envID) {
		return fail(out, 1, "ValueError: Could not import '%s' environment. Ensure the package for the '%s' environment is installed.", g.envID, g.envID)
	}
	model := newModelClient(g.baseURL, g.keyVar, g.model)
	refl := g.reflectionClient()
	for _, c := range []*modelClient{model, refl} {
		if err := c.check(ctx); err != nil {
			return fail(out, 1, "%v", err)
		}
	}
	h := fnv.New64a()
	h.Write([]byte(g.envID + g.model))
	rng := rand.New(rand.NewPCG(h.Sum64(), 7))
	rounds := max(1, min(10, g.maxCalls/100))
	type cand struct {
		idx    int
		score  float64
		prompt string
		calls  int
	}
	cands := []cand{{0, 0.2 + 0.2*rng.Float64(), "You are a helpful assistant.", 0}}
	tick := time.NewTicker(em.stepTime)
	defer tick.Stop()
	for i := 1; i <= rounds; i++ {
		select {
		case <-ctx.Done():
			return fail(out, 143, "terminated")
		case <-tick.C:
		}
		if err := model.complete(ctx, "rollout"); err != nil {
			return fail(out, 1, "%v", err)
		}
		if err := refl.complete(ctx, "reflect"); err != nil {
			return fail(out, 1, "%v", err)
		}
		prev := cands[len(cands)-1].score
		s := math.Min(1, prev+0.08*rng.Float64()-0.02)
		p := fmt.Sprintf("You are a careful solver for %s. Think step by step, check your answer, and reply in the requested format. (candidate %d)", g.envID, i)
		cands = append(cands, cand{i, s, p, i * g.maxCalls / rounds})
		fmt.Fprintf(out, "iteration %d/%d | calls %d/%d | candidate score %.3f\n", i, rounds, i*g.maxCalls/rounds, g.maxCalls, s)
	}
	if !g.save {
		return 0
	}
	dir := g.runDir
	if dir == "" {
		dir = filepath.Join("outputs", "gepa", g.envID+"--"+strings.ReplaceAll(g.model, "/", "--"), "emulated")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fail(out, 1, "error: %v", err)
	}
	best := 0
	for i, c := range cands {
		if c.score > cands[best].score {
			best = i
		}
	}
	sha := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
	// Each candidate's score on each validation row (GEPA's val_subscores), around its mean;
	// the frontier is, per row, the best any candidate reached and who reached it.
	rows := min(g.numVal, 10)
	sub := make([][]float64, len(cands))
	for i, c := range cands {
		sub[i] = make([]float64, rows)
		for row := range rows {
			sub[i][row] = math.Round(math.Max(0, math.Min(1, c.score+0.3*(rng.Float64()-0.5)))*4) / 4 // 0, .25, .5, .75, 1
		}
	}
	var results, frontier strings.Builder
	for i, c := range cands {
		subs := map[string]float64{}
		for row, v := range sub[i] {
			subs[strconv.Itoa(row)] = v
		}
		rec := map[string]any{"example_id": c.idx, "reward": c.score, "score": c.score, "info": map[string]any{
			"schema_version": "verifiers.gepa.v1", "eval_kind": "gepa", "sample_type": "gepa_candidate", "optimization_target": "system_prompt",
			"candidate_idx": c.idx, "is_best": c.idx == cands[best].idx, "system_prompt": c.prompt, "system_prompt_sha256": sha(c.prompt),
			"val_subscores": subs, "num_val_examples": rows, "discovery_metric_calls": c.calls}}
		b, _ := json.Marshal(rec)
		results.Write(append(b, '\n'))
	}
	for row := range rows {
		top := 0.0
		for i := range cands {
			top = math.Max(top, sub[i][row])
		}
		var who []map[string]any
		for i, c := range cands {
			if sub[i][row] == top {
				who = append(who, map[string]any{"candidate_idx": c.idx, "system_prompt_sha256": sha(c.prompt), "score": top})
			}
		}
		b, _ := json.Marshal(map[string]any{"schema_version": "verifiers.gepa.v1", "valset_row": row, "best_score": top,
			"num_best_candidates": len(who), "best_candidates": who})
		frontier.Write(append(b, '\n'))
	}
	meta, _ := json.MarshalIndent(map[string]any{"schema_version": "verifiers.gepa.v1", "eval_kind": "gepa", "framework": "verifiers",
		"optimizer": "gepa", "optimization_target": "system_prompt", "env_id": g.envID, "model": g.model, "reflection_model": g.reflection,
		"num_candidates": len(cands), "best_idx": cands[best].idx, "best_score": cands[best].score, "total_metric_calls": g.maxCalls,
		"initial_prompt_sha256": sha(cands[0].prompt), "best_prompt_sha256": sha(cands[best].prompt), "system_prompt_path": "system_prompt.txt",
		"results_path": "results.jsonl", "completed_at": time.Now().UTC().Format(time.RFC3339), "emulated": true}, "", "  ")
	err = errors.Join(
		os.WriteFile(filepath.Join(dir, "gepa.log"), []byte(banner+"\n"), 0o644),
		os.WriteFile(filepath.Join(dir, "results.jsonl"), []byte(results.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "pareto_frontier.jsonl"), []byte(frontier.String()), 0o644),
		os.WriteFile(filepath.Join(dir, "system_prompt.txt"), []byte(cands[best].prompt), 0o644),
		os.WriteFile(filepath.Join(dir, "metadata.json"), meta, 0o644),
	)
	if err != nil {
		return fail(out, 1, "error: %v", err)
	}
	fmt.Fprintf(out, "done: best score %.3f (candidate %d); results saved to %s\n", cands[best].score, cands[best].idx, dir)
	return 0
}
