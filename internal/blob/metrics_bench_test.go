package blob_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// putRun stores a 10,000-step run's metrics as the agent does: chunks of about 512 KiB
// (~1,000 steps of prime-rl's metric names), named by attempt and first step.
func putRun(b *testing.B, st blob.Store, steps int) {
	rng := rand.New(rand.NewPCG(1, 2))
	var chunk strings.Builder
	first := 1
	flush := func(last int) {
		if err := st.Put(context.Background(), blob.MetricsChunkKey("j1", 1, first), strings.NewReader(chunk.String())); err != nil {
			b.Fatal(err)
		}
		chunk.Reset()
		first = last + 1
	}
	for s := 1; s <= steps; s++ {
		fmt.Fprintf(&chunk, `{"step":%d,"time":%.3f,"reward/all/mean":%.4f,"reward/all/std":%.4f,"entropy/mean":%.4f,"mismatch_kl/mean":%.4f,"loss/mean":%.4f,"optim/grad_norm":%.4f,"perf/throughput":%.1f,"seq_len/mean":%.1f}`+"\n",
			s, 1.7e9+float64(s)*30, rng.Float64(), rng.Float64()/4, 1-rng.Float64()/2, rng.Float64()/100, rng.Float64()/10, rng.Float64(), 5000+rng.Float64()*100, 400+rng.Float64()*200)
		if chunk.Len() >= 512<<10 {
			flush(s)
		}
	}
	if chunk.Len() > 0 {
		flush(steps)
	}
}

// BenchmarkReadMetrics10kSteps reads a 10,000-step run's metrics as GET /v1/jobs/{id}/metrics
// does: every step and metric; a 500-step window; the reward alone over every step (a chart).
func BenchmarkReadMetrics10kSteps(b *testing.B) {
	dir, err := blob.NewDir(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	srv := s3test.Start(b)
	s3, err := srv.CreateBucket(context.Background(), "bench")
	if err != nil {
		b.Fatal(err)
	}
	for name, st := range map[string]blob.Store{"dir": dir, "s3": s3} {
		putRun(b, st, 10000)
		for qname, q := range map[string]blob.MetricsQuery{
			"all":         {},
			"window-500":  {MinStep: 5000, MaxStep: 5499},
			"reward-only": {Names: []string{"reward/all/mean"}},
		} {
			b.Run(name+"/"+qname, func(b *testing.B) {
				for i := 0; i < b.N; i++ {
					rows, _, err := blob.ReadMetrics(context.Background(), st, "j1", q)
					if err != nil || len(rows) == 0 {
						b.Fatal(len(rows), err)
					}
				}
			})
		}
	}
}
