package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// A run started from another run's checkpoint (checkpoint_id) resumes at the step after it —
// the agent restores the other job's committed checkpoint, which the job's storage grant lets
// it read — trains to its own max_steps and commits its own checkpoints.
func TestDevWarmStartsFromAnotherRunsCheckpoint(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	out, code := d.cli(t, "train", "submit", "../../examples/quickstart.toml", "--wait", "-o", "json")
	var first job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &first); code != 0 || err != nil || first.Status != job.Completed {
		t.Fatalf("the first run (%d): %s", code, out)
	}
	body, err := os.ReadFile("../../examples/quickstart.toml")
	if err != nil {
		t.Fatal(err)
	}
	warm := strings.Replace(string(body), "max_steps = 20", "max_steps = 30\ncheckpoint_id = \""+first.ID+"-step-15\"", 1)
	path := filepath.Join(t.TempDir(), "warm.toml")
	if err := os.WriteFile(path, []byte(warm), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = d.cli(t, "train", "submit", path, "--wait", "-o", "json")
	var second job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &second); code != 0 || err != nil || second.Status != job.Completed {
		t.Fatalf("the warm-started run (%d): %s", code, out)
	}
	if ws := second.Config.WarmStart; ws == nil || ws.Job != first.ID || ws.Step != 15 {
		t.Fatalf("warm start %+v", second.Config.WarmStart)
	}
	api := client.New(d.url, d.token)
	ctx := context.Background()
	m, err := api.JobMetrics(ctx, second.ID, 0, 0, []string{"loss/mean"}, 0)
	if err != nil {
		t.Fatal(err)
	}
	stepOf := func(row jobdata.Row) int { return row.Step() }
	if len(m.Items) != 15 || stepOf(m.Items[0]) != 16 || stepOf(m.Items[len(m.Items)-1]) != 30 {
		t.Errorf("the warm-started run's metrics: %d rows, want steps 16 to 30", len(m.Items))
	}
	cps, err := api.JobCheckpoints(ctx, second.ID)
	if err != nil {
		t.Fatal(err)
	}
	var steps []int
	for _, c := range cps {
		steps = append(steps, c.Step)
	}
	if len(steps) != 2 || steps[0] != 25 || steps[1] != 30 {
		t.Errorf("the warm-started run's own checkpoints: %v, want 25 and 30 (never step 15, the other job's)", steps)
	}
	// A fork of the warm-started run, from its step 25: the same, asked of the job itself.
	out, code = d.cli(t, "train", "fork", second.ID, "--step", "25", "--max-steps", "35", "--name", "forked")
	if code != 0 || !strings.Contains(out, "starts from job "+second.ID+"'s checkpoint of step 25 and runs to step 35") {
		t.Fatalf("fork (%d): %s", code, out)
	}
	forked := strings.Fields(out)[1]
	testwait.Until(t, 2*time.Minute, "the fork to complete", func() bool {
		j, err := api.GetJob(ctx, forked)
		return err == nil && j.Status == job.Completed
	})
	if out, code := d.cli(t, "train", "get", forked); code != 0 || !strings.Contains(out, "started from  job "+second.ID+", its checkpoint of step 25") ||
		!strings.Contains(out, "steps         35/35") {
		t.Errorf("train get of the fork (%d):\n%s", code, out)
	}
	logs, code := d.cli(t, "train", "logs", second.ID, "--component", "agent")
	if code != 0 || !strings.Contains(logs, "warm start") || !strings.Contains(logs, first.ID) {
		t.Errorf("the agent's log does not tell of the warm start (%d):\n%s", code, logs)
	}
	d.stop(t)
}
