package jobdata

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// Rollouts are what a job keeps of the episodes prime-rl's orchestrator scores. Its file
// monitor writes every episode of step N as a verifiers Trace record (one JSON line each,
// verifiers/v1/trace.py) under <run_dir>/rollouts/step_N/train/effective/traces.jsonl; the
// agent turns a step's file into one object, jobs/{id}/rollouts/step_{N}.json: a bounded,
// evenly spaced sample of the episodes with their text cut to size, and the distribution of
// every episode's reward and advantage.

// RolloutsPrefix holds a job's per-step rollout objects.
func RolloutsPrefix(jobID string) string { return JobPrefix(jobID) + "rollouts/" }

// RolloutsKey is where step's rollouts are stored.
func RolloutsKey(jobID string, step int) string {
	return fmt.Sprintf("%sstep_%d.json", RolloutsPrefix(jobID), step)
}

// Limits on what one step keeps: a step's object stays well under a megabyte whatever the
// batch size or the length of the episodes.
const (
	MaxSamplesPerStep = 32
	maxMessageChars   = 4000
	maxMessagesPerEnd = 12 // messages kept of the prompt and of the completion each
	maxTaskBytes      = 2000
	histogramBins     = 20
	// maxTraceLine is the longest trace line read; longer ones (huge token lists) are counted
	// in the distributions only if they can be read, and otherwise skipped.
	maxTraceLine = 32 << 20
)

// DistributionTypes are the distributions a step has.
var DistributionTypes = []string{"rewards", "advantages"}

// RolloutStep is one step's stored rollouts.
type RolloutStep struct {
	Step int `json:"step"`
	// Episodes is how many episodes the step's batch had; Samples holds at most
	// MaxSamplesPerStep of them, evenly spaced.
	Episodes      int                     `json:"episodes"`
	Samples       []Sample                `json:"samples"`
	Distributions map[string]Distribution `json:"distributions"`
	// Skipped counts trace lines that could not be read.
	Skipped int `json:"skipped,omitempty"`
}

// Sample is one episode: what the model was asked, what it answered, and how it scored.
type Sample struct {
	ID    string          `json:"id"`
	Index int             `json:"index"` // its place among the step's episodes
	Agent string          `json:"agent,omitempty"`
	Task  json.RawMessage `json:"task,omitempty"`
	// Prompt is the messages before the first one the model sampled; Completion the rest.
	Prompt        []SampleMessage    `json:"prompt"`
	Completion    []SampleMessage    `json:"completion"`
	Reward        float64            `json:"reward"`
	Advantage     float64            `json:"advantage"`
	Rewards       map[string]float64 `json:"rewards,omitempty"`
	Metrics       map[string]float64 `json:"metrics,omitempty"`
	OK            bool               `json:"ok"`
	StopCondition string             `json:"stop_condition,omitempty"`
	Errors        []string           `json:"errors,omitempty"`
	OutputTokens  int                `json:"output_tokens,omitempty"`
	Truncated     bool               `json:"truncated,omitempty"`
}

// SampleMessage is a message as text: tool calls and reasoning are written out in it.
type SampleMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Distribution is a histogram of one value over a step's episodes.
type Distribution struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Std   float64 `json:"std"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Bins  []Bin   `json:"bins"`
}

// Bin is one bar of a histogram: the values in [Min, Max) (the last bin includes Max).
type Bin struct {
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Count int     `json:"count"`
}

// trace is what is read of a verifiers Trace record.
type trace struct {
	ID   string `json:"id"`
	Task struct {
		Data json.RawMessage `json:"data"`
		Key  *string         `json:"key"`
		Hash *string         `json:"hash"`
	} `json:"task"`
	Agent struct {
		Name string `json:"name"`
	} `json:"agent"`
	Nodes []struct {
		Message json.RawMessage `json:"message"`
		Sampled bool            `json:"sampled"`
	} `json:"nodes"`
	Calls []struct {
		Usage *struct {
			CompletionTokens int `json:"completion_tokens"`
		} `json:"usage"`
	} `json:"calls"`
	Rewards map[string]*struct {
		Score  float64  `json:"score"`
		Weight *float64 `json:"weight"`
	} `json:"rewards"`
	Metrics       map[string]*float64 `json:"metrics"`
	OK            bool                `json:"ok"`
	StopCondition *string             `json:"stop_condition"`
	Errors        []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"errors"`
}

func (t *trace) reward() float64 {
	sum := 0.0
	for _, r := range t.Rewards {
		if r == nil {
			continue
		}
		w := 1.0
		if r.Weight != nil {
			w = *r.Weight
		}
		sum += r.Score * w
	}
	return sum
}

// group is the task an episode belongs to: episodes of one example form a group, whose mean
// reward is the baseline of the advantage.
func (t *trace) group() string {
	switch {
	case t.Task.Key != nil:
		return *t.Task.Key
	case t.Task.Hash != nil:
		return *t.Task.Hash
	}
	return string(t.Task.Data)
}

