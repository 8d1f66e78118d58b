package upstream_test

import (
	"bytes"
	"flag"
	"fmt"
	"go/format"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

var update = flag.Bool("update", false, "rewrite tasksets_gen.go from the conformance kit")

// TestTasksetTable regenerates the taskset table from the conformance kit — the harness
// prime-rl's example configs pin for each taskset, and each vendored taskset package's
// seats, settings and judges as the pinned verifiers resolves a bare config of it — and
// fails when tasksets_gen.go is not exactly that. `go test ./internal/upstream -run
// TestTasksetTable -update` rewrites it (after moving the pin or the kit).
func TestTasksetTable(t *testing.T) {
	src := generateTasksets(t)
	const file = "tasksets_gen.go"
	if *update {
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, src) {
		t.Fatalf("%s is not what the kit says; run go test ./internal/upstream -run TestTasksetTable -update and review the diff", file)
	}
	// The table says what the issue that made it was about: prime-rl's chat examples run
	// the null harness, and no vendored chat taskset is left to verifiers' bash fallback.
	for _, id := range []string{"reverse-text", "alphabet-sort", "wordle", "color-codeword", "gsm8k", "wiki-search"} {
		ts, ok := upstream.LookupTaskset("primeintellect/" + id + "@0.1.0")
		if !ok {
			t.Fatalf("%s: not in the table", id)
		}
		for _, seat := range ts.Seats() {
			if h := ts.SeatHarness(seat); h != upstream.NullHarness {
				t.Errorf("%s seat %s runs harness %q; want null", id, seat, h)
			}
		}
	}
	if ts, _ := upstream.LookupTaskset("wordle"); !slices.Equal(ts.Seats(), []string{"player"}) {
		t.Errorf("wordle seats %v; want [player]", ts.Seats())
	}
	if ts, _ := upstream.LookupTaskset("kuhn_poker"); !slices.Equal(ts.Seats(), []string{"player0", "player1"}) {
		t.Errorf("kuhn-poker seats %v; want [player0 player1]", ts.Seats())
	}
	if ts, _ := upstream.LookupTaskset("wiki-search"); len(ts.Judges) != 1 || ts.Judges[0].APIKeyVar != "PRIME_API_KEY" {
		t.Errorf("wiki-search judges %+v; want one called with PRIME_API_KEY", ts.Judges)
	}
	if ts, _ := upstream.LookupTaskset("alphabet-sort"); ts.MaxTurns() != 3 {
		t.Errorf("alphabet-sort max_turns %d; want 3", ts.MaxTurns())
	}
}

type genEntry struct {
	upstream.Taskset
	votes map[string]int // harness choices of the examples, by signature
}

func generateTasksets(t *testing.T) []byte {
	t.Helper()
	kit := upstreamtest.Kit(t)
	sources := readSources(t, filepath.Join(kit, "real-configs", "SOURCES"))
	entries := map[string]*genEntry{}
	entry := func(id string) *genEntry {
		m := upstream.TasksetModule(id)
		if entries[m] == nil {
			entries[m] = &genEntry{Taskset: upstream.Taskset{ID: id}, votes: map[string]int{}}
		}
		return entries[m]
	}

	// 1. prime-rl's example configs: the harness each pins for each taskset, by upstream's
	// resolution of the file.
	examples, _ := filepath.Glob(filepath.Join(kit, "real-configs", "prime-rl", "*.toml"))
	if len(examples) == 0 {
		t.Fatal("no real-configs/prime-rl in the kit")
	}
	sort.Strings(examples)
	res := upstreamtest.Check(t, "prime-rl", append(examples, "--output-dir", t.TempDir(), "--run-name", "table")...)
	firstFrom := map[string]string{} // signature → first file pinning it, per module
	for i, r := range res {
		if !r.OK {
			t.Fatalf("%s: upstream refuses its own example: %v", examples[i], r.Errors)
		}
		resolved, _ := r.Details["resolved"].(map[string]any)
		var raw map[string]any
		body, err := os.ReadFile(examples[i])
		if err != nil {
			t.Fatal(err)
		}
		if err := toml.Unmarshal(body, &raw); err != nil {
			t.Fatal(err)
		}
		from := "PrimeIntellect-ai/prime-rl@" + upstream.PrimeRLCommit[:7] + " " + sources[filepath.Base(examples[i])]
		vote := func(id string, harness map[string]any) {
			e := entry(id)
			h := map[string]string{}
			for seat, v := range harness {
				s, _ := v.(string)
				h[seat] = s
			}
			sig := fmt.Sprint(h)
			e.votes[sig]++
			key := upstream.TasksetModule(id) + sig
			if firstFrom[key] == "" {
				firstFrom[key] = from
			}
			best := e.votes[fmt.Sprint(e.Harness)]
			if e.Harness == nil || e.votes[sig] > best {
				e.Harness, e.HarnessFrom = h, firstFrom[key]
			}
		}
		seqLen, _ := dig(resolved, "seq_len", "trainer").(float64)
		for _, s := range list(resolved["train_sources"]) {
			src, _ := s.(map[string]any)
			ts, _ := src["taskset"].(map[string]any)
			id, _ := ts["id"].(string)
			vote(id, asMap(src["harness"]))
			// The lengths of the first example that trains on it.
			if e := entry(id); e.ExampleSeqLen == 0 {
				mt, _ := dig(src, "sampling", "max_completion_tokens").(float64)
				e.ExampleSeqLen, e.ExampleMaxTokens = int(seqLen), int(mt)
			}
		}
		eval, _ := resolved["eval"].(map[string]any)
		rawEval := list(dig(raw, "orchestrator", "eval", "source"))
		for j, s := range list(eval["sources"]) {
			src, _ := s.(map[string]any)
			if j >= len(rawEval) {
				t.Fatalf("%s: %d eval sources resolved, %d written", examples[i], len(list(eval["sources"])), len(rawEval))
			}
			id, _ := dig(rawEval[j], "env", "taskset", "id").(string)
			vote(id, asMap(src["harness"]))
		}
	}

	// 2. The taskset packages the pinned verifiers ships: a bare config of each, resolved.
	pkgs, _ := filepath.Glob(filepath.Join(kit, "verifiers", "environments", "*", "pyproject.toml"))
	if len(pkgs) == 0 {
		t.Fatal("no taskset packages in the kit's verifiers/environments")
	}
	sort.Strings(pkgs)
	dir := t.TempDir()
	var bare []string
	var ids []string
	for _, p := range pkgs {
		id := strings.ReplaceAll(filepath.Base(filepath.Dir(p)), "_", "-")
		f := filepath.Join(dir, id+".toml")
		cfg := fmt.Sprintf("max_steps = 1\n[model]\nname = \"Qwen/Qwen3-0.6B\"\n[deployment]\nnum_train_gpus = 1\nnum_infer_gpus = 1\n"+
			"[trainer]\n[orchestrator]\n[[orchestrator.train.source]]\nname = \"bare\"\n[orchestrator.train.source.env.taskset]\nid = %q\n[inference]\n", id)
		if err := os.WriteFile(f, []byte(cfg), 0o644); err != nil {
			t.Fatal(err)
		}
		bare, ids = append(bare, f), append(ids, id)
	}
	res = upstreamtest.Check(t, "prime-rl", append(append(bare, "--strict-tasksets"), "--output-dir", dir, "--run-name", "bare")...)
	for i, r := range res {
		if !r.OK {
			t.Fatalf("a bare config of the vendored taskset %s: %v", ids[i], r.Errors)
		}
		resolved, _ := r.Details["resolved"].(map[string]any)
		src, _ := list(resolved["train_sources"])[0].(map[string]any)
		e := entry(ids[i])
		e.Vendored = true
		e.Legacy = definesLoadEnvironment(t, filepath.Dir(pkgs[i]))
		ts := asMap(src["taskset"])
		e.Fields, e.TaskFields = map[string]any{}, map[string]any{}
		for k, v := range ts {
			if !slices.Contains([]string{"class", "id", "task", "system_prompt"}, k) {
				e.Fields[k] = whole(v)
			}
		}
		task := asMap(ts["task"])
		for k, v := range task {
			if !slices.Contains([]string{"judges", "stops", "metrics", "rewards"}, k) {
				e.TaskFields[k] = whole(v)
			}
		}
		for _, j := range list(task["judges"]) {
			jm := asMap(j)
			s := func(k string) string { v, _ := jm[k].(string); return v }
			e.Judges = append(e.Judges, upstream.Judge{ID: s("id"), Model: s("model"), BaseURL: s("base_url"), APIKeyVar: s("api_key_var")})
		}
		if e.Harness != nil {
			continue // an example pins it
		}
		// The package's own env config: its seats, and the harness it gives each, unless
		// that is verifiers' bash fallback (which no package chooses: it is what a package
		// that names none gets).
		e.Harness = map[string]string{}
		own := false
		for seat, v := range asMap(src["harness"]) {
			h, _ := v.(string)
			if h == "bash" {
				h = ""
			}
			own = own || h != ""
			e.Harness[seat] = h
		}
		if own {
			e.HarnessFrom = "PrimeIntellect-ai/verifiers@" + upstream.VerifiersCommit[:7] + " environments/" + filepath.Base(filepath.Dir(pkgs[i])) + " (the package's env config)"
		}
	}

	var b bytes.Buffer
	b.WriteString("// Code generated by TestTasksetTable from the upstream conformance kit (go test ./internal/upstream -run TestTasksetTable -update); DO NOT EDIT.\n\n")
	b.WriteString("package upstream\n\nvar tasksets = map[string]Taskset{\n")
	mods := make([]string, 0, len(entries))
	for m := range entries {
		mods = append(mods, m)
	}
	sort.Strings(mods)
	for _, m := range mods {
		e := entries[m]
		fmt.Fprintf(&b, "%q: {ID: %q, Harness: %#v, HarnessFrom: %q, Vendored: %t, Legacy: %t", m, e.ID, e.Harness, e.HarnessFrom, e.Vendored, e.Legacy)
		if e.ExampleSeqLen > 0 {
			fmt.Fprintf(&b, ", ExampleSeqLen: %d, ExampleMaxTokens: %d", e.ExampleSeqLen, e.ExampleMaxTokens)
		}
		if e.Vendored {
			fmt.Fprintf(&b, ", Fields: %#v, TaskFields: %#v", e.Fields, e.TaskFields)
			if len(e.Judges) > 0 {
				fmt.Fprintf(&b, ", Judges: %#v", e.Judges)
			}
		}
		b.WriteString("},\n")
	}
	b.WriteString("}\n")
	src := strings.ReplaceAll(b.String(), "upstream.", "")
	out, err := format.Source([]byte(src))
	if err != nil {
		t.Fatalf("generated table: %v\n%s", err, src)
	}
	return out
}

// readSources maps each real config's file name to its path in its repository.
func readSources(t *testing.T, path string) map[string]string {
	body, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Split(line, "\t")
		if strings.HasPrefix(line, "#") || len(f) < 4 {
			continue
		}
		out[filepath.Base(f[0])] = f[3]
	}
	return out
}

func list(v any) []any { l, _ := v.([]any); return l }

func asMap(v any) map[string]any { m, _ := v.(map[string]any); return m }

func dig(v any, keys ...string) any {
	for _, k := range keys {
		v = asMap(v)[k]
	}
	return v
}

// whole turns JSON's whole numbers back into ints.
func whole(v any) any {
	switch x := v.(type) {
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int(x)
		}
	case map[string]any:
		out := map[string]any{}
		for k, e := range x {
			out[k] = whole(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = whole(e)
		}
		return out
	}
	return v
}

// definesLoadEnvironment says whether a taskset package's source defines load_environment, the
// entry point of verifiers' legacy loader.
func definesLoadEnvironment(t *testing.T, dir string) bool {
	found := false
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".py") {
			return err
		}
		b, err := os.ReadFile(p)
		found = found || strings.Contains(string(b), "def load_environment(")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return found
}
