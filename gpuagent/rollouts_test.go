package gpuagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// The shipper stores a step once it is told the trainer took it, skips steps the run kept no
// episodes for, and a resumed run's shipper stores its steps over the earlier attempt's.
func TestRolloutShipperStoresStepsTheTrainerTook(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, step := range []int{1, 2, 3, 5} {
		writeTraces(t, dir, step, "1.0", 4)
	}
	s := &rolloutShipper{store: store, jobID: "j", dir: dir, next: 1}
	stored := func() string {
		steps, err := jobdata.RolloutSteps(ctx, store, "j")
		if err != nil {
			t.Fatal(err)
		}
		return fmt.Sprint(steps)
	}
	if n, notes, err := s.ship(ctx, 2, false); err != nil || n != 2 || len(notes) != 0 || stored() != "[1 2]" {
		t.Fatalf("up to step 2: %d stored, notes %v, err %v; stored %s", n, notes, err, stored())
	}
	if s.lastStep() != 5 {
		t.Fatalf("last step %d, want 5", s.lastStep())
	}
	// Step 4 has no traces file yet: the run goes on, so the shipper waits for it.
	if n, _, err := s.ship(ctx, s.lastStep(), false); err != nil || n != 1 || stored() != "[1 2 3]" {
		t.Fatalf("up to step 5 while the run goes on: %d stored, err %v; stored %s", n, err, stored())
	}
	// The run is over: step 4 has none, and step 5 is stored.
	if n, _, err := s.ship(ctx, s.lastStep(), true); err != nil || n != 1 || stored() != "[1 2 3 5]" {
		t.Fatalf("up to step 5 once the run is over: %d stored, err %v; stored %s (step 4 has no traces)", n, err, stored())
	}
	// A resume from step 2 writes step 3 again; its episodes replace the first attempt's.
	writeTraces(t, dir, 3, "0.0", 2)
	r := &rolloutShipper{store: store, jobID: "j", dir: dir, next: 3}
	if _, _, err := r.ship(ctx, 3, false); err != nil {
		t.Fatal(err)
	}
	got, err := jobdata.GetRollouts(ctx, store, "j", 3)
	if err != nil || got.Episodes != 2 || got.Distributions["rewards"].Mean != 0 {
		t.Fatalf("step 3 after the resume: %+v %v", got.Distributions["rewards"], err)
	}
}

// slowStore takes at least delay over each write: a store that cannot keep up.
type slowStore struct {
	blob.Store
	delay time.Duration
}

func (s slowStore) Put(ctx context.Context, key string, r io.Reader) error {
	time.Sleep(s.delay)
	return s.Store.Put(ctx, key, r)
}

// A running job's pass stores rollouts for about shipPass and leaves the rest for the next
// flush, so a backlog never holds up the metrics and logs stored after it; the run's last pass
// stores them all.
func TestRolloutShipperLeavesABacklogForTheNextPass(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	runDir := t.TempDir()
	for step := 1; step <= 6; step++ {
		writeTraces(t, runDir, step, "1.0", 1)
	}
	// Each write takes at least 2/5 of a pass: a pass stores 3 at most (the third starts
	// under shipPass, the fourth would not).
	s := &rolloutShipper{store: slowStore{Store: dir, delay: shipPass * 2 / 5}, jobID: "j", dir: runDir, next: 1}
	n, _, err := s.ship(ctx, 6, false)
	if err != nil || n < 1 || n > 3 {
		t.Fatalf("a running job's pass over 6 slow steps stored %d (%v); want 1 to 3", n, err)
	}
	rest, _, err := s.ship(ctx, 6, true)
	if err != nil || n+rest != 6 {
		t.Fatalf("the last pass stored %d after %d (%v); want all 6", rest, n, err)
	}
}

// writeTraces writes step's traces file under dir as prime-rl's file monitor does: n episodes of
// one prompt, each rewarded reward.
func writeTraces(t *testing.T, dir string, step int, reward string, n int) {
	t.Helper()
	p := filepath.Join(dir, fmt.Sprintf("step_%d", step), "train", "effective", "traces.jsonl")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	line := `{"id":"t%d","task":{"data":{"prompt":"q"},"key":"k"},"nodes":[{"message":{"role":"user","content":"q"}}],"rewards":{"r":{"score":%s,"weight":1.0}},"ok":true}` + "\n"
	var b strings.Builder
	for i := 0; i < n; i++ {
		fmt.Fprintf(&b, line, i, reward)
	}
	if err := os.WriteFile(p, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

// The run's folders are the job's to write: a step folder with a huge number (red team, issue
// 29: step_9000000000000000000 made the final pass count towards it, the job RUNNING and billed
// with the agent at full CPU) is none of the run's. The final pass visits only the folders
// there are, up to the job's max_steps, and ends at once.
func TestRolloutShipperReadsOnlyTheRunsSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for _, step := range []int{1, 3, 10, 11} {
		writeTraces(t, dir, step, "1.0", 2)
	}
	for _, name := range []string{"step_9000000000000000000", "step_99999999999999999999999", "step_-1", "step_05"} {
		if err := os.MkdirAll(filepath.Join(dir, name, "train", "effective"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	s := &rolloutShipper{store: store, jobID: "j", dir: dir, next: 1, maxStep: 10}
	if last := s.lastStep(); last != 10 {
		t.Fatalf("last step %d, want 10 (the job's max_steps)", last)
	}
	done := make(chan struct{})
	var n int
	go func() {
		defer close(done)
		n, _, err = s.ship(ctx, 9000000000000000000, true)
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the final pass did not end")
	}
	steps, _ := jobdata.RolloutSteps(ctx, store, "j")
	if err != nil || n != 3 || fmt.Sprint(steps) != "[1 3 10]" {
		t.Fatalf("%d stored (%v), err %v; want steps 1, 3 and 10", n, steps, err)
	}
}
