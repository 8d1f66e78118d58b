package gpuagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
	write := func(step int, reward string, n int) {
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
	for _, step := range []int{1, 2, 3, 5} {
		write(step, "1.0", 4)
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
	write(3, "0.0", 2)
	r := &rolloutShipper{store: store, jobID: "j", dir: dir, next: 3}
	if _, _, err := r.ship(ctx, 3, false); err != nil {
		t.Fatal(err)
	}
	got, err := jobdata.GetRollouts(ctx, store, "j", 3)
	if err != nil || got.Episodes != 2 || got.Distributions["rewards"].Mean != 0 {
		t.Fatalf("step 3 after the resume: %+v %v", got.Distributions["rewards"], err)
	}
}
