package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/failure"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// jobRun is one claimed job on this agent, from its claim to its report. It goes through
// three steps — prepare (restore, render, install, preflight), supervise (serve, run, watch)
// and finalize (commit, collect results, flush) — and ends in a typed outcome.
type jobRun struct {
	deps   runDeps
	phases *phaseClock // its start-up, timed
	// firstStepAfter is the step the run resumed from: the first step past it ends start-up.
	firstStepAfter int
	claim          *job.Claim
	devices        []Device
	ports          upstream.Ports
	dir            string
	log            *slog.Logger
	store          blob.Store
	box            *sandbox.Box  // the job's sandbox; nil where the sandbox is off
	disk           *sandbox.Disk // the job's file system (its folder); nil where it has none
	storage        *storageFault
	// flushFails counts the flushes in a row that failed; at Config.StorageTries the job's
	// storage is taken as refusing it.
	flushFails int
	lease      *leaseKeeper
	data       *streams
	runDir     string    // prime-rl's run folder, once the pipeline is rendered ("" for other kinds)
	watch      *watchdog // an rl or fft run's watch for stalls and collapses, once it runs
	stalled    string    // the stall alert's detail, once the watch raised one
	// limits are the limits of its share of the node the job reached, read from its control
	// group and file system as its sandbox closes (what its failure's analysis rests on).
	limits []string
	// cacheHeld lets go of the node cache's entries the job uses (not evicted meanwhile).
	cacheHeld []func()

	notesMu sync.Mutex
	notes   *os.File // agent.log: what the agent did for the job, shipped with its logs
}

// runDeps is what a job needs of its agent.
type runDeps struct {
	cfg *Config
	// sandbox is the open sandbox the job's processes run in; nil where it is off.
	sandbox *sandbox.Sandbox
	tel     *telemetry
	// freeGPUs gives the job's devices back to the node; safe to call twice.
	freeGPUs func()
	// serving files a serve job's model server where the agent's tunnel finds it (nil: takes
	// it out).
	serving func(id string, s *localServer)
}

// endKind is how a job ended for the agent.
type endKind int

const (
	endCompleted endKind = iota
	endFailed
	endStopped   // the service asked
	endTimeLimit // the job's time limit passed
	endReleased  // the agent is draining: the job goes back to the queue
	endLost      // the lease is someone else's: tell nothing
)

// outcome is how a job ended and what the service is told. A failure also says where the
// attempt stopped and the pipeline's exit status, which its analysis reads (failure.Classify).
type outcome struct {
	kind     endKind
	reason   string
	stage    failure.Stage
	code     int
	analysis *job.FailureAnalysis
}

// failed is a failure before the pipeline ran.
func failed(format string, args ...any) outcome {
	return failedIn(failure.StagePrepare, format, args...)
}

func failedIn(stage failure.Stage, format string, args ...any) outcome {
	return outcome{kind: endFailed, reason: fmt.Sprintf(format, args...), stage: stage}
}

// stoppedReason is the report of a job stopped on request; the service records it STOPPED.
const stoppedReason = "stopped on request"

// report is the call that tells the service: complete, fail, release, or "" for none.
func (o outcome) report() string {
	switch o.kind {
	case endCompleted:
		return "complete"
	case endReleased:
		return "release"
	case endLost:
		return ""
	}
	return "fail"
}

// label names the outcome in the agent's metrics.
func (o outcome) label() string {
	return [...]string{"completed", "failed", "stopped", "failed", "released", "lost"}[o.kind]
}

