package gpuagent

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// run is one claimed job on this agent.
type run struct {
	agent   *Agent
	claim   *job.Claim
	devices []Device
	dir     string
	log     *slog.Logger
	notes   *os.File // agent.log: what the agent did for the job, shipped with its logs
	// store is where the job's data goes; creds are the service's grant it is reached with
	// (nil when it is the agent's own store).
	store blob.Store
	creds *grantedCreds

	uploader *uploader
	tail     metricsTail
	metrics  *metricsStream
	logs     *logShipper

	mu         sync.Mutex
	running    bool
	progress   job.Progress
	unreported []int // steps committed but not yet acknowledged by a heartbeat
	cpuFreed   bool  // guarded by agent.mu

	stopped  chan struct{} // closed when the service says stop
	lost     chan struct{} // closed when the lease is lost
	kick     chan struct{} // asks for a heartbeat now
	stopOnce sync.Once
	lostOnce sync.Once
}

func newRun(a *Agent, cl *job.Claim, devs []Device, store blob.Store, creds *grantedCreds) *run {
	dir := filepath.Join(a.cfg.WorkDir, "jobs", cl.Job.ID)
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(dir, 0o755)
	r := &run{
		agent: a, claim: cl, devices: devs, dir: dir, store: store, creds: creds,
		log:      a.cfg.Logger.With("job", cl.Job.ID, "fence", cl.Lease.Fence, "kind", cl.Job.Kind),
		progress: job.Progress{MaxSteps: cl.Job.Config.MaxSteps},
		stopped:  make(chan struct{}),
		lost:     make(chan struct{}),
		kick:     make(chan struct{}, 1),
		metrics:  newMetricsStream(store, cl.Job.ID, cl.Lease.Fence),
		logs:     newLogShipper(store, cl.Job.ID, cl.Lease.Fence),
	}
	r.notes, _ = os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	r.logs.fixed["agent"] = filepath.Join(dir, "agent.log")
	r.logs.fixed["install"] = filepath.Join(dir, "install.log")
	r.logs.fixed["pipeline"] = filepath.Join(dir, "pipeline.log")
	return r
}

func (r *run) outputDir() string     { return filepath.Join(r.dir, "outputs") }
func (r *run) runDir() string        { return filepath.Join(r.outputDir(), r.claim.Job.ID) }
func (r *run) checkpointDir() string { return filepath.Join(r.runDir(), "checkpoints") }

