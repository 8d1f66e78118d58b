package queue

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// newServer submits a serve job for an adapter, as the API does when a deploy needs a server.
func (b bundle) newServer(t *testing.T) func(context.Context, *job.Adapter) (string, error) {
	return func(ctx context.Context, a *job.Adapter) (string, error) {
		j, _, err := b.q.Submit(ctx, job.Submission{Org: a.Org, Spec: jobspec.Spec{Kind: jobspec.KindServe, Name: "serve " + a.Base,
			Model: a.Base, Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"}}}, "", "")
		if err != nil {
			return "", err
		}
		return j.ID, nil
	}
}

func (b bundle) adapter(t *testing.T, org, jobID string, step int, kind string) *job.Adapter {
	t.Helper()
	a, _, err := b.q.PutAdapter(b.ctx, AdapterSpec{Org: org, Job: jobID, Step: step, Base: "Qwen/Qwen3-4B", Kind: kind, Name: "run"})
	if err != nil {
		t.Fatal(err)
	}
	return a
}

func (b bundle) deployment(t *testing.T, org, id string) *job.Adapter {
	t.Helper()
	a, err := b.q.GetAdapter(b.ctx, org, id)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// A deployment's life: adapters filed once per step, two LoRA adapters of one base model on
// one server (a serve job claimed like any job), DEPLOYED once its agent says it loaded them,
// unloaded through UNLOADING, and the server stopped once it holds nothing; another
// organization sees none of it.
func TestDeploymentsShareAServerPerBaseModel(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		a1 := b.adapter(t, "acme", "job-1", 10, job.AdapterLoRA)
		if again, created, err := b.q.PutAdapter(b.ctx, AdapterSpec{Org: "acme", Job: "job-1", Step: 10, Base: "Qwen/Qwen3-4B", Kind: job.AdapterLoRA}); err != nil || created || again.ID != a1.ID {
			t.Fatalf("a second put of the same step: %+v created=%v %v", again, created, err)
		}
		a2 := b.adapter(t, "acme", "job-1", 20, job.AdapterLoRA)
		if a1.Status != "READY" || a1.Deployment != job.NotDeployed || a1.ModelID() != "Qwen/Qwen3-4B:"+a1.ID {
			t.Fatalf("a new adapter: %+v", a1)
		}
		if _, err := b.q.GetAdapter(b.ctx, "other", a1.ID); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("another organization reads it: %v", err)
		}
		if _, err := b.q.Deploy(b.ctx, "other", a1.ID, b.newServer(t)); !errors.Is(err, job.ErrNotFound) {
			t.Fatalf("another organization deploys it: %v", err)
		}

		d1, err := b.q.Deploy(b.ctx, "acme", a1.ID, b.newServer(t))
		if err != nil || d1.Deployment != job.Deploying || d1.Server == "" {
			t.Fatalf("deploy: %+v %v", d1, err)
		}
		d2, err := b.q.Deploy(b.ctx, "acme", a2.ID, b.newServer(t))
		if err != nil || d2.Server != d1.Server {
			t.Fatalf("a second adapter of the base got server %q, want %q (%v)", d2.Server, d1.Server, err)
		}
		if again, err := b.q.Deploy(b.ctx, "acme", a1.ID, b.newServer(t)); err != nil || again.Server != d1.Server {
			t.Fatalf("a deploy of a deploying adapter: %+v %v", again, err)
		}
		if page, total, err := b.q.ListAdapters(b.ctx, "acme", 0, 10); err != nil || total != 2 || len(page) != 2 || page[0].ID != a2.ID {
			t.Fatalf("list: %d %v %v", total, page, err)
		}

		cl := b.claim(t)
		if cl.Job.ID != d1.Server || cl.Job.Kind != jobspec.KindServe {
			t.Fatalf("claimed %+v, want the server %s", cl.Job, d1.Server)
		}
		if _, err := b.q.Serving(b.ctx, cl.Job.ID, "not-the-token", nil, nil); !errors.Is(err, job.ErrLeaseLost) {
			t.Fatalf("serving under a stale token: %v", err)
		}
		heartbeat(t, b, cl, true)
		want, err := b.q.Serving(b.ctx, cl.Job.ID, cl.Lease.Token, nil, nil)
		if err != nil || len(want) != 2 {
			t.Fatalf("serving: %v %v", want, err)
		}
		if _, err := b.q.Serving(b.ctx, cl.Job.ID, cl.Lease.Token, []string{a1.ID}, map[string]string{a2.ID: "sha256 mismatch"}); err != nil {
			t.Fatal(err)
		}
		if d := b.deployment(t, "acme", a1.ID); d.Deployment != job.Deployed || d.Node != "agent-1" || d.DeployedAt == nil {
			t.Errorf("loaded: %+v", d)
		}
		if d := b.deployment(t, "acme", a2.ID); d.Deployment != job.DeployFailed || d.Error != "sha256 mismatch" {
			t.Errorf("failed: %+v", d)
		}
		evs, err := b.q.Events(b.ctx, cl.Job.ID, 0, 100)
		seen := map[string]bool{}
		for _, e := range evs {
			seen[e.Type] = true
		}
		if err != nil || !seen["deployment.deployed"] || !seen["deployment.failed"] {
			t.Errorf("the server's events: %+v %v", evs, err)
		}

		if d, err := b.q.Unload(b.ctx, "acme", a1.ID, false); err != nil || d.Deployment != job.Unloading {
			t.Fatalf("unload: %+v %v", d, err)
		}
		if n, err := b.q.CheckDeployments(b.ctx); err != nil {
			t.Fatal(err)
		} else if j := b.status(t, cl.Job.ID); j.StopRequested {
			t.Fatalf("a server still unloading was stopped (%d changed)", n)
		}
		if want, err := b.q.Serving(b.ctx, cl.Job.ID, cl.Lease.Token, nil, nil); err != nil || len(want) != 0 {
			t.Fatalf("serving after the unload: %v %v", want, err)
		}
		if d := b.deployment(t, "acme", a1.ID); d.Deployment != job.NotDeployed || d.Server != "" {
			t.Errorf("unloaded: %+v", d)
		}
		if _, err := b.q.CheckDeployments(b.ctx); err != nil {
			t.Fatal(err)
		}
		if j := b.status(t, cl.Job.ID); !j.StopRequested {
			t.Errorf("a server holding nothing was not stopped: %+v", j)
		}
	})
}

// A lost node's server is queued again: its adapters go back to DEPLOYING until the next agent
// loads them; an adapter no request reached for the idle time is unloaded, and a request's
// use keeps one loaded.
func TestDeploymentsFollowTheirServer(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		a := b.adapter(t, "acme", "job-1", 10, job.AdapterLoRA)
		used := b.adapter(t, "acme", "job-1", 20, job.AdapterLoRA)
		for _, id := range []string{a.ID, used.ID} {
			if _, err := b.q.Deploy(b.ctx, "acme", id, b.newServer(t)); err != nil {
				t.Fatal(err)
			}
		}
		cl := b.claim(t)
		heartbeat(t, b, cl, true)
		if _, err := b.q.Serving(b.ctx, cl.Job.ID, cl.Lease.Token, []string{a.ID, used.ID}, nil); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(b.cfg.LeaseTTL + time.Second)
		if _, _, err := b.q.Reap(b.ctx, 100); err != nil {
			t.Fatal(err)
		}
		if _, err := b.q.CheckDeployments(b.ctx); err != nil {
			t.Fatal(err)
		}
		if d := b.deployment(t, "acme", a.ID); d.Deployment != job.Deploying {
			t.Fatalf("after its node was lost: %+v", d)
		}
		b.clock.Advance(b.cfg.RetryBackoffMax)
		if _, _, err := b.q.Reap(b.ctx, 100); err != nil {
			t.Fatal(err)
		}
		again := b.claimFor(t, "agent-2", h100x8)
		if again == nil || again.Job.ID != cl.Job.ID {
			t.Fatalf("the server was not placed again: %+v", again)
		}
		heartbeat(t, b, again, true)
		if _, err := b.q.Serving(b.ctx, again.Job.ID, again.Lease.Token, []string{a.ID, used.ID}, nil); err != nil {
			t.Fatal(err)
		}
		if d := b.deployment(t, "acme", a.ID); d.Deployment != job.Deployed || d.Node != "agent-2" {
			t.Fatalf("on the new node: %+v", d)
		}

		b.clock.Advance(b.cfg.DeploymentIdle - time.Minute)
		if err := b.q.Used(b.ctx, "acme", used.ID, 1, 0, 12, 30, []float64{40}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(2 * time.Minute)
		if _, err := b.q.CheckDeployments(b.ctx); err != nil {
			t.Fatal(err)
		}
		if d := b.deployment(t, "acme", a.ID); d.Deployment != job.Unloading || !d.Idle {
			t.Errorf("an idle adapter: %+v", d)
		}
		if d := b.deployment(t, "acme", used.ID); d.Deployment != job.Deployed || d.Requests != 1 || d.PromptTokens != 12 || d.CompletionTokens != 30 {
			t.Errorf("a used adapter: %+v", d)
		}
		if n, p, c, err := b.q.InferenceUsage(b.ctx, "acme"); err != nil || n != 1 || p != 12 || c != 30 {
			t.Errorf("the organization's inference usage: %d %d %d %v", n, p, c, err)
		}
	})
}

// heartbeat sends one heartbeat of a claim (running: the pipeline started).
func heartbeat(t *testing.T, b bundle, cl *job.Claim, running bool) {
	t.Helper()
	if _, err := b.q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: running}); err != nil {
		t.Fatalf("heartbeat: %v", err)
	}
}
