package jobdata

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"maps"
	"math"
	"path"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
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
	maxSampleChars    = 16000 // all of a sample's messages together
	minMessageChars   = 200   // what a message keeps once its sample's budget is spent
	maxMessagesPerEnd = 12    // messages kept of the prompt and of the completion each
	maxTaskBytes      = 2000
	maxErrors         = 4
	maxErrorChars     = 1000
	maxNamedValues    = 32 // rewards and metrics kept of a sample each
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
type Distribution = job.Distribution

// Bin is one bar of a histogram.
type Bin = job.Bin

// rewards are a trace's named rewards, each weighted; nil where scoring did not run.
type rewards map[string]*struct {
	Score  float64  `json:"score"`
	Weight *float64 `json:"weight"`
}

// sum is verifiers' Trace.reward: the weighted sum of the rewards that ran.
func (rs rewards) sum() float64 {
	sum := 0.0
	for _, r := range rs {
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

// scored is what every episode is read for: its reward and the example it answered.
type scored struct {
	ID   string `json:"id"`
	Task struct {
		Data json.RawMessage `json:"data"`
		Key  *string         `json:"key"`
		Hash *string         `json:"hash"`
	} `json:"task"`
	Rewards rewards `json:"rewards"`
}

// trace is what is read of a verifiers Trace record kept as a sample.
type trace struct {
	scored
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
	Metrics       map[string]*float64 `json:"metrics"`
	OK            bool                `json:"ok"`
	StopCondition *string             `json:"stop_condition"`
	Errors        []struct {
		Type    string `json:"type"`
		Message string `json:"message"`
	} `json:"errors"`
}

// group is the example an episode answered: episodes of one example form a group, whose mean
// reward is the baseline of the advantage. Without the task's key or hash, a hash of its row.
func (t *scored) group() string {
	switch {
	case t.Task.Key != nil:
		return "k" + *t.Task.Key
	case t.Task.Hash != nil:
		return "h" + *t.Task.Hash
	}
	h := fnv.New64a()
	h.Write(t.Task.Data)
	return "d" + strconv.FormatUint(h.Sum64(), 16)
}

// traceReaders are ReadTraces' 1 MiB readers, reused.
var traceReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 1<<20) }}

