package main

import (
	"cmp"
	"container/heap"
	"fmt"
	"log"
	"maps"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/queue"
)

// Cache-aware placement (issue 33), measured: one workload run twice against the real queue on
// the real redis-server, on a simulated clock (a discrete-event loop; the queue's Config.Now is
// that clock) — once with claims that say nothing of their node's cache (first-fit, the
// behaviour before issue 33), once with claims that carry what the node's cache holds
// (job.ClaimRequest.Held). Nodes claim when GPUs free; a job's time to first step is the
// download of its model where the node lacks it, the install of its environments the node
// lacks, and a fixed start cost; its GPUs are held for that and then its duration, and it is
// completed through the queue, so usage and the fair order run as in production.
// `queuebench -only placement`.

// placementWorkload is the simulated fleet and its jobs; placementFull is the figures the
// benchmark states, placementSmall the test's.
type placementWorkload struct {
	Nodes       int           // nodes, each GPUsPerNode H100
	GPUsPerNode int           //
	Jobs        int           // jobs submitted in all
	Orgs        int           // organizations submitting them (Zipf OrgSkew over them)
	OrgSkew     float64       // Zipf exponent of the organizations' job counts
	Window      time.Duration // the jobs' submissions spread over this
	Seed        uint64        // one seed: the same jobs for both policies
	ModelRate   float64       // bytes/s a node downloads weights at (its link, one download at a time)
	EnvRate     float64       // bytes/s an environment installs at (download, unpack, build)
	EnvFixed    time.Duration // per environment installed, on top of its size
	ModelCache  int64         // bytes of weights a node keeps (LRU, never what a running job uses)
	EnvCache    int64         // bytes of installed environments a node keeps (LRU, likewise)
	Heartbeat   time.Duration // agents' heartbeat interval: how stale an org's charged usage may be at a claim
	// The start once weights and environments are on the node (startCost): processes up, then
	// vLLM's engine — weights into GPU memory, torch.compile (cached per organization, model and
	// GPUs in the node's compile cache, as the agent keys it), CUDA graphs, and the P2P check
	// (its result kept in the same cache).
	ProcStart    time.Duration // container, Python imports, vLLM's API server, the trainer: before the engine
	LoadRate     float64       // bytes/s weights load into GPU memory from the node's page cache
	CompileWarm  time.Duration // torch.compile's artifacts loaded from the compile cache instead of compiled
	CompileEntry int64         // bytes of one compile cache entry
	CompileCache int64         // bytes of compile caches a node keeps (LRU)
	// WaitFactor: a job waits for a node that holds its weights up to this many times their
	// download (the queue's Config.WeightsRate = ModelRate / WaitFactor); 0: never.
	WaitFactor float64
}

const (
	gb = int64(1_000_000_000)
	mb = int64(1_000_000)
)

var placementFull = placementWorkload{
	Nodes: 50, GPUsPerNode: 8, Jobs: 2000, Orgs: 100, OrgSkew: 1.1, Window: 12 * time.Hour, Seed: 33,
	ModelRate: 1e9, EnvRate: 25e6, EnvFixed: 3 * time.Second,
	ModelCache: 1000 * gb, EnvCache: 100 * gb, Heartbeat: 15 * time.Second,
	ProcStart: 25 * time.Second, LoadRate: 7e9, CompileWarm: 5 * time.Second, CompileEntry: 500 * mb, CompileCache: 20 * gb,
	WaitFactor: 1,
}

// startPhases is a job's start once its weights and environments are on its node, by phase.
type startPhases struct {
	proc, load, dynamo, compile, graphs, p2p time.Duration
}

func (p startPhases) total() time.Duration {
	return p.proc + p.load + p.dynamo + p.compile + p.graphs + p.p2p
}

// startCost is the start of a job of m on gpus GPUs, with its compile cache on the node or not.
// The figures are vLLM's own, scaled by parameters (P, billions) between two measurements:
//   - Llama-70B on 8 H100 (vllm-project/vllm#19824): ~60 s P2P check, ~10 s weights from a hot
//     page cache (70 GB: 7 GB/s), ~15 s Dynamo bytecode, ~70 s torch.compile, ~60 s CUDA graphs;
//   - a 3B model with its compile cache (vllm-project/vllm#20264): 7.5 s Dynamo, the compiled
//     graph loaded from the cache, 17 s CUDA graphs, and ~25 s before the engine (the server
//     answered 59 s after start, the engine's init took 34 s);
//   - a ~7B model compiling afresh (kubernetes-sigs/gateway-api-inference-extension#550):
//     torch.compile 28.8 s in all; a compiled graph loaded from the cache in 4.4 s
//     (vllm-project/vllm#20342).
//
// So: Dynamo 5 s + 0.15 s/B, every start; torch.compile 20 s + 0.7 s/B, or CompileWarm from
// the cache; CUDA graphs 15 s + 0.65 s/B, every start (vLLM does not cache them); the P2P check
// 60 s × pairs/56 for tensor parallelism tp = the job's GPUs / 2 (vLLM's inference half; one GPU
// shares), skipped when the compile cache holds its result.
func (w placementWorkload) startCost(m placementModel, gpus int, compileHit bool) startPhases {
	sec := func(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }
	p := startPhases{
		proc:   w.ProcStart,
		load:   sec(float64(m.bytes()) / w.LoadRate),
		dynamo: sec(5 + 0.15*m.params),
		graphs: sec(15 + 0.65*m.params),
	}
	if compileHit {
		p.compile = w.CompileWarm
		return p
	}
	p.compile = sec(20 + 0.7*m.params)
	tp := max(1, gpus/2)
	p.p2p = sec(60 * float64(tp*(tp-1)) / 56)
	return p
}

// placementModel is a model's weights as a job downloads them: bf16, two bytes a parameter.
type placementModel struct {
	name   string
	params float64 // billions
}

func (m placementModel) bytes() int64 { return int64(m.params * 2 * float64(gb)) }

// placementModels are 20 open models, most popular first (the order the Zipf popularity
// follows): small and mid-size models are what most RL runs fine-tune.
var placementModels = []placementModel{
	{"Qwen/Qwen3-4B-Instruct-2507", 4.02},
	{"Qwen/Qwen3-8B", 8.19},
	{"meta-llama/Llama-3.1-8B-Instruct", 8.03},
	{"Qwen/Qwen3-1.7B", 1.72},
	{"Qwen/Qwen2.5-7B-Instruct", 7.62},
	{"Qwen/Qwen3-0.6B", 0.6},
	{"Qwen/Qwen3-14B", 14.8},
	{"Qwen/Qwen3-30B-A3B", 30.5},
	{"meta-llama/Llama-3.2-3B-Instruct", 3.21},
	{"google/gemma-3-12b-it", 12.2},
	{"Qwen/Qwen3-32B", 32.8},
	{"deepseek-ai/DeepSeek-R1-Distill-Qwen-7B", 7.62},
	{"Qwen/Qwen2.5-Math-1.5B", 1.54},
	{"meta-llama/Llama-3.2-1B-Instruct", 1.24},
	{"google/gemma-3-4b-it", 4.3},
	{"microsoft/phi-4", 14.7},
	{"mistralai/Mistral-Small-24B-Instruct-2501", 23.6},
	{"google/gemma-3-27b-it", 27.4},
	{"meta-llama/Llama-3.3-70B-Instruct", 70.6},
	{"Qwen/Qwen2.5-72B-Instruct", 72.7},
}

