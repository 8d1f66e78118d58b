// Package gpuagent is the long-lived agent on a GPU node. It claims jobs over the API (never
// touching Redis) for the GPUs it has free, and runs each job side by side with the others on
// its own GPUs (CUDA_VISIBLE_DEVICES): it prepares the job (its prime-rl or GEPA config, its
// environments, the newest checkpoint when it resumes), runs the pipeline as a process group,
// heartbeats with the newest metrics, streams metrics and logs to object storage, commits
// checkpoints as they complete, uploads GEPA and eval outputs as artifacts, and reports the
// end.
//
// A heartbeat answered "stop" terminates the pipeline (SIGTERM, a grace period, SIGKILL) and
// reports it; a heartbeat answered 409 means another holder has the job, and the agent stops
// the pipeline without reporting anything. When the agent itself is told to stop (SIGTERM: a
// preemption notice, a deploy), it drains: it claims nothing more, stops its pipelines with
// the same grace, commits the checkpoints they completed and hands the jobs back so they
// resume elsewhere at once.
package gpuagent

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/gpuagent/nodecache"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// API is what the agent needs of the service; client.Client implements it.
type API interface {
	Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error)
	Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error)
	Complete(ctx context.Context, id string, o job.Outcome) error
	Fail(ctx context.Context, id string, o job.Outcome) error
	Release(ctx context.Context, id string, o job.Outcome) error
}

// The agent's defaults, named once: Config takes them where a setting is zero, and
// cmd/gpuagent's flags show them.
const (
	DefaultStopGrace      = 120 * time.Second
	DefaultDrainTimeout   = 5 * time.Minute
	DefaultPollInterval   = time.Second
	DefaultStallFloor     = 10 * time.Minute
	DefaultFlushInterval  = 10 * time.Second
	DefaultReportTimeout  = 15 * time.Minute
	DefaultServeTimeout   = 30 * time.Minute
	DefaultHealthInterval = 10 * time.Minute
	DefaultMaxCPUJobs     = 2
)

// Config configures an Agent.
type Config struct {
	API API
	// GatewayURL is the inference gateway the agent keeps a tunnel to (with GatewayToken, its
	// agent token), through which users reach the serve jobs it runs; "" for none.
	GatewayURL, GatewayToken string
	// ServingEvery is how often a serve job's agent reports what its server holds (default
	// DefaultServingEvery).
	ServingEvery time.Duration
	// Store is the agent's own storage, for claims that carry no storage grant; nil where
	// the service grants job-scoped credentials with every claim.
	Store blob.Store
	// PartSize and Concurrency shape uploads to granted storage (blob's defaults if 0).
	PartSize    int64
	Concurrency int
	WorkDir     string
	Devices     []Device
	Pipeline    render.Pipeline
	// MaxCPUJobs bounds the jobs that need no GPU (evals and GEPA against API models) run at
	// once (default 2); GPU jobs are bounded by the GPUs.
	MaxCPUJobs int
	// ClaimWait is how long one claim waits for work (default job.DefaultClaimWait; the API
	// caps it at its own MaxClaimWait, and the client's timeout must outlast it).
	ClaimWait time.Duration
	// StopGrace is how long a stopped pipeline may take to exit before SIGKILL (default 120 s).
	StopGrace time.Duration
	// DrainTimeout bounds a drain after the pipelines have exited: committing their complete
	// checkpoints and handing the jobs back (default 5 min).
	DrainTimeout time.Duration
	// PollInterval is how often metrics and checkpoints are looked at (default 1 s).
	PollInterval time.Duration
	// FlushInterval is how often metrics and log chunks are written to storage (default 10 s).
	FlushInterval time.Duration
	// ReportTimeout bounds the retries of a job's final report while the API is unreachable
	// (default 15 min); after it the lease lapses and the service requeues the job.
	ReportTimeout time.Duration
	// ServeTimeout bounds the wait for a GEPA or eval job's inference server to answer
	// (loading a model can take minutes; default 30 min).
	ServeTimeout time.Duration
	// PortRange is where jobs get their blocks of ports (default DefaultPortRange).
	PortRange [2]int
	// Versions are the upstream versions installed on the node (read at start); they are
	// reported with each claim and recorded on the jobs. New refuses versions other than the
	// pin unless AllowUnpinned.
	Versions      upstream.Versions
	AllowUnpinned bool
	// Endpoint, when set, serves open-weight models for GEPA and evals instead of a server on
	// the job's GPUs.
	Endpoint *render.Endpoint
	// Providers overrides where provider-hosted models are called (tests); nil for the real
	// providers.
	Providers map[string]upstream.Provider
	// StorageTries is how many times a write to a job's storage is tried (a checkpoint's
	// upload, or a flush of its metrics and logs) before the job fails with the reason
	// (default DefaultStorageTries).
	StorageTries int
	// StallFloor is the shortest wait without a new step that counts as a stall, whatever the
	// job's stall_factor times its median step time (default 10 min).
	StallFloor time.Duration
	// Sandbox runs the job's processes isolated from the node and each other (gpuagent/sandbox);
	// nil runs them as the agent's own user with the node in reach — unsafe with other people's
	// code.
	Sandbox *sandbox.Config
	// Cache is the node's caches that outlive jobs (gpuagent/nodecache): model weights,
	// environment installs, compile caches; nil: none (each job fetches and installs its own).
	Cache *nodecache.Cache
	// HealthQuery is the command that asks the GPU driver how the node's GPUs are (health.go:
	// nvidia-smi with HealthQuery's arguments on a node whose GPUs it lists); nil: the GPUs are
	// not asked (a node of --gpus). KernelLog is the kernel's log the check reads the driver's
	// Xid reports from ("/dev/kmsg" on a node; "": none). HealthInterval is how often the node is
	// checked before a claim when nothing made it look sooner (default 10 min).
	HealthQuery    []string
	KernelLog      string
	HealthInterval time.Duration
	Logger         *slog.Logger
}

