// Command queuebench measures hostedtrain's queue against asynq on one redis-server, in one run:
//
//  1. the job lifecycle, N jobs at concurrency C: asynq enqueue → process (no-op) → done;
//     hostedtrain submit → claim → heartbeat → complete;
//  2. claim latency with 1,000 and with 1,000,000 jobs queued across 100 organizations;
//  3. complete latency with 100 and with 10,000 jobs running;
//  4. submit → claim latency with an idle agent waiting on a claim.
//
// -only phases times the lifecycle's calls one at a time instead (phases.go).
//
// It prints a table, and last `queue lifecycle ratio hostedtrain/asynq: X.XX` (jobs per second,
// ours over theirs). It lives in its own module so asynq is never a dependency of the service.
// `make bench-queue` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"math"
	"os"
	"runtime"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/queue"
)

func main() {
	n := flag.Int("n", 20000, "jobs in the lifecycle comparison")
	c := flag.Int("c", 16, "concurrency (asynq's server concurrency; hostedtrain's workers)")
	big := flag.Int("big", 1000000, "queued jobs for the large claim-latency case")
	samples := flag.Int("samples", 2000, "operations timed for each latency figure")
	redisArgs := flag.String("redis-args", "", "extra redis-server arguments, the same for both queues")
	only := flag.String("only", "", `"lifecycle": only the lifecycle comparison; "fleet": only the fleet cases; "cluster": only the cluster case; "phases": the lifecycle's calls one at a time; "placement": first-fit against cache-aware claims on a simulated fleet (placement.go)`)
	clusterJobs := flag.Int("cluster-jobs", 100000, "jobs for the cluster case (spread over the shards, memory per job)")
	fleetSize := flag.String("fleet", "full", `the fleet cases' sizes: "full" (issue 16's) or "smoke"`)
	fleetSubmits := flag.Int("fleet-submits", 0, "submits timed at each number of waiting agents (0: the size's)")
	fleetRunning := flag.String("fleet-running", "", "running jobs for the reaper case, comma-separated (\"\": the size's; \"none\": skip it)")
	stats := flag.Bool("commandstats", false, "with -only lifecycle: print each lifecycle server's command statistics")
	protocol := flag.Int("protocol", 2, "the RESP version both queues' clients speak")
	cpuProfile := flag.String("cpuprofile", "", "write this process's CPU profile here")
	pw := placementFull
	flag.IntVar(&pw.Nodes, "placement-nodes", pw.Nodes, "the placement case's nodes (8 H100 each)")
	flag.IntVar(&pw.Jobs, "placement-jobs", pw.Jobs, "the placement case's jobs")
	flag.IntVar(&pw.Orgs, "placement-orgs", pw.Orgs, "the placement case's organizations")
	flag.DurationVar(&pw.Window, "placement-window", pw.Window, "the placement case's submissions spread over this (simulated)")
	flag.Uint64Var(&pw.Seed, "placement-seed", pw.Seed, "the placement case's workload seed")
	flag.Float64Var(&pw.ModelRate, "placement-model-rate", pw.ModelRate, "the placement case's weights download rate, bytes/s a node")
	placementSeeds := flag.Int("placement-seeds", 5, "the placement case's seeds: -placement-seed and the next ones, pooled")
	flag.Float64Var(&pw.WaitFactor, "placement-wait", pw.WaitFactor, "the placement case's delay scheduling: a job waits for a node that holds its weights up to this many times their download (0: never)")
	flag.Int64Var(&pw.ModelCache, "placement-model-cache", pw.ModelCache, "the placement case's weights cache per node, bytes")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}

	dir, err := os.MkdirTemp("", "queuebench")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	srv, err := redisproc.Start(ctx, redisproc.Options{Dir: dir, Args: append([]string{"--maxmemory", "0"}, strings.Fields(*redisArgs)...)})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 4 * *c, Protocol: *protocol})
	defer rdb.Close()
	b := &bench{ctx: ctx, rdb: rdb, addr: srv.Addr, protocol: *protocol, out: tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)}

	fmt.Printf("redis-server %s, GOMAXPROCS %d, N=%d, C=%d\n\n", serverVersion(ctx, rdb), runtime.GOMAXPROCS(0), *n, *c)
	if *only == "placement" {
		b.placementSeeds(pw, *placementSeeds)
		return
	}
	fmt.Fprintln(b.out, "measure\tvalue\tnote")
	sizes := fleetFull
	if *fleetSize == "smoke" {
		sizes = fleetSmoke
	}
	if *fleetSubmits > 0 {
		sizes.submits = *fleetSubmits
	}
	switch *fleetRunning {
	case "":
	case "none":
		sizes.running = nil
	default:
		sizes.running = nil
		for _, f := range strings.Split(*fleetRunning, ",") {
			n, err := strconv.Atoi(f)
			if err != nil {
				log.Fatalf("-fleet-running: %v", err)
			}
			sizes.running = append(sizes.running, n)
		}
	}
	if *only == "fleet" {
		b.fleet(sizes)
		b.out.Flush()
		return
	}
	if *only == "cluster" {
		b.clusterCase(dir, *clusterJobs, *c)
		b.out.Flush()
		return
	}
	if *only == "phases" {
		b.phases(*n, *c)
		b.out.Flush()
		return
	}
	// Each lifecycle runs on a fresh redis-server of its own (the same arguments): what one
	// side leaves behind — asynq's servers keep a few things going after Shutdown, a flushed
	// keyspace is still being freed — must not cost the next one.
	fresh := func(run func(b *bench) float64) float64 {
		sdir, err := os.MkdirTemp(dir, "lifecycle")
		if err != nil {
			log.Fatal(err)
		}
		s, err := redisproc.Start(ctx, redisproc.Options{Dir: sdir, Args: append([]string{"--maxmemory", "0"}, strings.Fields(*redisArgs)...)})
		if err != nil {
			log.Fatal(err)
		}
		defer s.Stop()
		r := redis.NewClient(&redis.Options{Addr: s.Addr, PoolSize: 4 * *c, Protocol: *protocol})
		defer r.Close()
		own := *b
		own.rdb, own.addr = r, s.Addr
		rate := run(&own)
		if *stats && *only == "lifecycle" {
			info, _ := r.Info(ctx, "commandstats").Result()
			fmt.Println(info)
		}
		return rate
	}
	theirs := fresh(func(b *bench) float64 { return b.asynqLifecycle(*n, *c, 1) })
	four := fresh(func(b *bench) float64 { return b.asynqLifecycle(*n, *c, 4) })
	ours := fresh(func(b *bench) float64 { return b.ourLifecycle(*n, *c) })
	if *only == "lifecycle" {
		b.out.Flush()
		fmt.Printf("\nqueue lifecycle ratio hostedtrain/asynq: %.2f (asynq with four servers: %.2f)\n", ours/theirs, ours/four)
		return
	}
	b.fleet(sizes)
	b.claimLatency(1000, *samples)
	b.claimLatency(*big, *samples)
	b.completeLatency(100, *samples)
	b.completeLatency(10000, *samples)
	b.wakeLatency(*samples / 4)
	b.out.Flush()
	fmt.Printf("\nqueue lifecycle ratio hostedtrain/asynq: %.2f (asynq with four servers: %.2f)\n", ours/theirs, ours/four)
}

