package queue

import (
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// An agent that stopped waiting for a claim's answer takes it back by its claim id, whichever
// came first: the claim or the abandonment.
func TestAbandonedClaims(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		claim := func(agent, id string) *job.Claim {
			cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: agent, GPUs: h100x8, ClaimID: id})
			if err != nil {
				t.Fatal(err)
			}
			return cl
		}
		abandon := func(agent, id string) string {
			got, err := b.q.AbandonClaim(b.ctx, agent, id)
			if err != nil {
				t.Fatal(err)
			}
			return got
		}

		// Made, then abandoned: the job is back in the queue, no attempt spent.
		j := b.submit(t, "acme", "a")
		if cl := claim("agent-1", "claim-0001"); cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("claim: %+v", cl)
		}
		if got := abandon("agent-1", "claim-0001"); got != j.ID {
			t.Fatalf("abandon handed back %q, want %s", got, j.ID)
		}
		back := b.status(t, j.ID)
		if back.Status != job.Queued || back.Attempt != 1 {
			t.Fatalf("after abandoning: %s attempt %d", back.Status, back.Attempt)
		}
		if got := abandon("agent-1", "claim-0001"); got != "" {
			t.Errorf("abandoning twice handed back %q", got)
		}

		// Abandoned before it was made: the claim, when it comes, takes nothing.
		if got := abandon("agent-1", "claim-0002"); got != "" {
			t.Errorf("abandoning an unmade claim handed back %q", got)
		}
		if cl := claim("agent-1", "claim-0002"); cl != nil {
			t.Fatalf("an abandoned claim took %s", cl.Job.ID)
		}

		// Another agent cannot take back someone else's claim; a started job is not taken back.
		cl := claim("agent-2", "claim-0003")
		if cl == nil {
			t.Fatal("claim-0003 got nothing")
		}
		if got := abandon("agent-3", "claim-0003"); got != "" || b.status(t, cl.Job.ID).Status != job.Pending {
			t.Errorf("another agent abandoned claim-0003 (%q)", got)
		}
		if _, err := b.q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
			t.Fatal(err)
		}
		if got := abandon("agent-2", "claim-0003"); got != "" || b.status(t, cl.Job.ID).Status != job.Running {
			t.Errorf("a running job was taken back (%q)", got)
		}
	})
}
