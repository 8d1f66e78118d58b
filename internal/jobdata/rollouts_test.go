package jobdata_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// upstreamTraces has the pinned verifiers write n Trace records as prime-rl's file monitor
// keeps them (testdata/traces.py: Trace.to_record(), one per line).
func upstreamTraces(t *testing.T, n int) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	py := upstreamtest.Command(t)[0]
	cmd := exec.CommandContext(ctx, py, filepath.Join("testdata", "traces.py"), upstreamtest.Kit(t), strconv.Itoa(n))
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("traces.py: %v\n%s", err, stderr.String())
	}
	return out
}

// score is testdata/traces.py's reward of episode i.
func score(i int) float64 {
	if i%4 < 1+(i/4)%3 {
		return 1
	}
	return 0
}

func TestReadTracesReadsWhatVerifiersWrites(t *testing.T) {
	t.Parallel()
	const n = 200
	data := upstreamTraces(t, n)
	data = append(data, []byte("not a trace\n{\"half\": ")...) // a bad line and a torn last line
	rs, err := jobdata.ReadTraces(7, bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	if rs.Step != 7 || rs.Episodes != n || rs.Skipped != 2 {
		t.Fatalf("step %d, %d episodes, %d skipped; want 7, %d, 2", rs.Step, rs.Episodes, rs.Skipped, n)
	}
	if len(rs.Samples) != jobdata.MaxSamplesPerStep {
		t.Fatalf("%d samples, want %d", len(rs.Samples), jobdata.MaxSamplesPerStep)
	}
	// the rewards' distribution counts every episode, not just the samples
	sum := 0.0
	for i := 0; i < n; i++ {
		sum += score(i)
	}
	d := rs.Distributions["rewards"]
	if d.Count != n || math.Abs(d.Mean-sum/n) > 1e-6 || d.Min != 0 || d.Max != 1 {
		t.Fatalf("rewards distribution %+v; want %d episodes with mean %v over [0, 1]", d, n, sum/n)
	}
	binned := 0
	for _, b := range d.Bins {
		binned += b.Count
	}
	if binned != n || d.Bins[0].Count != n-int(sum) || d.Bins[len(d.Bins)-1].Count != int(sum) {
		t.Fatalf("bins %+v: want %d zeros in the first and %d ones in the last", d.Bins, n-int(sum), int(sum))
	}
	if a := rs.Distributions["advantages"]; a.Count != n || math.Abs(a.Mean) > 1e-6 {
		t.Fatalf("advantages %+v: want %d with mean 0 (each group's own mean is its baseline)", a, n)
	}

	last := -1
	for _, s := range rs.Samples {
		if s.Index <= last {
			t.Fatalf("samples out of order: %d after %d", s.Index, last)
		}
		last = s.Index
		if s.ID == "" || s.Reward != score(s.Index) {
			t.Fatalf("sample %d: id %q reward %v, want %v", s.Index, s.ID, s.Reward, score(s.Index))
		}
		// advantage: the reward less the mean of its group of four
		g := s.Index / 4 * 4
		mean := (score(g) + score(g+1) + score(g+2) + score(g+3)) / 4
		if math.Abs(s.Advantage-(s.Reward-mean)) > 1e-6 {
			t.Fatalf("sample %d: advantage %v, want %v", s.Index, s.Advantage, s.Reward-mean)
		}
		if len(s.Prompt) != 2 || s.Prompt[0].Role != "system" || s.Prompt[1].Role != "user" || !strings.Contains(s.Prompt[1].Content, "What is") {
			t.Fatalf("sample %d prompt %+v", s.Index, s.Prompt)
		}
		if s.Rewards["correct"] != s.Reward || s.Metrics["format"] != 1 || len(s.Task) == 0 {
			t.Fatalf("sample %d: rewards %v metrics %v task %s", s.Index, s.Rewards, s.Metrics, s.Task)
		}
		if s.OutputTokens != 5+s.Index {
			t.Fatalf("sample %d: %d output tokens, want %d", s.Index, s.OutputTokens, 5+s.Index)
		}
	}
	// the samples spread over the batch
	if rs.Samples[0].Index != 0 || rs.Samples[len(rs.Samples)-1].Index < n*3/4 {
		t.Fatalf("samples from %d to %d of %d: not spread over the batch", rs.Samples[0].Index, rs.Samples[len(rs.Samples)-1].Index, n)
	}
}

// Every kind of message verifiers records comes out as text: typed content parts, reasoning,
// tool calls, tool results; an error is kept; a long completion is cut.
func TestReadTracesWritesMessagesAsText(t *testing.T) {
	t.Parallel()
	rs, err := jobdata.ReadTraces(1, bytes.NewReader(upstreamTraces(t, 8)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs.Samples) != 8 {
		t.Fatalf("%d samples", len(rs.Samples))
	}
	long := rs.Samples[3]
	if !long.Truncated || len(long.Completion[0].Content) > 4100 || !strings.Contains(long.Completion[0].Content, "more bytes]") {
		t.Fatalf("the 10 000-character completion: truncated %v, %d bytes", long.Truncated, len(long.Completion[0].Content))
	}
	failed := rs.Samples[5]
	if failed.OK || failed.StopCondition != "error" || len(failed.Errors) != 1 || failed.Errors[0] != "ProviderError: upstream 500" {
		t.Fatalf("the failed episode: ok %v stop %q errors %q", failed.OK, failed.StopCondition, failed.Errors)
	}
	tool := rs.Samples[7]
	if len(tool.Completion) != 3 {
		t.Fatalf("tool episode completion %+v", tool.Completion)
	}
	call, result, answer := tool.Completion[0], tool.Completion[1], tool.Completion[2]
	if call.Role != "assistant" || !strings.Contains(call.Content, "<think>\nI should use the calculator.\n</think>") ||
		!strings.Contains(call.Content, `[tool call] add({"a": 1, "b": 1})`) {
		t.Fatalf("tool call message %+v", call)
	}
	if result.Role != "tool" || result.Content != "2" || answer.Content != `\boxed{0}` { // episode 7 scores 0
		t.Fatalf("tool result %+v, answer %+v", result, answer)
	}
}

// A step's rollouts go to object storage and come back; the steps are listed in order.
func TestRolloutsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	rs, err := jobdata.ReadTraces(3, bytes.NewReader(upstreamTraces(t, 16)))
	if err != nil {
		t.Fatal(err)
	}
	for _, step := range []int{12, 3} {
		rs.Step = step
		if err := jobdata.PutRollouts(ctx, store, "j1", rs); err != nil {
			t.Fatal(err)
		}
	}
	steps, err := jobdata.RolloutSteps(ctx, store, "j1")
	if err != nil || len(steps) != 2 || steps[0] != 3 || steps[1] != 12 {
		t.Fatalf("steps %v %v", steps, err)
	}
	got, err := jobdata.GetRollouts(ctx, store, "j1", 12)
	if err != nil || got.Step != 12 || got.Episodes != 16 || len(got.Samples) != 16 {
		t.Fatalf("step 12: %+v %v", got.Step, err)
	}
	if _, err := jobdata.GetRollouts(ctx, store, "j1", 4); !errors.Is(err, blob.ErrNotFound) {
		t.Fatalf("a step without rollouts: %v", err)
	}
	if blob.KindOf(jobdata.RolloutsKey("j1", 3)) != "rollouts" {
		t.Fatalf("kind of %s: %q", jobdata.RolloutsKey("j1", 3), blob.KindOf(jobdata.RolloutsKey("j1", 3)))
	}
}

// Samples spread evenly over a batch of any size, and a step's object stays under a megabyte
// however long and however escaped its episodes are.
func TestReadTracesSpreadsAndBounds(t *testing.T) {
	t.Parallel()
	for _, n := range []int{31, 100, 1000, 4096} {
		var b strings.Builder
		for i := 0; i < n; i++ {
			fmt.Fprintf(&b, `{"id":"t%d","task":{"key":"k%d"},"rewards":{"r":{"score":1}},"nodes":[{"message":{"role":"user","content":"q"}}]}`+"\n", i, i/8)
		}
		rs, err := jobdata.ReadTraces(1, strings.NewReader(b.String()))
		if err != nil {
			t.Fatal(err)
		}
		want := min(n, jobdata.MaxSamplesPerStep)
		if len(rs.Samples) != want || rs.Episodes != n {
			t.Fatalf("n=%d: %d samples of %d episodes", n, len(rs.Samples), rs.Episodes)
		}
		ideal := float64(n) / float64(want)
		for i := 1; i < len(rs.Samples); i++ {
			gap := float64(rs.Samples[i].Index - rs.Samples[i-1].Index)
			if gap < ideal/2 || gap > ideal*2 {
				t.Fatalf("n=%d: gap %v between samples %d and %d, want about %.1f: %v", n, gap, i-1, i, ideal, indexes(rs.Samples))
			}
		}
	}

	// 64 episodes of 40 long messages of quotes and control characters, with many errors
	msg := strings.Repeat(`\"\u0001<>&`, 700)
	var b strings.Builder
	for i := 0; i < 64; i++ {
		var nodes []string
		for k := 0; k < 40; k++ {
			nodes = append(nodes, fmt.Sprintf(`{"message":{"role":"user","content":"%s"},"sampled":%v}`, msg, k > 2))
		}
		var errs []string
		for k := 0; k < 10; k++ {
			errs = append(errs, fmt.Sprintf(`{"type":"E","message":"%s"}`, msg))
		}
		fmt.Fprintf(&b, `{"id":"t%d","task":{"data":{"prompt":"%s"}},"nodes":[%s],"errors":[%s],"rewards":{"r":{"score":0.5}}}`+"\n",
			i, msg, strings.Join(nodes, ","), strings.Join(errs, ","))
	}
	rs, err := jobdata.ReadTraces(1, strings.NewReader(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if err := jobdata.PutRollouts(context.Background(), store, "j", rs); err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(context.Background(), jobdata.RolloutsPrefix("j"))
	if err != nil || len(objs) != 1 {
		t.Fatal(objs, err)
	}
	if out := objs[0].Size; len(rs.Samples) != jobdata.MaxSamplesPerStep || out > 1<<20 {
		t.Fatalf("%d samples in %d bytes, want %d in under 1 MiB", len(rs.Samples), out, jobdata.MaxSamplesPerStep)
	}
	var task map[string]string
	if err := json.Unmarshal(rs.Samples[0].Task, &task); err != nil || task["truncated"] == "" || !rs.Samples[0].Truncated {
		t.Fatalf("a long task row, cut: %s (%v)", rs.Samples[0].Task, err)
	}
	if n := len(rs.Samples[0].Errors); n != 5 || !strings.Contains(rs.Samples[0].Errors[4], "6 more errors") {
		t.Fatalf("%d errors kept: %q", n, rs.Samples[0].Errors[len(rs.Samples[0].Errors)-1])
	}
}

func indexes(ss []jobdata.Sample) []int {
	var out []int
	for _, s := range ss {
		out = append(out, s.Index)
	}
	return out
}