type bench struct {
	protocol int
	ctx      context.Context
	rdb      *redis.Client
	addr     string
	out      *tabwriter.Writer
}

func serverVersion(ctx context.Context, rdb *redis.Client) string {
	info, _ := rdb.Info(ctx, "server").Result()
	for _, line := range splitLines(info) {
		if len(line) > 14 && line[:14] == "redis_version:" {
			return line[14:]
		}
	}
	return "?"
}

func splitLines(s string) []string {
	var out []string
	start := 0
	for i := range s {
		if s[i] == '\n' {
			out = append(out, trimCR(s[start:i]))
			start = i + 1
		}
	}
	return out
}

func trimCR(s string) string {
	if len(s) > 0 && s[len(s)-1] == '\r' {
		return s[:len(s)-1]
	}
	return s
}

// redisCPU is the CPU time redis-server has used so far (user and system, all its threads).
func (b *bench) redisCPU() time.Duration {
	info, err := b.rdb.Info(b.ctx, "cpu").Result()
	if err != nil {
		log.Fatal(err)
	}
	var total float64
	for _, line := range splitLines(info) {
		for _, k := range []string{"used_cpu_sys:", "used_cpu_user:"} {
			if v, ok := strings.CutPrefix(line, k); ok {
				f, _ := strconv.ParseFloat(v, 64)
				total += f
			}
		}
	}
	return time.Duration(total * float64(time.Second))
}