// placementEnvNames are 40 Environments Hub environments: the first 20 light (text tasks,
// 50–200 MB installed), the next 14 with tools or datasets (200–800 MB), the last 6 code and
// agent sandboxes with toolchains (1–2 GB). Sizes are drawn log-uniform in each band.
var placementEnvNames = []string{
	"gsm8k", "math-python", "wordle", "alphabet-sort", "reverse-text", "hendrycks-math", "aime2025", "sudoku",
	"ifeval", "gpqa", "mmlu-pro", "arc-agi", "countdown", "logic-grid", "acereason-math", "intellect-math",
	"unscramble", "wiki-qa", "tic-tac-toe", "simpleqa",
	"wiki-search", "tau2-bench", "browsecomp", "hotpotqa", "toolbench", "bfcl", "med-qa", "legal-bench",
	"chess-puzzles", "livecodebench-lite", "pydantic-adherence", "webarena-lite", "scicode", "finqa",
	"livecodebench", "deepcoder", "swe-gym", "terminal-bench", "kernelbench", "cuda-kernels",
}

type placementEnv struct {
	id    string
	bytes int64
}

// pjob is one simulated job: what it needs and when, then what became of it under a policy.
type pjob struct {
	org      string
	model    int
	envs     []int
	gpus     int
	submit   time.Duration // simulated time since the start
	duration time.Duration // its run once it took its first step
	spec     jobspec.Spec
}

// placementJobs is the workload's jobs, its models' and environments' sizes, seeded.
type placementJobs struct {
	jobs   []pjob
	envs   []placementEnv
	orgs   []string
	sweeps int
}

func (w placementWorkload) generate() placementJobs {
	r := rand.New(rand.NewPCG(w.Seed, 0x9e3779b97f4a7c15))
	var out placementJobs
	bands := []struct {
		n      int
		lo, hi int64
	}{{20, 50 * mb, 200 * mb}, {14, 200 * mb, 800 * mb}, {6, 1 * gb, 2 * gb}}
	i := 0
	for _, b := range bands {
		for range b.n {
			size := math.Exp(math.Log(float64(b.lo)) + r.Float64()*(math.Log(float64(b.hi))-math.Log(float64(b.lo))))
			out.envs = append(out.envs, placementEnv{id: fmt.Sprintf("primeintellect/%s@0.1.%d", placementEnvNames[i], r.IntN(9)), bytes: int64(size)})
			i++
		}
	}
	// Environments' popularity: Zipf 1.0 over them in a seeded order (the heavy ones are not
	// the least used by construction).
	envOrder := r.Perm(len(out.envs))
	envPop := zipf(len(out.envs), 1.0)
	modelPop := zipf(len(placementModels), 1.0)
	// Jobs per organization: Zipf OrgSkew, at least one each.
	counts := apportion(zipf(w.Orgs, w.OrgSkew), w.Jobs)
	for o := range w.Orgs {
		org := fmt.Sprintf("org%03d", o)
		out.orgs = append(out.orgs, org)
		// Its working set: 1–3 models and 1–4 environments, by popularity.
		models := pickDistinct(r, modelPop, 1+weighted(r, []float64{0.4, 0.4, 0.2}))
		envs := pickDistinct(r, envPop, 1+weighted(r, []float64{0.3, 0.3, 0.25, 0.15}))
		for k := range envs {
			envs[k] = envOrder[envs[k]]
		}
		for left := counts[o]; left > 0; {
			// A sweep: one model, its environments and GPUs, a few runs submitted together
			// (hyperparameters, seeds); 1 + geometric, mean 3, at most 8.
			n := 1
			for n < 8 && r.Float64() < 2.0/3 {
				n++
			}
			n = min(n, left)
			left -= n
			out.sweeps++
			m := models[weighted(r, zipf(len(models), 1.0))]
			if r.Float64() < 0.1 {
				m = weighted(r, modelPop) // now and then a model outside its usual ones
			}
			var je []int
			for range 1 + weighted(r, []float64{0.7, 0.3}) {
				e := envs[r.IntN(len(envs))]
				if r.Float64() < 0.1 {
					e = envOrder[weighted(r, envPop)]
				}
				if !slices.Contains(je, e) {
					je = append(je, e)
				}
			}
			gpus := gpusFor(r, placementModels[m].params)
			at := time.Duration(r.Float64() * float64(w.Window))
			for k := range n {
				// A run: log-normal, median 40 min, between 5 min and 8 h.
				d := time.Duration(math.Exp(math.Log(40)+0.9*r.NormFloat64()) * float64(time.Minute))
				d = min(max(d, 5*time.Minute), 8*time.Hour).Round(time.Second)
				at += time.Duration(2+r.IntN(18)) * time.Second
				s := spec(fmt.Sprintf("%s-s%d-%d", org, out.sweeps, k))
				s.Model = placementModels[m].name
				s.Resources.GPUs = gpus
				s.Env = nil
				for _, e := range je {
					s.Env = append(s.Env, jobspec.Env{ID: out.envs[e].id, Weight: 1})
				}
				out.jobs = append(out.jobs, pjob{org: org, model: m, envs: je, gpus: gpus, submit: at, duration: d, spec: s})
			}
		}
	}
	slices.SortStableFunc(out.jobs, func(a, b pjob) int { return cmp.Compare(a.submit, b.submit) })
	return out
}

// jittered is the same jobs, each submitted up to a second later (seeded), in submission order.
func (p placementJobs) jittered(seed uint64) placementJobs {
	r := rand.New(rand.NewPCG(seed, 0x5eed))
	out := p
	out.jobs = slices.Clone(p.jobs)
	for i := range out.jobs {
		out.jobs[i].submit += time.Duration(r.IntN(1000)) * time.Millisecond
	}
	slices.SortStableFunc(out.jobs, func(a, b pjob) int { return cmp.Compare(a.submit, b.submit) })
	return out
}

// gpusFor is how many GPUs a run of a model of params billions asks: 1 or 2 below 2B, 1–4 up
// to 10B, 4 or 8 up to 40B, 8 beyond.
func gpusFor(r *rand.Rand, params float64) int {
	switch {
	case params < 2:
		return []int{1, 2}[weighted(r, []float64{0.7, 0.3})]
	case params < 10:
		return []int{1, 2, 4}[weighted(r, []float64{0.2, 0.5, 0.3})]
	case params < 40:
		return []int{4, 8}[weighted(r, []float64{0.6, 0.4})]
	}
	return 8
}

// zipf is the weights 1/k^s, k = 1..n, normalized.
func zipf(n int, s float64) []float64 {
	w := make([]float64, n)
	var sum float64
	for k := range n {
		w[k] = 1 / math.Pow(float64(k+1), s)
		sum += w[k]
	}
	for k := range w {
		w[k] /= sum
	}
	return w
}

