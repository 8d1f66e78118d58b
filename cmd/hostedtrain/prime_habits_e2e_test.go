package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// The prime CLI's habits work here: `train CONFIG` submits, `train init` writes a template both
// CLIs accept, `train models`, a piece of a job's id wherever an id is taken, logs by -n,
// --regex and --raw, list by --num and --page, checkpoints --download latest, and the flags
// that only skip the prime CLI's questions (-y, -f).
func TestCLITakesThePrimeCLIsHabits(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "rl.toml")

	out, code := d.cli(t, "train", "init", tmpl)
	if code != 0 || !strings.Contains(out, "hostedtrain train "+tmpl) {
		t.Fatalf("train init (%d): %s", code, out)
	}
	if out, code = d.cli(t, "train", "init", tmpl); code == 0 || !strings.Contains(out, "--force") {
		t.Errorf("train init over a file (%d): %s", code, out)
	}
	// The real prime CLI accepts the template as it is.
	if res := upstreamtest.Check(t, "prime-train", tmpl); len(res) != 1 || !res[0].OK {
		t.Errorf("the prime CLI refuses the template: %+v", res)
	}

	// `train CONFIG` is `train submit CONFIG`; -y is taken.
	out, code = d.cli(t, "train", tmpl, "-y", "--wait", "--poll", "100ms", "-o", "json")
	var first job.Job
	if code != 0 || json.Unmarshal([]byte(lastLine(out)), &first) != nil || first.Status != job.Completed || first.Progress.Step != 100 {
		t.Fatalf("train CONFIG --wait (%d): %s", code, out)
	}
	out, code = d.cli(t, "train", tmpl, "-o", "json")
	var second job.Job
	if code != 0 || json.Unmarshal([]byte(lastLine(out)), &second) != nil {
		t.Fatalf("train CONFIG (%d): %s", code, out)
	}

	// A piece of an id: its end is enough; a start two jobs share is not.
	if out, code = d.cli(t, "train", "get", first.ID[len(first.ID)-6:]); code != 0 || !strings.Contains(out, first.ID) {
		t.Errorf("get by the end of an id (%d): %s", code, out)
	}
	if first.ID[:4] == second.ID[:4] {
		if out, code = d.cli(t, "train", "get", first.ID[:4]); code == 0 || !strings.Contains(out, "give more of it") {
			t.Errorf("get by a start two jobs share (%d): %s", code, out)
		}
	}
	if out, code = d.cli(t, "train", "get", "zzzzzz"); code == 0 || !strings.Contains(out, "no job of yours") {
		t.Errorf("get by a piece of no id (%d): %s", code, out)
	}

	// Logs: the last -n lines that match a --regex, --raw (as written: no component column).
	out, code = d.cli(t, "train", "logs", first.ID[len(first.ID)-6:], "-n", "3", "--regex", "--search", `checkpoint for step \d+$`, "--raw", "--component", "orchestrator")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 3 || !strings.HasSuffix(lines[2], "Saved orchestrator checkpoint for step 100") {
		t.Errorf("logs -n 3 --regex --raw (%d): %q", code, lines)
	}
	for _, l := range lines {
		if strings.Contains(l, " | ") || !regexp.MustCompile(`Saved orchestrator checkpoint for step \d+$`).MatchString(l) {
			t.Errorf("a raw log line %q", l)
		}
	}

	// list --num 1 --page 2 is the older of the two.
	if out, code = d.cli(t, "train", "list", "-n", "1", "--page", "2", "-o", "json"); code != 0 || !strings.Contains(out, first.ID) || strings.Contains(out, second.ID) {
		t.Errorf("list -n 1 --page 2 (%d): %s", code, out)
	}

	// checkpoints --download latest fetches the newest committed one.
	to := filepath.Join(dir, "ckpt")
	if out, code = d.cli(t, "train", "checkpoints", first.ID, "--download", "latest", "--to", to); code != 0 {
		t.Errorf("checkpoints --download latest (%d): %s", code, out)
	} else if _, err := os.Stat(filepath.Join(to, "step_100")); err != nil {
		t.Errorf("checkpoints --download latest wrote no step_100: %v\n%s", err, out)
	}

	if out, code = d.cli(t, "train", "models"); code != 0 || !regexp.MustCompile(`Qwen/Qwen3-4B-Instruct-2507\s+2\s+-\s+qwen3`).MatchString(out) {
		t.Errorf("train models (%d): %s", code, out)
	}
	// stop -f takes the prime CLI's flag.
	if out, code = d.cli(t, "train", "stop", "-f", "--no-wait", second.ID); code != 0 && !strings.Contains(out, "already ended") {
		t.Errorf("stop -f (%d): %s", code, out)
	}
	d.stop(t)
}

