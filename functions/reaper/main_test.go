package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A scheduled run returns a job whose agent went silent to the queue once its lease lapses.
func TestAScheduledRunReapsALapsedLease(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	env := map[string]string{
		"HOSTEDTRAIN_REDIS_URL": "redis://" + rs.Addr + "/0",
		"HOSTEDTRAIN_LEASE_TTL": "300ms",
	}
	reaper, err := newReaper(context.Background(), func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(filepath.Join("testdata", "scheduled-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	run := handler(reaper)
	if res, err := run(ctx, ev); err != nil || res.Reaped != 0 {
		t.Fatalf("a run over an empty queue: %+v %v", res, err)
	}

	q := queue.New(redis.NewClient(&redis.Options{Addr: rs.Addr}), queue.Config{LeaseTTL: 300 * time.Millisecond})
	defer q.Close()
	spec := jobspec.Spec{Kind: "rl", Model: "m", MaxSteps: 1, Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"}, Env: []jobspec.Env{{ID: "e", Weight: 1}}}
	j, _, err := q.Submit(ctx, job.Submission{Org: "acme", Spec: spec}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := q.Claim(ctx, job.ClaimRequest{AgentID: "silent", GPUs: []job.GPU{{Model: "H100", Count: 1}}})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	reaped := 0
	testwait.Until(t, 10*time.Second, "the lapsed lease to be reaped", func() bool {
		res, err := run(ctx, ev)
		if err != nil {
			t.Fatal(err)
		}
		reaped += res.Reaped
		return reaped > 0
	})
	got, err := q.Get(ctx, j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if reaped != 1 || got.Status != job.Queued {
		t.Errorf("reaped %d; job %s, want QUEUED again", reaped, got.Status)
	}
	if _, err := q.Heartbeat(ctx, j.ID, job.Heartbeat{Token: cl.Lease.Token}); err == nil {
		t.Error("the silent agent's lease still works")
	}
}
