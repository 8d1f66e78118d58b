package gpuagent

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// normalized reads a job file as the API would take it.
func normalized(t *testing.T, name string) jobspec.Spec {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("..", "testdata", "jobs", name))
	if err != nil {
		t.Fatal(err)
	}
	doc, err := jobspec.DecodeTOML(data)
	if err != nil {
		t.Fatal(err)
	}
	switch name {
	case "gepa.toml":
		doc["kind"] = jobspec.KindGEPA
	case "eval.toml":
		doc["kind"] = jobspec.KindEval
	}
	res, err := jobspec.Normalize(doc)
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("%s: %v %v", name, err, res.Errors)
	}
	return res.Spec
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./gpuagent -run Golden -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// Every fixture's generated pipeline config (rl.toml, gepa.toml) or command (eval) is what the
// golden files say. Review a change to them as a change to what runs on the GPUs.
func TestGoldenPipelineConfigs(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("..", "testdata", "jobs", "*.toml"))
	if err != nil || len(files) < 8 {
		t.Fatalf("fixtures: %v %v", files, err)
	}
	for _, f := range files {
		name := filepath.Base(f)
		t.Run(name, func(t *testing.T) {
			spec := normalized(t, name)
			base := strings.TrimSuffix(name, ".toml")
			switch spec.Kind {
			case jobspec.KindRL:
				out, err := renderRLConfig("job-golden", spec, spec.Resources.GPUs)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, base+".rl.toml", out)
			case jobspec.KindGEPA:
				out, err := renderGEPAConfig("job-golden", spec)
				if err != nil {
					t.Fatal(err)
				}
				golden(t, base+".gepa.toml", out)
			case jobspec.KindEval:
				flags, err := evalFlags(spec)
				if err != nil {
					t.Fatal(err)
				}
				argv := expand(DefaultPipeline().Eval, map[string]string{
					"env_id": spec.Env[0].ID, "model": spec.Model,
					"num_examples": strconv.Itoa(spec.Evaluation.NumExamples), "rollouts_per_example": strconv.Itoa(spec.Evaluation.RolloutsPerExample),
				}, map[string][]string{"eval_flags": flags})
				golden(t, base+".eval.argv", []byte(strings.Join(argv, "\n")+"\n"))
			}
		})
	}
}

func TestSplitGPUsBetweenInferenceAndTrainer(t *testing.T) {
	t.Parallel()
	for n, want := range map[int][2]int{1: {1, 1}, 2: {1, 1}, 4: {2, 2}, 8: {4, 4}, 3: {1, 2}} {
		infer, train := splitGPUs(n)
		if infer != want[0] || train != want[1] {
			t.Errorf("%d GPUs: %d inference, %d trainer; want %v", n, infer, train, want)
		}
	}
}

func TestExpandSplatsListsAndDropsEmptyOnes(t *testing.T) {
	t.Parallel()
	got := expand([]string{"prime", "eval", "run", "{env_id}", "-m", "{model}", "{eval_flags}", "--x={env_id}"},
		map[string]string{"env_id": "acme/x", "model": "m"}, map[string][]string{"eval_flags": {"-a", `{"k":1}`, "-s"}})
	if strings.Join(got, " ") != `prime eval run acme/x -m m -a {"k":1} -s --x=acme/x` {
		t.Errorf("got %q", got)
	}
	got = expand([]string{"a", "{eval_flags}", "b"}, nil, map[string][]string{"eval_flags": nil})
	if strings.Join(got, " ") != "a b" {
		t.Errorf("got %q", got)
	}
}
