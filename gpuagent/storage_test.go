package gpuagent_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/grant"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
	"github.com/hostedtrain/hostedtrain/queue"
)

type countingGranter struct {
	grant.Static
	calls atomic.Int32
}

func (g *countingGranter) Grant(ctx context.Context, id string, reads ...string) (*job.StorageGrant, error) {
	g.calls.Add(1)
	return g.Static.Grant(ctx, id, reads...)
}

// An agent with no storage of its own runs a job with the credentials its claim carries, and
// asks for fresh ones on its heartbeats before they expire.
func TestAgentWritesWithTheGrantedCredentials(t *testing.T) {
	t.Parallel()
	store, srv := s3test.Store(t)
	g := &countingGranter{Static: grant.Static{Lifetime: 2 * time.Second, Template: job.StorageGrant{
		Bucket: store.Bucket(), Region: srv.Region, Endpoint: srv.Endpoint,
		AccessKeyID: srv.AccessKey, SecretAccessKey: srv.SecretKey,
	}}}
	s := apitest.Start(t, apitest.Options{Queue: queue.Config{}, Store: store, Storage: g})
	b := bundle{stack: s, user: client.New(s.URL, s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)), store: store, s3: srv}
	cfg := b.agentConfig(t, "agent-g", "--emulate.step-time", "60ms")
	cfg.Store = nil
	b.run(t, cfg)

	j := b.submit(t, withSteps(40))
	done := b.waitFor(t, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Progress.CheckpointStep != 40 {
		t.Fatalf("status %s (%s), progress %+v", done.Status, done.Error, done.Progress)
	}
	ctx := context.Background()
	if _, err := store.Get(ctx, jobdata.CheckpointPrefix(j.ID, 40)+jobdata.ManifestName); err != nil {
		t.Errorf("the newest checkpoint's manifest is not in the bucket: %v", err)
	}
	page, err := b.user.JobMetrics(ctx, j.ID, 0, 0, nil, 0)
	if err != nil || len(page.Items) != 40 {
		t.Errorf("metrics from the bucket: %d rows, %v", len(page.Items), err)
	}
	if n := g.calls.Load(); n < 2 {
		t.Errorf("%d grants: the claim's and no refresh", n)
	}
	if agentLog := b.logText(t, j.ID, 1, "agent"); !strings.Contains(agentLog, "checkpoint committed step=40") {
		t.Errorf("agent log:\n%s", agentLog)
	}
}
