package blob_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// putMetrics writes one chunk of attempt fence holding steps first..last, each step's reward
// naming the attempt.
func putMetrics(t *testing.T, st blob.Store, fence int64, first, last int) {
	t.Helper()
	var sb strings.Builder
	for s := first; s <= last; s++ {
		fmt.Fprintf(&sb, `{"step":%d,"time":1.5,"reward/all/mean":%d.%d,"entropy/mean":1}`+"\n", s, fence, s)
	}
	if err := st.Put(context.Background(), blob.MetricsChunkKey("j1", fence, first), strings.NewReader(sb.String())); err != nil {
		t.Fatal(err)
	}
}

// Attempt 1 wrote steps 1–50 (two chunks) and was lost; attempt 2 resumed from the checkpoint
// of step 40 and wrote 41–45 before it too was lost; attempt 3 resumed from 44 and wrote on
// to 70. Each step is read once, from the newest attempt that wrote it, and nothing an older
// attempt wrote past a newer one's resume point survives.
func TestReadMetricsAcrossResumedAttempts(t *testing.T) {
	t.Parallel()
	st, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	putMetrics(t, st, 1, 1, 30)
	putMetrics(t, st, 1, 31, 50)
	putMetrics(t, st, 2, 41, 45)
	putMetrics(t, st, 3, 45, 60)
	putMetrics(t, st, 3, 61, 70)
	ctx := context.Background()
	rows, more, err := blob.ReadMetrics(ctx, st, "j1", blob.MetricsQuery{})
	if err != nil || more {
		t.Fatal(err, more)
	}
	if len(rows) != 70 {
		t.Fatalf("%d rows, want 70", len(rows))
	}
	for _, r := range rows {
		s := r.Step()
		want := "1"
		switch {
		case s >= 45:
			want = "3"
		case s >= 41:
			want = "2"
		}
		if got := string(r["reward/all/mean"]); got != fmt.Sprintf("%s.%d", want, s) {
			t.Errorf("step %d from attempt %s, want attempt %s", s, got, want)
		}
	}
	// A window, some names, a limit: only what was asked, with a cursor.
	rows, more, err = blob.ReadMetrics(ctx, st, "j1", blob.MetricsQuery{MinStep: 38, MaxStep: 62, Names: []string{"reward/all/mean"}, Limit: 10})
	if err != nil || !more || len(rows) != 10 || rows[0].Step() != 38 || rows[9].Step() != 47 {
		t.Fatalf("window: %d rows more=%v %v", len(rows), more, err)
	}
	if _, ok := rows[0]["entropy/mean"]; ok || rows[0]["time"] == nil {
		t.Errorf("names filter: %v", rows[0])
	}
	rows, _, _ = blob.ReadMetrics(ctx, st, "j1", blob.MetricsQuery{MinStep: 65})
	if len(rows) != 6 || rows[0].Step() != 65 {
		t.Errorf("from 65: %d rows", len(rows))
	}
	if rows, _, err := blob.ReadMetrics(ctx, st, "none", blob.MetricsQuery{}); err != nil || len(rows) != 0 {
		t.Errorf("a job with no metrics: %v %v", rows, err)
	}
}

func TestListCheckpoints(t *testing.T) {
	t.Parallel()
	st, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	put := func(key, data string) {
		if err := st.Put(ctx, key, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	put(blob.CheckpointPrefix("j1", 10)+"trainer/model.safetensors", "0123456789")
	put(blob.CheckpointPrefix("j1", 10)+"orchestrator/progress.json", "{}")
	put(blob.CheckpointPrefix("j1", 10)+blob.ManifestName, "{}")
	put(blob.CheckpointPrefix("j1", 20)+"trainer/model.safetensors", "01234")
	cps, err := blob.ListCheckpoints(ctx, st, "j1")
	if err != nil {
		t.Fatal(err)
	}
	if len(cps) != 2 || cps[0].Step != 10 || !cps[0].Committed || cps[0].Bytes != 12 || cps[0].Files != 2 ||
		cps[1].Step != 20 || cps[1].Committed || cps[1].Bytes != 5 {
		t.Errorf("got %+v", cps)
	}
}
