// Command chaos is `make chaos`: it runs JOBS short jobs (the emulated pipeline) through the
// real HTTP API on the real agents (bin/gpuagent processes), and while they run kills agents
// with SIGKILL at random moments (starting a new one each time), restarts the API process
// once and redis-server (AOF on) twice, and tries writes with lease tokens that are no longer
// current. At the end it checks, from the API and Redis, that every job is in a terminal
// state, none is lost, none completed twice, no stale write was accepted, and every resumed
// run resumed from its newest committed checkpoint. Its last line is the summary.
//
// It re-executes itself as the API process (-role api), so that the API can be restarted.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sys/unix"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/httpserver"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/queue"
)

const prefix = "ht"

// quiet drops go-redis's own log lines (dial failures while redis-server is down on purpose).
type quiet struct{}

func (quiet) Printf(context.Context, string, ...any) {}

func main() {
	redis.SetLogger(quiet{})
	role := flag.String("role", "chaos", "chaos, or api (the API process the chaos run starts)")
	jobs := flag.Int("jobs", 1000, "jobs to run")
	agents := flag.Int("agents", 8, "agents alive at any time")
	kills := flag.Int("kills", 120, "agent SIGKILLs to spread over the run (at least)")
	steps := flag.Int("steps", 30, "training steps of each job")
	stepTime := flag.Duration("step-time", 60*time.Millisecond, "emulated time of one step")
	bin := flag.String("bin", "bin", "where gpuagent and prime-rl-emulator are")
	addr := flag.String("addr", "", "(api role) where to listen")
	redisAddr := flag.String("redis", "", "(api role) redis-server")
	store := flag.String("store", "", "(api role) the object store folder")
	flag.Parse()
	var err error
	if *role == "api" {
		err = serveAPI(*addr, *redisAddr, *store)
	} else {
		err = chaos(*jobs, *agents, *kills, *steps, *stepTime, *bin)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
}

// serveAPI is the API process: the API and the reaper, keys from the environment.
func serveAPI(addr, redisAddr, storeDir string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	keys, err := auth.ParseKeySet(os.Getenv("HOSTEDTRAIN_JWT_KEYS"))
	if err != nil {
		return err
	}
	secrets, err := seal.Parse(os.Getenv("HOSTEDTRAIN_SECRETS_KEYS"))
	if err != nil {
		return err
	}
	store, err := blob.NewDir(storeDir)
	if err != nil {
		return err
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: 1, DialTimeout: time.Second})
	defer rdb.Close()
	q := queue.New(rdb, queue.Config{Prefix: prefix, LeaseTTL: 3 * time.Second, HeartbeatInterval: 500 * time.Millisecond,
		MaxAttempts: 50, MaxClaimWait: 2 * time.Second, RetryBackoff: 100 * time.Millisecond,
		// every job is submitted first, before any runs; the agents it kills come back under
		// the same names, as fresh nodes, so none is quarantined for the leases it lost
		MaxQueued: math.MaxInt32, QuarantineAfter: -1})
	defer q.Close()
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	h, err := api.New(api.Config{Queue: q, Verifier: auth.NewVerifier(keys, nil), Secrets: secrets, Store: store, Logger: logger})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return err
	}
	// The inference gateway on the API's origin, as in hostedtrain dev: restarting this process
	// restarts it too, and every agent's tunnel must be dialled again.
	gw := gateway.New(gateway.Config{Verifier: auth.NewVerifier(keys, nil), Revoked: q.TokenRevoked, Deployments: q,
		Wake: h.Redeploy, RatePerOrg: 1e6, Burst: 1 << 20, WakeWait: 10 * time.Second, Logger: logger})
	defer gw.Close()
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gw.Handles(r.URL.Path) {
			gw.ServeHTTP(w, r)
			return
		}
		h.ServeHTTP(w, r)
	}))
	go func() { _ = srv.Serve(ln) }()
	_ = queue.NewReaper(q, 500*time.Millisecond, logger).Run(ctx) // until ctx ends
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// proc is a child process in its own process group.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func start(name string, args []string, env []string, logPath string) (*proc, error) {
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(name, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, err
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); logf.Close(); close(p.done) }()
	return p, nil
}