// note tells the user (agent.log, shipped with the job's logs) and the operator (the agent's
// own log) what the agent did.
func (r *run) note(msg string, args ...any) {
	r.log.Info(msg, args...)
	if r.notes != nil {
		line := msg
		for i := 0; i+1 < len(args); i += 2 {
			line += fmt.Sprintf(" %v=%v", args[i], args[i+1])
		}
		fmt.Fprintf(r.notes, "%s INFO %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
	}
}

func (r *run) setRunning() {
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
	r.beatNow()
}

// beatNow asks the heartbeat loop for a heartbeat at once.
func (r *run) beatNow() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// committed records a newly committed step for the next heartbeat to report, and sends that
// heartbeat now: the user hears of the checkpoint (job.checkpoint) without waiting.
func (r *run) committed(step int) {
	r.mu.Lock()
	r.unreported = append(r.unreported, step)
	r.mu.Unlock()
	r.note("checkpoint committed", "step", step)
	r.beatNow()
}

// acknowledged drops the steps a heartbeat has reported. Steps are committed in ascending
// order, so everything up to the newest one sent is known to the service.
func (r *run) acknowledged(sent []int) {
	if len(sent) == 0 {
		return
	}
	top := sent[len(sent)-1]
	r.mu.Lock()
	r.unreported = slices.DeleteFunc(r.unreported, func(s int) bool { return s <= top })
	r.mu.Unlock()
}

// snapshot is what the next heartbeat or final report says: whether the pipeline runs, its
// progress, and the checkpoint steps committed since the last acknowledged report.
func (r *run) snapshot() (bool, job.Progress, []int) {
	r.mu.Lock()
	up := r.uploader
	r.mu.Unlock()
	var kept []int
	if up != nil {
		kept = up.committedSteps()
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.progress
	p.Checkpoints = len(kept)
	if len(kept) > 0 {
		p.CheckpointStep = kept[len(kept)-1]
	}
	return r.running, p, slices.Clone(r.unreported)
}

func (r *run) heartbeatInterval() time.Duration {
	if s := r.claim.HeartbeatIntervalSeconds; s > 0 {
		return time.Duration(s * float64(time.Second))
	}
	return 10 * time.Second
}

// heartbeats renews the lease until ctx ends. A heartbeat that does not get through (the API
// unreachable) is retried with a backoff while the pipeline keeps running; what it carried
// (progress, committed steps) goes with the next one. A 409 means the lease is lost.
func (r *run) heartbeats(ctx context.Context) {
	interval := r.heartbeatInterval()
	failures := 0
	for {
		ok, lost := r.beat(ctx)
		if lost {
			return
		}
		wait := interval
		if ok {
			failures = 0
		} else {
			failures++
			wait = min(interval, (250*time.Millisecond)<<min(failures, 8))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-r.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// beat sends one heartbeat and acts on the answer; it reports whether it got through and
// whether the lease is lost.
func (r *run) beat(ctx context.Context) (ok, lost bool) {
	p := r.agent.cfg.Pipeline
	running, prog, fresh := r.snapshot()
	refresh := r.creds != nil && r.creds.due(time.Now())
	rep, err := r.agent.cfg.API.Heartbeat(ctx, r.claim.Job.ID, job.Heartbeat{
		Token: r.claim.Lease.Token, Running: running, Progress: &prog, Checkpoints: fresh,
		Runtime: &job.Runtime{Pipeline: p.Name, Emulated: p.Emulated}, StorageRefresh: refresh,
	})
	switch {
	case errors.Is(err, job.ErrLeaseLost):
		r.log.Warn("lease lost; stopping the pipeline")
		r.lostOnce.Do(func() { close(r.lost) })
		return false, true
	case err != nil:
		if ctx.Err() == nil {
			r.agent.tel.heartbeatFails.Inc()
			r.log.Warn("heartbeat failed; the pipeline keeps running", "err", err)
		}
		return false, false
	}
	r.acknowledged(fresh)
	if rep.Storage != nil && r.creds != nil {
		r.creds.update(rep.Storage, time.Now())
		r.log.Info("storage credentials refreshed", "expire", rep.Storage.Expiration)
	}
	if rep.Action == job.Stop {
		r.stopOnce.Do(func() { close(r.stopped) })
	}
	return true, false
}

// poll reads new metrics and queues the checkpoints that are complete.
func (r *run) poll(ctx context.Context, final bool) {
	lines, err := r.tail.read()
	if err != nil {
		r.log.Warn("read metrics", "err", err)
	}
	if len(lines) > 0 {
		r.mu.Lock()
		r.progress.Step = r.tail.step
		r.progress.Metrics = r.tail.latest
		r.mu.Unlock()
		r.metrics.addLines(lines)
	}
	// A new checkpoint: store the metrics up to it first, so that a run resumed from it finds
	// every earlier step's metrics in storage.
	if r.uploader != nil && r.uploader.scan(final) {
		r.flushMetrics(ctx)
	}
}

// flush writes the metrics and log chunks that changed. Whatever fails stays and goes with the
// next flush.
func (r *run) flush(ctx context.Context) {
	tel := r.agent.tel
	r.flushMetrics(ctx)
	if err := r.logs.ship(ctx); err != nil {
		tel.objectWrites.WithLabelValues("logs", "error").Inc()
		r.log.Warn("store logs; will retry", "err", err)
	} else {
		tel.objectWrites.WithLabelValues("logs", "ok").Inc()
	}
}

func (r *run) flushMetrics(ctx context.Context) {
	if r.metrics.pending() == 0 {
		return
	}
	if err := r.metrics.flush(ctx); err != nil {
		r.agent.tel.objectWrites.WithLabelValues("metrics", "error").Inc()
		r.log.Warn("store metrics; will retry", "err", err)
		return
	}
	r.agent.tel.objectWrites.WithLabelValues("metrics", "ok").Inc()
}

// lastError finds the most telling line for a failure: the newest ERROR line of the
// pipeline's logs, else the last line it printed.
func (r *run) lastError() string {
	var candidates []string
	_ = filepath.WalkDir(filepath.Join(r.runDir(), "logs", "latest")+"/", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			candidates = append(candidates, p)
		}
		return nil
	})
	candidates = append(candidates, filepath.Join(r.dir, "pipeline.log"))
	last, lastLine := "", ""
	for _, p := range candidates {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.Contains(line, "ERROR") || strings.Contains(line, "Error") {
				last = line
			}
			if filepath.Base(p) == "pipeline.log" && line != "" {
				lastLine = line
			}
		}
		f.Close()
	}
	if last == "" {
		last = lastLine
	}
	if last == "" {
		return "no error message in the logs"
	}
	if len(last) > 500 {
		last = last[:500] + "..."
	}
	return last
}

// report sends the end of the job (complete, fail or release), retrying while the API is
// unreachable, up to ReportTimeout.
func (r *run) report(ctx context.Context, how string, reason string) {
	_, prog, fresh := r.snapshot()
	o := job.Outcome{Token: r.claim.Lease.Token, Progress: &prog, Checkpoints: fresh, Reason: reason}
	api := r.agent.cfg.API
	send := map[string]func(context.Context, string, job.Outcome) error{
		"complete": api.Complete, "fail": api.Fail, "release": api.Release,
	}[how]
	ctx, cancel := context.WithTimeout(ctx, r.agent.cfg.ReportTimeout)
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		err := send(ctx, r.claim.Job.ID, o)
		switch {
		case err == nil:
			r.log.Info("job reported", "as", how, "reason", reason, "step", prog.Step)
			return
		case errors.Is(err, job.ErrLeaseLost), ctx.Err() != nil:
			r.log.Warn("job end not reported", "as", how, "err", err)
			return
		}
		r.log.Warn("report failed; retrying", "as", how, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}

// env is what the pipeline gets on top of the agent's environment: its GPUs, and the job's
// secrets, which go here and nowhere else (not the config file, not the command line, not
// the logs).
func (r *run) env() []string {
	env := []string{"HOSTEDTRAIN_JOB_ID=" + r.claim.Job.ID, "CUDA_VISIBLE_DEVICES=" + visibleDevices(r.devices)}
	for k, v := range r.claim.Secrets {
		env = append(env, k+"="+v)
	}
	return env
}

// installEnvs installs the job's environments with the configured command.
func (r *run) installEnvs(ctx context.Context) error {
	tmpl := r.agent.cfg.Pipeline.Install
	if len(tmpl) == 0 {
		return nil
	}
	spec := r.claim.Job.Config
	ids := make([]string, 0, len(spec.Env))
	for _, e := range spec.Env {
		ids = append(ids, e.ID)
	}
	if spec.Eval != nil {
		for _, e := range spec.Eval.Env {
			if !slices.Contains(ids, e.ID) {
				ids = append(ids, e.ID)
			}
		}
	}
	for _, id := range ids {
		r.note("installing environment", "env", id)
		argv := expand(tmpl, map[string]string{"env_id": id, "id": id}, nil)
		if err := runCommand(ctx, argv, r.dir, r.env(), filepath.Join(r.dir, "install.log")); err != nil {
			return fmt.Errorf("install environment %s: %w", id, err)
		}
	}
	return nil
}

// timeLimit is when the agent stops the pipeline itself if the service has not: the job's
// own time limit, counted from the claim. The service's reaper normally asks first (a
// heartbeat answered stop); this holds when the API cannot be reached.
func (r *run) timeLimit() time.Duration {
	return r.claim.Job.Config.TimeLimitDuration()
}
