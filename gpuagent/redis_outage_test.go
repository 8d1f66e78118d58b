package gpuagent_test

import (
	"context"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

var heartbeatFailures = regexp.MustCompile(`hostedtrain_agent_heartbeat_failures_total (\d+)`)

// Redis goes away mid-run: the API answers 503, the agent keeps training, committing
// checkpoints and buffering what it reports; when Redis is back (from its AOF) the run
// completes with every checkpoint event and every metric row.
func TestAgentTrainsThroughARedisOutage(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rs := redistest.StartRestartable(t)
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	s := apitest.Start(t, apitest.Options{Queue: queue.Config{LeaseTTL: time.Minute}, Store: store, Redis: rs.Client})
	b := bundle{stack: s, user: client.New(s.URL, s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)), store: store}
	a, _ := b.run(t, b.agentConfig(t, "agent-r", "--emulate.step-time", "50ms"))
	// Whatever wait fails, the agent's final report finds Redis up: cleanups run last first.
	t.Cleanup(func() { rs.Restore(t) })

	j := b.submit(t, withSteps(60))
	before := b.waitFor(t, j.ID, "running", func(j *job.Job) bool { return j.Status == job.Running && j.Progress.Step >= 2 })
	rs.Stop()
	testwait.Until(t, 2*time.Minute, "a heartbeat refused while Redis is down", func() bool {
		m := heartbeatFailures.FindStringSubmatch(scrape(t, a))
		n := 0
		if m != nil {
			n, _ = strconv.Atoi(m[1])
		}
		return n >= 1
	})
	testwait.Until(t, 2*time.Minute, "checkpoints committed while Redis is down", func() bool {
		cps, err := jobdata.ListCheckpoints(ctx, store, j.ID)
		return err == nil && len(cps) > 0 && cps[len(cps)-1].Step >= before.Progress.Step+6
	})
	rs.Start(t)
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Progress.Step != 60 || done.Attempt != 1 {
		t.Fatalf("got %s at step %d, attempt %d (%s)", done.Status, done.Progress.Step, done.Attempt, done.Error)
	}
	b.checkEveryCommitReported(t, j.ID, 6)
	page, err := b.user.JobMetrics(ctx, j.ID, 0, 0, nil, 0)
	if err != nil || len(page.Items) != 60 {
		t.Errorf("%d metric rows, want 60 (%v)", len(page.Items), err)
	}
}