func (c *Config) validate() error {
	if c.API == nil || c.WorkDir == "" {
		return errors.New("gpuagent: Config needs API and WorkDir")
	}
	if len(c.Pipeline.RL) == 0 && len(c.Pipeline.GEPA) == 0 && len(c.Pipeline.Eval) == 0 {
		return errors.New("gpuagent: Config.Pipeline has no command")
	}
	c.ClaimWait = cmp.Or(c.ClaimWait, job.DefaultClaimWait)
	c.StopGrace = cmp.Or(c.StopGrace, DefaultStopGrace)
	c.DrainTimeout = cmp.Or(c.DrainTimeout, DefaultDrainTimeout)
	c.PollInterval = cmp.Or(c.PollInterval, DefaultPollInterval)
	c.StallFloor = cmp.Or(c.StallFloor, DefaultStallFloor)
	c.FlushInterval = cmp.Or(c.FlushInterval, DefaultFlushInterval)
	c.ReportTimeout = cmp.Or(c.ReportTimeout, DefaultReportTimeout)
	c.ServeTimeout = cmp.Or(c.ServeTimeout, DefaultServeTimeout)
	c.HealthInterval = cmp.Or(c.HealthInterval, DefaultHealthInterval)
	c.MaxCPUJobs = cmp.Or(c.MaxCPUJobs, DefaultMaxCPUJobs)
	if c.StorageTries <= 0 {
		c.StorageTries = DefaultStorageTries
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Pipeline.Emulated && c.Versions == (upstream.Versions{}) {
		c.Versions = upstream.Pinned() // the emulator mirrors the pin
	}
	if err := upstream.CheckPinned(c.Versions); err != nil && !c.AllowUnpinned {
		return fmt.Errorf("gpuagent: %w; install the pinned versions (infra/gpu-node) or start with --allow-unpinned", err)
	}
	if c.Sandbox != nil {
		c.Sandbox.ReadOnly = append(c.Sandbox.ReadOnly, programs(c.Pipeline)...)
		if c.Endpoint != nil {
			addr, err := hostPort(c.Endpoint.BaseURL)
			if err != nil {
				return fmt.Errorf("gpuagent: the inference endpoint: %w", err)
			}
			c.Sandbox.Allow = append(c.Sandbox.Allow, addr)
		}
		if err := c.Sandbox.Check(); err != nil {
			return fmt.Errorf("gpuagent: %w", err)
		}
	}
	return nil
}

// Agent claims and runs jobs.
type Agent struct {
	cfg   Config
	node  *nodeChecker
	pool  *pool
	ports *portAllocator
	tel   *telemetry

	// sandbox is the open sandbox the jobs run in, while Run runs; nil where Config.Sandbox is.
	sandbox *sandbox.Sandbox

	// heldRefused is set once the API refused what a claim said the node holds (an API older
	// than this agent): claims say nothing of the cache from then on, and still take work.
	heldRefused atomic.Bool

	mu      sync.Mutex
	cpuJobs int
	running map[string]*jobRun
	// servers are the serve jobs' model servers, by job: where the tunnel hands requests.
	servers map[string]*localServer
	// cancelClaim ends the claim in flight, when GPUs come free and a bigger claim can be
	// made (the service hands back a job claimed for a request that has gone).
	cancelClaim context.CancelFunc
	changed     chan struct{} // a job ended: capacity changed
}

// New returns an agent.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(cfg.WorkDir, "jobs"), 0o755); err != nil {
		return nil, fmt.Errorf("gpuagent: %w", err)
	}
	// What jobs leave is read with no link allowed anywhere in the path (nolink): the work
	// folder's own path is made free of links once, here.
	wd, err := filepath.Abs(cfg.WorkDir)
	if err == nil {
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		return nil, fmt.Errorf("gpuagent: %w", err)
	}
	cfg.WorkDir = wd
	a := &Agent{cfg: cfg, pool: newPool(cfg.Devices), node: newNodeChecker(&cfg), ports: newPortAllocator(cfg.PortRange), tel: newTelemetry(),
		running: map[string]*jobRun{}, servers: map[string]*localServer{}, changed: make(chan struct{}, 1)}
	a.tel.setGPUs(a.pool)
	return a, nil
}

