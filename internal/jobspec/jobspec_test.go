package jobspec

import (
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func decodeFixture(t *testing.T, name string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "testdata", "jobs", name))
	if err != nil {
		t.Fatal(err)
	}
	v, err := DecodeTOML(b)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSyntaxErrorsNameTheLine(t *testing.T) {
	t.Parallel()
	_, err := DecodeTOML([]byte("model = \"m\"\n\nmax_steps = = 1\n"))
	var syn *SyntaxError
	if !errors.As(err, &syn) || syn.Line != 3 || syn.Column == 0 {
		t.Fatalf("got %#v", err)
	}
}

func TestEnvFileAfterATableIsHoisted(t *testing.T) {
	t.Parallel()
	v := decodeFixture(t, "hosted-reference.toml")
	if _, ok := v["env_file"]; !ok {
		t.Fatalf("env_file not at the top level: %v", v)
	}
	if _, ok := v["wandb"].(map[string]any)["env_file"]; ok {
		t.Error("env_file left under [wandb]")
	}
}

func TestNormalizeResolvesAliasesAndDefaults(t *testing.T) {
	t.Parallel()
	res, err := Normalize(decodeFixture(t, "self-hosted-style.toml"))
	if err != nil {
		t.Fatal(err)
	}
	s := res.Spec
	if s.Model != "Qwen/Qwen3-30B-A3B-Instruct-2507" || s.Kind != KindRL {
		t.Errorf("model %q kind %q", s.Model, s.Kind)
	}
	if len(s.Env) != 1 || s.Env[0].ID != "wiki-search" || s.Env[0].Weight != 1 {
		t.Errorf("env %+v", s.Env)
	}
	if s.Checkpoints.Interval != 50 || s.Checkpoints.KeepCloud != 10 {
		t.Errorf("checkpoints %+v, want the [checkpointing] values 50 and 10", s.Checkpoints)
	}

	res, err = Normalize(map[string]any{"model": "m", "env": []any{map[string]any{"id": "gsm8k"}}})
	if err != nil {
		t.Fatal(err)
	}
	s = res.Spec
	if s.Kind != KindRL || s.MaxSteps != 100 || s.BatchSize != 128 || s.RolloutsPerExample != 8 ||
		*s.Checkpoints != (Checkpoints{Interval: 50, KeepCloud: DefaultKeepCloud}) {
		t.Errorf("defaults: got %+v", s)
	}
}

// The best checkpoint is named by eval reward with online evaluation and by reward without,
// unless the job says; eval_reward without [eval] is refused.
func TestBestMetric(t *testing.T) {
	env := []any{map[string]any{"id": "gsm8k"}}
	base := func(extra map[string]any) map[string]any {
		m := map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": env, "max_steps": 10}
		for k, v := range extra {
			m[k] = v
		}
		return m
	}
	eval := map[string]any{"interval": 5, "env": []any{map[string]any{"id": "gsm8k"}}}
	for _, c := range []struct {
		in   map[string]any
		want string
	}{
		{base(nil), "reward"},
		{base(map[string]any{"eval": eval}), "eval_reward"},
		{base(map[string]any{"eval": eval, "checkpoints": map[string]any{"best_metric": "reward"}}), "reward"},
	} {
		res, err := Normalize(c.in)
		if err != nil || len(res.Errors) > 0 {
			t.Fatalf("%v: %v %v", c.in, err, res.Errors)
		}
		if got := res.Spec.Checkpoints.Best(res.Spec.Eval != nil); got != c.want {
			t.Errorf("%v: best by %s, want %s", c.in, got, c.want)
		}
	}
	res, err := Normalize(base(map[string]any{"checkpoints": map[string]any{"best_metric": "eval_reward"}}))
	if err != nil || len(res.Errors) != 1 || res.Errors[0].Pointer != "/checkpoints/best_metric" {
		t.Fatalf("eval_reward without [eval]: %v %+v", err, res.Errors)
	}
}

// A job bigger than the service keeps is refused at submit, naming what is too big (red team,
// issue 29: 524 KB of args and 655 KB of secrets a job, kept in Redis): an environment's args,
// the whole config, the secrets; what is stored is no bigger than what was written (no
// HTML escapes).
func TestJobsBiggerThanTheServiceKeepsAreRefused(t *testing.T) {
	t.Parallel()
	big := strings.Repeat("<", MaxArgsBytes)
	cases := map[string]struct {
		job  map[string]any
		want string
	}{
		"args": {map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507",
			"env": []any{map[string]any{"id": "acme/env", "args": map[string]any{"prompt": big}}}}, "/env/0/args"},
		"eval args": {map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": []any{map[string]any{"id": "gsm8k"}},
			"eval": map[string]any{"env": []any{map[string]any{"id": "acme/env", "args": map[string]any{"p": big}}}}}, "/eval/env/0/args"},
		"secrets": {map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": []any{map[string]any{"id": "gsm8k"}},
			"secrets": map[string]any{"A": strings.Repeat("x", 16000), "B": strings.Repeat("x", 16000), "C": strings.Repeat("x", 16000),
				"D": strings.Repeat("x", 16000), "E": strings.Repeat("x", 2000)}}, "/secrets"},
	}
	envs := []any{}
	for i := range 8 {
		envs = append(envs, map[string]any{"id": fmt.Sprintf("env-%d", i), "args": map[string]any{"p": strings.Repeat("a", MaxArgsBytes-100)}})
	}
	cases["config"] = struct {
		job  map[string]any
		want string
	}{map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": envs}, ""}
	for name, tc := range cases {
		res, err := Normalize(tc.job)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		found := false
		for _, e := range res.Errors {
			found = found || (e.Pointer == tc.want && strings.Contains(e.Message, "bytes"))
		}
		if !found {
			t.Errorf("%s: errors %+v; want one at %q naming its size", name, res.Errors, tc.want)
		}
	}
	// Stored as written: "<" is one byte, not six.
	if b, _ := Encode(map[string]string{"p": "<&>"}); string(b) != `{"p":"<&>"}` {
		t.Errorf("Encode: %s", b)
	}
}

