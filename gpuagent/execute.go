package gpuagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// outcome is how a run ended for the agent, and what it tells the service.
type outcome struct {
	how    string // complete, fail, release, or "" (lease lost: tell nothing)
	reason string
}

// runJob runs one claimed job to its report. drain ends when the agent drains.
func (a *Agent) runJob(drain context.Context, r *run) {
	defer os.RemoveAll(r.dir)
	r.note("job claimed", "attempt", r.claim.Job.Attempt, "gpus", visibleDevices(r.devices), "agent_pipeline", a.cfg.Pipeline.Name)

	// The job's own life: heartbeats and storage writes go on through a drain, until the job
	// is handed back or reported.
	life, endLife := context.WithCancel(context.WithoutCancel(drain))
	defer endLife()
	hbCtx, stopHeartbeats := context.WithCancel(life)
	hbDone := make(chan struct{})
	go func() {
		defer close(hbDone)
		r.heartbeats(hbCtx)
	}()

	out := r.execute(drain, life)
	stopHeartbeats()
	<-hbDone
	if r.notes != nil {
		r.notes.Close()
	}
	var label string
	switch out.how {
	case "":
		r.log.Warn("job abandoned", "reason", out.reason)
		label = "lost"
	case "release":
		r.report(life, "release", out.reason)
		label = "released"
	default:
		r.report(life, out.how, out.reason)
		if out.how == "complete" {
			label = "completed"
		} else if out.reason == stoppedReason {
			label = "stopped"
		} else {
			label = "failed"
		}
	}
	a.done(r, label)
}

const stoppedReason = "stopped on request"