func (p *proc) kill() {
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

func (p *proc) term() {
	_ = syscall.Kill(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		p.kill()
	}
}

type run struct {
	dir, bin, apiURL, apiAddr string
	keys                      *auth.KeySet
	env                       []string
	stepTime                  time.Duration
	redisOpts                 redisproc.Options
	storeDir                  string

	mu     sync.Mutex
	agents map[int]*proc // by slot: a replacement takes its victim's slot and ports
	names  map[int]string
	nextID int
	killed map[string]time.Time // agent name -> when it was killed
}

// agentPorts is each agent slot's range of ports: the agents share one machine here, where a
// node has one, and an rl job binds a block of 64 (four jobs of two GPUs on an agent's eight).
// A job keeps its block until it is reported, while its GPUs go back when its pipeline exits,
// so a slot needs more blocks than GPU jobs: with exactly four, the claim made with the freed
// GPUs found no block, handed the job back and backed off (1 s, doubling to 30 s).
const agentPorts = 8 * 64

func (r *run) startAgent(slot int) error {
	r.mu.Lock()
	id := r.nextID
	r.nextID++
	r.mu.Unlock()
	name := fmt.Sprintf("chaos-agent-%d", id)
	tok, err := r.keys.Issue(auth.TokenRequest{Subject: name, Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: 24 * time.Hour}, time.Now())
	if err != nil {
		return err
	}
	// The slot's work folder, as an agent that restarts on its node has its own: the new agent
	// reclaims what the killed one left (its jobs' groups, file systems) before it claims.
	work := filepath.Join(r.dir, "work", "slot-"+strconv.Itoa(slot))
	p, err := start(filepath.Join(r.bin, "gpuagent"), []string{
		"--api", r.apiURL, "--store", r.storeDir, "--gpus", "H100:8", "--work-dir", work,
		"--cache-dir", filepath.Join(r.dir, "work", "cache-"+strconv.Itoa(slot)), "--model-hub", "",
		"--emulated", "--emulator", filepath.Join(r.bin, "prime-rl-emulator"),
		"--emulate-flags", "--emulate.step-time " + r.stepTime.String() + " --emulate.token-time 100ms",
		"--gateway", r.apiURL, "--serving-every", "300ms",
		"--port-range", fmt.Sprintf("%d-%d", 20000+slot*agentPorts, 20000+(slot+1)*agentPorts-1),
		"--metrics-addr", "", "--claim-wait", "2s", "--stop-grace", "2s", "--poll-interval", "50ms", "--flush-interval", "200ms",
	}, []string{"HOSTEDTRAIN_AGENT_TOKEN=" + tok}, filepath.Join(r.dir, "agents.log"))
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.agents[slot] = p
	if r.names == nil {
		r.names = map[int]string{}
	}
	r.names[slot] = name
	r.mu.Unlock()
	return nil
}

// killOne SIGKILLs a random agent and starts another in its place.
func (r *run) killOne() error {
	r.mu.Lock()
	var slots []int
	for slot := range r.agents {
		slots = append(slots, slot)
	}
	victim := slots[rand.IntN(len(slots))]
	p := r.agents[victim]
	delete(r.agents, victim)
	if r.killed == nil {
		r.killed = map[string]time.Time{}
	}
	r.killed[r.names[victim]] = time.Now()
	r.mu.Unlock()
	p.kill()
	return r.startAgent(victim)
}

func (r *run) stopAgents() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.agents {
		p.kill()
	}
}

// scratchDir is where a run keeps its object store, redis-server's files and the agents' work
// folders (job disks included): $CHAOS_SCRATCH if set, else /dev/shm where it is a tmpfs with
// room, else the temporary folder. Chaos tests the service's guarantees, not the disk under
// it: on a root file system without a journal (this project's build machines) ext4 looks for
// recently deleted inodes on every file it creates, and a run creates and deletes hundreds of
// thousands; that scan was the largest single cost of a run in the kernel.
func scratchDir() string {
	if d := os.Getenv("CHAOS_SCRATCH"); d != "" {
		return d
	}
	const need = 4 << 30 // a 1,000-job run peaks well below it
	var st unix.Statfs_t
	if unix.Statfs("/dev/shm", &st) == nil && st.Type == unix.TMPFS_MAGIC && int64(st.Bavail)*st.Bsize >= need {
		return "/dev/shm"
	}
	return os.TempDir()
}

