package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The dashboard in a real browser (Debian's chromium driven by playwright-core) against the
// local stack: the jobs table and its filters, a finished job's charts (read-out on hover,
// smoothing, log scale, any metric), rollouts (histogram, episodes, another step), events,
// checkpoint links and log tail, an eval's and a GEPA run's results, two runs compared, and the
// API docs, with no page error. Screenshots go to web/test/out/ (the test logs the folder).
func TestDashboardInABrowser(t *testing.T) {
	t.Parallel()
	web := filepath.Join("..", "..", "web")
	if _, err := os.Stat(filepath.Join(web, "node_modules", "playwright-core")); err != nil {
		t.Fatalf("playwright-core is not installed: run `make test` (or make web): %v", err)
	}
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatalf("chromium is not installed: run `make test` (or make chromium): %v", err)
	}
	// The operator prices the model the jobs run: the jobs table shows their cost.
	models := filepath.Join(t.TempDir(), "models.toml")
	if err := os.WriteFile(models, []byte("[[model]]\nname = \"Qwen/Qwen3-4B-Instruct-2507\"\ngpus = 2\nprice_per_gpu_hour = 2.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "20ms", "--models", models)
	// More than a page of jobs (the table shows 50 a page), older than the rest and stopped at
	// once: the table's More, and its refresh of every page shown.
	quick, err := os.ReadFile("../../examples/quickstart.toml")
	if err != nil {
		t.Fatal(err)
	}
	api := client.New(d.url, d.token)
	for i := range 50 {
		s, err := api.SubmitJob(t.Context(), quick, "application/toml", "")
		if err != nil {
			t.Fatalf("filler job %d: %v", i, err)
		}
		if _, err := api.CancelJob(t.Context(), s.ID); err != nil {
			t.Fatalf("stop filler job %d: %v", i, err)
		}
	}
	out, code := d.cli(t, "train", "submit", "../../examples/quickstart.toml", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %s", out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil || j.Status != job.Completed {
		t.Fatalf("the run: %v %s", err, out)
	}
	// A run forked from its step 15: the dashboard shows where it started from.
	out, code = d.cli(t, "train", "fork", j.ID, "--step", "15", "--max-steps", "25", "-o", "json")
	var forked job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &forked); code != 0 || err != nil {
		t.Fatalf("fork: %s", out)
	}
	// An eval of an open-weight model: served on the dev agent's GPU, its summary on the job.
	out, code = d.cli(t, "eval", "run", "my-env", "-m", "Qwen/Qwen3-4B-Instruct-2507", "-n", "4", "-r", "2", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("eval: %s", out)
	}
	var ev job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &ev); err != nil || ev.Status != job.Completed {
		t.Fatalf("the eval: %v %s", err, out)
	}
	get, code := d.cli(t, "train", "get", ev.ID)
	if code != 0 || !strings.Contains(get, "eval my-env") || !strings.Contains(get, "over 4 examples × 2 rollouts (8 scored)") {
		t.Errorf("train get of the eval (%d):\n%s", code, get)
	}
	// A GEPA optimization on an open-weight model: its candidates, best prompt and frontier.
	out, code = d.cli(t, "gepa", "run", "my-env", "-m", "Qwen/Qwen3-4B-Instruct-2507", "-B", "400", "-N", "8", "--wait", "-o", "json")
	var gepa job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &gepa); code != 0 || err != nil || gepa.Status != job.Completed {
		t.Fatalf("the GEPA run (%d): %v %s", code, err, out)
	}
	// A run of two environments: its reward charted per environment.
	multiFile := filepath.Join(t.TempDir(), "multi.toml")
	multi := strings.Replace(string(quick), "[checkpoints]", "[[env]]\nid = \"primeintellect/reverse-text\"\n\n[checkpoints]", 1)
	if err := os.WriteFile(multiFile, []byte(multi), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = d.cli(t, "train", "submit", multiFile, "--wait", "-o", "json")
	var two job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &two); code != 0 || err != nil || two.Status != job.Completed || len(two.Config.Env) != 2 {
		t.Fatalf("the run of two environments (%d): %v %s", code, err, out)
	}
	// A run whose environment the Hub cannot resolve: FAILED, read as the job's own fault.
	brokenFile := filepath.Join(t.TempDir(), "broken.toml")
	broken := "max_gpu_hours = 5\n" + strings.Replace(string(quick), `id = "primeintellect/alphabet-sort"`, `id = "primeintellect/alphabet-sort-broken"`, 1)
	if err := os.WriteFile(brokenFile, []byte(broken), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ = d.cli(t, "train", "submit", brokenFile, "--wait", "-o", "json")
	var failed job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &failed); err != nil || failed.Status != job.Failed || failed.FailureAnalysis == nil ||
		failed.FailureAnalysis.Class != job.FailEnvInstall || failed.FailureAnalysis.Fault != job.FaultUser {
		t.Fatalf("the run with a broken environment: %v %s", err, out)
	}
	get, code = d.cli(t, "train", "get", failed.ID)
	if !strings.Contains(get, "failure       environment_install (attempt 1; user fault") || !strings.Contains(get, "> install.log: ✗ Failed to resolve") {
		t.Errorf("train get of the failed run (%d):\n%s", code, get)
	}
	// An operator cordons a node (one not running yet): the nodes list and the dashboard's
	// nodes page show it beside the dev agent.
	if out, code := d.cli(t, "admin", "nodes", "cordon", "gpu-node-9", "--reason", "fan noise"); code != 0 ||
		!strings.Contains(out, "node gpu-node-9 cordoned") {
		t.Fatalf("admin nodes cordon (%d): %s", code, out)
	}
	nodes, code := d.cli(t, "admin", "nodes", "list")
	if code != 0 || !regexp.MustCompile(`(?m)^gpu-node-9\s+cordoned\s.*fan noise$`).MatchString(nodes) ||
		!regexp.MustCompile(`(?m)^dev-agent-1\s+ok\s`).MatchString(nodes) {
		t.Errorf("admin nodes list (%d):\n%s", code, nodes)
	}
	// A long run, left running: the browser watches its charts grow, then stops it.
	liveFile := filepath.Join(t.TempDir(), "live.toml")
	if err := os.WriteFile(liveFile, []byte(strings.Replace(string(quick), "max_steps = 20", "max_steps = 100000", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = d.cli(t, "train", "submit", liveFile, "-o", "json")
	var live job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &live); code != 0 || err != nil {
		t.Fatalf("the long run (%d): %v %s", code, err, out)
	}
	shots, err := filepath.Abs(filepath.Join(web, "test", "out"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("node", filepath.Join("test", "dashboard.mjs"), d.url, d.token, j.ID, shots, ev.ID, forked.ID, failed.ID, gepa.ID, two.ID, live.ID)
	cmd.Dir = web
	res, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(res), "dashboard ok") {
		t.Fatalf("the browser test: %v\n%s", err, res)
	}
	for _, name := range []string{"jobs.png", "job.png", "charts.png", "rollouts.png", "eval.png", "gepa.png", "compare.png", "failed.png", "nodes.png", "phone.png", "docs.png"} {
		st, err := os.Stat(filepath.Join(shots, name))
		if err != nil || st.Size() < 10_000 {
			t.Errorf("screenshot %s: %v", name, err)
		}
	}
	t.Logf("screenshots in %s", shots)
	d.stop(t)
}