// execute prepares and runs the pipeline, and commits what it produced. drain ends when the
// agent drains; ctx is the job's life.
func (r *run) execute(drain, ctx context.Context) outcome {
	a := r.agent
	spec := r.claim.Job.Config
	released := false
	defer func() {
		if !released {
			a.freeDevices(r)
		}
	}()

	// Preparation ends early if the job is stopped or lost or the agent drains.
	prep, endPrep := until(ctx, drain.Done(), r.stopped, r.lost)
	defer endPrep()

	// Checkpoints: commit what the trainer completes; resume from the newest committed one.
	resume := false
	if spec.Kind == jobspec.KindRL {
		committed, err := committedSteps(ctx, r.store, r.claim.Job.ID)
		if err != nil {
			return outcome{how: "fail", reason: "list checkpoints: " + err.Error()}
		}
		keep := jobspec.DefaultKeepCloud
		if spec.Checkpoints != nil {
			keep = spec.Checkpoints.KeepCloud
		}
		up := newUploader(r.store, r.claim.Job.ID, r.checkpointDir(), keep, committed, r.log, r.committed, a.tel)
		r.mu.Lock() // the heartbeats read it
		r.uploader = up
		r.mu.Unlock()
		upCtx, stopUploads := context.WithCancel(ctx)
		defer stopUploads()
		go r.uploader.run(upCtx)
		if len(committed) > 0 {
			began := time.Now()
			step, err := restoreNewest(prep, r.store, r.claim.Job.ID, r.checkpointDir(), r.log)
			if err != nil {
				return r.interruptedOr(drain, outcome{how: "fail", reason: "restore checkpoint: " + err.Error()})
			}
			if step > 0 {
				resume = true
				a.tel.restoreSeconds.Observe(time.Since(began).Seconds())
				r.note("checkpoint restored and verified; the run resumes from it", "step", step, "took", time.Since(began).Round(time.Millisecond))
				// A previous run may have committed it and died before reporting it: report it,
				// so the service's record (and the job's events) know the newest checkpoint.
				r.mu.Lock()
				r.unreported = append(r.unreported, step)
				r.mu.Unlock()
			}
		}
	}
	cmd, err := a.cfg.Pipeline.prepare(r, resume)
	if err != nil {
		return outcome{how: "fail", reason: fmt.Sprintf("prepare the %s pipeline: %v", spec.Kind, err)}
	}
	if un := unmapped(spec); spec.Kind == jobspec.KindRL && len(un) > 0 {
		r.note("these job settings have no prime-rl key and are not applied", "settings", fmt.Sprint(un))
	}
	r.tail.path = cmd.metrics
	if cmd.logs != "" {
		r.logs.dirs = append(r.logs.dirs, cmd.logs)
	}
	if out, stop := r.interrupted(drain); stop {
		return out
	}
	if err := r.installEnvs(prep); err != nil {
		if out, stop := r.interrupted(drain); stop {
			return out
		}
		r.flush(ctx)
		return outcome{how: "fail", reason: err.Error()}
	}
	if out, stop := r.interrupted(drain); stop {
		return out
	}

	proc, err := startProcess(cmd.argv, r.dir, r.env(), filepath.Join(r.dir, "pipeline.log"))
	if err != nil {
		return outcome{how: "fail", reason: "start pipeline: " + err.Error()}
	}
	a.tel.pipelineStarted(time.Now())
	r.note("pipeline started", "argv", fmt.Sprint(cmd.argv), "resume", resume)
	r.setRunning()

	poll := time.NewTicker(a.cfg.PollInterval)
	defer poll.Stop()
	flush := time.NewTicker(a.cfg.FlushInterval)
	defer flush.Stop()
	var limit <-chan time.Time
	if d := r.timeLimit(); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		limit = t.C
	}
	var stopped, draining, timedOut bool
	terminate := func(why string) {
		r.note("terminating the pipeline", "why", why, "grace", a.cfg.StopGrace)
		go proc.terminate(a.cfg.StopGrace)
	}
	drainCh := drain.Done()
	for running := true; running; {
		select {
		case <-proc.done:
			running = false
		case <-poll.C:
			r.poll(ctx, false)
		case <-flush.C:
			r.flush(ctx)
		case <-r.stopped:
			if !stopped {
				stopped = true
				terminate("stop requested")
			}
		case <-limit:
			if !stopped && !timedOut {
				timedOut = true
				terminate("time limit reached")
			}
		case <-drainCh:
			drainCh = nil
			if !stopped && !timedOut {
				draining = true
				terminate("the agent is draining")
			}
		case <-r.lost:
			proc.terminate(10 * time.Second)
			a.tel.pipelineExited(time.Now())
			return outcome{reason: "lease lost: another agent holds the job or it ended"}
		}
	}
	a.tel.pipelineExited(time.Now())
	code := proc.exitCode()
	r.note("pipeline exited", "status", code)
	// The GPUs go back now; the final uploads do not need them.
	a.freeDevices(r)
	released = true

	// A pipeline that ended by itself, or shut down cleanly when asked (status 143 after our
	// SIGTERM), left its newest step folder whole.
	whole := code == 0 || ((stopped || draining || timedOut) && code == 143)
	r.poll(ctx, whole)
	final := ctx
	if draining {
		var cancel context.CancelFunc
		final, cancel = context.WithTimeout(ctx, a.cfg.DrainTimeout)
		defer cancel()
	}
	if spec.Kind != jobspec.KindRL && code == 0 {
		r.uploadArtifacts(final)
	}
	if r.uploader != nil {
		r.uploader.wait(final)
	}
	r.flush(final)
	switch {
	case stopped:
		return outcome{how: "fail", reason: stoppedReason}
	case timedOut:
		return outcome{how: "fail", reason: fmt.Sprintf("the time limit of %s was reached", spec.TimeLimit)}
	case draining:
		return outcome{how: "release", reason: "its agent is draining (node preempted or shut down)"}
	case code == 0:
		return outcome{how: "complete"}
	default:
		return outcome{how: "fail", reason: fmt.Sprintf("pipeline exited with status %d: %s", code, r.lastError())}
	}
}

// interrupted reports whether the job was stopped or lost, or the agent is draining, before
// the pipeline started.
func (r *run) interrupted(drain context.Context) (outcome, bool) {
	select {
	case <-r.lost:
		return outcome{reason: "lease lost"}, true
	case <-r.stopped:
		return outcome{how: "fail", reason: stoppedReason}, true
	default:
	}
	if drain.Err() != nil {
		return outcome{how: "release", reason: "its agent is draining (node preempted or shut down)"}, true
	}
	return outcome{}, false
}

// interruptedOr is the interruption if there was one, else out.
func (r *run) interruptedOr(drain context.Context, out outcome) outcome {
	if o, stop := r.interrupted(drain); stop {
		return o
	}
	return out
}
