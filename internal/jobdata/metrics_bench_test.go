package jobdata

import (
	"context"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// putRun stores a steps-long run's metrics as the agent does: prime-rl's rows in their order
// (the orchestrator's row two steps ahead of the trainer's five), through MetricsWriter, with
// a flush every 200 steps. With late > 0, every late steps two rows come out of order: an
// evaluation of the step late/2 back, and a result filed under step 1.
func putRun(tb testing.TB, st blob.Store, steps, orchestratorKeys, late int) {
	tb.Helper()
	w := NewMetricsWriter(st, "j1", 1, 1)
	add := func(r Row) {
		if err := w.Add(r); err != nil {
			tb.Fatal(err)
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
		if late > 0 && s%late == 0 {
			add(Row{"step": raw(s - late/2), "eval/gsm8k/avg_reward": raw(0.5)})
			add(Row{"step": raw(1), "result/score": raw(float64(s))})
		}
		if s%200 == 0 {
			if err := w.Flush(context.Background()); err != nil {
				tb.Fatal(err)
			}
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		tb.Fatal(err)
	}
}

// BenchmarkReadMetrics reads a run's metrics as GET /v1/jobs/{id}/metrics does: every step
// merged, a 500-step window, one series over every step (a chart), and the first step (a
// limit of one); and, as the progress endpoint does, the time of the newest 20 steps. Runs:
// 10,000 steps of narrow orchestrator rows; 2,000 steps of prime-rl's real width (about 450
// keys an orchestrator row); and 100,000 narrow steps, in order and with rows out of order
// (an evaluation reported 500 steps late and a result under step 1, every 1,000 steps), for
// the reads whose cost must not grow with the history. Besides time and memory, each reports
// the bytes and objects it fetched (read-B/op, gets/op).
func BenchmarkReadMetrics(b *testing.B) {
	srv := s3test.Start(b)
	type query struct {
		name string
		q    MetricsQuery
	}
	short := func(steps int) []query {
		return []query{
			{"all", MetricsQuery{}},
			{"window-500", MetricsQuery{MinStep: steps / 2, MaxStep: steps/2 + 499}},
			{"reward-only", MetricsQuery{Names: []string{"train/agg/all/agent/reward/mean"}}},
			{"limit-1", MetricsQuery{Limit: 1}},
			{"latest-20", MetricsQuery{MinStep: steps - 19, Names: []string{"time"}}},
		}
	}
	long := func(steps int) []query {
		return []query{
			{"limit-1", MetricsQuery{Limit: 1}},
			{"window-500", MetricsQuery{MinStep: steps / 2, MaxStep: steps/2 + 499}},
			{"latest-20", MetricsQuery{MinStep: steps - 19, Names: []string{"time"}}},
		}
	}
	for _, run := range []struct {
		name              string
		steps, keys, late int
		queries           []query
	}{
		{"10k-steps-narrow", 10000, 20, 0, short(10000)},
		{"2k-steps-450-keys", 2000, 450, 0, short(2000)},
		{"100k-steps-narrow", 100000, 20, 0, long(100000)},
		{"100k-steps-late-rows", 100000, 20, 1000, long(100000)},
	} {
		dir, err := blob.NewDir(b.TempDir())
		if err != nil {
			b.Fatal(err)
		}
		s3, err := srv.CreateBucket(context.Background(), "bench-"+run.name)
		if err != nil {
			b.Fatal(err)
		}
		for _, store := range []struct {
			name string
			st   blob.Store
		}{{"dir", dir}, {"s3", s3}} {
			putRun(b, store.st, run.steps, run.keys, run.late)
			for _, q := range run.queries {
				b.Run(run.name+"/"+store.name+"/"+q.name, func(b *testing.B) {
					st := &countingStore{Store: store.st}
					b.ReportAllocs()
					for b.Loop() {
						page, err := ReadMetrics(context.Background(), st, "j1", q.q)
						if err != nil || len(page.Rows) == 0 {
							b.Fatal(len(page.Rows), err)
						}
					}
					b.ReportMetric(float64(st.bytes.Load())/float64(b.N), "read-B/op")
					b.ReportMetric(float64(st.gets.Load())/float64(b.N), "gets/op")
				})
			}
		}
	}
}
