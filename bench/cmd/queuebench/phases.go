package main

import (
	"fmt"
	"log"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// phases times the lifecycle's four calls one at a time (all n submits, then all claims, all
// heartbeats, all completions, each at concurrency c), beside the cheapest round trips there
// are: Redis CPU per call (INFO cpu) and the commands each ran (INFO commandstats). It says
// where a job's Redis time goes (docs/performance.md). `queuebench -only phases`.
func (b *bench) phases(n, c int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	s := spec("bench")
	claims := make([]*job.Claim, n)
	phase := func(name string, f func(w, i int)) {
		cpu0, calls0, t0 := b.redisCPU(), b.commandCalls(), time.Now()
		parallel(n, c, f)
		elapsed := time.Since(t0)
		cpu, calls1 := b.redisCPU()-cpu0, b.commandCalls()
		var cmds []string
		var total int64
		for name, v := range calls1 {
			if d := v - calls0[name]; d > 0 && name != "info" {
				total += d
				cmds = append(cmds, fmt.Sprintf("%s %.1f", name, float64(d)/float64(n)))
			}
		}
		sort.Strings(cmds)
		b.row(name, fmt.Sprintf("Redis CPU %v/call", perJob(cpu, n)), fmt.Sprintf("%.0f calls/s; %.1f commands a call: %s",
			float64(n)/elapsed.Seconds(), float64(total)/float64(n), strings.Join(cmds, ", ")))
	}
	phase("PING", func(int, int) {
		if err := b.rdb.Ping(b.ctx).Err(); err != nil {
			log.Fatal(err)
		}
	})
	phase("EVAL return 1", func(int, int) {
		if err := b.rdb.Eval(b.ctx, "return 1", []string{"k"}).Err(); err != nil {
			log.Fatal(err)
		}
	})
	phase("submit", func(w, _ int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%d", w%4), Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	phase("claim", func(w, i int) {
		cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("agent", w), GPUs: gpus})
		if err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
		claims[i] = cl
	})
	phase("heartbeat (RUNNING)", func(_, i int) {
		if _, err := q.Heartbeat(b.ctx, claims[i].Job.ID, job.Heartbeat{Token: claims[i].Lease.Token, Running: true}); err != nil {
			log.Fatal(err)
		}
	})
	phase("complete", func(_, i int) {
		if _, err := q.Complete(b.ctx, claims[i].Job.ID, job.Outcome{Token: claims[i].Lease.Token}); err != nil {
			log.Fatal(err)
		}
	})
}

// commandCalls is how many times Redis has run each command (INFO commandstats).
func (b *bench) commandCalls() map[string]int64 {
	info, err := b.rdb.Info(b.ctx, "commandstats").Result()
	if err != nil {
		log.Fatal(err)
	}
	out := map[string]int64{}
	for _, line := range splitLines(info) {
		name, rest, ok := strings.Cut(line, ":")
		if !ok || !strings.HasPrefix(name, "cmdstat_") {
			continue
		}
		for kv := range strings.SplitSeq(rest, ",") {
			if v, ok := strings.CutPrefix(kv, "calls="); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				out[strings.TrimPrefix(name, "cmdstat_")] = n
			}
		}
	}
	return out
}
