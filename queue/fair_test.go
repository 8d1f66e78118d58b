package queue

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// simulate runs slots one-GPU agents for the given time against the queue, each job taking
// jobTime, heartbeating every tick, and returns the GPU-seconds each organization got.
func simulate(t *testing.T, b bundle, slots int, jobTime, total time.Duration) map[string]float64 {
	t.Helper()
	type held struct {
		cl    *job.Claim
		start time.Time
	}
	running := make([]*held, slots)
	got := map[string]float64{}
	tick := 15 * time.Second
	for elapsed := time.Duration(0); elapsed < total; elapsed += tick {
		now := b.clock.Now()
		for i, h := range running {
			if h == nil {
				continue
			}
			got[h.cl.Job.Org] += tick.Seconds()
			if now.Sub(h.start) >= jobTime {
				if _, err := b.q.Complete(b.ctx, h.cl.Job.ID, job.Outcome{Token: h.cl.Lease.Token}); err != nil {
					t.Fatal(err)
				}
				running[i] = nil
			} else {
				b.running(t, h.cl.Job.ID, h.cl)
			}
		}
		for i := range running {
			if running[i] == nil {
				if cl := b.claimFor(t, fmt.Sprintf("slot-%d", i), []job.GPU{{Model: "H100", Count: 1}}); cl != nil {
					running[i] = &held{cl: cl, start: now}
				}
			}
		}
		b.clock.Advance(tick)
	}
	return got
}

func share(got map[string]float64, org string) float64 {
	total := 0.0
	for _, v := range got {
		total += v
	}
	return got[org] / total
}

func TestFairShareFollowsTheWeights(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name          string
		weightA       float64
		wantA, within float64
	}{
		{"equal weights", 1, 0.5, 0.05},
		{"acme weighs 3", 3, 0.75, 0.05},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			each(t, func(t *testing.T, b bundle) {
				if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{Weight: c.weightA}); err != nil {
					t.Fatal(err)
				}
				// acme arrives first with a deep queue; globex right after.
				for i := range 60 {
					b.submitSpec(t, "acme", jobSpec(fmt.Sprint("a", i), 1))
				}
				for i := range 60 {
					b.submitSpec(t, "globex", jobSpec(fmt.Sprint("g", i), 1))
				}
				got := simulate(t, b, 4, 2*time.Minute, 40*time.Minute)
				t.Logf("GPU-seconds %v: acme %.1f%%", got, share(got, "acme")*100)
				if a := share(got, "acme"); math.Abs(a-c.wantA) > c.within {
					t.Errorf("acme got %.0f%% of the GPU time, want %.0f%% ± %.0f%% (%v)", a*100, c.wantA*100, c.within*100, got)
				}
			})
		})
	}
}

func TestABurstLongAgoDoesNotStarveToday(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		// acme used 100 GPU-hours five half-lives ago (about 3 remain); globex used 10 just now.
		j := b.submitSpec(t, "acme", jobSpec("burst", 8))
		cl := b.claim(t)
		b.clock.Advance(12*time.Hour + 30*time.Minute)
		b.running(t, j.ID, cl)
		if _, err := b.q.Complete(b.ctx, j.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		b.clock.Advance(5 * 24 * time.Hour)
		g := b.submitSpec(t, "globex", jobSpec("recent", 8))
		cg := b.claim(t)
		b.clock.Advance(75 * time.Minute)
		b.running(t, g.ID, cg)
		if _, err := b.q.Complete(b.ctx, g.ID, job.Outcome{Token: cg.Lease.Token}); err != nil {
			t.Fatal(err)
		}
		a, _ := b.q.GetOrg(b.ctx, "acme")
		gl, _ := b.q.GetOrg(b.ctx, "globex")
		if a.UsageGPUHours < 2.9 || a.UsageGPUHours > 3.4 || gl.UsageGPUHours < 9.9 || gl.UsageGPUHours > 10.1 {
			t.Fatalf("usage acme %.2f, globex %.2f GPU-hours; want about 3.1 and 10", a.UsageGPUHours, gl.UsageGPUHours)
		}
		b.submitSpec(t, "globex", jobSpec("g2", 8))
		aj := b.submitSpec(t, "acme", jobSpec("a2", 8))
		if next := b.claim(t); next.Job.ID != aj.ID {
			t.Errorf("claimed %s's job first; acme's old burst has decayed below globex's recent use", next.Job.Org)
		}
	}, func(c *Config) { c.LeaseTTL = 24 * time.Hour })
}