// weighted draws an index with the given (not necessarily normalized) weights.
func weighted(r *rand.Rand, w []float64) int {
	var sum float64
	for _, x := range w {
		sum += x
	}
	x := r.Float64() * sum
	for i, v := range w {
		if x < v {
			return i
		}
		x -= v
	}
	return len(w) - 1
}

// pickDistinct draws n distinct indices by weight.
func pickDistinct(r *rand.Rand, w []float64, n int) []int {
	w = slices.Clone(w)
	var out []int
	for range min(n, len(w)) {
		i := weighted(r, w)
		out = append(out, i)
		w[i] = 0
	}
	return out
}

// apportion splits total by weights into whole numbers, at least one each (largest remainder).
func apportion(w []float64, total int) []int {
	out := make([]int, len(w))
	rest := total
	for i := range out {
		out[i] = 1
		rest--
	}
	type rem struct {
		i int
		f float64
	}
	var rems []rem
	given := 0
	for i, x := range w {
		exact := x * float64(rest)
		out[i] += int(exact)
		given += int(exact)
		rems = append(rems, rem{i, exact - math.Floor(exact)})
	}
	slices.SortStableFunc(rems, func(a, b rem) int { return cmp.Compare(b.f, a.f) })
	for k := 0; given < rest; k++ {
		out[rems[k].i]++
		given++
	}
	return out
}

// The simulation.

// cacheEntry is a model's weights or an environment on a node's disk (or arriving there).
type cacheEntry struct {
	size    int64
	readyAt time.Duration // when it is fully on disk
	lastUse time.Duration
	pins    int // running jobs that use it
}

type nodeCache struct {
	capacity, used int64
	entries        map[string]*cacheEntry
	evicted        int
}

// put files key, arriving at readyAt, making room by evicting the least recently used entries
// no running job uses; where none is left to evict it goes over its capacity.
func (c *nodeCache) put(key string, size int64, readyAt, now time.Duration) *cacheEntry {
	for c.used+size > c.capacity {
		var lru string
		for k, e := range c.entries {
			if e.pins == 0 && (lru == "" || e.lastUse < c.entries[lru].lastUse || (e.lastUse == c.entries[lru].lastUse && k < lru)) {
				lru = k
			}
		}
		if lru == "" {
			break
		}
		c.used -= c.entries[lru].size
		delete(c.entries, lru)
		c.evicted++
	}
	e := &cacheEntry{size: size, readyAt: readyAt, lastUse: now}
	c.entries[key] = e
	c.used += size
	return e
}

type simNode struct {
	id       string
	free     int
	linkFree time.Duration // when its link has finished the downloads already asked of it
	models   nodeCache
	envs     nodeCache
	compiles nodeCache
	tie      float64       // a waiting claim's place among equals (the waiter's random id)
	lookAt   time.Duration // when it is to look again (evLook), 0 for never
}

// held is what the node's caches hold or are fetching, as the agent would say in its claim:
// weights and installs from the moment they are asked for, compile caches once kept (the
// agent keeps one when its run ends).
func (n *simNode) held(now time.Duration) []string {
	var h []string
	for k := range n.models.entries {
		h = append(h, k)
	}
	for k := range n.envs.entries {
		h = append(h, k)
	}
	for k, e := range n.compiles.entries {
		if e.readyAt <= now {
			h = append(h, k)
		}
	}
	slices.Sort(h)
	return h
}

// run is what became of one job under one policy.
type run struct {
	id                   string
	node                 *simNode
	token                string
	claimed, first, done time.Duration // claim, first step, GPUs given back
	lastBeat             time.Duration
	started              bool
	modelHit             bool
	compileHit           bool
	start                startPhases
	envHits, envs        int
	finished             int
	placedForCache       bool
}

// placementResult is one policy's figures.
type placementResult struct {
	policy                            string
	modelBytes, envBytes              int64
	ttfsMean, ttfsP50, ttfsP90        time.Duration
	waitMean                          time.Duration // submit to claim
	modelHits, modelUses              int
	envHits, envUses                  int
	makespan                          time.Duration
	gpuHours                          float64
	fairMean, fairMax                 float64 // |received share − fair share|, percentage points
	fairWorstOrg                      string
	ratioMean                         float64 // mean over orgs of |received/fair − 1|
	evictions                         int
	placedForCache                    int
	completed, claims, heartbeats     int
	queueGPUSeconds, simGPUSeconds    float64
	runs                              []run
	received, fair                    map[string]float64
	claimedTwice, completedNotOnce    int
	queueStatusWrong                  int
	wall                              time.Duration
	policyHeld                        bool
	orgsWithDemand                    int
	fairGPUHours, receivedGPUHoursSum float64
	// Cold claims (the node lacked the job's weights) where a queued job that fit the node's
	// free GPUs had weights the node held: any such job, and one of the same org as the job
	// taken (the look-ahead's reach: it looks at the next jobs of the org first in fair order).
	coldClaims, coldWithWarmQueued, coldWithWarmSameOrg int
	pairsFetched                                        int // (node, model) downloads
	fetchesByModel                                      map[int]int
	compileHits                                         int
	waitedWarm, waitedNone                              int // jobs that waited for a node holding their weights: one came, none did
	submitToFirstMean                                   time.Duration
	start                                               startPhases // the mean start, by phase
}

// sim event kinds, in the order they are handled at one instant: GPUs given back before a
// job starts, before new submissions.
const (
	evDone = iota
	evFirstStep
	evSubmit
	evLook // a node looks again when the claim said to (a job's wait for a warm node ended); job is the node's index
)

type simEvent struct {
	at   time.Duration
	kind int
	job  int
	seq  int
}

