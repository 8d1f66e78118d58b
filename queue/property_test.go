package queue

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// TestQueueInvariantsUnderRandomOperations drives random submits, claims, heartbeats, agent
// deaths, completions, failures, stops, restarts, releases and clock jumps, and after every
// step checks the queue's invariants against what Redis holds:
//
//   - every accepted job is in exactly one state, and indexed where that state says (and
//     nowhere else);
//   - a job has at most one live lease, and every older token is refused;
//   - each organization's counters match its jobs;
//   - every claim goes to an organization with the least usage per weight among those that
//     have a job the agent can run and room under their running limit (fair share, exactly).
//
// HT_PROPERTY_SEED=n replays a run.
func TestQueueInvariantsUnderRandomOperations(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HT_PROPERTY_SEED"); s != "" {
		seed, _ = strconv.ParseUint(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	each(t, func(t *testing.T, b bundle) {
		p := &property{t: t, b: b, rnd: rand.New(rand.NewPCG(seed, 7)), held: map[string]*job.Claim{}}
		if err := b.q.SetOrg(b.ctx, "b", job.OrgSettings{Weight: 2}); err != nil {
			t.Fatal(err)
		}
		if err := b.q.SetOrg(b.ctx, "c", job.OrgSettings{MaxRunning: 2}); err != nil {
			t.Fatal(err)
		}
		ops := map[string]int{}
		for step := range 400 {
			op := p.step()
			ops[op]++
			p.check(fmt.Sprintf("step %d (%s)", step, op))
		}
		statuses := map[job.Status]int{}
		for _, id := range p.jobs {
			statuses[p.b.status(t, id).Status]++
		}
		t.Logf("operations %v; jobs end %v", ops, statuses)
	}, func(c *Config) {
		c.LeaseTTL = 60 * time.Second
		c.MaxAttempts = 3
		c.MaxQueued = 40
		// One simulated agent claims everything: keeping a retried job from the agent that lost
		// it, or quarantining the agent for its lost leases, would leave jobs that fit
		// unclaimed. TestALapsedLeaseRetriesAfterABackoffThenFails,
		// TestAPlatformFaultIsRetriedElsewhere and TestNodeHealth cover those rules.
		c.RetryElsewhereFor = -1
		c.QuarantineAfter = -1
	})
}

type property struct {
	t    *testing.T
	b    bundle
	rnd  *rand.Rand
	jobs []string
	// held are the leases our simulated agents hold and keep alive; a dead agent's lease is
	// dropped from here and lapses.
	held  map[string]*job.Claim
	stale []struct{ id, token string }
}

var orgs = []string{"a", "b", "c"}

func (p *property) pick(list []string) string { return list[p.rnd.IntN(len(list))] }

func (p *property) heldIDs() []string {
	ids := make([]string, 0, len(p.held))
	for id := range p.held {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids
}

func (p *property) drop(id string) {
	if cl, ok := p.held[id]; ok {
		p.stale = append(p.stale, struct{ id, token string }{id, cl.Lease.Token})
		delete(p.held, id)
	}
}

func (p *property) step() string {
	b, t := p.b, p.t
	switch r := p.rnd.IntN(100); {
	case r < 25:
		spec := jobSpec("p", []int{0, 1, 2, 8}[p.rnd.IntN(4)])
		spec.Priority = []int{0, 0, 5}[p.rnd.IntN(3)]
		j, _, err := b.q.Submit(b.ctx, job.Submission{Org: p.pick(orgs), Spec: spec}, "", "")
		var limit *job.LimitError
		if errors.As(err, &limit) {
			return "submit past the limit"
		}
		if err != nil {
			t.Fatal(err)
		}
		p.jobs = append(p.jobs, j.ID)
		return "submit"
	case r < 50:
		free := []job.GPU{{Model: "H100", Count: []int{1, 2, 8}[p.rnd.IntN(3)]}}
		p.claimFairly(free)
		return fmt.Sprintf("claim %d", free[0].Count)
	case r < 60 && len(p.held) > 0:
		id := p.pick(p.heldIDs())
		cl := p.held[id]
		if p.rnd.IntN(2) == 0 {
			if _, err := b.q.Complete(b.ctx, id, job.Outcome{Token: cl.Lease.Token}); err != nil && !errors.Is(err, job.ErrLeaseLost) {
				t.Fatal(err)
			}
		} else if _, err := b.q.Fail(b.ctx, id, job.Outcome{Token: cl.Lease.Token, Reason: "boom"}); err != nil && !errors.Is(err, job.ErrLeaseLost) {
			t.Fatal(err)
		}
		p.drop(id)
		return "finish"
	case r < 65 && len(p.held) > 0:
		p.drop(p.pick(p.heldIDs())) // the agent dies without a word
		return "agent dies"
	case r < 70 && len(p.held) > 0:
		id := p.pick(p.heldIDs())
		if _, err := b.q.Release(b.ctx, id, job.Outcome{Token: p.held[id].Lease.Token, Reason: "drain"}); err != nil && !errors.Is(err, job.ErrLeaseLost) {
			t.Fatal(err)
		}
		p.drop(id)
		return "release"
	case r < 77 && len(p.jobs) > 0:
		if _, err := b.q.Cancel(b.ctx, p.pick(p.jobs)); err != nil && !errors.Is(err, job.ErrConflict) {
			t.Fatal(err)
		}
		return "stop"
	case r < 82 && len(p.jobs) > 0:
		if _, err := b.q.Restart(b.ctx, p.pick(p.jobs)); err != nil && !errors.Is(err, job.ErrConflict) {
			t.Fatal(err)
		}
		return "restart"
	default:
		b.clock.Advance(time.Duration(1+p.rnd.IntN(40)) * time.Second)
		for _, id := range p.heldIDs() {
			rep, err := b.q.Heartbeat(b.ctx, id, job.Heartbeat{Token: p.held[id].Lease.Token, Running: true})
			switch {
			case errors.Is(err, job.ErrLeaseLost):
				p.drop(id)
			case err != nil:
				t.Fatal(err)
			case rep.Action == job.Stop:
				// The pipeline stops; the agent confirms (half the time) or goes silent.
				if p.rnd.IntN(2) == 0 {
					if _, err := b.q.Fail(b.ctx, id, job.Outcome{Token: p.held[id].Lease.Token, Reason: "terminated"}); err != nil {
						t.Fatal(err)
					}
				}
				p.drop(id)
			}
		}
		if _, _, err := b.q.Reap(b.ctx, 100); err != nil {
			t.Fatal(err)
		}
		return "time passes"
	}
}

// claimFairly claims, and checks that the organization served had the least usage per weight
// among those that could be served.
func (p *property) claimFairly(free []job.GPU) {
	b, t := p.b, p.t
	candidates := map[string]float64{}
	for _, org := range orgs {
		st, err := b.q.GetOrg(b.ctx, org)
		if err != nil {
			t.Fatal(err)
		}
		if st.MaxRunning > 0 && st.Running >= st.MaxRunning {
			continue
		}
		classes, _ := b.rdb.HGet(b.ctx, b.q.keys.org(org), "classes").Result()
		for _, c := range strings.Split(classes, ",") {
			if c == "" {
				continue
			}
			n, _ := strconv.Atoi(c[strings.LastIndexByte(c, ':')+1:])
			if n == 0 || n <= free[0].Count {
				score, err := b.rdb.ZScore(b.ctx, b.q.keys.of("fairkey", c), org).Result()
				if err != nil {
					t.Fatalf("org %s has a ready class %s but no fair score: %v", org, c, err)
				}
				candidates[org] = score
			}
		}
	}
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "agent", GPUs: free})
	if err != nil {
		t.Fatal(err)
	}
	if cl == nil {
		if len(candidates) > 0 {
			t.Fatalf("nothing claimed, yet %v had jobs that fit %v", candidates, free)
		}
		return
	}
	best := cl.Job.Org
	for org, score := range candidates {
		if score < candidates[best]-1e-9 {
			t.Fatalf("claimed %s's job (score %g) while %s scored %g: not fair", best, candidates[best], org, score)
		}
	}
	p.held[cl.Job.ID] = cl
}

