package main

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redistest"
)

// placementSmall is the placement case on tiny numbers: 4 nodes, 50 jobs from 8 orgs.
var placementSmall = func() placementWorkload {
	w := placementFull
	w.Nodes, w.Jobs, w.Orgs, w.Window = 4, 50, 8, time.Hour
	return w
}()

// The placement case on a real redis-server, small, over a few seeds: under both policies every
// job is claimed once and completed once and the queue agrees (COMPLETED, and each org's
// GPU-seconds are the simulation's); cache-aware claims reach the queue (some are placed for
// their cache, none without Held); and over the seeds together cache-aware fetches less than
// first-fit. Not for every seed: placement is greedy, one claim at a time, and at this size
// about 1 seed in 10 fetches more with it (a job placed for its cache moves others onto colder
// nodes later).
func TestPlacementSmall(t *testing.T) {
	srv := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	b := &bench{ctx: ctx, rdb: rdb, addr: srv.Addr}
	var ff, ca int64
	waited := 0
	for seed := uint64(1); seed <= 6; seed++ {
		w := placementSmall
		w.Seed = seed
		c := b.placement(w)
		for _, r := range []placementResult{c.firstFit, c.cacheAware, c.delayed} {
			if r.completed != w.Jobs || r.completedNotOnce != 0 || r.claimedTwice != 0 || r.queueStatusWrong != 0 {
				t.Errorf("seed %d, %s: %d completed of %d, %d not exactly once, %d claimed twice, %d not COMPLETED in the queue",
					seed, r.policy, r.completed, w.Jobs, r.completedNotOnce, r.claimedTwice, r.queueStatusWrong)
			}
			if math.Abs(r.queueGPUSeconds/r.simGPUSeconds-1) > 0.001 {
				t.Errorf("seed %d, %s: the queue's GPU-seconds %.0f, the simulation's %.0f", seed, r.policy, r.queueGPUSeconds, r.simGPUSeconds)
			}
			if r.ttfsMean < w.ProcStart || r.makespan <= 0 {
				t.Errorf("seed %d, %s: mean time to first step %v (processes alone take %v), makespan %v", seed, r.policy, r.ttfsMean, w.ProcStart, r.makespan)
			}
			// Each run's time to first step holds its start, which is at least the start from
			// its caches, and a compile cache hit is the start from its caches.
			jobs := w.generate() // the jobs b.placement ran, in the runs' order
			for i, rn := range r.runs {
				j := jobs.jobs[i]
				from := w.startCost(placementModels[j.model], j.gpus, true).total()
				if rn.first-rn.claimed < rn.start.total() || rn.start.total() < from || rn.compileHit != (rn.start.total() == from) {
					t.Fatalf("seed %d, %s: %s took %v to its first step, its start %v (compile hit %v), from its caches %v",
						seed, r.policy, rn.id, rn.first-rn.claimed, rn.start.total(), rn.compileHit, from)
				}
			}
		}
		for _, r := range []placementResult{c.firstFit, c.cacheAware} {
			if n := r.waitedWarm + r.waitedNone; n != 0 {
				t.Errorf("seed %d: %d %s jobs waited for a node that holds their weights, with delay scheduling off", seed, n, r.policy)
			}
		}
		waited += c.delayed.waitedWarm + c.delayed.waitedNone
		if c.firstFit.placedForCache != 0 || c.cacheAware.placedForCache == 0 {
			t.Errorf("seed %d: claims placed for their cache: first-fit %d (want 0), cache-aware %d (want some)",
				seed, c.firstFit.placedForCache, c.cacheAware.placedForCache)
		}
		ff += c.firstFit.modelBytes + c.firstFit.envBytes
		ca += c.cacheAware.modelBytes + c.cacheAware.envBytes
	}
	if waited == 0 {
		t.Error("over 6 seeds no job waited for a node that holds its weights, with delay scheduling on")
	}
	if ca >= ff {
		t.Errorf("over 6 seeds cache-aware fetched %s, first-fit %s", fmtBytes(ca), fmtBytes(ff))
	}
	t.Logf("over 6 seeds: bytes fetched first-fit %s, cache-aware %s", fmtBytes(ff), fmtBytes(ca))
}