func (b *bench) flush() {
	if err := b.rdb.FlushAll(b.ctx).Err(); err != nil {
		log.Fatal(err)
	}
}

func (b *bench) row(measure, value, note string) {
	if b.out == nil {
		return
	}
	fmt.Fprintf(b.out, "%s\t%s\t%s\n", measure, value, note)
}

// spec is a job like the quickstart: the config a real submission stores.
func spec(name string) jobspec.Spec {
	t := 1.0
	return jobspec.Spec{
		Kind: "rl", Name: name, Model: "Qwen/Qwen3-4B-Instruct-2507", MaxSteps: 20, BatchSize: 64, RolloutsPerExample: 8,
		LearningRate: 1e-5, Sampling: &jobspec.Sampling{MaxTokens: 512, Temperature: &t},
		Env:         []jobspec.Env{{ID: "primeintellect/alphabet-sort", Args: map[string]any{"min_turns": 1, "max_turns": 3}, Weight: 1}},
		Resources:   jobspec.Resources{GPUs: 1, GPUType: "H100"},
		Checkpoints: &jobspec.Checkpoints{Interval: 5, KeepCloud: 2},
	}
}

var gpus = []job.GPU{{Model: "H100", Count: 8}}

// parallel runs f(worker, i) for i in [0, n), split across c workers.
func parallel(n, c int, f func(worker, i int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for w := range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				f(w, i)
			}
		}()
	}
	wg.Wait()
}

// asynqLifecycle enqueues n tasks from c goroutines, then lets an asynq server with
// concurrency c process them; it returns tasks per second, done as asynq records it.
func (b *bench) asynqLifecycle(n, c, servers int) float64 {
	b.flush()
	// asynq gets a client made as ours is (the same protocol and pool).
	rdb := redis.NewClient(&redis.Options{Addr: b.addr, PoolSize: 4 * c, Protocol: b.protocol})
	defer rdb.Close()
	cl := asynq.NewClientFromRedisClient(rdb)
	defer cl.Close()
	cpu0 := b.redisCPU()
	start := time.Now()
	parallel(n, c, func(_, i int) {
		if _, err := cl.Enqueue(asynq.NewTask("noop", []byte(fmt.Sprintf(`{"i":%d}`, i))), asynq.MaxRetry(0)); err != nil {
			log.Fatal(err)
		}
	})
	enqueued := time.Since(start)
	mux := asynq.NewServeMux()
	var handled atomic.Int64
	all := make(chan struct{})
	mux.HandleFunc("noop", func(context.Context, *asynq.Task) error {
		if handled.Add(1) == int64(n) {
			close(all)
		}
		return nil
	})
	// servers servers, each with concurrency c, as a fleet of workers would run.
	srvs := make([]*asynq.Server, servers)
	for i := range srvs {
		srvs[i] = asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: c, LogLevel: asynq.ErrorLevel})
		if err := srvs[i].Start(mux); err != nil {
			log.Fatal(err)
		}
	}
	// Every handler has run; done is when asynq has recorded the last of them (its pending and
	// active lists empty). Two LLENs a poll, so the measuring does not load Redis.
	<-all
	for {
		pending, _ := b.rdb.LLen(b.ctx, "asynq:{default}:pending").Result()
		active, _ := b.rdb.LLen(b.ctx, "asynq:{default}:active").Result()
		if pending == 0 && active == 0 {
			break
		}
		time.Sleep(200 * time.Microsecond)
	}
	total := time.Since(start)
	cpu := b.redisCPU() - cpu0
	for _, srv := range srvs {
		srv.Shutdown()
	}
	rate := float64(n) / total.Seconds()
	name := "asynq lifecycle"
	if servers > 1 {
		name = fmt.Sprintf("asynq lifecycle, %d servers", servers)
	}
	b.row(name, fmt.Sprintf("%.0f jobs/s", rate), fmt.Sprintf("enqueue %v, all done %v; Redis CPU %v/job", enqueued.Round(time.Millisecond), total.Round(time.Millisecond), perJob(cpu, n)))
	return rate
}

