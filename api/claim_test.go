package api_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/queue"
)

// giveUpQueue is the real queue, with the agent giving up on its claim at the worst moment:
// just after the job was claimed for it, before the answer reaches it.
type giveUpQueue struct {
	*queue.Client
	giveUp func()
}

func (q giveUpQueue) Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error) {
	cl, err := q.Client.Claim(ctx, req)
	q.giveUp()
	<-ctx.Done() // the agent's connection is gone before the answer is written
	return cl, err
}

// A job claimed as its agent stopped waiting is not left PENDING, held by nobody, until its
// lease lapses: the agent's client abandons the claim by its id and the job goes back at once.
// (An agent interrupts its claim whenever its free GPUs change or it drains.)
func TestAClaimNobodyReceivedGoesBackToTheQueue(t *testing.T) {
	t.Parallel()
	q := queue.New(redistest.Client(t), queue.Config{LeaseTTL: time.Hour})
	t.Cleanup(func() { _ = q.Close() })
	keys, err := auth.NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	entry, _ := seal.NewKey("k")
	ring, _ := seal.Parse(entry)
	ctx, giveUp := context.WithCancel(context.Background())
	h, err := api.New(api.Config{Queue: giveUpQueue{q, giveUp}, Verifier: auth.NewVerifier(keys, nil), Secrets: ring})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	spec := jobspec.Spec{Kind: "rl", Model: "Qwen/Qwen3-4B-Instruct-2507", MaxSteps: 10, Resources: jobspec.Resources{GPUs: 2, GPUType: "H100"},
		Env: []jobspec.Env{{ID: "acme/env", Weight: 1}}}
	j, _, err := q.Submit(context.Background(), job.Submission{Org: "acme", Spec: spec}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	tok, _ := keys.Issue(auth.TokenRequest{Subject: "agent-1", Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: time.Hour}, time.Now())
	cl, err := client.New(srv.URL, tok).Claim(ctx, job.ClaimRequest{GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if cl != nil || err == nil {
		t.Fatalf("a claim given up on returned %v, %v", cl, err)
	}

	back, err := q.Get(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if back.Status != job.Queued || back.Attempt != 1 {
		t.Fatalf("after the lost claim: %s attempt %d; want QUEUED attempt 1", back.Status, back.Attempt)
	}
	evs, _ := q.Events(context.Background(), j.ID, 0, 10)
	if last := evs[len(evs)-1]; last.Type != "job.retrying" || !strings.Contains(last.Detail, "stopped waiting") {
		t.Errorf("last event %+v", last)
	}
	next, err := q.Claim(context.Background(), job.ClaimRequest{AgentID: "agent-2", GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if err != nil || next == nil || next.Job.ID != j.ID {
		t.Fatalf("the next claim: %v %v", next, err)
	}
}