func (a *Agent) newJobRun(cl *job.Claim, devs []Device, ports upstream.Ports, store blob.Store, creds *grantedCreds, disk *sandbox.Disk) *jobRun {
	dir := a.jobDir(cl.Job.ID)
	if disk == nil {
		_ = os.RemoveAll(dir)
		_ = os.MkdirAll(dir, 0o755)
	}
	for _, d := range sandbox.WritableDirs {
		_ = os.MkdirAll(filepath.Join(dir, d), 0o700)
	}
	log := a.cfg.Logger.With("job", cl.Job.ID, "fence", cl.Lease.Fence, "kind", cl.Job.Kind)
	r := &jobRun{
		claim: cl, devices: devs, ports: ports, dir: dir, disk: disk, log: log, store: store, storage: newStorageFault(),
		deps: runDeps{cfg: &a.cfg, sandbox: a.sandbox, tel: a.tel, freeGPUs: sync.OnceFunc(func() { a.freeDevices(cl.Job.ID, len(devs) == 0) }),
			serving: a.serving},
	}
	r.lease = newLeaseKeeper(a.cfg.API, cl, a.runtime(), creds, log, a.tel)
	// The job's GPU time ends when its GPUs go back, not when its report arrives.
	free := r.deps.freeGPUs
	r.deps.freeGPUs = sync.OnceFunc(func() { r.lease.gpusFreed(time.Now()); free() })
	r.data = &streams{logs: jobdata.NewLogShipper(store, cl.Job.ID, cl.Lease.Fence)}
	r.notes, _ = os.OpenFile(filepath.Join(dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	r.data.logs.File("agent", filepath.Join(dir, "agent.log"))
	r.data.logs.File("install", filepath.Join(dir, "install.log"))
	r.data.logs.File("preflight", filepath.Join(dir, "preflight.log"))
	r.data.logs.File("pipeline", filepath.Join(dir, "pipeline.log"))
	r.data.logs.File("inference", filepath.Join(dir, "inference.log"))
	return r
}

// jobDir is where a job's files are on the node.
func (a *Agent) jobDir(id string) string { return filepath.Join(a.cfg.WorkDir, "jobs", id) }

// note tells the user (agent.log, shipped with the job's logs) and the operator (the agent's
// own log) what the agent did.
func (r *jobRun) note(msg string, args ...any) {
	r.log.Info(msg, args...)
	r.notesMu.Lock()
	defer r.notesMu.Unlock()
	if r.notes == nil {
		return
	}
	line := msg
	for i := 0; i+1 < len(args); i += 2 {
		line += fmt.Sprintf(" %v=%v", args[i], args[i+1])
	}
	fmt.Fprintf(r.notes, "%s INFO %s\n", time.Now().UTC().Format(time.RFC3339Nano), line)
}

// warn is note at WARNING.
func (r *jobRun) warn(msg string) {
	r.log.Warn(msg)
	r.notesMu.Lock()
	defer r.notesMu.Unlock()
	if r.notes != nil {
		fmt.Fprintf(r.notes, "%s WARNING %s\n", time.Now().UTC().Format(time.RFC3339Nano), msg)
	}
}

func (r *jobRun) closeNotes() {
	r.notesMu.Lock()
	defer r.notesMu.Unlock()
	if r.notes != nil {
		r.notes.Close()
		r.notes = nil
	}
}

// baseEnv is what every command of the job gets on top of the agent's environment: its GPUs,
// UTC (prime-rl's and vLLM's log lines carry a time of day only), unbuffered Python output.
func (r *jobRun) baseEnv() []string {
	return append([]string{
		"HOSTEDTRAIN_JOB_ID=" + r.claim.Job.ID, "CUDA_VISIBLE_DEVICES=" + visibleDevices(r.devices),
		"TZ=UTC", "PYTHONUNBUFFERED=1",
	}, r.cacheEnv()...)
}

// pipelineEnv is the pipeline's environment: the base, the job's secrets — which go here and
// nowhere else (not a config file, not a command line, not a log) — and the key of the
// inference server the agent started for it.
func (r *jobRun) pipelineEnv(localKey string) []string {
	names := make([]string, 0, len(r.claim.Secrets))
	for k := range r.claim.Secrets {
		names = append(names, k)
	}
	sort.Strings(names)
	// The secrets first: where a name is also one of the agent's (which the service refuses
	// at submit), the agent's comes later and wins.
	env := make([]string, 0, len(names)+6)
	for _, k := range names {
		if jobspec.ReservedEnv(k) {
			// Refused at submit; one that got here anyway (an older service) is not used.
			r.warn(fmt.Sprintf("secret %s not set: the name is reserved for the service", k))
			continue
		}
		env = append(env, k+"="+r.claim.Secrets[k])
	}
	env = append(env, r.baseEnv()...)
	// An operator's inference endpoint: its key, from the agent's environment, is the one
	// variable of the agent's a pipeline gets.
	if ep := r.deps.cfg.Endpoint; ep != nil && ep.KeyVar != "" {
		if v, ok := os.LookupEnv(ep.KeyVar); ok {
			env = append(env, ep.KeyVar+"="+v)
		}
	}
	if localKey != "" {
		env = append(env, render.LocalKeyVar+"="+localKey)
	}
	if j := r.claim.Judge; j != nil {
		// The job's own token for the service's judge (never the operator's key).
		env = append(env, jobspec.JudgeKeyVar+"="+j.Token)
	}
	return env
}

// runJob runs one claimed job to its report. drain ends when the agent drains.
func (a *Agent) runJob(drain context.Context, r *jobRun) {
	defer os.RemoveAll(r.dir)
	if r.disk != nil {
		defer r.disk.Close() // before the folder is removed: it is the mount point
	}
	defer a.ports.give(r.claim.Job.ID)
	r.note("job claimed", "attempt", r.claim.Job.Attempt, "gpus", visibleDevices(r.devices),
		"ports", fmt.Sprintf("%d-%d", r.ports.Inference(), r.ports.Inference()+upstream.PortBlockSize-1),
		"pipeline", a.cfg.Pipeline.Name, "upstream", a.cfg.Versions.String())

	// The job's own life: heartbeats and storage writes go on through a drain, until the job
	// is handed back or reported.
	life, endLife := context.WithCancel(context.WithoutCancel(drain))
	defer endLife()
	hbCtx, stopHeartbeats := context.WithCancel(life)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		r.lease.run(hbCtx)
	}()

	out := r.execute(drain, life)
	if (out.kind == endFailed || out.kind == endTimeLimit) && out.analysis == nil {
		an := r.analyze(out)
		if suspicious(&an) {
			// The job's logs (or a process that could not start) point at the node: the node's
			// own check decides, never the job's output.
			chk := a.node.check(life)
			judge(&an, chk)
			r.note("the node checked itself", "failed", chk.Failed, "found", strings.Join(chk.Evidence, "; "))
		}
		out.analysis = &an
		r.note("failure analysed", "class", an.Class, "fault", an.Fault, "confidence", an.Confidence, "retry", an.Retryable())
	} else if out.analysis != nil {
		out.analysis.Attempt = r.claim.Job.Attempt
		if r.stalled != "" {
			out.analysis.Evidence = []string{"agent: " + r.stalled}
		}
	}
	stopHeartbeats()
	<-hbDone
	r.closeNotes()
	if how := out.report(); how != "" {
		r.lease.report(life, how, out.reason, out.analysis, a.cfg.ReportTimeout)
	} else {
		r.log.Warn("job abandoned", "reason", out.reason)
		a.node.suspect() // a lost lease: the node checks itself before its next claim
	}
	a.done(r, out.label())
}

// execute prepares and runs the pipeline, and commits what it produced. drain ends when the
// agent drains; ctx is the job's life.
func (r *jobRun) execute(drain, ctx context.Context) outcome {
	defer r.deps.freeGPUs()
	defer func() {
		if r.box != nil {
			r.box.Close()
		}
		r.releaseCache()
	}()
	defer func() { r.limits = r.limitsReached() }() // before the sandbox closes: its counters go with it
	p, out := r.prepare(drain, ctx)
	if p == nil {
		// Whatever was written before the end (install and preflight logs, notes) is the
		// user's to read.
		r.flush(ctx)
		return out
	}
	defer p.stopUploads()
	defer r.keepCompile() // once its processes have ended
	run := r.supervise(drain, ctx, p)
	return r.finalize(drain, ctx, p, run)
}

// limitsReached are the limits of its share of the node the job reached, as the kernel counted
// them: the OOM kills and refused tasks of its control group, and its file system full.
func (r *jobRun) limitsReached() []string {
	var hits []string
	if r.box != nil {
		lim := r.box.Limits()
		if n := r.box.OOMKills(); n > 0 {
			hits = append(hits, fmt.Sprintf("memory: the kernel ended %d of its processes at its limit of %.1f GiB", n, float64(lim.Memory)/(1<<30)))
		}
		if n := r.box.TasksRefused(); n > 0 {
			hits = append(hits, fmt.Sprintf("tasks: %d new processes or threads refused at its limit of %d", n, lim.Tasks))
		}
	}
	if r.disk != nil && r.disk.Full() {
		_, size := r.disk.Space()
		hits = append(hits, fmt.Sprintf("disk: its file system of %.1f GiB is full", float64(size)/(1<<30)))
	}
	return hits
}

// interrupted reports whether the job was stopped or lost, or the agent is draining.
func (r *jobRun) interrupted(drain context.Context) (outcome, bool) {
	return r.causeOf(drain).outcome(r.claim.Job.Config)
}

// errAborted is a wait given up because the job was stopped or lost or the agent drains.
var errAborted = errors.New("aborted")

// flush writes the metrics and log chunks that changed. Whatever fails stays and goes with the
// next flush.
func (r *jobRun) flush(ctx context.Context) {
	tel := r.deps.tel
	err := r.flushMetrics(ctx)
	if rerr := r.shipRollouts(ctx); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if lerr := r.data.logs.Ship(ctx); lerr != nil {
		tel.objectWrites.WithLabelValues("logs", "error").Inc()
		r.log.Warn("store logs; will retry", "err", lerr)
		err = errors.Join(err, lerr)
	} else {
		tel.objectWrites.WithLabelValues("logs", "ok").Inc()
	}
	if r.lease != nil {
		r.lease.loggedBytes(r.data.logs.Stored())
	}
	switch {
	case err == nil:
		r.flushFails = 0
	case ctx.Err() == nil:
		r.flushFails++
		if tries := r.deps.cfg.StorageTries; r.flushFails >= tries {
			r.storage.set("the job's metrics and logs", r.flushFails, err)
		}
	}
}

// shipRollouts stores the rollouts of the steps the trainer has taken.
func (r *jobRun) shipRollouts(ctx context.Context) error {
	if r.data.rollouts == nil {
		return nil
	}
	n, notes, err := r.data.rollouts.ship(ctx, r.data.trained, r.data.ended)
	for _, msg := range notes {
		r.warn(msg)
	}
	if n > 0 {
		r.deps.tel.objectWrites.WithLabelValues("rollouts", "ok").Add(float64(n))
	}
	if err != nil {
		r.deps.tel.objectWrites.WithLabelValues("rollouts", "error").Inc()
		r.log.Warn("store rollouts; will retry", "err", err)
	}
	return err
}

func (r *jobRun) flushMetrics(ctx context.Context) error {
	if r.data.metrics == nil || r.data.metrics.Pending() == 0 {
		return nil
	}
	if err := r.data.metrics.Flush(ctx); err != nil {
		r.deps.tel.objectWrites.WithLabelValues("metrics", "error").Inc()
		r.log.Warn("store metrics; will retry", "err", err)
		return err
	}
	r.deps.tel.objectWrites.WithLabelValues("metrics", "ok").Inc()
	return nil
}

// poll reads new metrics rows into the stream and the heartbeat's summary, and queues the
// checkpoints that are complete.
func (r *jobRun) poll(ctx context.Context) {
	rows, bad, err := r.data.tail.read()
	if err != nil {
		r.log.Warn("read metrics", "err", err)
	}
	for _, n := range bad {
		if n.offset < 0 {
			r.warn(fmt.Sprintf("metrics.jsonl: %v", n.err))
			continue
		}
		r.warn(fmt.Sprintf("metrics.jsonl line at byte %d not stored: %v", n.offset, n.err))
	}
	if len(rows) > 0 {
		for _, msg := range r.data.addRows(rows) {
			r.warn("metrics row not stored: " + msg)
		}
		if r.watch != nil {
			for _, a := range r.watch.rows(rows, time.Now()) {
				r.alert(a)
			}
		}
		sum := r.data.summary
		if sum.Step > r.firstStepAfter {
			r.phases.mark(job.PhaseFirstStep)
		}
		r.lease.setProgress(func(p *job.Progress) {
			p.Step = sum.Step
			p.Metrics = cloneMap(sum.Values)
			p.Series = cloneMap(sum.Series)
		})
	}
	// A new checkpoint: store the metrics up to it first, so that a run resumed from it finds
	// every earlier step's metrics in storage.
	if r.data.uploader != nil && r.data.uploader.scan() {
		_ = r.flushMetrics(ctx)
	}
}

// alert tells the user (agent.log, and an event by the next heartbeat) that the run looks wrong.
func (r *jobRun) alert(a job.Alert) {
	r.warn(a.Type + ": " + a.Detail)
	r.lease.alert(a)
}

// timeLimit is when the agent stops the pipeline itself if the service has not: the job's own
// time limit, counted from the pipeline's start (so a little later than the service counts
// it, from the claim). The service's reaper normally asks first (a heartbeat answered stop);
// this holds when the API cannot be reached.
func (r *jobRun) timeLimit() time.Duration {
	return r.claim.Job.Config.TimeLimitDuration()
}