// ReadTraces turns a step's traces.jsonl into its stored form. A line that is not a trace
// record is skipped and counted. Every episode counts in the distributions; samples are
// taken at a stride that doubles as the batch grows (at most 2 × MaxSamplesPerStep are held,
// each cut to size as it is taken), so they spread evenly over a batch of any size.
func ReadTraces(step int, r io.Reader) (RolloutStep, error) {
	out := RolloutStep{Step: step, Samples: []Sample{}}
	// One step's file at a time, every step of every job: the 1 MiB reader is reused, not
	// made (and collected) each time.
	br := traceReaders.Get().(*bufio.Reader)
	br.Reset(r)
	defer func() { br.Reset(nil); traceReaders.Put(br) }()
	type episode struct {
		reward float64
		group  string
	}
	var eps []episode
	var kept []Sample // candidates: the episodes at multiples of stride
	stride := 1
	for {
		line, err := readTraceLine(br)
		if len(line) > 0 {
			// A line at a multiple of stride is read whole once, as a sample; the others only
			// for what the distributions need.
			at := len(eps)
			var t trace
			sc := &t.scored
			whole := at%stride == 0 && json.Unmarshal(line, &t) == nil
			if !whole {
				t = trace{} // a record whose other fields do not read still counts as an episode
				if json.Unmarshal(line, sc) != nil {
					sc.ID = ""
				}
			}
			if sc.ID == "" {
				out.Skipped++
			} else {
				eps = append(eps, episode{reward: sc.Rewards.sum(), group: sc.group()})
				if whole {
					kept = append(kept, sampleOf(&t, at))
					if len(kept) >= 2*MaxSamplesPerStep {
						stride *= 2
						kept = slices.DeleteFunc(kept, func(s Sample) bool { return s.Index%stride != 0 })
					}
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
	out.Distributions = map[string]Distribution{"rewards": Histogram(rewards), "advantages": Histogram(advantages)}
	for _, i := range spaced(len(kept), MaxSamplesPerStep) {
		sm := kept[i]
		sm.Advantage = round6(advantages[sm.Index])
		out.Samples = append(out.Samples, sm)
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

// sampleOf is an episode as kept: its text cut to the sample's budget (the advantage is set
// once the whole batch is read).
func sampleOf(t *trace, index int) Sample {
	s := Sample{ID: cutText(t.ID, 100), Index: index, Agent: cutText(t.Agent.Name, 100), Reward: round6(t.Rewards.sum()), OK: t.OK,
		Prompt: []SampleMessage{}, Completion: []SampleMessage{}}
	if len(t.Task.Data) > 0 && string(t.Task.Data) != "null" {
		if len(t.Task.Data) <= maxTaskBytes {
			s.Task = t.Task.Data
		} else {
			// cut: an object still, its text under "truncated"
			text, _ := cutEncoded(string(t.Task.Data), maxTaskBytes)
			cut, _ := json.Marshal(map[string]string{"truncated": text})
			s.Task, s.Truncated = cut, true
		}
	}
	if t.StopCondition != nil {
		s.StopCondition = cutText(*t.StopCondition, 100)
	}
	for _, name := range slices.Sorted(maps.Keys(t.Rewards)) {
		if r := t.Rewards[name]; r != nil && len(s.Rewards) < maxNamedValues {
			if s.Rewards == nil {
				s.Rewards = map[string]float64{}
			}
			s.Rewards[cutText(name, 100)] = round6(r.Score)
		}
	}
	for _, name := range slices.Sorted(maps.Keys(t.Metrics)) {
		if v := t.Metrics[name]; v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) && len(s.Metrics) < maxNamedValues {
			if s.Metrics == nil {
				s.Metrics = map[string]float64{}
			}
			s.Metrics[cutText(name, 100)] = round6(*v)
		}
	}
	for i, e := range t.Errors {
		if i == maxErrors {
			s.Errors = append(s.Errors, fmt.Sprintf("[%d more errors not kept]", len(t.Errors)-maxErrors))
			break
		}
		text, _ := cutEncoded(strings.TrimSpace(e.Type+": "+e.Message), maxErrorChars)
		s.Errors = append(s.Errors, text)
	}
	for _, c := range t.Calls {
		if c.Usage != nil {
			s.OutputTokens += c.Usage.CompletionTokens
		}
	}
	var prompt, completion []json.RawMessage
	sampled := false
	for _, n := range t.Nodes {
		sampled = sampled || n.Sampled
		if sampled {
			completion = append(completion, n.Message)
		} else {
			prompt = append(prompt, n.Message)
		}
	}
	budget := maxSampleChars
	var cut bool
	s.Prompt, cut = keptMessages(prompt, &budget)
	s.Truncated = s.Truncated || cut
	s.Completion, cut = keptMessages(completion, &budget)
	s.Truncated = s.Truncated || cut
	return s
}

// keptMessages writes messages as text, the first and last of a long list, each cut to what
// is left of the sample's budget (and never to less than minMessageChars).
func keptMessages(raw []json.RawMessage, budget *int) ([]SampleMessage, bool) {
	var cut bool
	if len(raw) > maxMessagesPerEnd {
		half := maxMessagesPerEnd / 2
		raw = append(raw[:half:half], raw[len(raw)-half:]...)
		cut = true
	}
	out := make([]SampleMessage, 0, len(raw)+1)
	for i, m := range raw {
		if cut && i == maxMessagesPerEnd/2 {
			out = append(out, SampleMessage{Role: "note", Content: "[messages not kept]"})
		}
		text, role := messageText(m)
		limit := max(min(maxMessageChars, *budget), minMessageChars)
		var size int
		if text, size = cutEncoded(text, limit); size > limit {
			cut = true
		}
		*budget -= min(size, limit)
		out = append(out, SampleMessage{Role: role, Content: text})
	}
	return out, cut
}

// messageText writes a verifiers message (system, user, assistant or tool; content a string
// or typed parts) as text.
func messageText(raw json.RawMessage) (text, role string) {
	var m struct {
		Role             string          `json:"role"`
		Content          json.RawMessage `json:"content"`
		ReasoningContent *string         `json:"reasoning_content"`
		ToolCalls        []struct {
			Name      string `json:"name"`
			Arguments string `json:"arguments"`
		} `json:"tool_calls"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return string(raw), "unknown"
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
	return strings.Join(parts, "\n"), cutText(m.Role, 20)
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

// cutEncoded cuts s so that it takes at most n bytes as a JSON string (a control character
// takes 6, a quote or backslash 2), marking the cut; it also says what s took whole.
func cutEncoded(s string, n int) (string, int) {
	size, end := 0, -1
	for i, r := range s {
		c := utf8.RuneLen(r)
		switch {
		case r < 0x20:
			c = 6
		case r == '"' || r == '\\':
			c = 2
		}
		if end < 0 && size+c > n {
			end = i
		}
		size += c
	}
	if end < 0 {
		return s, size
	}
	return s[:end] + fmt.Sprintf(" […%d more bytes]", len(s)-end), size
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

// Histogram bins values into histogramBins equal bins between their min and max (one bin when
// they are all equal).
func Histogram(vs []float64) Distribution {
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
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // the budget counts `<` as one byte, as it is stored
	if err := enc.Encode(rs); err != nil {
		return err
	}
	return store.Put(ctx, RolloutsKey(jobID, rs.Step), &b)
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
