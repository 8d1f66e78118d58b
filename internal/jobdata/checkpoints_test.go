package jobdata

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A step folder is whole when prime-rl's own marks are there: the trainer's .metadata (which
// torch writes last) and the orchestrator's progress. The orchestrator saves ahead of the
// trainer and a trainer killed mid-save leaves no .metadata: neither folder is whole.
func TestCompleteIsUpstreamsMarks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(step int, files ...string) string {
		d := StepDir(dir, step)
		for _, f := range files {
			p := filepath.Join(d, filepath.FromSlash(f))
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		return d
	}
	whole := write(10, "trainer/__0_0.distcp", TrainerDone, OrchestratorDone)
	ahead := write(12, OrchestratorDone)
	midSave := write(14, "trainer/__0_0.distcp", OrchestratorDone)
	noOrch := write(16, "trainer/__0_0.distcp", TrainerDone)
	if !Complete(whole) || Complete(ahead) || Complete(midSave) || Complete(noOrch) {
		t.Errorf("complete: %v %v %v %v, want true false false false", Complete(whole), Complete(ahead), Complete(midSave), Complete(noOrch))
	}
	if got := LocalSteps(dir); len(got) != 4 || got[0] != 10 || got[3] != 16 {
		t.Errorf("local steps %v", got)
	}
}

func TestListCheckpoints(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	ctx := context.Background()
	put := func(key, data string) {
		if err := st.Put(ctx, key, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	put(CheckpointPrefix("j1", 10)+"trainer/__0_0.distcp", "0123456789")
	put(CheckpointPrefix("j1", 10)+"orchestrator/progress.pt", "{}")
	put(CheckpointPrefix("j1", 10)+ManifestName, "{}")
	put(CheckpointPrefix("j1", 20)+"trainer/__0_0.distcp", "01234")
	cps, err := ListCheckpoints(ctx, st, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].Step != 10 || !cps[0].Committed || cps[0].Bytes != 12 || cps[0].Files != 2 ||
		cps[1].Step != 20 || cps[1].Committed || cps[1].Bytes != 5 {
		t.Errorf("got %+v", cps)
	}
	if steps, err := CommittedSteps(ctx, st, "j1"); err != nil || len(steps) != 1 || steps[0] != 10 {
		t.Errorf("committed %v %v", steps, err)
	}
	for name, want := range map[string]int{"step_40": 40, "step_0": 0, "step_05": -1, "step_+5": -1, "step_": -1, "stepx": -1} {
		if n, ok := stepOf(name); (want < 0 && ok) || (want >= 0 && (!ok || n != want)) {
			t.Errorf("stepOf(%q) = %d, %v", name, n, ok)
		}
	}
}