// ourLifecycle submits n jobs from c goroutines, then c agents claim, heartbeat and complete
// them; it returns jobs per second.
func (b *bench) ourLifecycle(n, c int) float64 {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	s := spec("bench")
	cpu0 := b.redisCPU()
	start := time.Now()
	parallel(n, c, func(w, _ int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%d", w%4), Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
	submitted := time.Since(start)
	parallel(n, c, func(w, _ int) {
		cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("agent", w), GPUs: gpus})
		if err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
		if _, err := q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
			log.Fatal(err)
		}
		if _, err := q.Complete(b.ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
			log.Fatal(err)
		}
	})
	total := time.Since(start)
	cpu := b.redisCPU() - cpu0
	rate := float64(n) / total.Seconds()
	if b.out == nil {
		return rate
	}
	b.row("hostedtrain lifecycle", fmt.Sprintf("%.0f jobs/s", rate), fmt.Sprintf("submit %v, all complete %v; Redis CPU %v/job", submitted.Round(time.Millisecond), total.Round(time.Millisecond), perJob(cpu, n)))
	return rate
}

func perJob(d time.Duration, n int) time.Duration {
	return (d / time.Duration(n)).Round(100 * time.Nanosecond)
}

// timeClaims times samples single claims of an 8-GPU agent, each of which must get a job;
// check, if set, vets each claim.
func (b *bench) timeClaims(q *queue.Client, samples int, check func(*job.Claim)) []time.Duration {
	lat := make([]time.Duration, 0, samples)
	for i := range samples {
		t := time.Now()
		cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("a", i), GPUs: gpus})
		lat = append(lat, time.Since(t))
		if err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
		if check != nil {
			check(cl)
		}
	}
	return lat
}

func percentiles(d []time.Duration) (p50, p99 time.Duration) {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return d[len(d)/2], d[len(d)*99/100]
}

func fmtLatency(d []time.Duration) string {
	p50, p99 := percentiles(d)
	return fmt.Sprintf("p50 %v, p99 %v", p50.Round(time.Microsecond), p99.Round(time.Microsecond))
}

// fill queues n jobs across 100 organizations, many at a time.
func (b *bench) fill(q *queue.Client, n int) {
	s := spec("fill")
	parallel(n, 32, func(_, i int) {
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%03d", i%100), Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
	})
}

// claimLatency times single claims with queued jobs waiting across 100 organizations.
func (b *bench) claimLatency(queued, samples int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	start := time.Now()
	b.fill(q, queued+samples)
	filled := time.Since(start)
	lat := b.timeClaims(q, samples, nil)
	b.row(fmt.Sprintf("claim latency, %d queued / 100 orgs", queued), fmtLatency(lat), fmt.Sprintf("filled in %v", filled.Round(time.Second)))
}

// completeLatency times completions with running jobs holding leases.
func (b *bench) completeLatency(running, samples int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	b.fill(q, running+samples)
	claims := make([]*job.Claim, running+samples)
	parallel(len(claims), 16, func(_, i int) {
		cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: fmt.Sprint("a", i), GPUs: gpus})
		if err != nil || cl == nil {
			log.Fatalf("claim: %v %v", cl, err)
		}
		claims[i] = cl
	})
	lat := make([]time.Duration, 0, samples)
	for _, cl := range claims[:samples] {
		t := time.Now()
		if _, err := q.Complete(b.ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, time.Since(t))
	}
	b.row(fmt.Sprintf("complete latency, %d running", running), fmtLatency(lat), "")
}

// wakeLatency times submit → claim with an agent already waiting on a claim.
func (b *bench) wakeLatency(samples int) {
	b.flush()
	q := queue.New(b.rdb, unlimited)
	defer q.Close()
	s := spec("wake")
	lat := make([]time.Duration, 0, samples)
	for range samples {
		got := make(chan time.Time, 1)
		go func() {
			cl, err := q.Claim(b.ctx, job.ClaimRequest{AgentID: "idle", GPUs: gpus, Wait: 20 * time.Second})
			if err != nil || cl == nil {
				log.Fatalf("waiting claim: %v %v", cl, err)
			}
			got <- time.Now()
		}()
		time.Sleep(2 * time.Millisecond) // let the claim look, find nothing and wait
		t := time.Now()
		if _, _, err := q.Submit(b.ctx, job.Submission{Org: "org", Spec: s}, "", ""); err != nil {
			log.Fatal(err)
		}
		lat = append(lat, (<-got).Sub(t))
	}
	b.row("submit → claim, agent waiting", fmtLatency(lat), "pub/sub wake-up, no polling")
}

// unlimited is the queue's default configuration without the queued limit: the benchmarks fill
// queues far past it to measure the scheduler, not the limit.
var unlimited = queue.Config{MaxQueued: math.MaxInt32}
