package jobdata

import (
	"context"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// putRun stores a steps-long run's metrics as the agent does: prime-rl's rows in their order
// (the orchestrator's row two steps ahead of the trainer's five), through MetricsWriter.
func putRun(b *testing.B, st blob.Store, steps, orchestratorKeys int) {
	w := NewMetricsWriter(st, "j1", 1, 1)
	add := func(r Row) {
		if err := w.Add(r); err != nil {
			b.Fatal(err)
		}
	}
	add(orchestratorRow(1, 0.1, orchestratorKeys))
	add(orchestratorRow(2, 0.1, orchestratorKeys))
	for s := 1; s <= steps; s++ {
		for _, r := range trainerRows(s, 0.05) {
			add(r)
		}
		if s+2 <= steps {
			add(orchestratorRow(s+2, 0.1, orchestratorKeys))
		}
		if s%200 == 0 {
			if err := w.Flush(context.Background()); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkReadMetrics reads a run's metrics as GET /v1/jobs/{id}/metrics does: every step
// merged, a 500-step window, one series over every step (a chart), and the first step (a
// limit of one). Two runs: 10,000 steps of narrow orchestrator rows, and 2,000 steps of
// prime-rl's real width (about 450 keys an orchestrator row).
func BenchmarkReadMetrics(b *testing.B) {
	srv := s3test.Start(b)
	for _, run := range []struct {
		name        string
		steps, keys int
	}{{"10k-steps-narrow", 10000, 20}, {"2k-steps-450-keys", 2000, 450}} {
		dir, err := blob.NewDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		s3, err := srv.CreateBucket(context.Background(), "bench-"+run.name)
		if err != nil {
			b.Fatal(err)
		}
		for name, st := range map[string]blob.Store{"dir": dir, "s3": s3} {
			putRun(b, st, run.steps, run.keys)
			for qname, q := range map[string]MetricsQuery{
				"all":         {},
				"window-500":  {MinStep: run.steps / 2, MaxStep: run.steps/2 + 499},
				"reward-only": {Names: []string{"train/agg/all/agent/reward/mean"}},
				"limit-1":     {Limit: 1},
			} {
				b.Run(run.name+"/"+name+"/"+qname, func(b *testing.B) {
					for b.Loop() {
						rows, _, err := ReadMetrics(context.Background(), st, "j1", q)
						if err != nil || len(rows) == 0 {
							b.Fatal(len(rows), err)
						}
					}
				})
			}
		}
	}
}
