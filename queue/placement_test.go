package queue

import (
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// modelJob is a one-GPU rl job of model with the Hub environment env.
func modelJob(name, model, env string) jobspec.Spec {
	s := jobSpec(name, 1)
	s.Model = model
	s.Env = []jobspec.Env{{ID: env, Weight: 1}}
	return s
}

// Cache-aware placement (issue 33): a claim that says what its node holds takes, of the next
// few jobs in fair order, the one whose model and environments the node holds, and says so in
// the job's events; the job passed over is counted, and after PASS_AT_MOST such passes it is
// taken first whatever the node holds. Without held, the order is the fair order.
func TestAClaimPrefersAJobItsNodeHolds(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		one := []job.GPU{{Model: "H100", Count: 1}}
		cold := b.submitSpec(t, "acme", modelJob("cold", "big/model-70b", "o/env-a@1"))
		warm := b.submitSpec(t, "acme", modelJob("warm", "small/model-7b", "o/env-b@2"))
		held := []string{jobspec.NeedModel + "small/model-7b", jobspec.EnvNeed("acme", "o/env-b@2"), jobspec.EnvNeed("zeta", "o/env-b@2")}

		cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-warm", GPUs: one, Held: held})
		if err != nil || cl == nil || cl.Job.ID != warm.ID {
			t.Fatalf("claim with the 7b model held: %+v %v; want %s, the job the node holds", cl, err, warm.ID)
		}
		evs, err := b.q.Events(b.ctx, warm.ID, 0, 10)
		if err != nil {
			t.Fatal(err)
		}
		pending := evs[len(evs)-1]
		if pending.Type != job.EventPending || !strings.Contains(pending.Detail, "placed for its cache") ||
			!strings.Contains(pending.Detail, "small/model-7b") || !strings.Contains(pending.Detail, "1 job(s) ahead") {
			t.Fatalf("pending event: %+v; want it to say the job was placed for its cache", pending)
		}
		if got := b.rdb.HGet(b.ctx, b.q.keys.job(cold.ID), jobField.CachePassed).Val(); got != "1" {
			t.Fatalf("the cold job's passes: %q, want 1", got)
		}
		// A claim that holds nothing takes the fair order's first job, and its event says
		// nothing of a cache.
		cl, err = b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-bare", GPUs: one})
		if err != nil || cl == nil || cl.Job.ID != cold.ID {
			t.Fatalf("claim without held: %+v %v; want %s", cl, err, cold.ID)
		}
		evs, _ = b.q.Events(b.ctx, cold.ID, 0, 10)
		if d := evs[len(evs)-1].Detail; strings.Contains(d, "cache") {
			t.Fatalf("a fair-order claim says %q", d)
		}

		// Bounded: a cold job passed over PASS_AT_MOST (4) times is taken first by the next
		// claim, whatever that node holds.
		starved := b.submitSpec(t, "zeta", modelJob("starved", "big/model-70b", "o/env-a@1"))
		for i := range 4 {
			w := b.submitSpec(t, "zeta", modelJob("warm", "small/model-7b", "o/env-b@2"))
			cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-warm", GPUs: one, Held: held})
			if err != nil || cl == nil || cl.Job.ID != w.ID {
				t.Fatalf("warm claim %d: %+v %v; want %s", i, cl, err, w.ID)
			}
		}
		b.submitSpec(t, "zeta", modelJob("warm", "small/model-7b", "o/env-b@2"))
		cl, err = b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-warm", GPUs: one, Held: held})
		if err != nil || cl == nil || cl.Job.ID != starved.ID {
			t.Fatalf("after 4 passes: %+v %v; want the job passed over, %s", cl, err, starved.ID)
		}
	})
}

// A job wakes a waiting claim whose node holds its model's weights before one that would
// download them, even where the other has fewer GPUs free (the order a wake-up otherwise
// takes); a job of a model no waiting node holds wakes the fewest-free one. A claim that
// stops waiting leaves nothing filed under what its node held.
func TestAJobWakesTheWaitingNodeThatHoldsItsModel(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		type result struct {
			node string
			cl   *job.Claim
			err  error
		}
		got := make(chan result, 2)
		wait := func(node string, free int, held []string) {
			go func() {
				cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: node, GPUs: []job.GPU{{Model: "H100", Count: free}},
					Held: held, Wait: time.Minute})
				got <- result{node, cl, err}
			}()
		}
		wait("node-bare", 2, nil)
		wait("node-warm", 8, []string{jobspec.NeedModel + "small/model-7b", jobspec.EnvNeed("acme", "o/env-b@2")})
		testwait.Until(t, 10*time.Second, "both claims to wait", func() bool {
			return b.rdb.ZCard(b.ctx, b.q.keys.of("waitkey", "H100")).Val() == 2
		})
		if n := b.rdb.ZCard(b.ctx, b.q.keys.of("waitheld", "H100", jobspec.NeedModel+"small/model-7b")).Val(); n != 1 {
			t.Fatalf("%d claims filed as holding small/model-7b, want 1", n)
		}
		warm := b.submitSpec(t, "acme", modelJob("warm", "small/model-7b", "o/env-b@2"))
		r := <-got
		if r.err != nil || r.node != "node-warm" || r.cl == nil || r.cl.Job.ID != warm.ID {
			t.Fatalf("the 7b job woke %s (%+v, %v); want node-warm, which holds its weights", r.node, r.cl, r.err)
		}
		if n := b.rdb.HLen(b.ctx, rediskeys.Queue.FixedName(b.q.keys.prefix, "WAITER_HELD")).Val(); n != 0 {
			t.Fatalf("%d waiters still filed by what they hold after the warm one was woken", n)
		}
		cold := b.submitSpec(t, "acme", modelJob("cold", "big/model-70b", "o/env-a@1"))
		r = <-got
		if r.err != nil || r.node != "node-bare" || r.cl == nil || r.cl.Job.ID != cold.ID {
			t.Fatalf("the 70b job: %s %+v %v; want node-bare", r.node, r.cl, r.err)
		}
		if n := b.rdb.ZCard(b.ctx, b.q.keys.of("waitheld", "H100", jobspec.NeedModel+"small/model-7b")).Val(); n != 0 {
			t.Fatalf("%d claims still filed as holding small/model-7b", n)
		}
	})
}