// ReadTraces turns a step's traces.jsonl into its stored form. A line that is not a trace
// record is skipped and counted.
func ReadTraces(step int, r io.Reader) (RolloutStep, error) {
	out := RolloutStep{Step: step, Samples: []Sample{}}
	br := bufio.NewReaderSize(r, 1<<20)
	type episode struct {
		reward float64
		group  string
	}
	var eps []episode
	var kept []*trace // candidates, thinned as more arrive (reservoir by index)
	var keptAt []int
	for {
		line, err := readTraceLine(br)
		if len(line) > 0 {
			var t trace
			if jerr := json.Unmarshal(line, &t); jerr != nil || t.ID == "" {
				out.Skipped++
			} else {
				eps = append(eps, episode{reward: t.reward(), group: t.group()})
				kept = append(kept, &t)
				keptAt = append(keptAt, len(eps)-1)
				if len(kept) >= 4*MaxSamplesPerStep {
					kept, keptAt = thin(kept, keptAt)
				}
			}
		}
		if errors.Is(err, errTooLong) {
			out.Skipped++
			continue
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return out, err
		}
	}
	out.Episodes = len(eps)
	// advantage: the episode's reward less its group's mean (GRPO's baseline)
	sums, counts := map[string]float64{}, map[string]int{}
	for _, e := range eps {
		sums[e.group] += e.reward
		counts[e.group]++
	}
	rewards, advantages := make([]float64, len(eps)), make([]float64, len(eps))
	for i, e := range eps {
		rewards[i] = e.reward
		advantages[i] = e.reward - sums[e.group]/float64(counts[e.group])
	}
	out.Distributions = map[string]Distribution{"rewards": histogram(rewards), "advantages": histogram(advantages)}
	for _, i := range spaced(len(kept), MaxSamplesPerStep) {
		at := keptAt[i]
		out.Samples = append(out.Samples, sampleOf(kept[i], at, advantages[at]))
	}
	return out, nil
}

var errTooLong = errors.New("trace line too long")

// readTraceLine reads one line; a line over maxTraceLine is passed over to its end (errTooLong).
func readTraceLine(br *bufio.Reader) ([]byte, error) {
	var buf []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(buf)+len(chunk) > maxTraceLine {
			buf = nil
			for errors.Is(err, bufio.ErrBufferFull) {
				_, err = br.ReadSlice('\n')
			}
			if err != nil && err != io.EOF {
				return nil, err
			}
			return nil, errTooLong
		}
		buf = append(buf, chunk...)
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSpace(buf), err
	}
}

// thin halves the candidates, keeping every other one, so a step of any size holds a bounded
// number in memory and what is kept stays spread over the whole batch.
func thin(ts []*trace, at []int) ([]*trace, []int) {
	var t2 []*trace
	var a2 []int
	for i := 0; i < len(ts); i += 2 {
		t2 = append(t2, ts[i])
		a2 = append(a2, at[i])
	}
	return t2, a2
}

// spaced picks up to k of n indices, evenly spaced, first included.
func spaced(n, k int) []int {
	if n <= k {
		out := make([]int, n)
		for i := range out {
			out[i] = i
		}
		return out
	}
	out := make([]int, k)
	for i := range out {
		out[i] = i * n / k
	}
	return out
}

func sampleOf(t *trace, index int, advantage float64) Sample {
	s := Sample{ID: t.ID, Index: index, Agent: t.Agent.Name, Reward: round6(t.reward()), Advantage: round6(advantage), OK: t.OK,
		Prompt: []SampleMessage{}, Completion: []SampleMessage{}}
	if len(t.Task.Data) > 0 && string(t.Task.Data) != "null" {
		if len(t.Task.Data) <= maxTaskBytes {
			s.Task = t.Task.Data
		} else {
			cut, _ := json.Marshal(cutText(string(t.Task.Data), maxTaskBytes))
			s.Task, s.Truncated = cut, true
		}
	}
	if t.StopCondition != nil {
		s.StopCondition = *t.StopCondition
	}
	for name, r := range t.Rewards {
		if r != nil {
			if s.Rewards == nil {
				s.Rewards = map[string]float64{}
			}
			s.Rewards[name] = round6(r.Score)
		}
	}
	for name, v := range t.Metrics {
		if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
			if s.Metrics == nil {
				s.Metrics = map[string]float64{}
			}
			s.Metrics[name] = round6(*v)
		}
	}
	for _, e := range t.Errors {
		s.Errors = append(s.Errors, cutText(strings.TrimSpace(e.Type+": "+e.Message), maxMessageChars))
	}
	for _, c := range t.Calls {
		if c.Usage != nil {
			s.OutputTokens += c.Usage.CompletionTokens
		}
	}
	sampled := false
	for _, n := range t.Nodes {
		sampled = sampled || n.Sampled
		m, cut := messageText(n.Message)
		s.Truncated = s.Truncated || cut
		if sampled {
			s.Completion = append(s.Completion, m)
		} else {
			s.Prompt = append(s.Prompt, m)
		}
	}
	var cut bool
	s.Prompt, cut = keepEnds(s.Prompt)
	s.Truncated = s.Truncated || cut
	s.Completion, cut = keepEnds(s.Completion)
	s.Truncated = s.Truncated || cut
	return s
}

