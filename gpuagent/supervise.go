package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/failure"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// stopCause is why the agent ended a pipeline itself.
type stopCause int

const (
	causeNone      stopCause = iota // it ended by itself
	causeStop                       // the service asked
	causeTimeLimit                  // the job's time limit passed
	causeDrain                      // the agent is draining
	causeLost                       // the lease is lost
	causeStorage                    // the job's storage refuses its writes (finalize fails the job)
	causeStall                      // the run stalled and its job asks for a restart (on_stall)
)

// outcome is the job's end for a run the agent ended (false for causeNone): the one place
// each cause gets its report and reason.
func (c stopCause) outcome(spec jobspec.Spec) (outcome, bool) {
	switch c {
	case causeLost:
		return outcome{kind: endLost, reason: "lease lost: another agent holds the job or it ended"}, true
	case causeStop:
		return outcome{kind: endStopped, reason: stoppedReason}, true
	case causeTimeLimit:
		return outcome{kind: endTimeLimit, reason: fmt.Sprintf("the time limit of %s was reached", spec.TimeLimit), stage: failure.StageTimeLimit}, true
	case causeDrain:
		return outcome{kind: endReleased, reason: "its agent is draining (node preempted or shut down)"}, true
	case causeStall:
		// Read as the platform's: retried on another node from the newest checkpoint, an
		// attempt spent each time, so a run that always hangs ends FAILED at max_attempts.
		return outcome{kind: endFailed, stage: failure.StagePipeline,
			reason: "the run stalled (no new step for far longer than its steps take); on_stall = restart",
			analysis: &job.FailureAnalysis{Class: job.FailStalled, Fault: job.FaultPlatform, Confidence: 0.75,
				Summary: "the run stopped stepping while its processes lived on (a hung collective, a wedged server); on_stall = restart: retried from its newest checkpoint on another node"}}, true
	}
	return outcome{}, false
}

// ran is how the pipeline ended.
type ran struct {
	started bool
	code    int    // exit status; -1 killed by a signal
	exit    string // how it ended, for the job's error: "status 1", "signal killed"
	cause   stopCause
	err     error // it could not start (or its inference server could not)
}