// Run claims and runs jobs until ctx ends, then drains: it claims nothing more, stops the
// running pipelines, commits their complete checkpoints and hands their jobs back to the
// queue. It returns once every job is handed back or reported.
func (a *Agent) Run(ctx context.Context) error {
	if c := a.cfg.Sandbox; c != nil {
		// What an agent of this work folder left running when it died ends before any claim.
		sb, err := sandbox.Open(*c, a.cfg.WorkDir, len(a.cfg.Devices), a.cfg.MaxCPUJobs)
		if err != nil {
			return fmt.Errorf("gpuagent: %w", err)
		}
		a.sandbox = sb
		defer sb.Close() // after every job has ended (deferred calls run last first)
	}
	var jobs sync.WaitGroup
	defer jobs.Wait()
	if a.cfg.GatewayURL != "" {
		tunnel, endTunnel := context.WithCancel(ctx)
		defer endTunnel()
		go gateway.Tunnel(tunnel, a.cfg.GatewayURL, a.cfg.GatewayToken, a.tunnelHandler(), a.cfg.Logger, nil)
	}
	if a.cfg.Cache != nil {
		reports, endReports := context.WithCancel(ctx)
		reported := make(chan struct{})
		defer func() { endReports(); <-reported }()
		go func() { defer close(reported); a.cacheReports(reports) }()
	}
	backoff := time.Second
	for ctx.Err() == nil {
		free := a.pool.free()
		gpuFree := 0
		for _, g := range free {
			gpuFree += g.Count
		}
		a.mu.Lock()
		cpuRoom := a.cpuJobs < a.cfg.MaxCPUJobs
		a.mu.Unlock()
		if gpuFree == 0 && !cpuRoom {
			select { // full: wait for a job to end
			case <-ctx.Done():
			case <-a.changed:
			}
			continue
		}
		claimCtx, cancel := context.WithCancel(ctx)
		a.mu.Lock()
		a.cancelClaim = cancel
		a.mu.Unlock()
		rt := a.runtime()
		// A node whose own check fails takes no work: the claim says so, and the service takes
		// the node out of rotation.
		health := a.node.beforeClaim(claimCtx, a.cfg.HealthInterval)
		if health != nil {
			a.cfg.Logger.Error("the node's own check failed; claiming nothing", "evidence", strings.Join(health.Evidence, "; "))
		}
		cl, err := a.cfg.API.Claim(claimCtx, job.ClaimRequest{GPUs: free, Wait: a.cfg.ClaimWait, GPUJobsOnly: !cpuRoom, Runtime: &rt, Health: health,
			Held: a.held()})
		a.mu.Lock()
		a.cancelClaim = nil
		a.mu.Unlock()
		interrupted := claimCtx.Err() != nil
		cancel()
		switch {
		case cl != nil:
			// A job, even if the claim was interrupted after it was made.
		case ctx.Err() != nil, interrupted:
			continue // draining, or GPUs came free: claim again with all of them
		case err != nil && refusedHeld(err) && !a.heldRefused.Swap(true):
			a.tel.claims.WithLabelValues("error").Inc()
			a.cfg.Logger.Warn("the API refused what the node's cache holds (it is older than this agent: upgrade it); claiming without it", "err", err)
			continue
		case err != nil:
			a.tel.claims.WithLabelValues("error").Inc()
			a.cfg.Logger.Warn("claim failed; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		default:
			a.tel.claims.WithLabelValues("empty").Inc()
			a.tel.nodeIdle()
			backoff = time.Second
			continue
		}
		a.tel.claims.WithLabelValues("job").Inc()
		// The claim's stretch: from the service's claim of the job (its clock; a skewed one
		// counts as nothing) to the agent holding the answer.
		start := cl.Job.UpdatedAt
		if now := time.Now(); start.After(now) || now.Sub(start) > time.Minute {
			start = now
		}
		clock := newPhaseClock(start, a.tel)
		clock.mark(job.PhaseClaim)
		r, err := a.admit(ctx, cl, clock)
		if err != nil {
			a.cfg.Logger.Error("claimed job cannot run here; handing it back", "job", cl.Job.ID, "err", err)
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
			if err := a.cfg.API.Release(rctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token, Reason: err.Error()}); err != nil {
				a.cfg.Logger.Error("handing the job back failed; its lease will lapse", "job", cl.Job.ID, "err", err)
			}
			cancel()
			// What made it fail (no free ports, storage) may last: do not claim again at once.
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		jobs.Add(1)
		go func() {
			defer jobs.Done()
			a.runJob(ctx, r)
		}()
	}
	return nil
}

// runtime is what the agent runs jobs with, as the service records it on each job.
func (a *Agent) runtime() job.Runtime {
	v := a.cfg.Versions
	return job.Runtime{Pipeline: a.cfg.Pipeline.Name, Emulated: a.cfg.Pipeline.Emulated, Upstream: &v}
}

// admit gives a claimed job its storage, devices and ports.
func (a *Agent) admit(ctx context.Context, cl *job.Claim, clock *phaseClock) (*jobRun, error) {
	store, creds, err := a.storeFor(ctx, cl)
	if err != nil {
		return nil, err
	}
	ports, err := a.ports.take(cl.Job.ID)
	if err != nil {
		return nil, err
	}
	res := cl.Job.Config.Resources
	devs, ok := a.pool.take(res.GPUType, res.GPUs, cl.Job.ID)
	if !ok {
		a.ports.give(cl.Job.ID)
		return nil, fmt.Errorf("no %d×%s free for the job", res.GPUs, res.GPUType)
	}
	var disk *sandbox.Disk
	if sb := a.sandbox; sb != nil {
		if disk, err = sb.OpenDisk(a.jobDir(cl.Job.ID), len(devs)); err != nil {
			a.pool.give(cl.Job.ID)
			a.ports.give(cl.Job.ID)
			return nil, err
		}
	}
	r := a.newJobRun(cl, devs, ports, store, creds, disk)
	r.phases = clock
	clock.report = func(ps []job.Phase) { r.lease.setProgress(func(p *job.Progress) { p.Phases = ps }) }
	clock.mark(job.PhaseStorage)
	a.mu.Lock()
	a.running[cl.Job.ID] = r
	if len(devs) == 0 {
		a.cpuJobs++
	}
	a.mu.Unlock()
	a.tel.jobsRunning.WithLabelValues(cl.Job.Kind).Inc()
	a.tel.setGPUs(a.pool)
	return r, nil
}

// freeDevices returns a job's GPUs (or its slot of a job without GPUs) to the pool as soon as
// its pipeline exits (its final uploads go on without them) and lets the claim loop use them
// at once: a waiting claim is cut short to ask again with them. It runs once a job (the job's
// freeGPUs).
func (a *Agent) freeDevices(jobID string, cpuJob bool) {
	a.pool.give(jobID)
	a.tel.setGPUs(a.pool)
	a.mu.Lock()
	if cpuJob {
		a.cpuJobs--
	}
	if a.cancelClaim != nil {
		a.cancelClaim()
	}
	a.mu.Unlock()
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// done forgets a job once it is reported.
func (a *Agent) done(r *jobRun, outcome string) {
	r.deps.freeGPUs()
	a.mu.Lock()
	delete(a.running, r.claim.Job.ID)
	a.mu.Unlock()
	a.tel.jobsRunning.WithLabelValues(r.claim.Job.Kind).Dec()
	a.tel.jobsEnded.WithLabelValues(outcome).Inc()
}

// serving files (s non-nil) or takes out a serve job's model server.
func (a *Agent) serving(id string, s *localServer) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s == nil {
		delete(a.servers, id)
		return
	}
	a.servers[id] = s
}

// Running lists the ids of the jobs the agent holds.
func (a *Agent) Running() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	ids := make([]string, 0, len(a.running))
	for id := range a.running {
		ids = append(ids, id)
	}
	return ids
}

// hostPort is the host:port a URL reaches (the scheme's port when it names none).
func hostPort(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "", fmt.Errorf("%q is not a URL", raw)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port := "443"
	if u.Scheme == "http" {
		port = "80"
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// programs are the pipeline's own programs and its prime-rl checkout where they lie outside the
// system folders: the sandbox shows them read-only.
func programs(p render.Pipeline) []string {
	var paths []string
	add := func(p string) {
		if p != "" && filepath.IsAbs(p) && !sandbox.InSystemDirs(p) && !slices.Contains(paths, p) {
			paths = append(paths, p)
		}
	}
	add(p.PrimeRL)
	for _, t := range [][]string{p.RL, p.Preflight, p.GEPA, p.GEPACheck, p.EnvCheck, p.Eval, p.Serve, p.Install} {
		if len(t) > 0 && filepath.IsAbs(t[0]) {
			add(t[0])
		}
	}
	return paths
}