// `hostedtrain dev --models FILE` is the operator's list: `train models` shows it, with
// prices, and a job of another model is refused naming it.
func TestDevTakesTheOperatorsModels(t *testing.T) {
	t.Parallel()
	list := filepath.Join(t.TempDir(), "models.toml")
	if err := os.WriteFile(list, []byte("[[model]]\nname = \"Qwen/Qwen3-4B-Instruct-2507\"\ngpus = 2\nprice_per_gpu_hour = 2.5\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	d := startDev(t, "20ms", "--models", list)
	out, code := d.cli(t, "train", "models")
	if code != 0 || !regexp.MustCompile(`Qwen/Qwen3-4B-Instruct-2507\s+2\s+\$2\.50/GPU-hour`).MatchString(out) || strings.Contains(out, "any other") {
		t.Errorf("train models (%d): %s", code, out)
	}
	// The dev agent, idle, is the capacity: one node could start a job of it now.
	idle := regexp.MustCompile(`Qwen/Qwen3-4B-Instruct-2507\s+2\s+\$2\.50/GPU-hour\s+qwen3\s+1\n`)
	testwait.Until(t, time.Minute, "train models to show the idle dev agent", func() bool {
		out, _ = d.cli(t, "train", "models")
		return idle.MatchString(out)
	})
	if out, code := d.cli(t, "train", "gpus"); code != 0 || !regexp.MustCompile(`H100\s+8\s+1: 1  2: 1  `).MatchString(out) {
		t.Errorf("train gpus (%d): %s", code, out)
	}
	job := filepath.Join(t.TempDir(), "job.toml")
	if err := os.WriteFile(job, []byte("model = \"Qwen/Qwen3-8B\"\n[[env]]\nid = \"gsm8k\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, code = d.cli(t, "train", job); code == 0 || !strings.Contains(out, "line 1 (/model): Qwen/Qwen3-8B is not offered here") {
		t.Errorf("a job of an unlisted model (%d): %s", code, out)
	}
	// A job of a listed model: its usage is priced, its tokens counted.
	out, code = d.cli(t, "train", "submit", "../../examples/quickstart.toml", "--wait", "-o", "json")
	var done struct{ ID, Status string }
	if err := json.Unmarshal([]byte(lastLine(out)), &done); code != 0 || err != nil || done.Status != "COMPLETED" {
		t.Fatalf("the run (%d): %s", code, out)
	}
	if out, code = d.cli(t, "train", "usage", done.ID[:8], "--watch"); code != 0 || !regexp.MustCompile(`cost\s+\$\d+\.\d\d \(at \$2\.50/GPU-hour\)`).MatchString(out) ||
		!regexp.MustCompile(`tokens\s+\d+ \(\d+ in, \d+ out\)`).MatchString(out) || !strings.Contains(out, "COMPLETED") {
		t.Errorf("train usage ID --watch of a finished job (%d): %s", code, out)
	}
	// The organization's usage by user and by token: the dev admin's token ran it, priced.
	if out, code = d.cli(t, "train", "usage"); code != 0 || !regexp.MustCompile(`(?m)^dev-admin\s+\S+ GPU-\S+\s+\$\d+\.\d\d$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^BY TOKEN\s+GPU TIME\s+COST\n\S{8,}\s+\S+ GPU-\S+\s+\$\d+\.\d\d$`).MatchString(out) {
		t.Errorf("train usage by user and token (%d): %s", code, out)
	}
	// What the job keeps in storage — every file under its folder of the dev stack's objects —
	// is measured by the reaper soon after it ended, for the job and the organization.
	var stored int64
	err := filepath.WalkDir(filepath.Join(d.data, "objects", "jobs", done.ID), func(_ string, e os.DirEntry, err error) error {
		if err != nil || e.IsDir() {
			return err
		}
		info, err := e.Info()
		stored += info.Size()
		return err
	})
	if err != nil || stored == 0 {
		t.Fatalf("the job's files: %d bytes, %v", stored, err)
	}
	var usage struct {
		Organization struct {
			StorageBytes int64 `json:"storage_bytes"`
		}
		Jobs []struct {
			ID           string
			StorageBytes int64 `json:"storage_bytes"`
		}
	}
	testwait.Until(t, time.Minute, "the job's storage to be measured", func() bool {
		out, _ = d.cli(t, "train", "usage", "-o", "json")
		return json.Unmarshal([]byte(out), &usage) == nil && usage.Organization.StorageBytes == stored
	})
	if len(usage.Jobs) != 1 || usage.Jobs[0].ID != done.ID || usage.Jobs[0].StorageBytes != stored {
		t.Errorf("usage by job: %+v; want %s keeping %d bytes", usage.Jobs, done.ID, stored)
	}
	if out, code = d.cli(t, "train", "usage", done.ID[:8]); code != 0 || !regexp.MustCompile(`storage\s+\d+\.\d [KM]iB \(checkpoints`).MatchString(out) {
		t.Errorf("train usage ID shows its storage? (%d): %s", code, out)
	}
	if out, code = d.cli(t, "train", "usage"); code != 0 || !regexp.MustCompile(`; \d+\.\d [KM]iB in storage\n`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^`+done.ID+`\s+rl\s+COMPLETED\s+.*GPU-\S+\s+\d+\.\d [KM]iB$`).MatchString(out) {
		t.Errorf("train usage shows the storage? (%d): %s", code, out)
	}
	// An operator gives the organization a monthly budget and a checkpoint TTL; a later change of
	// its weight keeps both (flags not given keep their values).
	if out, code = d.cli(t, "admin", "org", "set", "dev", "--monthly-gpu-hours", "100", "--checkpoint-ttl-days", "30"); code != 0 ||
		!regexp.MustCompile(`monthly budget: \d+\.\d\d of 100\.00 GPU-hours used this month \(\d+ %\)`).MatchString(out) ||
		!strings.Contains(out, "checkpoints: kept 30 days after a job ends") ||
		!regexp.MustCompile(`storage: \d+\.\d [KM]iB \(as last measured\)`).MatchString(out) {
		t.Errorf("admin org set (%d): %s", code, out)
	}
	if out, code = d.cli(t, "admin", "org", "set", "dev", "--weight", "2"); code != 0 || !strings.Contains(out, "weight 2,") ||
		!strings.Contains(out, "of 100.00 GPU-hours") || !strings.Contains(out, "kept 30 days") {
		t.Errorf("admin org set --weight kept the rest? (%d): %s", code, out)
	}
	if out, code = d.cli(t, "train", "usage", "--watch"); code == 0 || !strings.Contains(out, "give its ID") {
		t.Errorf("train usage --watch without an ID (%d): %s", code, out)
	}
	d.stop(t)
}
