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

// Delay scheduling (issue 33): a job whose weights another node holds is left by a node that
// lacks them for as long as downloading them would take (its weights at Config.WeightsRate),
// counted from the first claim that left it; a node that holds them takes it meanwhile, and
// says in its event how long it waited; once the wait is over any node takes it. Nothing
// waits for weights no node holds, nor for a node that has not claimed within HeldTTL or is
// out of rotation, and a claim that says nothing of its cache (first-fit) never leaves a job.
func TestAJobWaitsForANodeThatHoldsItsWeightsNoLongerThanTheirDownload(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		one := []job.GPU{{Model: "H100", Count: 1}}
		const model = "acme-lab/model-7b" // 7B in bf16: 14 GB, 14 s at the default 1 GB/s
		const wait = 14 * time.Second
		warmHeld := []string{jobspec.NeedModel + model}
		coldHeld := []string{jobspec.NeedModel + "acme-lab/other-1b"}
		try := func(node string, held []string) (*job.Claim, time.Time) {
			t.Helper()
			cl, again, err := b.q.TryClaim(b.ctx, job.ClaimRequest{AgentID: node, GPUs: one, Held: held})
			if err != nil {
				t.Fatalf("claim of %s: %v", node, err)
			}
			return cl, again
		}
		lastEvent := func(id string) string {
			t.Helper()
			evs, err := b.q.Events(b.ctx, id, 0, 20)
			if err != nil || len(evs) == 0 {
				t.Fatalf("events of %s: %v %v", id, evs, err)
			}
			return evs[len(evs)-1].Detail
		}
		// node-warm says, with a claim that finds nothing, that it holds the model.
		if cl, _ := try("node-warm", warmHeld); cl != nil {
			t.Fatalf("node-warm took %s from an empty queue", cl.Job.ID)
		}

		// A node that lacks the weights leaves the job, and is told when to look again.
		first := b.submitSpec(t, "acme", modelJob("first", model, "o/env@1"))
		start := b.clock.Now()
		cl, again := try("node-cold", coldHeld)
		if cl != nil || !again.Equal(start.Add(wait).Truncate(time.Millisecond)) {
			t.Fatalf("node-cold: %+v, look again at %v; want nothing now and a look at %v", cl, again, start.Add(wait))
		}
		b.clock.Advance(wait - time.Second)
		if cl, again2 := try("node-cold", coldHeld); cl != nil || !again2.Equal(again) {
			t.Fatalf("node-cold a second before the wait ends: %+v, %v; want nothing, and the same time", cl, again2)
		}
		// The node that holds them takes it, and its event says it waited.
		if cl, _ := try("node-warm", warmHeld); cl == nil || cl.Job.ID != first.ID {
			t.Fatalf("node-warm: %+v; want %s", cl, first.ID)
		}
		if d := lastEvent(first.ID); !strings.Contains(d, "waited 13.0 s for a node that holds "+model) {
			t.Fatalf("pending event %q; want it to say it waited 13.0 s for a node that holds the model", d)
		}
		if got := b.rdb.HExists(b.ctx, b.q.keys.job(first.ID), jobField.ColdSince).Val(); got {
			t.Fatal("the job claimed still has a cold_since")
		}

		// No node that holds them claims within the wait: the cold node takes it after.
		second := b.submitSpec(t, "acme", modelJob("second", model, "o/env@1"))
		if cl, _ := try("node-cold", coldHeld); cl != nil {
			t.Fatalf("node-cold took %s at once", cl.Job.ID)
		}
		b.clock.Advance(wait)
		if cl, _ := try("node-cold", coldHeld); cl == nil || cl.Job.ID != second.ID {
			t.Fatalf("node-cold once the wait ended: %+v; want %s", cl, second.ID)
		}
		if d := lastEvent(second.ID); !strings.Contains(d, "waited 14.0 s") || !strings.Contains(d, "none came") {
			t.Fatalf("pending event %q; want it to say it waited 14.0 s and no node that holds the weights came", d)
		}

		// While one job waits, a job the node may take goes first.
		third := b.submitSpec(t, "acme", modelJob("third", model, "o/env@1"))
		other := b.submitSpec(t, "zeta", modelJob("other", "nobody/model-3b", "o/env@1"))
		if cl, _ := try("node-cold", coldHeld); cl == nil || cl.Job.ID != other.ID {
			t.Fatalf("node-cold with %s waiting: %+v; want %s, whose weights no node holds", third.ID, cl, other.ID)
		}
		// A claim that says nothing of its cache takes the waiting job.
		if cl, _ := try("node-bare", nil); cl == nil || cl.Job.ID != third.ID {
			t.Fatalf("a first-fit claim: %+v; want %s", cl, third.ID)
		}

		// A holder that has not claimed within HeldTTL is no node to wait for.
		b.clock.Advance(b.cfg.HeldTTL)
		stale := b.submitSpec(t, "acme", modelJob("stale", model, "o/env@1"))
		if cl, _ := try("node-cold", coldHeld); cl == nil || cl.Job.ID != stale.ID {
			t.Fatalf("node-cold with the holder's claim an hour old: %+v; want %s at once", cl, stale.ID)
		}
		// Nor is a holder out of rotation.
		if cl, _ := try("node-warm", warmHeld); cl != nil {
			t.Fatalf("node-warm took %s", cl.Job.ID)
		}
		if err := b.q.SetNode(b.ctx, "node-warm", job.NodeCordoned, "maintenance"); err != nil {
			t.Fatal(err)
		}
		cordoned := b.submitSpec(t, "acme", modelJob("cordoned", model, "o/env@1"))
		if cl, _ := try("node-cold", coldHeld); cl == nil || cl.Job.ID != cordoned.ID {
			t.Fatalf("node-cold with the holder cordoned: %+v; want %s at once", cl, cordoned.ID)
		}
	}, func(c *Config) { c.WaitForWeights = 1 })
}

