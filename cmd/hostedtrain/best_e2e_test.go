package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// A run with online evaluation names its best checkpoint by eval reward — the checkpoint whose
// step has the highest newest evaluation, read here from the run's own metrics — and
// `checkpoints --download best` fetches that one.
func TestDevNamesTheBestCheckpointByEvalReward(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	file := filepath.Join(t.TempDir(), "eval.toml")
	body := `model = "Qwen/Qwen3-4B-Instruct-2507"
max_steps = 24
batch_size = 16
rollouts_per_example = 4

[[env]]
id = "primeintellect/alphabet-sort"

[eval]
interval = 4
num_examples = 8

[[eval.env]]
id = "primeintellect/alphabet-sort"

[checkpoints]
interval = 4
keep_cloud = -1
`
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code := d.cli(t, "train", "submit", file, "--wait", "-o", "json")
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); code != 0 || err != nil || j.Status != job.Completed {
		t.Fatalf("the run (%d): %s", code, out)
	}
	api := client.New(d.url, d.token)
	ctx := context.Background()
	cps, err := api.JobCheckpoints(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	evalKey := j.Progress.Series["eval_reward"]
	page, err := api.JobMetrics(ctx, j.ID, 0, 0, []string{evalKey}, 0)
	if err != nil || evalKey == "" {
		t.Fatalf("eval metrics (%q): %v", evalKey, err)
	}
	evals := map[int]float64{}
	for _, row := range page.Items {
		if v, ok := row.Float(evalKey); ok {
			evals[row.Step()] = v
		}
	}
	// the expected best: the committed step whose newest evaluation since the checkpoint
	// before it (never the base model's, step 0) is highest
	want, wantV, prev := 0, math.Inf(-1), 0
	for _, c := range cps {
		newest, at := 0.0, -1
		for s, v := range evals {
			if s <= c.Step && s > prev && s > at {
				newest, at = v, s
			}
		}
		if at >= 0 && newest > wantV {
			want, wantV = c.Step, newest
		}
		prev = c.Step
	}
	best := 0
	for _, c := range cps {
		if c.Best {
			if best != 0 {
				t.Fatalf("two best checkpoints: %+v", cps)
			}
			best = c.Step
		}
		if c.Metrics["reward"] == 0 {
			t.Errorf("checkpoint %d has no reward: %+v", c.Step, c.Metrics)
		}
	}
	if want == 0 || best != want {
		t.Fatalf("best checkpoint %d, want %d (evaluations %v)", best, want, evals)
	}
	dl := t.TempDir()
	if out, code := d.cli(t, "train", "checkpoints", j.ID, "--download", "best", "--to", dl); code != 0 || !strings.Contains(out, "sha256 ok") {
		t.Fatalf("--download best (%d): %s", code, out)
	}
	if _, err := os.Stat(filepath.Join(dl, "step_"+strconv.Itoa(best), "trainer", ".metadata")); err != nil {
		t.Errorf("the best checkpoint's files: %v", err)
	}
	d.stop(t)
}