type eventHeap []simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	if h[i].kind != h[j].kind {
		return h[i].kind < h[j].kind
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Set moves the simulated clock to t.
func (c *simClock) Set(t time.Time) {
	c.mu.Lock()
	c.now = t
	c.mu.Unlock()
}

// placementPolicy is how the simulated agents claim and the queue places.
type placementPolicy struct {
	name string
	held bool    // claims say what their node holds (cache-aware)
	wait float64 // delay scheduling: the queue's Config.WaitForWeights (0: off, the default)
}

// simulate runs the workload through the queue once, under policy.
func (b *bench) simulate(w placementWorkload, jobs placementJobs, policy placementPolicy) placementResult {
	cacheAware := policy.held
	b.flush()
	wall := time.Now()
	t0 := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	clock := &simClock{now: t0}
	cfg := unlimited
	cfg.Now, cfg.HeartbeatInterval = clock.Now, w.Heartbeat
	// The queue reckons a download at the simulation's rate.
	cfg.WeightsRate, cfg.WaitForWeights = w.ModelRate, policy.wait
	q := queue.New(b.rdb, cfg)
	defer q.Close()
	res := placementResult{policy: policy.name, policyHeld: cacheAware, received: map[string]float64{}, fair: map[string]float64{},
		fetchesByModel: map[int]int{}}
	tieRand := rand.New(rand.NewPCG(w.Seed, 7)) // the same ties for both policies
	nodes := make([]*simNode, w.Nodes)
	for i := range nodes {
		nodes[i] = &simNode{id: fmt.Sprintf("node%02d", i), free: w.GPUsPerNode,
			models:   nodeCache{capacity: w.ModelCache, entries: map[string]*cacheEntry{}},
			envs:     nodeCache{capacity: w.EnvCache, entries: map[string]*cacheEntry{}},
			compiles: nodeCache{capacity: w.CompileCache, entries: map[string]*cacheEntry{}}, tie: tieRand.Float64()}
	}
	runs := make([]run, len(jobs.jobs))
	byID := map[string]int{}
	events := &eventHeap{}
	seq := 0
	push := func(at time.Duration, kind, j int) {
		seq++
		heap.Push(events, simEvent{at: at, kind: kind, job: j, seq: seq})
	}
	for i, j := range jobs.jobs {
		push(j.submit, evSubmit, i)
	}
	// What is queued, by GPU count: a node claims only while a queued job could fit it.
	queuedByGPUs := map[int]int{}
	queued := 0
	minQueued := func() int {
		m := math.MaxInt
		for g, n := range queuedByGPUs {
			if n > 0 && g < m {
				m = g
			}
		}
		return m
	}
	running := map[int]bool{}
	queuedSet := map[int]bool{}
	demand, holding := map[string]int{}, map[string]int{} // GPUs asked (queued or running), GPUs held
	capacity := w.Nodes * w.GPUsPerNode
	var now, last time.Duration
	var firstSubmit, lastDone time.Duration = -1, 0

	beat := func(ids []int) {
		var mu sync.Mutex
		parallel(len(ids), 8, func(_, k int) {
			i := ids[k]
			rn := &runs[i]
			rep, err := q.Heartbeat(b.ctx, rn.id, job.Heartbeat{Token: rn.token, Running: rn.started})
			if err != nil || rep.Action != job.Continue {
				log.Fatalf("placement: heartbeat of %s: %+v %v", rn.id, rep, err)
			}
			mu.Lock()
			rn.lastBeat = now
			res.heartbeats++
			mu.Unlock()
		})
	}
	var freedNow []*simNode

	for events.Len() > 0 {
		next := (*events)[0].at
		// Fairness, integrated over [last, next): what each org held, and its max-min fair
		// share of the fleet given what each org asked then.
		if dt := (next - last).Hours(); dt > 0 && firstSubmit >= 0 {
			for org, f := range maxMinShares(demand, capacity) {
				res.fair[org] += f * dt
			}
			for org, g := range holding {
				res.received[org] += float64(g) * dt
			}
		}
		now, last = next, next
		clock.Set(t0.Add(now))
		freedNow = freedNow[:0]
		for events.Len() > 0 && (*events)[0].at == now {
			ev := heap.Pop(events).(simEvent)
			j, rn := &jobs.jobs[ev.job], &runs[ev.job]
			switch ev.kind {
			case evSubmit:
				if firstSubmit < 0 {
					firstSubmit = now
				}
				sub, _, err := q.Submit(b.ctx, job.Submission{Org: j.org, Spec: j.spec}, "", "")
				if err != nil {
					log.Fatalf("placement: submit: %v", err)
				}
				rn.id = sub.ID
				byID[sub.ID] = ev.job
				queuedByGPUs[j.gpus]++
				queued++
				queuedSet[ev.job] = true
				demand[j.org] += j.gpus
			case evFirstStep:
				rn.started = true
				if _, err := q.Heartbeat(b.ctx, rn.id, job.Heartbeat{Token: rn.token, Running: true}); err != nil {
					log.Fatalf("placement: heartbeat: %v", err)
				}
				rn.lastBeat = now
				res.heartbeats++
			case evLook:
				n := nodes[ev.job]
				if n.lookAt == now {
					n.lookAt = 0
					if !slices.Contains(freedNow, n) {
						freedNow = append(freedNow, n)
					}
				}
			case evDone:
				// The agent's last heartbeat, then the completion: the GPU time up to now
				// charged, as a heartbeat every interval would have.
				if _, err := q.Heartbeat(b.ctx, rn.id, job.Heartbeat{Token: rn.token, Running: true}); err != nil {
					log.Fatalf("placement: heartbeat: %v", err)
				}
				res.heartbeats++
				freed := t0.Add(now)
				st, err := q.Complete(b.ctx, rn.id, job.Outcome{Token: rn.token, GPUsFreedAt: &freed})
				if err != nil || st != job.Completed {
					log.Fatalf("placement: complete %s: %s %v", rn.id, st, err)
				}
				rn.finished++
				res.completed++
				delete(running, ev.job)
				n := rn.node
				n.free += j.gpus
				n.models.entries[jobspec.NeedModel+j.spec.Model].pins--
				if rn.compileHit {
					n.compiles.entries[jobspec.CompileNeed(j.org, j.spec.Model, jobspec.DefaultGPUType, j.gpus)].pins--
				}
				for _, e := range j.envs {
					n.envs.entries[jobspec.NeedEnv+jobs.envs[e].id].pins--
				}
				demand[j.org] -= j.gpus
				holding[j.org] -= j.gpus
				lastDone = now
				if !slices.Contains(freedNow, n) {
					freedNow = append(freedNow, n)
				}
			}
		}
		if queued == 0 {
			continue
		}
		// The claims of this instant: the nodes whose GPUs just freed claim at once, then
		// the waiting ones as a submit wakes them: the fewest free GPUs that fit first, as the
		// queue wakes claims that say nothing of their caches (cache-aware: below). Each claims
		// until nothing fits it.
		var order []*simNode
		order = append(order, freedNow...)
		var waiting []*simNode
		for _, n := range nodes {
			if n.free > 0 && !slices.Contains(freedNow, n) {
				waiting = append(waiting, n)
			}
		}
		slices.SortFunc(waiting, func(a, b *simNode) int {
			return cmp.Or(cmp.Compare(a.free, b.free), cmp.Compare(a.tie, b.tie))
		})
		if cacheAware {
			// The queue's wake with claims that say what their nodes hold: each queued job,
			// oldest first, wakes the waiting node that holds its model's weights (the fewest
			// free GPUs that fit among those), else the fewest-free one that fits.
			var woken []*simNode
			for _, i := range slices.Sorted(maps.Keys(queuedSet)) {
				j := &jobs.jobs[i]
				var pick *simNode
				for _, n := range waiting {
					if n.free < j.gpus || slices.Contains(woken, n) {
						continue
					}
					if n.models.entries[jobspec.NeedModel+j.spec.Model] != nil {
						pick = n
						break
					}
					if pick == nil {
						pick = n
					}
				}
				if pick != nil {
					woken = append(woken, pick)
				}
			}
			for _, n := range waiting {
				if !slices.Contains(woken, n) {
					woken = append(woken, n)
				}
			}
			waiting = woken
		}
		order = append(order, waiting...)
		if fit := minQueued(); !slices.ContainsFunc(order, func(n *simNode) bool { return n.free >= fit }) {
			continue
		}
		// Every running job's usage charged as of its last heartbeat, as in production.
		var stale []int
		for i := range running {
			if now-runs[i].lastBeat >= w.Heartbeat {
				stale = append(stale, i)
			}
		}
		slices.Sort(stale)
		beat(stale)
		for _, n := range order {
			for queued > 0 && n.free >= minQueued() {
				req := job.ClaimRequest{AgentID: n.id, GPUs: []job.GPU{{Model: "H100", Count: n.free}}}
				if cacheAware {
					req.Held = n.held(now)
				}
				cl, again, err := q.TryClaim(b.ctx, req)
				res.claims++
				if err != nil {
					log.Fatalf("placement: claim: %v", err)
				}
				if cl == nil {
					// A claim that took nothing, told to look again (a job waits for a node
					// that holds its weights until then), does so as a waiting agent would.
					if !again.IsZero() {
						at := again.Sub(t0)
						if at <= now {
							at = now + time.Millisecond
						}
						if n.lookAt == 0 || at < n.lookAt {
							n.lookAt = at
							push(at, evLook, slices.Index(nodes, n))
						}
					}
					break
				}
				i, ok := byID[cl.Job.ID]
				if !ok {
					log.Fatalf("placement: claimed an unknown job %s", cl.Job.ID)
				}
				j, rn := &jobs.jobs[i], &runs[i]
				if rn.node != nil {
					res.claimedTwice++
					log.Printf("placement: %s claimed twice", rn.id)
					continue
				}
				if j.gpus > n.free {
					log.Fatalf("placement: %s asks %d GPUs, %s has %d free", rn.id, j.gpus, n.id, n.free)
				}
				delete(queuedSet, i)
				mk := jobspec.NeedModel + j.spec.Model
				if n.models.entries[mk] == nil {
					res.coldClaims++
					warm, same := false, false
					for k := range queuedSet {
						o := &jobs.jobs[k]
						if o.gpus <= n.free && n.models.entries[jobspec.NeedModel+o.spec.Model] != nil {
							warm = true
							same = same || o.org == j.org
						}
					}
					if warm {
						res.coldWithWarmQueued++
					}
					if same {
						res.coldWithWarmSameOrg++
					}
				}
				n.free -= j.gpus
				queuedByGPUs[j.gpus]--
				queued--
				holding[j.org] += j.gpus
				rn.node, rn.token, rn.claimed, rn.lastBeat = n, cl.Lease.Token, now, now
				running[i] = true
				// Time to first step: the model, downloaded where the node lacks it (its link
				// takes one download at a time), or waited for where it is on the way; then the
				// environments it lacks, installed one after another; then the start.
				ready := now
				if e := n.models.entries[mk]; e != nil {
					rn.modelHit = true
					ready = max(ready, e.readyAt)
					e.lastUse, e.pins = now, e.pins+1
				} else {
					size := placementModels[j.model].bytes()
					start := max(now, n.linkFree)
					ready = start + time.Duration(float64(size)/w.ModelRate*float64(time.Second))
					n.linkFree = ready
					n.models.put(mk, size, ready, now).pins++
					res.modelBytes += size
					res.pairsFetched++
					res.fetchesByModel[j.model]++
				}
				for _, ei := range j.envs {
					ek := jobspec.NeedEnv + jobs.envs[ei].id
					rn.envs++
					if e := n.envs.entries[ek]; e != nil {
						rn.envHits++
						ready = max(ready, e.readyAt)
						e.lastUse, e.pins = now, e.pins+1
					} else {
						size := jobs.envs[ei].bytes
						ready += w.EnvFixed + time.Duration(float64(size)/w.EnvRate*float64(time.Second))
						n.envs.put(ek, size, ready, now).pins++
						res.envBytes += size
					}
				}
				// Then the start: torch.compile's work (and the P2P check's) loaded from the
				// node's compile cache where this organization ran the model on as many GPUs
				// there before (the agent keeps it once such a run ends), else done afresh.
				ck := jobspec.CompileNeed(j.org, j.spec.Model, jobspec.DefaultGPUType, j.gpus)
				c := n.compiles.entries[ck]
				rn.compileHit = c != nil && c.readyAt <= ready
				rn.start = w.startCost(placementModels[j.model], j.gpus, rn.compileHit)
				rn.first = ready + rn.start.total()
				rn.done = rn.first + j.duration
				if rn.compileHit {
					c.lastUse, c.pins = now, c.pins+1
				} else if c == nil {
					n.compiles.put(ck, w.CompileEntry, rn.done, now)
				}
				push(rn.first, evFirstStep, i)
				push(rn.done, evDone, i)
			}
		}
	}
	res.makespan = lastDone - firstSubmit
	res.wall = time.Since(wall)

	// What the queue says: every job COMPLETED, once, placed for its cache or not (its
	// pending event), and each org's GPU-seconds against the simulation's.
	var ttfs, waits, toFirst []time.Duration
	orgSim := map[string]float64{}
	for i := range runs {
		rn, j := &runs[i], &jobs.jobs[i]
		if rn.finished != 1 {
			res.completedNotOnce++
			continue
		}
		got, err := q.Get(b.ctx, rn.id)
		if err != nil || got.Status != job.Completed {
			res.queueStatusWrong++
		}
		evs, err := q.Events(b.ctx, rn.id, 0, 100)
		if err != nil {
			log.Fatal(err)
		}
		for _, e := range evs {
			if e.Type != job.EventPending {
				continue
			}
			if strings.Contains(e.Detail, "placed for its cache") {
				rn.placedForCache = true
				res.placedForCache++
			}
			switch {
			case strings.Contains(e.Detail, "s for a node that holds"):
				res.waitedWarm++
			case strings.Contains(e.Detail, "none came"):
				res.waitedNone++
			}
		}
		ttfs = append(ttfs, rn.first-rn.claimed)
		waits = append(waits, rn.claimed-j.submit)
		toFirst = append(toFirst, rn.first-j.submit)
		if rn.compileHit {
			res.compileHits++
		}
		res.start.proc += rn.start.proc
		res.start.load += rn.start.load
		res.start.dynamo += rn.start.dynamo
		res.start.compile += rn.start.compile
		res.start.graphs += rn.start.graphs
		res.start.p2p += rn.start.p2p
		res.modelUses++
		if rn.modelHit {
			res.modelHits++
		}
		res.envUses += rn.envs
		res.envHits += rn.envHits
		gs := float64(j.gpus) * (rn.done - rn.claimed).Seconds()
		orgSim[j.org] += gs
		res.simGPUSeconds += gs
	}
	for org := range orgSim {
		st, err := q.GetOrg(b.ctx, org)
		if err != nil {
			log.Fatal(err)
		}
		res.queueGPUSeconds += st.GPUSeconds
	}
	res.ttfsMean, res.ttfsP50, res.ttfsP90 = meanPct(ttfs)
	res.waitMean, _, _ = meanPct(waits)
	res.submitToFirstMean, _, _ = meanPct(toFirst)
	if k := time.Duration(len(ttfs)); k > 0 {
		res.start = startPhases{res.start.proc / k, res.start.load / k, res.start.dynamo / k, res.start.compile / k,
			res.start.graphs / k, res.start.p2p / k}
	}
	res.gpuHours = res.simGPUSeconds / 3600
	for _, n := range nodes {
		res.evictions += n.models.evicted + n.envs.evicted + n.compiles.evicted
	}
	// Fairness: each org's share of all GPU-time received against its share of the max-min
	// fair GPU-time (above), in percentage points.
	var sumR, sumF float64
	for _, org := range jobs.orgs {
		sumR += res.received[org]
		sumF += res.fair[org]
	}
	res.fairGPUHours, res.receivedGPUHoursSum = sumF, sumR
	for _, org := range jobs.orgs {
		if res.fair[org] == 0 {
			continue
		}
		res.orgsWithDemand++
		d := math.Abs(res.received[org]/sumR-res.fair[org]/sumF) * 100
		res.fairMean += d
		if d > res.fairMax {
			res.fairMax, res.fairWorstOrg = d, org
		}
		res.ratioMean += math.Abs(res.received[org]/res.fair[org] - 1)
	}
	res.fairMean /= float64(res.orgsWithDemand)
	res.ratioMean /= float64(res.orgsWithDemand)
	res.runs = runs
	return res
}

// maxMinShares is the max-min fair split of capacity GPUs among orgs asking demand each
// (equal weights, as every org here has): water-filling.
func maxMinShares(demand map[string]int, capacity int) map[string]float64 {
	type od struct {
		org string
		d   int
	}
	var asks []od
	for org, d := range demand {
		if d > 0 {
			asks = append(asks, od{org, d})
		}
	}
	slices.SortFunc(asks, func(a, b od) int { return cmp.Or(cmp.Compare(a.d, b.d), strings.Compare(a.org, b.org)) })
	out := make(map[string]float64, len(asks))
	left := float64(capacity)
	for k, a := range asks {
		level := left / float64(len(asks)-k)
		give := math.Min(float64(a.d), level)
		out[a.org] = give
		left -= give
	}
	return out
}

func meanPct(d []time.Duration) (mean, p50, p90 time.Duration) {
	if len(d) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	var sum time.Duration
	for _, x := range s {
		sum += x
	}
	return sum / time.Duration(len(s)), s[len(s)/2], s[len(s)*9/10]
}

// placementComparison is the three policies' figures on one seed: first-fit, cache-aware
// claims (the service's default), and cache-aware claims with delay scheduling.
type placementComparison struct {
	firstFit, cacheAware, delayed placementResult
	// null is first-fit again with each job submitted up to a second later: the same policy
	// and jobs on another sample path, the noise any comparison of two runs carries.
	null placementResult
}

// placement runs the workload under the three policies on b's redis-server and prints the
// figures (where b.out is set).
func (b *bench) placement(w placementWorkload) placementComparison {
	jobs := w.generate()
	var c placementComparison
	c.firstFit = b.simulate(w, jobs, placementPolicy{name: "first-fit"})
	c.cacheAware = b.simulate(w, jobs, placementPolicy{name: "cache-aware", held: true})
	c.delayed = b.simulate(w, jobs, placementPolicy{name: fmt.Sprintf("+ waits ≤ %g× download", w.WaitFactor), held: true, wait: w.WaitFactor})
	c.null = b.simulate(w, jobs.jittered(w.Seed), placementPolicy{name: "first-fit, submits jittered"})
	if b.out != nil {
		b.printPlacement(w, jobs, c)
	}
	return c
}

// placementTotals pools one policy's figures over seeds: bytes summed, time to first step and
// submit to first step averaged over every job, fairness deviation averaged over the seeds.
type placementTotals struct {
	bytes         int64
	ttfs, toFirst time.Duration
	fair          float64
	jobs, seeds   int
}

func (t *placementTotals) add(r placementResult) {
	t.bytes += r.modelBytes + r.envBytes
	t.ttfs += r.ttfsMean * time.Duration(r.completed)
	t.toFirst += r.submitToFirstMean * time.Duration(r.completed)
	t.fair += r.fairMean
	t.jobs += r.completed
	t.seeds++
}

func (t placementTotals) meanTTFS() time.Duration { return t.ttfs / time.Duration(max(1, t.jobs)) }
func (t placementTotals) meanToFirst() time.Duration {
	return t.toFirst / time.Duration(max(1, t.jobs))
}
func (t placementTotals) meanFair() float64 { return t.fair / float64(max(1, t.seeds)) }

// placementSeeds runs the placement case on seeds w.Seed, w.Seed+1, … (n of them): the first
// seed's figures in full, then each seed's ratios, then the pooled ones the aims are judged on.
// One seed is not enough: which org's job lands where diverges between policies within hours,
// and fairness deviation in particular moves by tens of per cent from seed to seed.
func (b *bench) placementSeeds(w placementWorkload, n int) {
	var ff, ca, dl, null placementTotals
	type seedRow struct {
		seed                             uint64
		bytesCA, bytesDL, ttfsCA, ttfsDL float64
		fairFF, fairCA, fairDL, fairNull float64
		bytesNull                        float64
	}
	var rows []seedRow
	out := b.out
	for k := range n {
		ws := w
		ws.Seed = w.Seed + uint64(k)
		if k > 0 {
			b.out = nil // the full table for the first seed only
		}
		c := b.placement(ws)
		b.out = out
		ff.add(c.firstFit)
		ca.add(c.cacheAware)
		dl.add(c.delayed)
		null.add(c.null)
		fb := float64(c.firstFit.modelBytes + c.firstFit.envBytes)
		rows = append(rows, seedRow{ws.Seed,
			fb / float64(c.cacheAware.modelBytes+c.cacheAware.envBytes), fb / float64(c.delayed.modelBytes+c.delayed.envBytes),
			c.firstFit.ttfsMean.Seconds() / c.cacheAware.ttfsMean.Seconds(), c.firstFit.ttfsMean.Seconds() / c.delayed.ttfsMean.Seconds(),
			c.firstFit.fairMean, c.cacheAware.fairMean, c.delayed.fairMean, c.null.fairMean,
			fb / float64(c.null.modelBytes+c.null.envBytes)})
	}
	if b.out == nil {
		return
	}
	fmt.Printf("\nplacement over %d seeds (%d … %d), first-fit against cache-aware (CA) and cache-aware with waits ≤ %g× download (+W):\n",
		n, w.Seed, w.Seed+uint64(n-1), w.WaitFactor)
	t := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(t, strings.Join(cells, "\t")+"\t") }
	row("seed", "bytes CA", "bytes +W", "TTFS CA", "TTFS +W", "fairness first-fit / CA / +W", "null: bytes, fairness")
	for _, r := range rows {
		row(fmt.Sprint(r.seed), fmt.Sprintf("%.2f×", r.bytesCA), fmt.Sprintf("%.2f×", r.bytesDL), fmt.Sprintf("%.2f×", r.ttfsCA),
			fmt.Sprintf("%.2f×", r.ttfsDL), fmt.Sprintf("%.3f / %.3f / %.3f pp", r.fairFF, r.fairCA, r.fairDL),
			fmt.Sprintf("%.2f×, %.3f pp (%+.0f %%)", r.bytesNull, r.fairNull, 100*(r.fairNull/r.fairFF-1)))
	}
	t.Flush()
	aim := func(ok bool) string {
		if ok {
			return "met"
		}
		return "NOT met"
	}
	fmt.Printf("null comparison (first-fit against itself, each job submitted up to 1 s later), pooled: bytes %.2f×, fairness deviation %.3f pp against %.3f pp (%+.1f %%): the noise of a comparison of two runs\n",
		float64(ff.bytes)/float64(null.bytes), null.meanFair(), ff.meanFair(), 100*(null.meanFair()/ff.meanFair()-1))
	for _, p := range []struct {
		name string
		t    placementTotals
	}{{"cache-aware", ca}, {fmt.Sprintf("cache-aware with waits ≤ %g× download", w.WaitFactor), dl}} {
		br := float64(ff.bytes) / float64(p.t.bytes)
		tr := ff.meanTTFS().Seconds() / p.t.meanTTFS().Seconds()
		fr := p.t.meanFair()/ff.meanFair() - 1
		fmt.Printf("placement, %s, pooled: bytes fetched first-fit/it %.2f× (aim ≥ 3×: %s); mean time to first step %.2f× (aim ≥ 2×: %s); "+
			"submit → first step %s against first-fit's %s; fairness deviation %.3f pp against %.3f pp (%+.1f %%; aim ≤ +5 %%: %s)\n",
			p.name, br, aim(br >= 3), tr, aim(tr >= 2), fmtMin(p.t.meanToFirst()), fmtMin(ff.meanToFirst()),
			p.t.meanFair(), ff.meanFair(), 100*fr, aim(fr <= 0.05))
	}
}