func TestPriorityOrdersJobsWithinAnOrganization(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		low := jobSpec("low", 0)
		high := jobSpec("high", 0)
		high.Priority = 10
		first := b.submitSpec(t, "acme", low)
		b.clock.Advance(time.Second)
		second := b.submitSpec(t, "acme", high)
		b.clock.Advance(time.Second)
		third := b.submitSpec(t, "acme", low)
		var order []string
		for range 3 {
			order = append(order, b.claim(t).Job.ID)
		}
		if want := []string{second.ID, first.ID, third.ID}; !equal(order, want) {
			t.Errorf("claimed %v, want the priority 10 job first, then by age: %v", order, want)
		}
	})
}

func TestAJobThatDoesNotFitNeverBlocksOneThatDoes(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		big := jobSpec("big", 8)
		big.Priority = 50
		b.submitSpec(t, "acme", big)
		b.clock.Advance(time.Second)
		small := b.submitSpec(t, "acme", jobSpec("small", 2))
		other := b.submitSpec(t, "globex", jobSpec("other", 4))

		four := []job.GPU{{Model: "H100", Count: 4}}
		got := b.claimFor(t, "agent-4", four)
		if got == nil || got.Job.ID != small.ID && got.Job.ID != other.ID {
			t.Fatalf("a 4-GPU agent claimed %v; the 8-GPU job must not block the smaller ones", got)
		}
		got2 := b.claimFor(t, "agent-4b", four)
		if got2 == nil || got2.Job.ID == got.Job.ID || got2.Job.Config.Resources.GPUs > 4 {
			t.Fatalf("second 4-GPU agent claimed %v", got2)
		}
		if none := b.claimFor(t, "agent-4c", four); none != nil {
			t.Fatalf("a 4-GPU agent claimed the 8-GPU job: %+v", none.Job)
		}
		if eight := b.claimFor(t, "agent-8", h100x8); eight == nil || eight.Job.Config.Resources.GPUs != 8 {
			t.Fatalf("an 8-GPU agent did not get the 8-GPU job: %v", eight)
		}
	})
}

func TestGPUModelsMustMatch(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		h := b.submitSpec(t, "acme", jobSpec("h100", 2))
		cpu := b.submitSpec(t, "acme", jobSpec("api-model", 0))
		if cl := b.claimFor(t, "a100-node", []job.GPU{{Model: "A100", Count: 8}}); cl == nil || cl.Job.ID != cpu.ID {
			t.Fatalf("an A100 node claimed %v; it fits only the job that needs no GPU", cl)
		}
		if cl := b.claimFor(t, "a100-node", []job.GPU{{Model: "A100", Count: 8}}); cl != nil {
			t.Fatalf("an A100 node claimed an H100 job: %v", cl.Job)
		}
		if cl := b.claimFor(t, "h100-node", []job.GPU{{Model: "h100", Count: 2}}); cl == nil || cl.Job.ID != h.ID {
			t.Fatalf("an H100 node (model in lower case) did not get the H100 job: %v", cl)
		}
	})
}

func TestOrganizationLimits(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{MaxRunning: 1, MaxQueued: 2}); err != nil {
			t.Fatal(err)
		}
		first := b.submit(t, "acme", "1")
		second := b.submit(t, "acme", "2")
		var limit *job.LimitError
		if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("3", 0)}, "", ""); !errors.As(err, &limit) ||
			limit.Limit != "queued" || limit.Current != 2 || limit.Max != 2 {
			t.Fatalf("third submit: %v, want a queued-limit error", err)
		}
		globex := b.submit(t, "globex", "g")
		if b.claim(t).Job.ID != first.ID {
			t.Fatal("first claim should take acme's first job")
		}
		// acme is at its running limit: its second job waits, globex's runs.
		if next := b.claim(t); next.Job.ID != globex.ID {
			t.Fatalf("claimed %s, want globex's job while acme is at its running limit", next.Job.ID)
		}
		pos, _, _ := b.q.Position(b.ctx, second.ID)
		if !strings.Contains(pos.Reason, "running limit (1 of 1 jobs running)") {
			t.Errorf("reason %q", pos.Reason)
		}
		if cl := b.claimFor(t, "x", h100x8); cl != nil {
			t.Fatalf("claimed %s past acme's running limit", cl.Job.ID)
		}
		// Lifting the limit lets it run.
		if err := b.q.SetOrg(b.ctx, "acme", job.OrgSettings{}); err != nil {
			t.Fatal(err)
		}
		if next := b.claim(t); next.Job.ID != second.ID {
			t.Fatalf("claimed %s after the limit was lifted", next.Job.ID)
		}
		st, _ := b.q.GetOrg(b.ctx, "acme")
		if st.Running != 2 || st.Queued != 0 || st.MaxRunning != 0 || st.Weight != 1 {
			t.Errorf("org %+v", st)
		}
	}, func(c *Config) { c.MaxQueued = 100 })
}