// check verifies every invariant against Redis.
func (p *property) check(where string) {
	b, t := p.b, p.t
	t.Helper()
	type counts struct {
		queued, running, gpus int
		ready                 map[string]bool // classes with a job ready to claim
	}
	want := map[string]*counts{}
	for _, org := range orgs {
		want[org] = &counts{ready: map[string]bool{}}
	}
	leases, _ := b.rdb.ZRange(b.ctx, b.q.keys.leases(), 0, -1).Result()
	delayed, _ := b.rdb.ZRange(b.ctx, b.q.keys.fixed("DELAYED"), 0, -1).Result()
	// A job's hash is in the queue's slot while it is live, in its own once it ended and moved.
	hashes := make([]*redis.MapStringStringCmd, len(p.jobs))
	owns := make([]*redis.MapStringStringCmd, len(p.jobs))
	if _, err := b.rdb.Pipelined(b.ctx, func(pl redis.Pipeliner) error {
		for i, id := range p.jobs {
			hashes[i] = pl.HGetAll(b.ctx, b.q.keys.job(id))
			owns[i] = pl.HGetAll(b.ctx, b.q.keys.own(id, "ownjob"))
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	settling, _ := b.rdb.ZRange(b.ctx, b.q.keys.settle(), 0, -1).Result()
	for i, id := range p.jobs {
		m := hashes[i].Val()
		if len(m) == 0 {
			m = owns[i].Val()
		} else if is := job.Status(m["status"]); (is == job.Completed || is == job.Failed || is == job.Stopped) && !slices.Contains(settling, id) {
			t.Fatalf("%s: %s job %s is neither moved to its own slot nor due to be", where, is, id)
		}
		org, class, status := m["org"], m["class"], job.Status(m["status"])
		_, inQueueErr := b.rdb.ZScore(b.ctx, b.q.keys.classQueue(org, class), id).Result()
		inQueue := inQueueErr == nil
		inLeases, inDelayed := slices.Contains(leases, id), slices.Contains(delayed, id)
		gpus, _ := strconv.Atoi(m["gpus"])
		switch status {
		case job.Queued:
			want[org].queued++
			if inQueue {
				want[org].ready[class] = true
			}
			if inQueue == inDelayed || inLeases || m["lease_token"] != "" {
				t.Fatalf("%s: QUEUED job %s: in queue %v, delayed %v, leased %v, token %q", where, id, inQueue, inDelayed, inLeases, m["lease_token"])
			}
		case job.Pending, job.Running:
			want[org].running++
			want[org].gpus += gpus
			if !inLeases || m["lease_token"] == "" || inQueue || inDelayed {
				t.Fatalf("%s: %s job %s: leased %v, token %q, in queue %v, delayed %v", where, status, id, inLeases, m["lease_token"], inQueue, inDelayed)
			}
		case job.Completed, job.Failed, job.Stopped:
			if inQueue || inLeases || inDelayed || m["lease_token"] != "" {
				t.Fatalf("%s: %s job %s still indexed: queue %v, leases %v, delayed %v", where, status, id, inQueue, inLeases, inDelayed)
			}
		default:
			t.Fatalf("%s: job %s in no state (%q)", where, id, status)
		}
	}
	for _, org := range orgs {
		st, _ := b.q.GetOrg(b.ctx, org)
		w := want[org]
		if st.Queued != w.queued || st.Running != w.running || st.RunningGPUs != w.gpus {
			t.Fatalf("%s: org %s counters %+v, its jobs say queued %d running %d gpus %d", where, org, st, w.queued, w.running, w.gpus)
		}
		field, _ := b.rdb.HGet(b.ctx, b.q.keys.org(org), "classes").Result()
		got := map[string]bool{}
		for _, c := range strings.Split(field, ",") {
			if c != "" {
				got[c] = true
			}
		}
		if fmt.Sprint(got) != fmt.Sprint(w.ready) {
			t.Fatalf("%s: org %s lists ready classes %v, its jobs say %v", where, org, got, w.ready)
		}
		// It is in the fair order of each class it has ready jobs in while it has room to run
		// one more, and in none while it has not.
		room := st.MaxRunning == 0 || st.Running < st.MaxRunning
		for c := range w.ready {
			_, fairErr := b.rdb.ZScore(b.ctx, b.q.keys.of("fairkey", c), org).Result()
			if (fairErr == nil) != room {
				t.Fatalf("%s: org %s with room %v: in the fair order of %s: %v", where, org, room, c, fairErr == nil)
			}
		}
	}
	// A token that is not the job's current one never works again. (A dead agent's token stays
	// current until its lease lapses; a heartbeat with it would revive the lease, so it is not
	// tried then.)
	stale := p.stale
	if len(stale) > 10 { // the newest ten, and ten others at random
		recent := stale[len(stale)-10:]
		for range 10 {
			recent = append(recent, stale[p.rnd.IntN(len(stale))])
		}
		stale = recent
	}
	for _, s := range stale {
		if cur, _ := b.rdb.HGet(b.ctx, b.q.keys.job(s.id), "lease_token").Result(); cur == s.token {
			continue
		}
		if _, err := b.q.Heartbeat(b.ctx, s.id, job.Heartbeat{Token: s.token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Fatalf("%s: a heartbeat with a stale token of job %s was accepted (%v)", where, s.id, err)
		}
		if _, err := b.q.Complete(b.ctx, s.id, job.Outcome{Token: s.token}); !errors.Is(err, job.ErrLeaseLost) {
			t.Fatalf("%s: a completion with a stale token of job %s was accepted (%v)", where, s.id, err)
		}
	}
}