func (b *bench) printPlacement(w placementWorkload, jobs placementJobs, c placementComparison) {
	var modelSum int64
	lo, hi := placementModels[0].bytes(), placementModels[0].bytes()
	for _, m := range placementModels {
		modelSum += m.bytes()
		lo, hi = min(lo, m.bytes()), max(hi, m.bytes())
	}
	var envSum int64
	elo, ehi := jobs.envs[0].bytes, jobs.envs[0].bytes
	for _, e := range jobs.envs {
		envSum += e.bytes
		elo, ehi = min(elo, e.bytes), max(ehi, e.bytes)
	}
	var gpuHours float64
	byGPUs := map[int]int{}
	perOrg := map[string]int{}
	for _, j := range jobs.jobs {
		gpuHours += float64(j.gpus) * j.duration.Hours()
		byGPUs[j.gpus]++
		perOrg[j.org]++
	}
	counts := make([]int, 0, len(perOrg))
	for _, n := range perOrg {
		counts = append(counts, n)
	}
	slices.Sort(counts)
	slices.Reverse(counts)
	top10 := 0
	for _, n := range counts[:min(10, len(counts))] {
		top10 += n
	}
	capacity := float64(w.Nodes * w.GPUsPerNode)
	fmt.Printf("placement (issue 33): first-fit against cache-aware claims, the same workload on the real queue, simulated clock\n")
	fmt.Printf("  fleet: %d nodes × %d H100; per node a %s weights cache and a %s environments cache (LRU; what a running job uses is never evicted)\n",
		w.Nodes, w.GPUsPerNode, fmtBytes(w.ModelCache), fmtBytes(w.EnvCache))
	fmt.Printf("  fetch: weights at %.1f GB/s a node (one download at a time on its link); environments installed at %.0f MB/s + %v each, one after another\n",
		w.ModelRate/1e9, w.EnvRate/1e6, w.EnvFixed)
	fmt.Printf("  start (vLLM's own figures, by parameters P in billions; see startCost): processes %v; weights into GPU memory at %.0f GB/s; Dynamo 5 s + 0.15 s/B;\n",
		w.ProcStart, w.LoadRate/1e9)
	fmt.Printf("    torch.compile 20 s + 0.7 s/B, or %v from the node's compile cache (per org, model and GPUs, kept after a run; %s a node, %s an entry);\n",
		w.CompileWarm, fmtBytes(w.CompileCache), fmtBytes(w.CompileEntry))
	fmt.Printf("    CUDA graphs 15 s + 0.65 s/B; P2P check 60 s × pairs/56 at tensor parallelism GPUs/2, skipped with the compile cache\n")
	fmt.Printf("  time to first step (claim → first step) = weights download (if not cached; waited for if on the way) + installs of environments not cached + start\n")
	fmt.Printf("  cache-aware claims: the node's held weights and environments with each claim; a job waits for a node that holds its weights up to %.0f× their download (delay scheduling)\n",
		w.WaitFactor)
	fmt.Printf("  models: %d, bf16 weights %s … %s (%s all together); environments: %d, %s … %s installed (%s all together)\n",
		len(placementModels), fmtBytes(lo), fmtBytes(hi), fmtBytes(modelSum), len(jobs.envs), fmtBytes(elo), fmtBytes(ehi), fmtBytes(envSum))
	fmt.Printf("  jobs: %d from %d orgs (Zipf %.1f: the top 10 orgs submit %d, the largest %d, the smallest %d), in %d sweeps (1–8 runs of one model and env set) over %v;\n",
		len(jobs.jobs), len(jobs.orgs), w.OrgSkew, top10, counts[0], counts[len(counts)-1], jobs.sweeps, w.Window)
	fmt.Printf("    each org uses 1–3 models and 1–4 environments (Zipf 1.0 popularity), 10%% of sweeps another; GPUs 1/2/4/8: %d/%d/%d/%d jobs;\n",
		byGPUs[1], byGPUs[2], byGPUs[4], byGPUs[8])
	fmt.Printf("    runs log-normal, median 40 min, 5 min … 8 h: %.0f GPU-hours of runs, %.2f × the fleet's GPU-hours over the submission window\n",
		gpuHours, gpuHours/(capacity*w.Window.Hours()))
	fmt.Printf("  fairness: an org's fair share is its max-min fair split of the %d GPUs among the orgs with jobs queued or running, integrated over time;\n", int(capacity))
	fmt.Printf("    deviation = |its share of all GPU-time received − its share of all fair GPU-time|, in percentage points, over the orgs that had demand\n\n")

	t := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row := func(cells ...string) { fmt.Fprintln(t, strings.Join(cells, "\t")+"\t") }
	ff, ca, dl := c.firstFit, c.cacheAware, c.delayed
	row("", ff.policy, ca.policy, dl.policy)
	both := func(name string, f func(r placementResult) string) { row(name, f(ff), f(ca), f(dl)) }
	both("bytes fetched, all", func(r placementResult) string { return fmtBytes(r.modelBytes + r.envBytes) })
	both("  weights", func(r placementResult) string { return fmtBytes(r.modelBytes) })
	both("  environments", func(r placementResult) string { return fmtBytes(r.envBytes) })
	both("weights cache hits", func(r placementResult) string {
		return fmt.Sprintf("%.1f %% (%d/%d)", 100*float64(r.modelHits)/float64(r.modelUses), r.modelHits, r.modelUses)
	})
	both("environment cache hits", func(r placementResult) string {
		return fmt.Sprintf("%.1f %% (%d/%d)", 100*float64(r.envHits)/float64(r.envUses), r.envHits, r.envUses)
	})
	both("compile cache hits", func(r placementResult) string {
		return fmt.Sprintf("%.1f %% (%d/%d)", 100*float64(r.compileHits)/float64(r.modelUses), r.compileHits, r.modelUses)
	})
	both("time to first step, mean", func(r placementResult) string { return fmtSim(r.ttfsMean) })
	both("  p50", func(r placementResult) string { return fmtSim(r.ttfsP50) })
	both("  p90", func(r placementResult) string { return fmtSim(r.ttfsP90) })
	both("  start, mean: compile / P2P check", func(r placementResult) string {
		return fmt.Sprintf("%s / %s", fmtSim(r.start.compile), fmtSim(r.start.p2p))
	})
	both("  start, mean: the rest", func(r placementResult) string {
		return fmtSim(r.start.proc + r.start.load + r.start.dynamo + r.start.graphs)
	})
	both("queue wait (submit → claim), mean", func(r placementResult) string { return fmtSim(r.waitMean) })
	both("submit → first step, mean", func(r placementResult) string { return fmtSim(r.submitToFirstMean) })
	both("jobs that waited for a node holding their weights", func(r placementResult) string {
		return fmt.Sprintf("%d (one came: %d)", r.waitedWarm+r.waitedNone, r.waitedWarm)
	})
	both("makespan (first submit → last done)", func(r placementResult) string { return fmtSim(r.makespan) })
	both("GPU-hours held (first step + run)", func(r placementResult) string { return fmt.Sprintf("%.0f", r.gpuHours) })
	both("claims placed for their cache", func(r placementResult) string {
		return fmt.Sprintf("%d (%.1f %%)", r.placedForCache, 100*float64(r.placedForCache)/float64(r.completed))
	})
	both("cold claims: weights not on the node", func(r placementResult) string { return fmt.Sprint(r.coldClaims) })
	both("  a queued job that fit had weights it held", func(r placementResult) string { return fmt.Sprint(r.coldWithWarmQueued) })
	both("  one of them of the org of the job taken", func(r placementResult) string { return fmt.Sprint(r.coldWithWarmSameOrg) })
	both("cache evictions", func(r placementResult) string { return fmt.Sprint(r.evictions) })
	both("fairness deviation, mean", func(r placementResult) string { return fmt.Sprintf("%.3f pp", r.fairMean) })
	both("  max (org)", func(r placementResult) string { return fmt.Sprintf("%.3f pp (%s)", r.fairMax, r.fairWorstOrg) })
	both("  mean |received/fair − 1|", func(r placementResult) string { return fmt.Sprintf("%.1f %%", 100*r.ratioMean) })
	both("jobs completed once / claims / heartbeats", func(r placementResult) string {
		return fmt.Sprintf("%d / %d / %d", r.completed, r.claims, r.heartbeats)
	})
	both("queue's GPU-seconds / simulation's", func(r placementResult) string {
		return fmt.Sprintf("%.4f", r.queueGPUSeconds/r.simGPUSeconds)
	})
	both("wall time", func(r placementResult) string { return r.wall.Round(100 * time.Millisecond).String() })
	t.Flush()
	// Where the ratios could go at most: every job's weights, environments and compile cache on
	// its node (time to first step = its start from the caches), each model and environment
	// used fetched once.
	var once int64
	var warm time.Duration
	for _, j := range jobs.jobs {
		warm += w.startCost(placementModels[j.model], j.gpus, true).total()
	}
	warm /= time.Duration(len(jobs.jobs))
	seenM, seenE := map[int]bool{}, map[int]bool{}
	for _, j := range jobs.jobs {
		if !seenM[j.model] {
			seenM[j.model] = true
			once += placementModels[j.model].bytes()
		}
		for _, e := range j.envs {
			if !seenE[e] {
				seenE[e] = true
				once += jobs.envs[e].bytes
			}
		}
	}
	// Where the bytes go: each model's downloads under each policy, the heaviest first.
	fmt.Printf("\nweights downloads by model (the most bytes under cache-aware first):\n")
	order := make([]int, len(placementModels))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(a, b int) int {
		return cmp.Compare(int64(ca.fetchesByModel[b])*placementModels[b].bytes(), int64(ca.fetchesByModel[a])*placementModels[a].bytes())
	})
	uses := map[int]int{}
	for _, j := range jobs.jobs {
		uses[j.model]++
	}
	t = tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	row("model", "weights", "jobs", "first-fit", "cache-aware", "with waits", "cache-aware bytes")
	for _, m := range order[:8] {
		pm := placementModels[m]
		row(pm.name, fmtBytes(pm.bytes()), fmt.Sprint(uses[m]), fmt.Sprint(ff.fetchesByModel[m]), fmt.Sprint(ca.fetchesByModel[m]),
			fmt.Sprint(dl.fetchesByModel[m]), fmtBytes(int64(ca.fetchesByModel[m])*pm.bytes()))
	}
	t.Flush()
	fmt.Printf("\nbounds: everything cached gives a mean time to first step of %s (first-fit/that: %.2f×); each model and environment used fetched once: %s (first-fit/that: %.1f×)\n",
		fmtSim(warm), ff.ttfsMean.Seconds()/warm.Seconds(), fmtBytes(once), float64(ff.modelBytes+ff.envBytes)/float64(once))
	for _, r := range []placementResult{ca, dl} {
		fmt.Printf("seed %d, %s: bytes fetched first-fit/it %.2f×, mean time to first step %.2f×, fairness deviation %+.1f %%\n",
			w.Seed, r.policy, float64(ff.modelBytes+ff.envBytes)/float64(r.modelBytes+r.envBytes), ff.ttfsMean.Seconds()/r.ttfsMean.Seconds(),
			100*(r.fairMean/ff.fairMean-1))
	}
}

func fmtBytes(n int64) string {
	switch {
	case n >= 1000*gb:
		return fmt.Sprintf("%.2f TB", float64(n)/1e12)
	case n >= gb:
		return fmt.Sprintf("%.1f GB", float64(n)/1e9)
	}
	return fmt.Sprintf("%.0f MB", float64(n)/1e6)
}

// fmtMin writes a simulated duration in minutes, to a tenth.
func fmtMin(d time.Duration) string { return fmt.Sprintf("%.1f min", d.Minutes()) }

// fmtSim writes a simulated duration: seconds below 10 min, else hours and minutes.
func fmtSim(d time.Duration) string {
	if d < 10*time.Minute {
		return fmt.Sprintf("%.1f s", d.Seconds())
	}
	return d.Round(time.Minute).String()
}