// keepEnds keeps the first and last of a long list of messages, with a marker between.
func keepEnds(ms []SampleMessage) ([]SampleMessage, bool) {
	if len(ms) <= maxMessagesPerEnd {
		return ms, false
	}
	half := maxMessagesPerEnd / 2
	out := append([]SampleMessage{}, ms[:half]...)
	out = append(out, SampleMessage{Role: "note", Content: fmt.Sprintf("[%d messages not kept]", len(ms)-2*half)})
	return append(out, ms[len(ms)-half:]...), true
}

// messageText writes a verifiers message (system, user, assistant or tool; content a string
// or typed parts) as text.
func messageText(raw json.RawMessage) (SampleMessage, bool) {
	var m struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		ToolCalls        []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"tool_calls"`
		Name *string `json:"name"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return SampleMessage{Role: "unknown", Content: cutText(string(raw), maxMessageChars)}, len(raw) > maxMessageChars
	}
	var parts []string
	if m.ReasoningContent != nil && *m.ReasoningContent != "" {
		parts = append(parts, "<think>\n"+*m.ReasoningContent+"\n</think>")
	}
	if text := contentText(m.Content); text != "" {
		parts = append(parts, text)
	}
	for _, c := range m.ToolCalls {
		parts = append(parts, fmt.Sprintf("[tool call] %s(%s)", c.Name, c.Arguments))
	}
	text := strings.Join(parts, "\n")
	return SampleMessage{Role: m.Role, Content: cutText(text, maxMessageChars)}, len(text) > maxMessageChars
}

// contentText is verifiers' content_text: a string as is, typed parts' text joined by
// newlines, images dropped (named by a marker here).
func contentText(raw json.RawMessage) string {
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var parts []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if json.Unmarshal(raw, &parts) != nil {
		return ""
	}
	var out []string
	for _, p := range parts {
		switch p.Type {
		case "text":
			out = append(out, p.Text)
		case "image_url":
			out = append(out, "[image]")
		}
	}
	return strings.Join(out, "\n")
}

// cutText cuts s to at most n bytes on a rune boundary, marking the cut.
func cutText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !isRuneStart(s[i]) {
		i--
	}
	return s[:i] + fmt.Sprintf(" […%d more bytes]", len(s)-i)
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }

func round6(f float64) float64 { return math.Round(f*1e6) / 1e6 }

// histogram bins values into histogramBins equal bins between their min and max (one bin when
// they are all equal).
func histogram(vs []float64) Distribution {
	d := Distribution{Count: len(vs), Bins: []Bin{}}
	if len(vs) == 0 {
		return d
	}
	lo, hi, sum := vs[0], vs[0], 0.0
	for _, v := range vs {
		lo, hi, sum = min(lo, v), max(hi, v), sum+v
	}
	mean := sum / float64(len(vs))
	ss := 0.0
	for _, v := range vs {
		ss += (v - mean) * (v - mean)
	}
	d.Mean, d.Std, d.Min, d.Max = round6(mean), round6(math.Sqrt(ss/float64(len(vs)))), round6(lo), round6(hi)
	if hi == lo {
		d.Bins = []Bin{{Min: d.Min, Max: d.Max, Count: len(vs)}}
		return d
	}
	width := (hi - lo) / histogramBins
	counts := make([]int, histogramBins)
	for _, v := range vs {
		i := int((v - lo) / width)
		counts[min(max(i, 0), histogramBins-1)]++
	}
	for i, c := range counts {
		d.Bins = append(d.Bins, Bin{Min: round6(lo + float64(i)*width), Max: round6(lo + float64(i+1)*width), Count: c})
	}
	return d
}

// PutRollouts stores one step's rollouts.
func PutRollouts(ctx context.Context, store blob.Store, jobID string, rs RolloutStep) error {
	b, err := json.Marshal(rs)
	if err != nil {
		return err
	}
	return store.Put(ctx, RolloutsKey(jobID, rs.Step), bytes.NewReader(b))
}

// RolloutSteps lists the steps a job has rollouts of, in order.
func RolloutSteps(ctx context.Context, store blob.Store, jobID string) ([]int, error) {
	objs, err := store.List(ctx, RolloutsPrefix(jobID))
	if err != nil {
		return nil, err
	}
	var steps []int
	for _, o := range objs {
		name := strings.TrimSuffix(path.Base(o.Key), ".json")
		if n, err := strconv.Atoi(strings.TrimPrefix(name, "step_")); err == nil && strings.HasPrefix(name, "step_") && n > 0 {
			steps = append(steps, n)
		}
	}
	sort.Ints(steps)
	return steps, nil
}

// GetRollouts reads one step's rollouts; blob.ErrNotFound when the step has none.
func GetRollouts(ctx context.Context, store blob.Store, jobID string, step int) (RolloutStep, error) {
	var rs RolloutStep
	b, err := getAll(ctx, store, RolloutsKey(jobID, step))
	if err != nil {
		return rs, err
	}
	if err := json.Unmarshal(b, &rs); err != nil {
		return rs, fmt.Errorf("rollouts of step %d: %w", step, err)
	}
	return rs, nil
}