func TestPositionSaysWhereAJobStandsAndWhy(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		waiting := b.submitSpec(t, "acme", jobSpec("big", 8))
		if p, _, _ := b.q.Position(b.ctx, waiting.ID); p.Reason != "waiting for 8×H100: no agent has that many free now" {
			t.Errorf("with no agent about: %+v", p)
		}
		if _, err := b.q.Cancel(b.ctx, waiting.ID); err != nil {
			t.Fatal(err)
		}
		// An idle 8-GPU agent waits on an empty queue, so the queue knows it is there.
		if cl := b.claimFor(t, "idle", h100x8); cl != nil {
			t.Fatalf("claimed %v from an empty queue", cl.Job)
		}
		var acme []*job.Job
		for i := range 3 {
			acme = append(acme, b.submitSpec(t, "acme", jobSpec(fmt.Sprint(i), 8)))
			b.clock.Advance(time.Millisecond)
		}
		pos, queued, err := b.q.Position(b.ctx, acme[2].ID)
		if err != nil || !queued || pos.RunsAhead != 2 || pos.Reason != "waiting for its turn: 2 job(s) ahead" {
			t.Fatalf("position %+v %v %v", pos, queued, err)
		}
		// The first runs; acme's use now puts globex, which arrives, ahead of acme's others.
		b.claim(t)
		g := b.submitSpec(t, "globex", jobSpec("g", 8))
		if pos, _, _ = b.q.Position(b.ctx, acme[2].ID); pos.RunsAhead != 2 {
			t.Errorf("acme's last job: %+v; want acme's other queued job and globex's ahead", pos)
		}
		if pg, _, _ := b.q.Position(b.ctx, g.ID); pg.RunsAhead != 0 || !strings.HasPrefix(pg.Reason, "next in line") {
			t.Errorf("globex's job: %+v", pg)
		}
		huge := jobSpec("huge", 16)
		h := b.submitSpec(t, "acme", huge)
		if ph, _, _ := b.q.Position(b.ctx, h.ID); ph.Reason != "waiting for 16×H100: no agent has that many free now" {
			t.Errorf("a 16-GPU job: %+v", ph)
		}
		b.clock.Advance(time.Millisecond)
		pre, err := b.q.RunsAhead(b.ctx, "acme", jobSpec("preview", 8))
		if err != nil || pre.RunsAhead != 4 {
			t.Errorf("a new acme job would have %+v ahead (%v), want 4", pre, err)
		}
		if _, queued, _ := b.q.Position(b.ctx, acme[0].ID); queued {
			t.Error("a claimed job has no queue position")
		}
	})
}

func TestUsageRebasesWithoutChangingTheOrder(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		a := b.submitSpec(t, "acme", jobSpec("a", 1))
		ca := b.claim(t)
		b.clock.Advance(time.Hour)
		b.running(t, a.ID, ca)
		b.submitSpec(t, "acme", jobSpec("a2", 1))
		b.submitSpec(t, "globex", jobSpec("g", 1))
		before, _ := b.q.GetOrg(b.ctx, "acme")
		// 11 time constants later (past the threshold of 10) the reaper rebases the frame.
		b.clock.Advance(11 * time.Duration(float64(b.cfg.UsageHalfLife)/math.Ln2))
		b.reap(t)
		tref, _ := b.rdb.HGet(b.ctx, b.q.keys.meta(), "tref").Int64()
		if tref != b.clock.Now().UnixMilli() {
			t.Fatalf("tref %d, want now %d", tref, b.clock.Now().UnixMilli())
		}
		after, _ := b.q.GetOrg(b.ctx, "acme")
		want := before.UsageGPUHours * math.Exp(-11)
		if before.UsageGPUHours <= 0 || math.Abs(after.UsageGPUHours-want) > want*0.01 {
			t.Errorf("usage before %g, after 11 time constants %g, want %g", before.UsageGPUHours, after.UsageGPUHours, want)
		}
		if next := b.claimFor(t, "n", h100x8); next == nil || next.Job.Org != "globex" {
			t.Errorf("after the rebase, globex (no use) should come before acme")
		}
	}, func(c *Config) { c.LeaseTTL = 1000 * 24 * time.Hour })
}
