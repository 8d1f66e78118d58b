package main

import (
	"context"
	"fmt"
	"log"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// The queue pushed the way a fleet pushes it (issue 16): many agents waiting, many jobs
// running, many organizations. Each figure is one run on the same redis-server as the rest.

// fleetSizes are the sizes each fleet case runs at: the issue's, or a smoke run's.
type fleetSizes struct {
	waiting     []int // waiting agents over a backlog that fits none of them
	backlog     int   // queued 8-GPU jobs in that backlog
	submits     int   // submits timed at each number of waiting agents
	orgs        int   // organizations for the claim case (half of them at their limit)
	agents      int   // agents known for the position case
	running     []int // running jobs for the reaper case
	fleetSample int   // operations timed for each latency
}

var fleetFull = fleetSizes{waiting: []int{0, 100, 500}, backlog: 200, submits: 4000, orgs: 10000, agents: 10000,
	running: []int{100, 1000, 10000}, fleetSample: 2000}

var fleetSmoke = fleetSizes{waiting: []int{0, 20}, backlog: 20, submits: 200, orgs: 200, agents: 200,
	running: []int{10, 100}, fleetSample: 50}

func (b *bench) fleet(s fleetSizes) {
	var base float64
	for _, w := range s.waiting {
		rate, cpu := b.submitsWhileWaiting(w, s.backlog, s.submits)
		note := fmt.Sprintf("Redis CPU %v/submit", cpu)
		if w == 0 {
			base = rate
		} else {
			note += fmt.Sprintf("; %.2f of 0 waiting", rate/base)
		}
		b.row(fmt.Sprintf("submits, %d agents waiting, %d queued that fit none", w, s.backlog), fmt.Sprintf("%.0f/s", rate), note)
	}
	b.claimAmongLimitedOrgs(s.orgs, s.fleetSample)
	b.positionWithAgents(s.agents, s.fleetSample)
	for _, n := range s.running {
		b.deathToRequeue(n)
	}
}

// submitsWhileWaiting has waiting agents (1 free H100 each) long-poll claims over a backlog of
// 8-GPU jobs that fit none of them, and times submits of more such jobs from 16 goroutines.
func (b *bench) submitsWhileWaiting(waiting, backlog, submits int) (perSec float64, cpu time.Duration) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	big := spec("big")
	big.Resources.GPUs = 8
	parallel(backlog, 16, func(_, i int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%d", i%10), Spec: big}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	ctx, cancel := context.WithCancel(b.ctx)
	var wg sync.WaitGroup
	var looked atomic.Int64
	for i := range waiting {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				looked.Add(1)
				cl, err := q.Claim(ctx, job.ClaimRequest{AgentID: fmt.Sprint("small", i), GPUs: []job.GPU{{Model: "H100", Count: 1}}, Wait: 20 * time.Second})
				if cl != nil {
					log.Fatalf("an agent with 1 GPU claimed %s", cl.Job.ID)
				}
				if err != nil && ctx.Err() == nil {
					log.Fatal(err)
				}
			}
		}()
	}
	// Every agent has looked once and is waiting.
	for looked.Load() < int64(waiting) {
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond)
	cpu0 := b.redisCPU()
	start := time.Now()
	parallel(submits, 16, func(w, _ int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%d", w%10), Spec: big}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	elapsed := time.Since(start)
	cpu = b.redisCPU() - cpu0
	cancel()
	wg.Wait()
	return float64(submits) / elapsed.Seconds(), perJob(cpu, submits)
}

// claimAmongLimitedOrgs times claims with orgs organizations queued, half of them at their
// running limit (one job running, one queued, limit 1) and first in fair order.
func (b *bench) claimAmongLimitedOrgs(orgs, samples int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	s := spec("org")
	limited := orgs / 2
	// The limited ones: a job each, claimed, then the limit, then one more queued.
	parallel(limited, 16, func(_, i int) {
		org := fmt.Sprintf("a-lim%05d", i)
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: org, Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	parallel(limited, 16, func(_, i int) {
		if cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("busy", i), GPUs: gpus}); err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
	})
	parallel(limited, 16, func(_, i int) {
		org := fmt.Sprintf("a-lim%05d", i)
		// A weight so large that their usage counts as none, and names that sort first, put
		// them first in fair order: a claim meets all of them before any other.
		if err := q.SetOrg(b.ctx, org, job.OrgSettings{MaxRunning: 1, Weight: 1000000}); err != nil {
			log.Fatal(err)
		}
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: org, Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	// The others: queued jobs, enough for every sample.
	free := orgs - limited
	parallel(max(free, samples), 16, func(_, i int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("free%05d", i%free), Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	lat := b.timeClaims(q, samples, func(cl *job.Claim) {
		if strings.HasPrefix(cl.Job.Org, "a-lim") {
			log.Fatalf("claimed a job of %s, at its limit", cl.Job.Org)
		}
	})
	b.row(fmt.Sprintf("claim latency, %d orgs, %d at their limit", orgs, limited), fmtLatency(lat), "")
}

// positionWithAgents times GET of a queued job's position with agents agents known (each
// waited once with 1 free H100; the job needs 8).
func (b *bench) positionWithAgents(agents, samples int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	big := spec("big")
	big.Resources.GPUs = 8
	j, _, err := q.Submit(b.ctx, job.Submission{Org: "acme", Spec: big}, "", "")
	if err != nil {
		log.Fatal(err)
	}
	parallel(agents, 16, func(_, i int) {
		if cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("agent", i), GPUs: []job.GPU{{Model: "H100", Count: 1}}}); err != nil || cl != nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
	})
	lat := make([]time.Duration, 0, samples)
	var reason string
	for range samples {
		t := time.Now()
		p, queued, err := q.Position(b.ctx, j.ID)
		lat = append(lat, time.Since(t))
		if err != nil || !queued {
			log.Fatalf("position: %v %v", queued, err)
		}
		reason = p.Reason
	}
	b.row(fmt.Sprintf("queue position, %d agents known", agents), fmtLatency(lat), reason)
}

// deathToRequeue runs n jobs on a simulated clock — every agent heartbeats every 15 s of it,
// the reaper runs every 10 s of it — and times, on that clock, how long after one agent's
// last heartbeat its job is back in the queue; and, on the wall clock, the reaper's passes.
func (b *bench) deathToRequeue(n int) {
	b.flush()
	clock := &simClock{now: time.Date(2026, 11, 24, 12, 0, 0, 0, time.UTC)}
	cfg := unlimited
	cfg.Now, cfg.LeaseTTL, cfg.HeartbeatInterval = clock.Now, time.Minute, 15*time.Second
	q := queue.New(b.rdb, cfg)
	defer q.Close()
	reaper := queue.NewReaper(q, 10*time.Second, nil)
	s := spec("run")
	parallel(n, 16, func(_, _ int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: "acme", Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	claims := make([]*job.Claim, n)
	parallel(n, 16, func(_, i int) {
		cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("agent", i), GPUs: gpus})
		if err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
		claims[i] = cl
	})
	beat := func(skip int) {
		parallel(n, 16, func(_, i int) {
			if i == skip {
				return
			}
			if _, err := q.Heartbeat(b.ctx, claims[i].Job.ID, job.Heartbeat{Token: claims[i].Lease.Token, Running: true}); err != nil {
				log.Fatalf("heartbeat: %v", err)
			}
		})
	}
	// A minute of healthy running first, then agent 0 dies just after a heartbeat.
	var passes []time.Duration
	step := 5 * time.Second
	dead := -1
	var died time.Time
	for t := time.Duration(0); ; t += step {
		if t%(15*time.Second) == 0 {
			beat(dead)
			if t == time.Minute {
				dead, died = 0, clock.Now()
			}
		}
		if t%(10*time.Second) == 0 {
			w := time.Now()
			if _, err := reaper.RunOnce(b.ctx); err != nil {
				log.Fatal(err)
			}
			passes = append(passes, time.Since(w))
			if dead >= 0 {
				j, err := q.Get(b.ctx, claims[0].Job.ID)
				if err != nil {
					log.Fatal(err)
				}
				if j.Status == job.Queued {
					break
				}
			}
		}
		if t > time.Hour {
			log.Fatal("the dead agent's job was never queued again")
		}
		clock.Advance(step)
	}
	p50, p99 := percentiles(passes)
	b.row(fmt.Sprintf("agent death → job queued again, %d running", n), fmt.Sprintf("%v simulated", clock.Now().Sub(died)),
		fmt.Sprintf("lease 60 s, reaper every 10 s; reaper pass p50 %v, max %v", p50.Round(time.Microsecond), p99.Round(time.Microsecond)))
}

type simClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *simClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *simClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}