func chaos(nJobs, nAgents, nKills, steps int, stepTime time.Duration, bin string) error {
	ctx := context.Background()
	began := time.Now()
	bin, err := filepath.Abs(bin)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp(scratchDir(), "hostedtrain-chaos")
	if err != nil {
		return err
	}
	defer func() {
		// What the last agents left, as their next start on the node would.
		slots, _ := filepath.Glob(filepath.Join(dir, "work", "slot-*"))
		for _, w := range slots {
			if err := sandbox.Reclaim(w); err != nil {
				fmt.Println("chaos: reclaim", w, err)
			}
		}
		if os.Getenv("CHAOS_KEEP") != "" {
			fmt.Println("chaos: logs and data kept in", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	keys, err := auth.NewKeySet()
	if err != nil {
		return err
	}
	sealKey, err := seal.NewKey("k1")
	if err != nil {
		return err
	}
	redisPort, err := redisproc.FreePort()
	if err != nil {
		return err
	}
	apiPort, err := redisproc.FreePort()
	if err != nil {
		return err
	}
	r := &run{
		dir: dir, bin: bin, keys: keys, stepTime: stepTime, agents: map[int]*proc{},
		apiAddr: "127.0.0.1:" + strconv.Itoa(apiPort), apiURL: "http://127.0.0.1:" + strconv.Itoa(apiPort),
		env:       []string{"HOSTEDTRAIN_JWT_KEYS=" + keys.String(), "HOSTEDTRAIN_SECRETS_KEYS=" + sealKey},
		redisOpts: redisproc.Options{Dir: filepath.Join(dir, "redis"), Port: redisPort, AppendOnly: true},
		storeDir:  filepath.Join(dir, "objects"),
	}
	if err := os.MkdirAll(r.storeDir, 0o755); err != nil {
		return err
	}
	rs, err := redisproc.Start(ctx, r.redisOpts)
	if err != nil {
		return err
	}
	defer func() { rs.Stop() }()
	redisAddr := rs.Addr
	self, err := os.Executable()
	if err != nil {
		return err
	}
	apiArgs := []string{"-role", "api", "-addr", r.apiAddr, "-redis", redisAddr, "-store", r.storeDir}
	apiProc, err := start(self, apiArgs, r.env, filepath.Join(dir, "api.log"))
	if err != nil {
		return err
	}
	defer func() { apiProc.term() }()
	userTok, err := keys.Issue(auth.TokenRequest{Org: "chaos", Scopes: []string{auth.ScopeJobsRead, auth.ScopeJobsWrite}, TTL: 24 * time.Hour}, time.Now())
	if err != nil {
		return err
	}
	user := client.New(r.apiURL, userTok)
	if err := waitFor(time.Minute, func() bool { _, err := user.Usage(ctx, "", 1); return err == nil }); err != nil {
		return fmt.Errorf("the API never answered: %w", err)
	}
	if nAgents*agentPorts > 10000 {
		return fmt.Errorf("%d agents need more than ports 20000-29999", nAgents)
	}
	for slot := range nAgents {
		if err := r.startAgent(slot); err != nil {
			return err
		}
	}
	defer r.stopAgents()
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr, MaxRetries: 1})
	defer rdb.Close()

	// Submit every job first, before any chaos.
	body := fmt.Sprintf("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = %d\nbatch_size = 16\nrollouts_per_example = 4\n"+
		"[[env]]\nid = \"primeintellect/alphabet-sort\"\n[checkpoints]\ninterval = 2\nkeep_cloud = 2\n", steps)
	ids := make([]string, nJobs)
	var submitWG sync.WaitGroup
	var submitErr atomic.Value
	sem := make(chan struct{}, 16)
	for i := range nJobs {
		submitWG.Add(1)
		sem <- struct{}{}
		go func() {
			defer submitWG.Done()
			defer func() { <-sem }()
			j, err := user.SubmitJob(ctx, []byte(body), "application/toml", "")
			if err != nil {
				submitErr.Store(err)
				return
			}
			ids[i] = j.ID
		}()
	}
	submitWG.Wait()
	if err, _ := submitErr.Load().(error); err != nil {
		return fmt.Errorf("submit: %w", err)
	}
	fmt.Printf("chaos: %d jobs submitted; %d agents; killing agents, restarting the API once and Redis twice\n", nJobs, nAgents)

	// Deployments under fire: once jobs complete, the newest checkpoints of three are deployed
	// and streamed from, one stream after another each, through every kill and restart.
	deps := newDeployments(user, userTok, r.apiURL)
	depCtx, stopDeps := context.WithCancel(ctx)
	defer stopDeps()
	depsDone := make(chan struct{})
	go func() { defer close(depsDone); deps.run(depCtx) }()

	// The stale-write probe: every lease token seen; once a job's token has moved on, an agent
	// writes with the old one. None may be accepted.
	probeTok, err := keys.Issue(auth.TokenRequest{Subject: "stale-prober", Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: 24 * time.Hour}, time.Now())
	if err != nil {
		return err
	}
	prober := client.New(r.apiURL, probeTok)
	var staleTried, staleAccepted atomic.Int64
	probeCtx, stopProbe := context.WithCancel(ctx)
	defer stopProbe()
	probeDone := make(chan struct{})
	go func() {
		defer close(probeDone)
		seen := map[string]map[string]bool{} // job -> tokens seen
		for probeCtx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			leased, err := rdb.ZRange(probeCtx, rediskeys.Queue.FixedName("{"+prefix+"}:", "LEASES"), 0, -1).Result()
			if err != nil {
				continue
			}
			for _, id := range leased {
				tok, err := rdb.HGet(probeCtx, rediskeys.Queue.NamedKey("{"+prefix+"}:", "jobkey", id), "lease_token").Result()
				if err != nil || tok == "" {
					continue
				}
				if seen[id] == nil {
					seen[id] = map[string]bool{}
				}
				for old := range seen[id] {
					if old == tok {
						continue
					}
					staleTried.Add(1)
					if _, err := prober.Heartbeat(probeCtx, id, job.Heartbeat{Token: old, Running: true}); err == nil {
						staleAccepted.Add(1)
					}
					if err := prober.Complete(probeCtx, id, job.Outcome{Token: old}); err == nil {
						staleAccepted.Add(1)
					}
					delete(seen[id], old)
				}
				seen[id][tok] = true
			}
		}
	}()

	// The chaos: kills spread over the expected run; the API restarted at a third of the jobs,
	// Redis at a half and three quarters.
	// terminal counts the jobs that have ended, in one round trip: the loop below runs it
	// between kills, which must keep their pace.
	// A job that ended is in the index of ended jobs (its hash has moved to its own slot).
	terminal := func() int {
		scores, _ := rdb.ZMScore(ctx, rediskeys.Queue.FixedName("{"+prefix+"}:", "ENDED"), ids...).Result()
		n := 0
		for _, s := range scores {
			if s != 0 {
				n++
			}
		}
		return n
	}
	// Kills come every killEvery until there have been nKills; a job's run takes longer than
	// that, so most kills land mid-run. They also follow the jobs: by the time a share of the
	// jobs has ended, as large a share of the kills is done (all of them by nine tenths), so a
	// machine that runs the jobs faster than the clock expects still gets every kill.
	killEvery := 150 * time.Millisecond
	due := func(done int) int { return min(nKills, done*nKills*10/(nJobs*9)+1) }
	kills, redisRestarts, apiRestarts := 0, 0, 0
	deadline := time.Now().Add(20 * time.Minute)
	lastKill := time.Now()
	lastTick := time.Now()
	for {
		done := terminal()
		if time.Since(lastTick) >= 10*time.Second {
			lastTick = time.Now()
			fmt.Printf("chaos: [t=%s] %d of %d terminal, %d kills\n", time.Since(began).Round(time.Second), done, nJobs, kills)
		}
		if done == nJobs && kills >= nKills && redisRestarts >= 2 && apiRestarts >= 1 {
			break
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("after 20 minutes %d of %d jobs are terminal", done, nJobs)
		}
		switch {
		case apiRestarts == 0 && done >= nJobs/3:
			apiProc.term()
			if apiProc, err = start(self, apiArgs, r.env, filepath.Join(dir, "api.log")); err != nil {
				return err
			}
			apiRestarts++
			fmt.Printf("chaos: API restarted (%d of %d jobs terminal)\n", done, nJobs)
		case redisRestarts == 0 && done >= nJobs/2, redisRestarts == 1 && done >= nJobs*3/4:
			rs.Stop()
			time.Sleep(time.Second) // the outage: API answers 503, agents buffer
			if rs, err = redisproc.Start(ctx, r.redisOpts); err != nil {
				return err
			}
			redisRestarts++
			fmt.Printf("chaos: redis-server restarted (%d of %d jobs terminal)\n", done, nJobs)
		case kills < nKills && (time.Since(lastKill) >= killEvery || kills < due(done)):
			if err := r.killOne(); err != nil {
				return err
			}
			kills++
			lastKill = time.Now()
		case done == nJobs:
			// All ended before the last chaos: more jobs would be needed to place it.
			if kills < nKills {
				return fmt.Errorf("all jobs ended after only %d kills: give them more steps", kills)
			}
			if redisRestarts < 2 || apiRestarts < 1 {
				return fmt.Errorf("all jobs ended before every restart (API %d, Redis %d)", apiRestarts, redisRestarts)
			}
		default:
			time.Sleep(20 * time.Millisecond)
		}
	}
	fmt.Printf("chaos: [t=%s] chaos loop over\n", time.Since(began).Round(100*time.Millisecond))
	stopProbe()
	<-probeDone
	stopDeps()
	<-depsDone
	fmt.Printf("chaos: [t=%s] probe and streams stopped\n", time.Since(began).Round(100*time.Millisecond))
	depErr := deps.verdict(ctx)
	fmt.Printf("chaos: [t=%s] deployments verdict done\n", time.Since(began).Round(100*time.Millisecond))
	phaseSecs := map[string][]float64{}
	var runDur, firstStart []float64

	// The verdict, from the API (events) and Redis (statuses).
	lost, duplicated, failed, resumed, badResume := 0, 0, 0, 0, 0
	stepRe := regexp.MustCompile(`step (\d+)`)
	resumeRe := regexp.MustCompile(`from the checkpoint of step (\d+)`)
	agentRe := regexp.MustCompile(`lease expired on (\S+?);`)
	// Goodput: the GPU time that produced the steps kept (each job's steps at the emulated step
	// time, on its GPUs) over the GPU time billed; what the failures cost; and how long a job
	// whose node was killed took to run again and to commit its next checkpoint.
	var billed, useful, gpus float64
	var cleanOverhead []float64 // billed less useful GPU time of the jobs no failure touched: start-up
	var toRunning, toCheckpoint []time.Duration
	for _, id := range ids {
		j, err := getRetry(ctx, user, id)
		if err != nil || !j.Status.Terminal() {
			lost++
			continue
		}
		jobUseful := float64(j.Progress.Step) * r.stepTime.Seconds() * float64(j.Config.Resources.GPUs)
		billed += j.GPUSeconds
		useful += jobUseful
		gpus += float64(j.Config.Resources.GPUs) / float64(len(ids))
		resumedBefore := resumed
		if j.Status == job.Failed {
			failed++
			if failed <= 3 {
				fmt.Printf("chaos: job %s FAILED: %s\n", j.ID, j.Error)
			}
		}
		for _, ph := range j.Progress.Phases {
			phaseSecs[ph.Name] = append(phaseSecs[ph.Name], ph.Seconds)
		}
		evs, err := eventsRetry(ctx, user, id)
		if err != nil {
			return err
		}
		{
			var lastStart, queued time.Time
			for _, e := range evs {
				switch e.Type {
				case "job.queued":
					if queued.IsZero() {
						queued = e.Time
					}
				case "job.started":
					if lastStart.IsZero() && !queued.IsZero() {
						firstStart = append(firstStart, e.Time.Sub(queued).Seconds())
					}
					lastStart = e.Time
				case "job.completed":
					if !lastStart.IsZero() {
						runDur = append(runDur, e.Time.Sub(lastStart).Seconds())
					}
				}
			}
		}
		completions, newest := 0, 0
		for _, e := range evs {
			switch e.Type {
			case "job.completed":
				completions++
			case "job.checkpoint":
				if m := stepRe.FindStringSubmatch(e.Detail); m != nil {
					newest, _ = strconv.Atoi(m[1])
				}
			case "job.retrying":
				resumed++
				if m := agentRe.FindStringSubmatch(e.Detail); m != nil {
					r.mu.Lock()
					at, ok := r.killed[m[1]]
					r.mu.Unlock()
					if ok {
						running, ckpt := nextAfter(evs, e.Seq)
						if !running.IsZero() {
							toRunning = append(toRunning, running.Sub(at))
						}
						if !ckpt.IsZero() {
							toCheckpoint = append(toCheckpoint, ckpt.Sub(at))
						}
					}
				}
				m := resumeRe.FindStringSubmatch(e.Detail)
				if (m == nil && newest != 0) || (m != nil && m[1] != strconv.Itoa(newest)) {
					badResume++
					if badResume <= 3 {
						fmt.Printf("chaos: job %s resumed not from its newest checkpoint (step %d):\n", id, newest)
						for _, e := range evs {
							fmt.Printf("  %d %s %s %s\n", e.Seq, e.Time.Format("15:04:05.000"), e.Type, e.Detail)
						}
					}
				}
			}
		}
		if completions > 1 {
			duplicated++
		}
		if resumed == resumedBefore {
			cleanOverhead = append(cleanOverhead, j.GPUSeconds-jobUseful)
		}
	}
	fmt.Printf("chaos: %d terminal (%d failed), %d runs resumed (%d not from the newest checkpoint), %d stale writes tried, API restarts %d, took %s\n",
		nJobs-lost, failed, resumed, badResume, staleTried.Load(), apiRestarts, time.Since(began).Round(time.Second))
	if billed > 0 && resumed > 0 && len(cleanOverhead) > 0 {
		// What failures cost: the GPU time billed beyond the steps kept, less the start-up every
		// run pays (the mean of the jobs no failure touched).
		start := 0.0
		for _, o := range cleanOverhead {
			start += o / float64(len(cleanOverhead))
		}
		failCost := max(0, billed-useful-start*float64(nJobs-lost))
		perFailure := failCost / float64(resumed)
		fmt.Printf("chaos: goodput %.3f (GPU time that produced the steps kept / GPU time billed: %.0f of %.0f GPU-s; a run's start-up %.1f GPU-s); "+
			"failures cost %.1f%% of the billed time, %.1f GPU-s each (%.1f steps' worth, the restart's start-up included); "+
			"node loss -> running again p50 %s p90 %s, -> next checkpoint p50 %s p90 %s (%d resumes timed)\n",
			useful/billed, useful, billed, start, 100*failCost/billed, perFailure, perFailure/(gpus*r.stepTime.Seconds()),
			pct(toRunning, 50), pct(toRunning, 90), pct(toCheckpoint, 50), pct(toCheckpoint, 90), len(toRunning))
	}
	fmt.Printf("chaos: [t=%s] every job read\n", time.Since(began).Round(100*time.Millisecond))
	stats := func(name string, v []float64) {
		if len(v) == 0 {
			return
		}
		s := slices.Clone(v)
		slices.Sort(s)
		sum := 0.0
		for _, x := range s {
			sum += x
		}
		fmt.Printf("chaos: timing %-28s n=%4d mean=%6.2fs p50=%6.2fs p90=%6.2fs max=%6.2fs\n", name, len(s), sum/float64(len(s)), s[len(s)/2], s[len(s)*9/10], s[len(s)-1])
	}
	for _, n := range []string{"claim", "storage", "sandbox", "restore", "install", "preflight", "inference", "start", "first_step"} {
		stats("phase "+n+" (last run)", phaseSecs[n])
	}
	stats("job.started->job.completed", runDur)
	stats("queued->first job.started", firstStart)
	fmt.Printf("chaos: jobs=%d agent_kills=%d redis_restarts=%d lost=%d duplicated=%d stale_accepted=%d\n",
		nJobs, kills, redisRestarts, lost, duplicated, staleAccepted.Load())
	if lost > 0 || duplicated > 0 || staleAccepted.Load() > 0 || badResume > 0 || failed > 0 {
		return errors.New("the run broke a promise")
	}
	return depErr
}

