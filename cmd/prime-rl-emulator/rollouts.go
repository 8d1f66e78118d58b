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
	var line []byte
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
			line = append(emulatedTrace(task, score, rng).appendJSON(line[:0]), '\n')
			all.Write(line)
			if kept {
				effective.Write(line)
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
// sampled assistant node, the model call, and the named rewards. Its fields are typed, and
// what is the same in every episode is encoded once (traceConstants): a run writes tens of
// these a step, and a chaos run's emulators spent more CPU building them as maps than on
// anything else.
func emulatedTrace(t task, score float64, rng *rand.Rand) *wireTrace {
	answer := t.answer
	if score == 0 {
		n, _ := strconv.Atoi(t.answer)
		answer = strconv.Itoa(n + 1 + rng.IntN(9))
	}
	completion := fmt.Sprintf("Adding the two crates gives %s apples.\n\n\\boxed{%s}", answer, answer)
	// verifiers' TaskData with the taskset's own fields after it (WireTaskData)
	raw, _ := json.Marshal(taskData{Idx: t.idx, Prompt: t.question, NetworkAllow: traceConstants.allowAll,
		NetworkBlock: traceConstants.emptyList, Artifacts: traceConstants.emptyList, Timeout: traceConstants.taskTimeout,
		Resources: traceConstants.taskResources, Answer: t.answer})
	sum := sha256.Sum256(raw)
	hash := hex.EncodeToString(sum[:8])
	var id [16]byte
	for i := range id {
		id[i] = byte(rng.IntN(256))
	}
	at := now()
	out := 24 + rng.IntN(40)
	node := func(parent *int, msg any, sampled bool, tokens int) wireNode {
		ids, mask := make([]int, tokens), make([]bool, tokens)
		logprobs := []float64{}
		for i := range ids {
			ids[i] = 1000 + rng.IntN(30000)
			mask[i] = sampled && i >= 3
			if mask[i] {
				logprobs = append(logprobs, round(-rng.Float64()))
			}
		}
		return wireNode{Parent: parent, Message: msg, Sampled: sampled, Timestamp: at, TokenIDs: ids, Mask: mask,
			IsContent: []bool{}, Logprobs: logprobs}
	}
	zero, one := 0, 1
	return &wireTrace{
		Version:   1,
		ID:        hex.EncodeToString(id[:]),
		Verifiers: traceConstants.verifiers,
		Task:      wireTask{Type: "Task", Data: raw, Key: hash, Hash: hash},
		Agent:     traceConstants.agent,
		Tools:     traceConstants.emptyList,
		Nodes: []wireNode{
			node(nil, textMessage{Role: "system", Content: "Solve the problem. Put the final answer in \\boxed{}."}, false, 18),
			node(&zero, textMessage{Role: "user", Content: t.question}, false, 40),
			node(&one, assistantMessage{Role: "assistant", Content: completion}, true, out),
		},
		Calls: []wireCall{{Node: 2, Model: "policy", Endpoint: "/chat/completions", FinishReason: "stop",
			Usage: wireUsage{PromptTokens: 58, CompletionTokens: out}, Time: span{Start: at - 1, End: at}}},
		RequestRewrites:  traceConstants.emptyList,
		ResponseRewrites: traceConstants.emptyList,
		Rewards:          map[string]wireReward{"correct": {Score: score, Weight: 1.0}},
		Metrics:          traceConstants.metrics,
		Info:             traceConstants.emptyObject,
		ExtraUsage:       traceConstants.emptyList,
		IsCompleted:      true,
		OK:               true,
		StopCondition:    "completed",
		Errors:           traceConstants.emptyList,
		Timing: wireTiming{Start: at - 2, Boot: span{at - 2, at - 2}, Setup: span{at - 2, at - 1.5},
			Agent:    agentTiming{Start: at - 1.5, End: at, Model: duration{1.0}, Harness: duration{0.5}},
			Finalize: span{at, at}, Scoring: span{at, at}},
	}
}

// The parts of a verifiers Trace record the emulator writes (verifiers/v1/trace.py), in its
// field order; a null field is a nil pointer or an any left nil, never omitted.
type (
	wireTrace struct {
		Version          int                   `json:"version"`
		ID               string                `json:"id"`
		Verifiers        json.RawMessage       `json:"verifiers"`
		Task             wireTask              `json:"task"`
		Agent            json.RawMessage       `json:"agent"`
		Tools            json.RawMessage       `json:"tools"`
		Nodes            []wireNode            `json:"nodes"`
		Calls            []wireCall            `json:"calls"`
		RequestRewrites  json.RawMessage       `json:"request_rewrites"`
		ResponseRewrites json.RawMessage       `json:"response_rewrites"`
		Rewards          map[string]wireReward `json:"rewards"`
		Metrics          json.RawMessage       `json:"metrics"`
		Info             json.RawMessage       `json:"info"`
		ExtraUsage       json.RawMessage       `json:"extra_usage"`
		IsCompleted      bool                  `json:"is_completed"`
		OK               bool                  `json:"ok"`
		StopCondition    string                `json:"stop_condition"`
		Errors           json.RawMessage       `json:"errors"`
		Timing           wireTiming            `json:"timing"`
	}
	wireTask struct {
		Type string          `json:"type"`
		Data json.RawMessage `json:"data"`
		Key  string          `json:"key"`
		Hash string          `json:"hash"`
	}
	taskData struct {
		Idx          int             `json:"idx"`
		Name         *string         `json:"name"`
		Description  *string         `json:"description"`
		Prompt       string          `json:"prompt"`
		SystemPrompt *string         `json:"system_prompt"`
		Image        *string         `json:"image"`
		Workdir      *string         `json:"workdir"`
		NetworkAllow json.RawMessage `json:"network_allow"`
		NetworkBlock json.RawMessage `json:"network_block"`
		Artifacts    json.RawMessage `json:"artifacts"`
		Timeout      json.RawMessage `json:"timeout"`
		Resources    json.RawMessage `json:"resources"`
		Answer       string          `json:"answer"`
	}
	wireNode struct {
		Parent            *int       `json:"parent"`
		Message           any        `json:"message"`
		Sampled           bool       `json:"sampled"`
		Timestamp         float64    `json:"timestamp"`
		TokenIDs          []int      `json:"token_ids"`
		Mask              []bool     `json:"mask"`
		IsContent         []bool     `json:"is_content"`
		Logprobs          []float64  `json:"logprobs"`
		Advantages        *[]float64 `json:"advantages"`
		ReferenceLogprobs *[]float64 `json:"reference_logprobs"`
		LossWeights       *[]float64 `json:"loss_weights"`
	}
	textMessage struct {
		Role    string `json:"role"`
		Content string `json:"content"`
	}
	assistantMessage struct {
		Role             string  `json:"role"`
		Content          string  `json:"content"`
		ReasoningContent *string `json:"reasoning_content"`
		ToolCalls        *[]any  `json:"tool_calls"`
		ProviderState    *any    `json:"provider_state"`
	}
	wireCall struct {
		Node         int       `json:"node"`
		Model        string    `json:"model"`
		Sampling     *any      `json:"sampling"`
		Endpoint     string    `json:"endpoint"`
		FinishReason string    `json:"finish_reason"`
		Usage        wireUsage `json:"usage"`
		Time         span      `json:"time"`
		Error        *any      `json:"error"`
		Policy       *any      `json:"policy"`
	}
	wireUsage struct {
		PromptTokens      int      `json:"prompt_tokens"`
		CompletionTokens  int      `json:"completion_tokens"`
		CachedInputTokens *int     `json:"cached_input_tokens"`
		ReasoningTokens   *int     `json:"reasoning_tokens"`
		Cost              *float64 `json:"cost"`
	}
	wireReward struct {
		Score  float64 `json:"score"`
		Weight float64 `json:"weight"`
	}
	span struct {
		Start float64 `json:"start"`
		End   float64 `json:"end"`
	}
	duration struct {
		Duration float64 `json:"duration"`
	}
	agentTiming struct {
		Start   float64  `json:"start"`
		End     float64  `json:"end"`
		Model   duration `json:"model"`
		Harness duration `json:"harness"`
	}
	wireTiming struct {
		Start    float64     `json:"start"`
		Boot     span        `json:"boot"`
		Setup    span        `json:"setup"`
		Agent    agentTiming `json:"agent"`
		Finalize span        `json:"finalize"`
		Scoring  span        `json:"scoring"`
	}
)

// traceConstants are the parts of a record every episode shares, encoded once.
var traceConstants = struct {
	verifiers, agent, metrics, emptyList, emptyObject, allowAll, taskTimeout, taskResources json.RawMessage
}{
	verifiers: mustJSON(map[string]any{"version": "0.1.15", "commit": nil}),
	agent: mustJSON(map[string]any{"config": map[string]any{"harness": nil, "runtime": map[string]any{"type": "subprocess"}, "model": "policy", "client": nil, "sampling": nil,
		"max_turns": nil, "max_input_tokens": nil, "max_output_tokens": nil, "max_total_tokens": nil,
		"timeout": map[string]any{"setup": nil, "rollout": nil, "finalize": nil, "scoring": nil},
		"retries": map[string]any{"max_retries": 0, "include": []any{}, "exclude": []any{}}},
		"runtime": nil, "name": "agent", "trainable": true}),
	metrics:       mustJSON(map[string]any{"format": 1.0}),
	emptyList:     json.RawMessage(`[]`),
	emptyObject:   json.RawMessage(`{}`),
	allowAll:      json.RawMessage(`["*"]`),
	taskTimeout:   mustJSON(map[string]any{"setup": nil, "agent": nil, "finalize": nil, "scoring": nil}),
	taskResources: mustJSON(map[string]any{"cpu": nil, "memory": nil, "gpu": nil, "disk": nil}),
}

func mustJSON(v any) json.RawMessage {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