// supervise runs the pipeline: the inference server it needs first (waiting until it
// answers), then the pipeline in its own process group, watched until it exits or the agent
// ends it (a stop, the time limit, a drain: SIGTERM, the grace, SIGKILL; a lost lease: at
// once). Meanwhile its metrics and checkpoints are read and its streams stored (pump).
func (r *jobRun) supervise(drain, ctx context.Context, p *prepared) ran {
	if r.claim.Job.Config.Kind == jobspec.KindServe {
		return r.superviseServe(drain, ctx, p)
	}
	cfg, tel := r.deps.cfg, r.deps.tel
	// The wait for the inference server ends with a stop, a lost lease or a drain.
	waiting, endWait := until(ctx, drain.Done(), r.lease.stopped, r.lease.lost, r.lease.released)
	defer endWait()
	var server *process
	if s := p.rendered.Serve; s != nil {
		var err error
		server, err = r.startServer(ctx, s, p.key, cfg.ServeTimeout, waiting.Done())
		if err != nil {
			return ran{err: err, cause: r.causeOf(drain)}
		}
		r.phases.mark(job.PhaseInference)
		defer func() {
			r.note("stopping the inference server")
			server.terminate(cfg.StopGrace)
		}()
	}

	argv := p.rendered.Command
	proc, err := startProcess(r.box, argv, r.dir, r.pipelineEnv(p.key), filepath.Join(r.dir, "pipeline.log"))
	if err != nil {
		return ran{err: fmt.Errorf("start pipeline: %w", err)}
	}
	tel.pipelineStarted(time.Now())
	r.phases.mark(job.PhaseStart)
	if spec := r.claim.Job.Config; jobspec.RunsPrimeRL(spec.Kind) {
		r.watch = newWatchdog(max(spec.StallFactor, 2), cfg.StallFloor, time.Now())
	}
	r.note("pipeline started", "argv", fmt.Sprint(argv), "resume_step", p.resume)
	r.lease.setRunning()

	// The run's data is read and stored on a goroutine of its own (pump), so that a stop, the
	// pipeline's exit or a lost lease is acted on at once: never behind a slow store or a
	// backlog of rollouts, which a run stepping faster than its data is stored builds up.
	stalls := make(chan struct{}, 1)
	pumpCtx, endPump := context.WithCancel(ctx)
	pumped := make(chan struct{})
	go func() {
		defer close(pumped)
		r.pump(pumpCtx, stalls)
	}()
	defer func() {
		endPump()
		<-pumped
	}()
	var limit <-chan time.Time
	if d := r.timeLimit(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		limit = t.C
	}
	var serverDone <-chan struct{}
	if server != nil {
		serverDone = server.done
	}
	cause := causeNone
	terminate := func(c stopCause, why string) {
		if cause != causeNone {
			return
		}
		cause = c
		r.note("terminating the pipeline", "why", why, "grace", cfg.StopGrace)
		go proc.terminate(cfg.StopGrace)
	}
	// A closed channel is always ready: each of these is read once, then set to nil.
	drainCh, stopCh, storageCh, releaseCh := drain.Done(), r.lease.stopped, r.storage.failed(), r.lease.released
	for running := true; running; {
		select {
		case <-proc.done:
			running = false
		case <-stalls:
			terminate(causeStall, "the run stalled; the job asks for a restart")
		case <-stopCh:
			stopCh = nil
			terminate(causeStop, "stop requested")
		case <-storageCh:
			storageCh = nil
			terminate(causeStorage, r.storage.get().Error())
		case <-limit:
			limit = nil
			terminate(causeTimeLimit, "time limit reached")
		case <-drainCh:
			drainCh = nil
			terminate(causeDrain, "the agent is draining")
		case <-releaseCh:
			releaseCh = nil
			terminate(causeDrain, "the operator drains this node")
		case <-serverDone:
			serverDone = nil
			r.warn("the inference server exited while the pipeline ran")
		case <-r.lease.lost:
			proc.terminate(10 * time.Second)
			tel.pipelineExited(time.Now())
			return ran{started: true, code: proc.exitCode(), cause: causeLost}
		}
	}
	tel.pipelineExited(time.Now())
	code := proc.exitCode()
	r.note("pipeline exited", "how", proc.describeExit())
	return ran{started: true, code: code, exit: proc.describeExit(), cause: cause}
}

// causeOf says why a wait was given up.
func (r *jobRun) causeOf(drain context.Context) stopCause {
	select {
	case <-r.lease.lost:
		return causeLost
	case <-r.lease.stopped:
		return causeStop
	default:
	}
	select {
	case <-r.lease.released:
		return causeDrain
	default:
	}
	if drain.Err() != nil {
		return causeDrain
	}
	return causeNone
}

// describeStart is the failure reason of a pipeline that could not start.
func describeStart(err error) string {
	if errors.Is(err, errAborted) {
		return "stopped before the pipeline started"
	}
	return err.Error()
}

// pump reads the run's metrics and checkpoints every poll interval and stores its streams
// every flush interval, until ctx ends. A stall the watch sees is alerted; where the job asks
// for a restart on a stall, stalls is told. It alone touches the run's data while it runs.
func (r *jobRun) pump(ctx context.Context, stalls chan<- struct{}) {
	cfg := r.deps.cfg
	pollT := time.NewTicker(cfg.PollInterval)
	defer pollT.Stop()
	flushT := time.NewTicker(cfg.FlushInterval)
	defer flushT.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-pollT.C:
			r.poll(ctx)
			if r.watch == nil {
				break
			}
			if a, stalled := r.watch.stall(time.Now()); stalled {
				r.alert(a)
				r.stalled = a.Detail
				if r.claim.Job.Config.OnStall == "restart" {
					select {
					case stalls <- struct{}{}:
					default:
					}
				}
			}
		case <-flushT.C:
			r.flush(ctx)
		}
	}
}
