package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// The orchestrator's file monitor (on by default) keeps every episode it scores, one
// verifiers Trace record per line (verifiers/v1/trace.py, serialized with model_dump(mode=
// "json") less the raw tensor fields), under <run_dir>/rollouts/step_<N>/<split>/<subset>/
// traces.jsonl: `all` grows as rollouts finish, `effective` holds the rollouts that made the
// shipped batch (upstream kit: traces/metrics-keys.json "episodes", traces/checkpoints-and-
// process.json "rollouts_dir").

// cleanRollouts is the launcher on start: a fresh run deletes every rollouts/step_M folder, a
// resumed one those after the step it resumes from.
func cleanRollouts(runDir string, resumed int) {
	entries, _ := os.ReadDir(filepath.Join(runDir, "rollouts"))
	for _, e := range entries {
		n, err := strconv.Atoi(strings.TrimPrefix(e.Name(), "step_"))
		if err != nil || !strings.HasPrefix(e.Name(), "step_") || n <= resumed {
			continue
		}
		_ = os.RemoveAll(filepath.Join(runDir, "rollouts", e.Name()))
	}
}

// writeEpisodes writes the traces of one shipped batch (split "train") or one evaluation
// ("eval") of step: n episodes in groups of groupSize (the rollouts of one example), scored
// around reward. `all` holds one group more than `effective`: one a filter dropped.
func (r *rlRun) writeEpisodes(step int, split string, n, groupSize int, reward float64, rng *rand.Rand) error {
	var all, effective bytes.Buffer
	groups := max(n/groupSize, 1)
	for g := 0; g < groups+1; g++ {
		task := emulatedTask(step, g, rng)
		kept := g < groups
		for i := 0; i < groupSize; i++ {
			score := 0.0
			if rng.Float64() < reward {
				score = 1
			}
			if !kept {
				score = 0 // a group with no spread is the one a filter drops
			}
			line, err := json.Marshal(emulatedTrace(task, score, rng))
			if err != nil {
				return err
			}
			all.Write(append(line, '\n'))
			if kept {
				effective.Write(append(line, '\n'))
			}
		}
	}
	for subset, b := range map[string]*bytes.Buffer{"all": &all, "effective": &effective} {
		dir := filepath.Join(r.dir, "rollouts", fmt.Sprintf("step_%d", step), split, subset)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		f, err := os.OpenFile(filepath.Join(dir, "traces.jsonl"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(b.Bytes())
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return err
		}
	}
	return nil
}

type task struct {
	idx              int
	question, answer string
}

func emulatedTask(step, group int, rng *rand.Rand) task {
	a, b := rng.IntN(90)+10, rng.IntN(90)+10
	return task{
		idx:      group,
		question: fmt.Sprintf("Step %d, example %d: a crate holds %d apples and another %d. How many apples are there in all?", step, group, a, b),
		answer:   strconv.Itoa(a + b),
	}
}

// emulatedTrace is one episode as verifiers serializes a Trace: a system and a user node, the
// sampled assistant node, the model call, and the named rewards.
func emulatedTrace(t task, score float64, rng *rand.Rand) map[string]any {
	answer := t.answer
	if score == 0 {
		n, _ := strconv.Atoi(t.answer)
		answer = strconv.Itoa(n + 1 + rng.IntN(9))
	}
	completion := fmt.Sprintf("Adding the two crates gives %s apples.\n\n\\boxed{%s}", answer, answer)
	// verifiers' TaskData with the taskset's own fields after it (WireTaskData)
	data := map[string]any{"idx": t.idx, "name": nil, "description": nil, "prompt": t.question, "system_prompt": nil,
		"image": nil, "workdir": nil, "network_allow": []string{"*"}, "network_block": []string{}, "artifacts": []any{},
		"timeout":   map[string]any{"setup": nil, "agent": nil, "finalize": nil, "scoring": nil},
		"resources": map[string]any{"cpu": nil, "memory": nil, "gpu": nil, "disk": nil},
		"answer":    t.answer}
	raw, _ := json.Marshal(data)
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:8])
	var id [16]byte
	for i := range id {
		id[i] = byte(rng.IntN(256))
	}
	at := now()
	out := 24 + rng.IntN(40)
	node := func(parent any, msg map[string]any, sampled bool, tokens int) map[string]any {
		ids, mask := make([]int, tokens), make([]bool, tokens)
		var logprobs []float64
		for i := range ids {
			ids[i] = 1000 + rng.IntN(30000)
			mask[i] = sampled && i >= 3
			if mask[i] {
				logprobs = append(logprobs, round(-rng.Float64()))
			}
		}
		n := map[string]any{"parent": parent, "message": msg, "sampled": sampled, "timestamp": at,
			"token_ids": ids, "mask": mask, "is_content": []bool{}, "logprobs": logprobs,
			"advantages": nil, "reference_logprobs": nil, "loss_weights": nil}
		if logprobs == nil {
			n["logprobs"] = []float64{}
		}
		return n
	}
	nodes := []any{
		node(nil, map[string]any{"role": "system", "content": "Solve the problem. Put the final answer in \\boxed{}."}, false, 18),
		node(0, map[string]any{"role": "user", "content": t.question}, false, 40),
		node(1, map[string]any{"role": "assistant", "content": completion, "reasoning_content": nil, "tool_calls": nil, "provider_state": nil}, true, out),
	}
	usage := map[string]any{"prompt_tokens": 58, "completion_tokens": out, "cached_input_tokens": nil, "reasoning_tokens": nil, "cost": nil}
	return map[string]any{
		"version":   1,
		"id":        hex.EncodeToString(id[:]),
		"verifiers": map[string]any{"version": "0.1.15", "commit": nil},
		"task":      map[string]any{"type": "Task", "data": data, "key": hash, "hash": hash},
		"agent": map[string]any{"config": map[string]any{"harness": nil, "runtime": map[string]any{"type": "subprocess"}, "model": "policy", "client": nil, "sampling": nil,
			"max_turns": nil, "max_input_tokens": nil, "max_output_tokens": nil, "max_total_tokens": nil,
			"timeout": map[string]any{"setup": nil, "rollout": nil, "finalize": nil, "scoring": nil},
			"retries": map[string]any{"max_retries": 0, "include": []any{}, "exclude": []any{}}},
			"runtime": nil, "name": "agent", "trainable": true},
		"tools": []any{},
		"nodes": nodes,
		"calls": []any{map[string]any{"node": 2, "model": "policy", "sampling": nil, "endpoint": "/chat/completions",
			"finish_reason": "stop", "usage": usage, "time": map[string]any{"start": at - 1, "end": at}, "error": nil, "policy": nil}},
		"request_rewrites":  []any{},
		"response_rewrites": []any{},
		"rewards":           map[string]any{"correct": map[string]any{"score": score, "weight": 1.0}},
		"metrics":           map[string]any{"format": 1.0},
		"info":              map[string]any{},
		"extra_usage":       []any{},
		"is_completed":      true,
		"ok":                true,
		"stop_condition":    "completed",
		"errors":            []any{},
		"timing": map[string]any{"start": at - 2, "boot": map[string]any{"start": at - 2, "end": at - 2}, "setup": map[string]any{"start": at - 2, "end": at - 1.5},
			"agent":    map[string]any{"start": at - 1.5, "end": at, "model": map[string]any{"duration": 1.0}, "harness": map[string]any{"duration": 0.5}},
			"finalize": map[string]any{"start": at, "end": at}, "scoring": map[string]any{"start": at, "end": at}},
	}
}
