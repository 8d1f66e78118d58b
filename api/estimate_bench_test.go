package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// estimateShape is one kind of run in the simulated mix: a model on a number of GPUs whose
// step time varies from run to run (lognormal around a median, spread sigma) after a start-up.
type estimateShape struct {
	model     string
	gpus      int
	median    float64 // seconds a step
	sigma     float64
	startup   float64 // seconds before the first step, on top
	weightMix int
}

var estimateMix = []estimateShape{
	{"Qwen/Qwen3-4B-Instruct-2507", 2, 45, 0.15, 90, 5},
	{"Qwen/Qwen3-8B", 4, 80, 0.25, 150, 3},
	{"Qwen/Qwen3-30B-A3B-Instruct-2507", 8, 140, 0.35, 300, 2},
}

// BenchmarkEstimateError is the dry run's estimate (POST /v1/jobs/preview) against what the runs
// then took, over a simulated mix of jobs in one organization on the queue's clock: each job is
// estimated from the runs before it, then run (claimed, started, its steps taking the time its
// shape draws, completed) and so becomes history for the next. It reports the expected
// duration's relative error (p50, p90) and how often the run fell within low..high, for jobs
// estimated from 3 or more past runs and for those estimated from fewer (the default or 1-2).
// `make bench-estimate`.
func BenchmarkEstimateError(b *testing.B) {
	clock := &clock{now: time.Date(2026, 11, 2, 0, 0, 0, 0, time.UTC)}
	s := apitest.Start(b, apitest.Options{Queue: queue.Config{Now: clock.Now, LeaseTTL: time.Hour}})
	writer := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(1, 2))
	var total int
	for _, sh := range estimateMix {
		total += sh.weightMix
	}
	type result struct {
		runs      int
		relErr    float64
		oracleErr float64 // the error knowing the shape's own start-up and median step time
		inRange   bool
		expected  float64
		actualSec float64
	}
	var results []result
	const jobs = 240
	for b.Loop() {
		results = results[:0]
		for i := range jobs {
			pick, sh := rng.IntN(total), estimateMix[0]
			for _, c := range estimateMix {
				if pick < c.weightMix {
					sh = c
					break
				}
				pick -= c.weightMix
			}
			steps := 20 + rng.IntN(480)
			toml := fmt.Sprintf("model = %q\nmax_steps = %d\nnum_gpus = %d\n[[env]]\nid = \"gsm8k\"\n", sh.model, steps, sh.gpus)
			r := call(b, "POST", s.URL+"/v1/jobs/preview", writer, "application/toml", []byte(toml))
			var pre struct {
				Estimate struct {
					Runs            int                                   `json:"runs"`
					DurationSeconds struct{ Low, Expected, High float64 } `json:"duration_seconds"`
				} `json:"estimate"`
			}
			if r.status != http.StatusOK || json.Unmarshal(r.body, &pre) != nil {
				b.Fatalf("preview of job %d: %d %s", i, r.status, r.body)
			}
			// The run: its own step time, drawn once (runs differ more than their steps do).
			step := sh.median * math.Exp(sh.sigma*rng.NormFloat64())
			actual := sh.startup + float64(steps)*step
			var j struct{ ID string }
			if r := call(b, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte(toml)); r.status != http.StatusCreated || json.Unmarshal(r.body, &j) != nil {
				b.Fatalf("submit of job %d: %d %s", i, r.status, r.body)
			}
			cl, err := s.Queue.Claim(ctx, job.ClaimRequest{AgentID: "sim", GPUs: []job.GPU{{Model: "H100", Count: 8}}})
			if err != nil || cl == nil || cl.Job.ID != j.ID {
				b.Fatalf("claim of job %d: %+v %v", i, cl, err)
			}
			if _, err := s.Queue.Heartbeat(ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
				b.Fatal(err)
			}
			clock.Advance(time.Duration(actual * float64(time.Second)))
			prog := &job.Progress{Step: steps, MaxSteps: steps}
			if _, err := s.Queue.Complete(ctx, j.ID, job.Outcome{Token: cl.Lease.Token, Progress: prog}); err != nil {
				b.Fatal(err)
			}
			clock.Advance(time.Minute)
			e := pre.Estimate
			oracle := sh.startup + float64(steps)*sh.median
			results = append(results, result{runs: e.Runs, relErr: math.Abs(e.DurationSeconds.Expected-actual) / actual,
				oracleErr: math.Abs(oracle-actual) / actual,
				inRange:   actual >= e.DurationSeconds.Low && actual <= e.DurationSeconds.High, expected: e.DurationSeconds.Expected, actualSec: actual})
		}
	}
	report := func(name string, keep func(result) bool) {
		var errs, floor []float64
		in := 0
		for _, r := range results {
			if keep(r) {
				errs, floor = append(errs, r.relErr), append(floor, r.oracleErr)
				if r.inRange {
					in++
				}
			}
		}
		if len(errs) == 0 {
			return
		}
		slices.Sort(errs)
		slices.Sort(floor)
		q := func(xs []float64, p float64) float64 { return 100 * xs[min(len(xs)-1, int(p*float64(len(xs))))] }
		b.ReportMetric(q(errs, 0.5), name+"-p50-err-%")
		b.ReportMetric(q(errs, 0.9), name+"-p90-err-%")
		b.ReportMetric(q(floor, 0.5), name+"-oracle-p50-err-%")
		b.ReportMetric(q(floor, 0.9), name+"-oracle-p90-err-%")
		b.ReportMetric(100*float64(in)/float64(len(errs)), name+"-in-range-%")
		b.ReportMetric(float64(len(errs)), name+"-jobs")
	}
	report("3+runs", func(r result) bool { return r.runs >= 3 })
	report("0-2runs", func(r result) bool { return r.runs < 3 })
	if len(results) != jobs || strings.Contains(fmt.Sprint(results[0]), "NaN") {
		b.Fatalf("%d results", len(results))
	}
}
