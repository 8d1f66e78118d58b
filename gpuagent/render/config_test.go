package render

import (
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// admitted reads a job file as the API would take it: its secrets gathered as the CLI does,
// the schema, normalization and the rules.
func admitted(t *testing.T, name string) (jobspec.Spec, []string) {
	t.Helper()
	adm, err := api.NewAdmission()
	if err != nil {
		t.Fatal(err)
	}
	kind := jobspectest.Kind(name)
	got, prob := adm.Admit(kind, "application/toml", jobspectest.Fixture(t, name))
	if prob != nil {
		t.Fatalf("%s: %s %+v", name, prob.Detail, prob.Errors)
	}
	var secrets []string
	for k := range got.Secrets {
		secrets = append(secrets, k)
	}
	sort.Strings(secrets)
	return got.Spec, secrets
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
		t.Fatalf("%v (run go test ./gpuagent/render -run Golden -update to write it)", err)
	}
	if string(got) != string(want) {
		t.Errorf("%s differs from the golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

// Every fixture's rendered files (rl.toml, the GEPA config and endpoint registry) and commands
// are what the golden files say, on the GPUs the job asks for. Review a change to them as a
// change to what runs on the GPUs; the conformance test proves upstream accepts them.
func TestGoldenPipelineConfigs(t *testing.T) {
	for _, name := range jobspectest.Names(t) {
		t.Run(name, func(t *testing.T) {
			spec, secrets := admitted(t, name)
			r, err := Render(RenderInput{JobID: "job-golden", Spec: spec, Secrets: secrets, GPUs: spec.Resources.GPUs,
				Ports: upstream.Ports{Base: 20000}, Dir: "/work/jobs/job-golden", Pipeline: DefaultPipeline()})
			if err != nil {
				t.Fatal(err)
			}
			base := strings.TrimSuffix(name, ".toml")
			for _, f := range r.FileNames() {
				golden(t, base+"."+f, r.Files[f])
			}
			var cmds strings.Builder
			if len(r.EnvCheck) > 0 {
				cmds.WriteString("env check: " + strings.Join(r.EnvCheck, " ") + "\n")
			}
			if len(r.Preflight) > 0 {
				cmds.WriteString("preflight: " + strings.Join(r.Preflight, " ") + "\n")
			}
			if r.Serve != nil {
				cmds.WriteString("serve: " + strings.Join(r.Serve.Command, " ") + "\n")
			}
			cmds.WriteString("run: " + strings.Join(r.Command, " ") + "\n")
			golden(t, base+".commands", []byte(cmds.String()))
		})
	}
}

func TestExpandSplatsListsAndDropsEmptyOnes(t *testing.T) {
	t.Parallel()
	got := Expand([]string{"prime", "eval", "run", "{env_id}", "-m", "{model}", "{eval_flags}", "--x={env_id}"},
		map[string]string{"env_id": "acme/x", "model": "m"}, map[string][]string{"eval_flags": {"-a", `{"k":1}`, "-s"}})
	if strings.Join(got, " ") != `prime eval run acme/x -m m -a {"k":1} -s --x=acme/x` {
		t.Errorf("got %q", got)
	}
	got = Expand([]string{"a", "{eval_flags}", "b"}, nil, map[string][]string{"eval_flags": nil})
	if strings.Join(got, " ") != "a b" {
		t.Errorf("got %q", got)
	}
}

// The environment check a GEPA or eval job runs before its model server (the runtime's
// env_check) passes an environment the legacy loader can load and stops one it cannot (a
// verifiers v1 taskset: no load_environment), with a message that says so.
func TestEnvCheckStopsAV1OnlyEnvironment(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for name, src := range map[string]string{
		"legacy_env.py": "def load_environment(**kwargs):\n    return None\n",
		"v1_only.py":    "class Taskset:\n    pass\n",
	} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	prog := upstream.PinnedRuntime().Commands.EnvCheck
	if len(prog) != 4 || prog[0] != "python" || prog[1] != "-c" || prog[3] != "{envs}" {
		t.Fatalf("env_check is %q; this test runs its program", prog)
	}
	run := func(ids ...string) (string, error) {
		cmd := exec.Command("python3", append([]string{"-c", prog[2]}, ids...)...)
		cmd.Env = append(os.Environ(), "PYTHONPATH="+dir)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := run("acme/legacy-env@1.0"); err != nil {
		t.Errorf("a legacy environment: %v\n%s", err, out)
	}
	if out, err := run("acme/legacy-env", "owner/v1-only"); err == nil || !strings.Contains(out, "cannot load owner/v1-only: a verifiers v1 taskset") {
		t.Errorf("a v1-only environment: %v\n%s", err, out)
	}
}