// The prime CLI's filters decide prime-rl's zero-advantage filtering: an empty list or an
// unenforced zero_advantage filter turns it off (it was ignored before), an enforced one or
// no list leaves prime-rl's default.
func TestFiltersDecideZeroAdvantageFiltering(t *testing.T) {
	t.Parallel()
	off, on := false, true
	for name, c := range map[string]struct {
		filters map[string]any
		want    *bool
	}{
		"no filters":           {nil, nil},
		"an empty list":        {map[string]any{"pre_batch_filters": []any{}}, &off},
		"unenforced":           {map[string]any{"pre_batch_filters": []any{map[string]any{"type": "zero_advantage", "enforce": false}}}, &off},
		"enforced":             {map[string]any{"post_batch_filters": []any{map[string]any{"type": "zero_advantage"}}}, &on},
		"only another filter":  {map[string]any{"pre_batch_filters": []any{map[string]any{"type": "gibberish"}}}, &off},
		"another and enforced": {map[string]any{"pre_batch_filters": []any{map[string]any{"type": "gibberish"}, map[string]any{"type": "zero_advantage", "enforce": true}}}, &on},
	} {
		job := map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507", "env": []any{map[string]any{"id": "acme/env"}}}
		maps.Copy(job, c.filters)
		res, err := Normalize(job)
		if err != nil || len(res.Errors) > 0 {
			t.Fatalf("%s: %v %+v", name, err, res.Errors)
		}
		got := res.Spec.FilterZeroAdvantages
		if (got == nil) != (c.want == nil) || got != nil && *got != *c.want {
			t.Errorf("%s: filter_zero_advantages %v; want %v", name, got, c.want)
		}
	}
}

// Lengths hold a whole sample: turns × per-turn budget and a prompt; an agent taskset whose
// upstream example bounds no turn gets the example's whole sample; the rounding stops at the
// model's own context; a sample past it is refused, for training and for serving.
func TestLengthsHoldAWholeSample(t *testing.T) {
	t.Parallel()
	for name, c := range map[string]struct {
		job     map[string]any
		seqLen  int
		context int
		err     string
	}{
		"one turn at the example's budget": {job: map[string]any{"env": []any{map[string]any{"id": "primeintellect/reverse-text"}}}, seqLen: 2048, context: 2048},
		"wordle at 1024 a turn": {job: map[string]any{"env": []any{map[string]any{"id": "primeintellect/wordle"}},
			"sampling": map[string]any{"max_tokens": 1024.0}}, seqLen: 8192, context: 8192},
		"an agent taskset": {job: map[string]any{"env": []any{map[string]any{"id": "primeintellect/r2e-gym"}}}, seqLen: 131072, context: 131072},
		"max_turns 16 on a 40,960-token model": {job: map[string]any{"model": "Qwen/Qwen3-8B", "env": []any{map[string]any{"id": "acme/env", "max_turns": 16.0}}},
			seqLen: 40960, context: 40960},
		"past the model's context": {job: map[string]any{"model": "Qwen/Qwen3-8B", "env": []any{map[string]any{"id": "acme/env", "max_turns": 30.0}}},
			err: "at most 40960 tokens"},
		"a seq_len shorter than a sample": {job: map[string]any{"seq_len": 2048.0, "env": []any{map[string]any{"id": "primeintellect/alphabet-sort"}},
			"sampling": map[string]any{"max_tokens": 1024.0}}, seqLen: 2048, context: 4096},
	} {
		job := map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507"}
		maps.Copy(job, c.job)
		res, err := Normalize(job)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if c.err != "" {
			if len(res.Errors) == 0 || !strings.Contains(res.Errors[0].Message, c.err) {
				t.Errorf("%s: errors %+v; want %q", name, res.Errors, c.err)
			}
			continue
		}
		if len(res.Errors) > 0 || res.Spec.SeqLen != c.seqLen || res.Spec.ContextLen() != c.context {
			t.Errorf("%s: seq_len %d, context %d, errors %+v; want %d and %d", name, res.Spec.SeqLen, res.Spec.ContextLen(), res.Errors, c.seqLen, c.context)
		}
	}
}
