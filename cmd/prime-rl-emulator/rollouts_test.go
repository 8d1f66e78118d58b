package main

import (
	"bytes"
	"context"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// The episodes the emulator keeps are what verifiers writes: every line loads as upstream's
// WireTrace and dumps back unchanged (internal/jobdata/testdata/traces.py check), and a
// launch cleans the steps it will write again, as prime-rl's launcher does.
func TestEmulatedTracesAreVerifiersTraces(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	r := &rlRun{dir: dir}
	rng := rand.New(rand.NewPCG(1, 2))
	for step := 1; step <= 3; step++ {
		if err := r.writeEpisodes(step, "train", 16, 8, 0.5, rng); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.writeEpisodes(2, "eval", 8, 8, 0.4, rng); err != nil {
		t.Fatal(err)
	}
	var all bytes.Buffer
	for _, f := range []string{"step_1/train/all", "step_1/train/effective", "step_2/eval/effective"} {
		b, err := os.ReadFile(filepath.Join(dir, "rollouts", f, "traces.jsonl"))
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	if n := strings.Count(all.String(), "\n"); n != 16+8+16+8 {
		t.Fatalf("%d episodes: want the batch of 16 and a dropped group in all, the batch in effective, a group in eval", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	script := filepath.Join(jobspectest.Root(t), "internal", "jobdata", "testdata", "traces.py")
	cmd := exec.CommandContext(ctx, upstreamtest.Command(t)[0], script, upstreamtest.Kit(t), "check")
	cmd.Stdin = &all
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("upstream's Trace refuses the emulator's episodes: %v\n%s", err, out)
	}

	cleanRollouts(dir, 1) // a resume from step 1
	for step, want := range map[int]bool{1: true, 2: false, 3: false} {
		if _, err := os.Stat(filepath.Join(dir, "rollouts", "step_"+string(rune('0'+step)))); (err == nil) != want {
			t.Fatalf("step %d kept %v after a resume from step 1, want %v", step, err == nil, want)
		}
	}
	cleanRollouts(dir, 0) // a fresh run
	if entries, _ := os.ReadDir(filepath.Join(dir, "rollouts")); len(entries) != 0 {
		t.Fatalf("a fresh run left %d rollout folders", len(entries))
	}
}