// Delay scheduling is off unless the operator turns it on: with the defaults a node that
// lacks a job's weights takes it at once, though another node holds them.
func TestNoJobWaitsForWeightsByDefault(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		one := []job.GPU{{Model: "H100", Count: 1}}
		const model = "acme-lab/model-7b"
		if cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-warm", GPUs: one, Held: []string{jobspec.NeedModel + model}}); cl != nil || err != nil {
			t.Fatalf("node-warm on an empty queue: %+v %v", cl, err)
		}
		j := b.submitSpec(t, "acme", modelJob("j", model, "o/env@1"))
		cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node-cold", GPUs: one, Held: []string{jobspec.NeedModel + "acme-lab/other-1b"}})
		if err != nil || cl == nil || cl.Job.ID != j.ID {
			t.Fatalf("node-cold: %+v %v; want %s at once", cl, err, j.ID)
		}
	})
}

// A node's compile cache of an organization's model is a bonus: between jobs the node lacks
// something of, it takes the one whose compile cache it also holds, and says so; but a job it
// holds the weights and environments of is taken at once, compile cache or not (only a run of
// the organization's model on those GPUs leaves one: no reason to pass a job over).
func TestACompileCacheIsABonusNeverAReasonToLookFurther(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		one := []job.GPU{{Model: "H100", Count: 1}}
		const model = "acme-lab/model-7b"
		zetaCompile := jobspec.CompileNeed("zeta", model, "H100", 1)
		claim := func(held ...string) *job.Claim {
			t.Helper()
			cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "node", GPUs: one, Held: held})
			if err != nil || cl == nil {
				t.Fatalf("claim: %+v %v", cl, err)
			}
			return cl
		}
		// acme's job first in fair order, zeta's next; the node holds the weights and zeta's
		// compile cache, neither organization's install: zeta's job, for its compile cache.
		acme := b.submitSpec(t, "acme", modelJob("acme", model, "o/env-a@1"))
		zeta := b.submitSpec(t, "zeta", modelJob("zeta", model, "o/env-z@1"))
		if cl := claim(jobspec.NeedModel+model, zetaCompile); cl.Job.ID != zeta.ID {
			t.Fatalf("took %s; want zeta's %s, whose compile cache the node holds", cl.Job.ID, zeta.ID)
		}
		evs, _ := b.q.Events(b.ctx, zeta.ID, 0, 10)
		if d := evs[len(evs)-1].Detail; !strings.Contains(d, "placed for its cache") || !strings.Contains(d, "the compile cache zeta:"+model+"|H100|1") {
			t.Fatalf("pending event %q; want it to name the compile cache", d)
		}
		if cl := claim(); cl.Job.ID != acme.ID {
			t.Fatalf("took %s; want %s", cl.Job.ID, acme.ID)
		}
		// With acme's install held too, acme's job is taken at once though zeta's compile cache
		// is what the node also holds.
		acme2 := b.submitSpec(t, "acme", modelJob("acme2", model, "o/env-a@1"))
		b.submitSpec(t, "zeta", modelJob("zeta2", model, "o/env-z@1"))
		if cl := claim(jobspec.NeedModel+model, jobspec.EnvNeed("acme", "o/env-a@1"), zetaCompile); cl.Job.ID != acme2.ID {
			t.Fatalf("took %s; want acme's %s, whose weights and install the node holds", cl.Job.ID, acme2.ID)
		}
	})
}
