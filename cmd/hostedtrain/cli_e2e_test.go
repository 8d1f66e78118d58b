package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// cliWith runs the CLI with exactly env (plus PATH), for tests of where it finds its token.
func cliWith(t *testing.T, env []string, stdin string, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH")}, env...)
	cmd.Stdin = strings.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatal(err)
	}
	return string(out), code
}

// Everything a user follows a run with, from the CLI against the local stack: login, logs,
// metrics and their plot, checkpoints and their download, artifacts, progress, usage, events,
// list filters, and stop waiting for STOPPED.
func TestCLIFollowsARun(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")

	// login keeps the token in the config folder, mode 0600; the CLI then needs no env.
	home := t.TempDir()
	env := []string{"HOME=" + home, "XDG_CONFIG_HOME=" + filepath.Join(home, ".config")}
	if out, code := cliWith(t, env, d.token+"\n", "login", "--url", d.url); code != 0 || !strings.Contains(out, "logged in") {
		t.Fatalf("login (%d): %s", code, out)
	}
	cfgPath := filepath.Join(home, ".config", "hostedtrain", "config.json")
	st, err := os.Stat(cfgPath)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("config %s: %v %v", cfgPath, st, err)
	}
	if out, code := cliWith(t, env, "", "login", "--url", d.url, "--token", "not-a-token"); code == 0 || !strings.Contains(out, "401") {
		t.Errorf("login with a bad token (%d): %s", code, out)
	}
	out, code := cliWith(t, env, "", "train", "submit", "../../examples/quickstart.toml", "--wait", "-o", "json")
	if code != 0 {
		t.Fatalf("submit with the saved token (%d): %s", code, out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil || j.Status != job.Completed {
		t.Fatalf("the run: %v %s", err, out)
	}
	// HOSTEDTRAIN_TOKEN wins over the file.
	if out, code := cliWith(t, append(env, "HOSTEDTRAIN_TOKEN=wrong"), "", "train", "list"); code == 0 || !strings.Contains(out, "HOSTEDTRAIN_TOKEN") {
		t.Errorf("a wrong HOSTEDTRAIN_TOKEN did not win (%d): %s", code, out)
	}

	check := func(what string, args []string, wants ...string) string {
		t.Helper()
		out, code := d.cli(t, args...)
		if code != 0 {
			t.Errorf("%s (%d): %s", what, code, out)
			return out
		}
		for _, w := range wants {
			if !strings.Contains(out, w) {
				t.Errorf("%s lacks %q:\n%s", what, w, out)
			}
		}
		return out
	}
	logs := check("logs", []string{"train", "logs", j.ID, "--component", "trainer", "--tail", "5"}, "trainer      | ", "Training finished after step 20")
	if n := strings.Count(strings.TrimSpace(logs), "\n") + 1; n != 5 {
		t.Errorf("--tail 5 printed %d lines", n)
	}
	check("logs -f of a finished run", []string{"train", "logs", j.ID, "-f", "--component", "agent"}, "pipeline exited")
	comps := check("components", []string{"train", "components", j.ID}, "COMPONENT", "trainer", "--env ")
	if m := regexp.MustCompile(`--env (\S+)`).FindStringSubmatch(comps); m != nil {
		check("logs --env", []string{"train", "logs", j.ID, "--env", m[1], "-n", "3"}, "rollouts scored")
	}
	check("metrics", []string{"train", "metrics", j.ID}, "REWARD", "LOSS", "\n20 ", "reward = train/agg/all/agent/reward/mean")
	check("metrics --plot", []string{"train", "metrics", j.ID, "--plot"}, "reward (train/agg/all/agent/reward/mean), steps 1 to 20", "┤")
	check("checkpoints", []string{"train", "checkpoints", j.ID}, "STEP", "committed")
	check("checkpoints --pin", []string{"train", "checkpoints", j.ID, "--pin", "20"}, "committed, pinned")
	dl := t.TempDir()
	check("checkpoints --download", []string{"train", "checkpoints", j.ID, "--download", "0", "--to", dl}, "sha256 ok")
	if _, err := os.Stat(filepath.Join(dl, "step_20", "trainer", ".metadata")); err != nil {
		t.Errorf("the downloaded checkpoint: %v", err)
	}
	// The weights alone, as a folder to load elsewhere: the LoRA adapter prime-rl broadcast for
	// the step, with its config naming the base model.
	ex := t.TempDir()
	check("checkpoints --export", []string{"train", "checkpoints", j.ID, "--export", "latest", "--to", ex}, "adapter_model.safetensors", "sha256 ok")
	if cfg, err := os.ReadFile(filepath.Join(ex, "step_20", "adapter_config.json")); err != nil ||
		!strings.Contains(string(cfg), `"base_model_name_or_path": "Qwen/Qwen3-4B-Instruct-2507"`) || !strings.Contains(string(cfg), `"r": 32`) {
		t.Errorf("the exported adapter's config: %v %s", err, cfg)
	}
	if entries, _ := os.ReadDir(filepath.Join(ex, "step_20")); len(entries) != 2 {
		t.Errorf("the export holds %d files; want the adapter and its config", len(entries))
	}
	check("progress", []string{"train", "progress", j.ID}, "20/20 (100.0%)", "reward", "train/agg/all/agent/reward/mean", "20 steps have rollouts, 1 to 20")
	check("rollouts", []string{"train", "rollouts", j.ID[:8], "--step", "3", "-n", "2"}, "step 3: ", "page 1 of ", "[user] Step 3, example 0", "apples", "── episode 0 · reward")
	check("distributions", []string{"train", "distributions", j.ID, "--type", "advantages"}, "advantages at step 20 over ", "█")
	if out, code := d.cli(t, "train", "rollouts", j.ID, "--step", "21"); code == 0 || !strings.Contains(out, "step 21 has no stored rollouts") {
		t.Errorf("rollouts of a step past the end (%d): %s", code, out)
	}
	check("usage", []string{"train", "usage"}, "GPU-", j.ID)
	check("events", []string{"train", "events", j.ID}, "job.queued", "job.checkpoint", "job.completed")
	check("list --status", []string{"train", "list", "--status", "COMPLETED", "--kind", "rl"}, j.ID)
	if out := check("list --status QUEUED", []string{"train", "list", "--status", "queued"}); strings.Contains(out, j.ID) {
		t.Errorf("a completed job listed as queued:\n%s", out)
	}
	for _, c := range []string{"logs", "metrics", "checkpoints", "progress", "events", "rollouts", "distributions"} {
		out, code := d.cli(t, "train", c, j.ID, "-o", "json")
		if code != 0 || !json.Valid([]byte(strings.TrimSpace(strings.Split(strings.TrimSpace(out), "\n")[0]))) {
			t.Errorf("%s -o json (%d): %s", c, code, out)
		}
	}

	// An error names the parameter and what it takes.
	if out, code := d.cli(t, "train", "logs", j.ID, "--level", "LOUD"); code == 0 || !strings.Contains(out, "parameter level") || !strings.Contains(out, "WARNING") {
		t.Errorf("a bad --level (%d): %s", code, out)
	}

	// stop waits until the job is STOPPED.
	long := filepath.Join(t.TempDir(), "long.toml")
	if err := os.WriteFile(long, []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 100000\n[[env]]\nid = \"acme/env\"\n[checkpoints]\ninterval = 10\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = d.cli(t, "train", "submit", long, "-o", "json")
	if code != 0 {
		t.Fatalf("submit: %s", out)
	}
	var lj job.Job
	_ = json.Unmarshal([]byte(lastLine(out)), &lj)
	check("progress of the long run", []string{"train", "progress", lj.ID})
	testwait.Until(t, time.Minute, "the long run to start", func() bool {
		out, _ := d.cli(t, "train", "get", lj.ID, "-o", "json")
		var g job.Job
		return json.Unmarshal([]byte(lastLine(out)), &g) == nil && g.Status == job.Running
	})
	check("stop", []string{"train", "stop", lj.ID, "--timeout", "60s"}, "STOPPED")

	// delete cannot be undone: off a terminal it wants --force; then the job and its data go.
	if out, code := d.cli(t, "train", "delete", lj.ID); code == 0 || !strings.Contains(out, "pass --force (-f) to go ahead") {
		t.Errorf("delete without --force off a terminal (%d): %s", code, out)
	}
	if out, code := d.cli(t, "train", "delete", lj.ID[:13], "-f"); code == 0 || !strings.Contains(out, "takes a job's whole id") {
		t.Errorf("delete -f of a piece of an id (%d): %s", code, out)
	}
	check("delete", []string{"train", "delete", lj.ID, "-f"}, "job "+lj.ID+" deleted")
	if out, code := d.cli(t, "train", "get", lj.ID); code == 0 || !strings.Contains(out, "404") {
		t.Errorf("get of the deleted job (%d): %s", code, out)
	}
	d.stop(t)
}
