package gpuagent_test

import (
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

// BenchmarkJobToJobGap measures how long a node's GPUs sit idle between one job's pipeline
// exiting and the next job's pipeline starting, with the next job already queued (aim: at most
// 1 s): the agent hands the GPUs back at the exit, claims, lists the job's checkpoints in
// storage (S3 here), writes its config, installs its environment and starts it, while the
// finished job's last checkpoint and logs are still being stored. One op is one job. With the
// sandbox on (as a node runs jobs: bubblewrap, seccomp, the job's network namespace, cgroups,
// its disk) and, beside it, off.
func BenchmarkJobToJobGap(b *testing.B) {
	b.Run("sandbox", func(b *testing.B) { jobToJobGap(b, true) })
	b.Run("no-sandbox", func(b *testing.B) { jobToJobGap(b, false) })
}

func jobToJobGap(b *testing.B, sandboxOn bool) {
	bundle := setupS3(b, queue.Config{})
	cfg := bundle.agentConfig(b, "agent-gap", "--emulate.step-time", "10ms", "--emulate.ckpt-bytes", "4194304")
	cfg.Devices = gpuagent.DevicesFromSpec([]job.GPU{{Model: "H100", Count: 2}})
	if sandboxOn {
		cfg.Sandbox = sandboxed(b)
	}
	a, _ := bundle.run(b, cfg)
	const tiny = `
model = "Qwen/Qwen3-4B-Instruct-2507"
max_steps = 4
batch_size = 16
rollouts_per_example = 4
[[env]]
id = "primeintellect/alphabet-sort"
[checkpoints]
interval = 2
`
	var ids []string
	for i := 0; i < b.N+1; i++ {
		ids = append(ids, bundle.submit(b, tiny).ID)
	}
	b.ResetTimer()
	for _, id := range ids {
		bundle.waitFor(b, id, "completed", func(j *job.Job) bool { return j.Status == job.Completed })
	}
	b.StopTimer()
	var h *dto.Histogram
	testwait.Until(b, time.Minute, "the gaps to be recorded", func() bool {
		h = gapHistogram(b, a)
		return h != nil && h.GetSampleCount() >= uint64(b.N)
	})
	n := float64(h.GetSampleCount())
	b.ReportMetric(h.GetSampleSum()/n*1000, "gap-ms-mean")
	// The histogram keeps no maximum: report the smallest bucket bound that holds every gap.
	bound := -1.0
	for _, bk := range h.GetBucket() {
		if float64(bk.GetCumulativeCount()) >= n {
			bound = bk.GetUpperBound()
			break
		}
	}
	b.ReportMetric(bound*1000, "gap-ms-all-below")
	b.ReportMetric(0, "ns/op")
}

func gapHistogram(tb testing.TB, a *gpuagent.Agent) *dto.Histogram {
	mfs, err := a.Gatherer().Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "hostedtrain_agent_idle_gap_seconds" {
			return mf.GetMetric()[0].GetHistogram()
		}
	}
	return nil
}