func waitFor(d time.Duration, cond func() bool) error {
	end := time.Now().Add(d)
	for !cond() {
		if time.Now().After(end) {
			return errors.New("timed out")
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

func getRetry(ctx context.Context, c *client.Client, id string) (*job.Job, error) {
	var j *job.Job
	err := waitFor(30*time.Second, func() bool {
		var err error
		j, err = c.GetJob(ctx, id)
		return err == nil || strings.Contains(err.Error(), "404")
	})
	return j, err
}

func eventsRetry(ctx context.Context, c *client.Client, id string) ([]job.Event, error) {
	var evs []job.Event
	var last error
	if waitFor(30*time.Second, func() bool { evs, last = c.Events(ctx, id, 0); return last == nil }) != nil {
		return nil, last
	}
	return evs, nil
}

// nextAfter is when, after event seq, the job next ran (job.started) and next committed a
// checkpoint (job.checkpoint); zero where it did not.
func nextAfter(evs []job.Event, seq int64) (running, checkpoint time.Time) {
	for _, e := range evs {
		if e.Seq <= seq {
			continue
		}
		if e.Type == "job.started" && running.IsZero() {
			running = e.Time
		}
		if e.Type == "job.checkpoint" && checkpoint.IsZero() && !running.IsZero() {
			checkpoint = e.Time
		}
	}
	return running, checkpoint
}

// pct is a percentile of durations, rounded ("-" for none).
func pct(ds []time.Duration, p int) string {
	if len(ds) == 0 {
		return "-"
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*p/100)].Round(10 * time.Millisecond).String()
}
