package gpuagent

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// leaseKeeper holds a job's lease: it heartbeats with the job's progress until the job is
// reported, hears the service say stop, notices a lost lease, refreshes storage credentials,
// and sends the final report.
type leaseKeeper struct {
	api        API
	jobID      string
	token      string
	interval   time.Duration
	runtime    job.Runtime
	creds      *grantedCreds
	log        *slog.Logger
	tel        *telemetry
	mu         sync.Mutex
	committed  func() []int // the uploader's committed steps, read at each heartbeat (nil for none)
	running    bool
	progress   job.Progress
	unreported []int       // steps committed but not yet acknowledged by a heartbeat
	freedAt    *time.Time  // when the job's GPUs went back to the node (nil: not yet)
	logBytes   int64       // bytes of log written to storage so far (the heartbeat's log_bytes)
	rejected   bool        // the service refused the full heartbeat: send the minimal one
	alerts     []job.Alert // raised and not yet acknowledged by a heartbeat

	stopped     chan struct{} // closed when the service says stop
	released    chan struct{} // closed when the service says release (the node is drained)
	lost        chan struct{} // closed when the lease is lost
	kick        chan struct{} // asks for a heartbeat now
	stopOnce    sync.Once
	releaseOnce sync.Once
	lostOnce    sync.Once
}

func newLeaseKeeper(api API, cl *job.Claim, runtime job.Runtime, creds *grantedCreds, log *slog.Logger, tel *telemetry) *leaseKeeper {
	interval := 10 * time.Second
	if s := cl.HeartbeatIntervalSeconds; s > 0 {
		interval = time.Duration(s * float64(time.Second))
	}
	return &leaseKeeper{
		api: api, jobID: cl.Job.ID, token: cl.Lease.Token, interval: interval, runtime: runtime, creds: creds, log: log, tel: tel,
		progress: job.Progress{MaxSteps: cl.Job.Config.MaxSteps},
		stopped:  make(chan struct{}), released: make(chan struct{}), lost: make(chan struct{}), kick: make(chan struct{}, 1),
	}
}

// setRunning says the pipeline has started: the next heartbeat (sent now) moves the job to
// RUNNING.
func (l *leaseKeeper) setRunning() {
	l.mu.Lock()
	l.running = true
	l.mu.Unlock()
	l.beatNow()
}

// setProgress records what the next heartbeat says of the run.
func (l *leaseKeeper) setProgress(update func(p *job.Progress)) {
	l.mu.Lock()
	update(&l.progress)
	l.mu.Unlock()
}

// beatNow asks for a heartbeat at once.
func (l *leaseKeeper) beatNow() {
	select {
	case l.kick <- struct{}{}:
	default:
	}
}

// loggedBytes records how many bytes of log are in storage; when that grew, the heartbeat goes
// now, so that log followers (who read storage only when it grows) see the lines at once.
func (l *leaseKeeper) loggedBytes(n int64) {
	l.mu.Lock()
	grew := n > l.logBytes
	l.logBytes = max(l.logBytes, n)
	l.mu.Unlock()
	if grew {
		l.beatNow()
	}
}

// reportCommitted makes every later heartbeat report the steps committed() returns.
// gpusFreed records when the job's GPUs went back to the node, for the final report.
func (l *leaseKeeper) gpusFreed(t time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.freedAt == nil {
		l.freedAt = &t
	}
}

func (l *leaseKeeper) reportCommitted(committed func() []int) {
	l.mu.Lock()
	l.committed = committed
	l.mu.Unlock()
}

// alert records an alert for the next heartbeat to carry, and sends that heartbeat now.
func (l *leaseKeeper) alert(a job.Alert) {
	l.mu.Lock()
	l.alerts = append(l.alerts, a)
	l.mu.Unlock()
	l.beatNow()
}

// committedStep records a newly committed step for the next heartbeat to report, and sends
// that heartbeat now: the user hears of the checkpoint (job.checkpoint) without waiting.
func (l *leaseKeeper) committedStep(step int) {
	l.mu.Lock()
	l.unreported = append(l.unreported, step)
	l.mu.Unlock()
	l.beatNow()
}

// acknowledged drops the steps a heartbeat has reported. Steps are committed in ascending
// order, so everything up to the newest one sent is known to the service.
func (l *leaseKeeper) acknowledged(sent []int) {
	if len(sent) == 0 {
		return
	}
	top := sent[len(sent)-1]
	l.mu.Lock()
	l.unreported = slices.DeleteFunc(l.unreported, func(s int) bool { return s <= top })
	l.mu.Unlock()
}

// snapshot is what the next heartbeat or final report says: whether the pipeline runs, its
// progress, and the checkpoint steps committed since the last acknowledged report.
func (l *leaseKeeper) snapshot() (bool, job.Progress, []int) {
	l.mu.Lock()
	committed := l.committed
	l.mu.Unlock()
	var kept []int
	if committed != nil {
		kept = committed()
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	p := l.progress
	p.Metrics = cloneMap(p.Metrics)
	p.Series = cloneMap(p.Series)
	p.Checkpoints = len(kept)
	if len(kept) > 0 {
		p.CheckpointStep = kept[len(kept)-1]
	}
	return l.running, p, slices.Clone(l.unreported)
}

// bare is progress without its metrics and results: what a report the service refused is sent
// again with.
func bare(p job.Progress) *job.Progress {
	return &job.Progress{Step: p.Step, MaxSteps: p.MaxSteps, Checkpoints: p.Checkpoints, CheckpointStep: p.CheckpointStep}
}

func cloneMap[V any](m map[string]V) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// run heartbeats until ctx ends. A heartbeat that does not get through (the API unreachable)
// is retried with a backoff while the pipeline keeps running; what it carried (progress,
// committed steps) goes with the next one. A 409 means the lease is lost.
func (l *leaseKeeper) run(ctx context.Context) {
	failures := 0
	for {
		ok, lost := l.beat(ctx)
		if lost {
			return
		}
		wait := l.interval
		if ok {
			failures = 0
		} else {
			failures++
			wait = min(l.interval, (250*time.Millisecond)<<min(failures, 8))
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-l.kick:
		case <-t.C:
		}
		t.Stop()
	}
}

// beat sends one heartbeat and acts on the answer; it reports whether it got through and
// whether the lease is lost. A heartbeat the service refuses as malformed (any 4xx but 409)
// is logged and sent again without its progress, which renews the lease all the same: a
// report the service cannot take must never cost the job its lease.
func (l *leaseKeeper) beat(ctx context.Context) (ok, lost bool) {
	running, prog, fresh := l.snapshot()
	refresh := l.creds != nil && l.creds.due(time.Now())
	rt := l.runtime
	hb := job.Heartbeat{Token: l.token, Running: running, Progress: &prog, Checkpoints: fresh, Runtime: &rt, StorageRefresh: refresh}
	l.mu.Lock()
	minimal := l.rejected
	hb.LogBytes = l.logBytes
	hb.Alerts = slices.Clone(l.alerts[:min(len(l.alerts), job.MaxAlerts)])
	l.mu.Unlock()
	if minimal {
		hb.Progress = bare(prog)
	}
	rep, err := l.api.Heartbeat(ctx, l.jobID, hb)
	if err != nil && !minimal && refused(err) {
		l.log.Error("the service refused a heartbeat; sending the minimal one from now on", "err", err)
		l.mu.Lock()
		l.rejected = true
		l.mu.Unlock()
		hb.Progress = bare(prog)
		if len(hb.Alerts) > 0 {
			// They may be what the service refused: dropped, so that the rest get through.
			l.mu.Lock()
			l.alerts = l.alerts[len(hb.Alerts):]
			l.mu.Unlock()
			hb.Alerts = nil
		}
		rep, err = l.api.Heartbeat(ctx, l.jobID, hb)
	}
	switch {
	case errors.Is(err, job.ErrLeaseLost):
		l.log.Warn("lease lost; stopping the pipeline")
		l.lostOnce.Do(func() { close(l.lost) })
		return false, true
	case err != nil:
		if ctx.Err() == nil {
			l.tel.heartbeatFails.Inc()
			l.log.Warn("heartbeat failed; the pipeline keeps running", "err", err)
		}
		return false, false
	}
	l.acknowledged(fresh)
	if n := len(hb.Alerts); n > 0 {
		l.mu.Lock()
		l.alerts = l.alerts[n:]
		l.mu.Unlock()
	}
	if rep.Storage != nil && l.creds != nil {
		l.creds.update(rep.Storage, time.Now())
		l.log.Info("storage credentials refreshed", "expire", rep.Storage.Expiration)
	}
	switch rep.Action {
	case job.Stop:
		l.stopOnce.Do(func() { close(l.stopped) })
	case job.Release:
		l.releaseOnce.Do(func() { close(l.released) })
	}
	return true, false
}

// refused reports whether the service answered a request with a client error other than a
// lost lease: the request itself is at fault, and sending it again will not help.
func refused(err error) bool { return errors.Is(err, job.ErrRefused) }

// report sends the end of the job (complete, fail or release), retrying while the API is
// unreachable, up to timeout.
func (l *leaseKeeper) report(ctx context.Context, how, reason string, analysis *job.FailureAnalysis, timeout time.Duration) {
	_, prog, fresh := l.snapshot()
	o := job.Outcome{Token: l.token, Progress: &prog, Checkpoints: fresh, Reason: reason}
	if how == "fail" {
		o.Failure = analysis
	}
	l.mu.Lock()
	o.GPUsFreedAt = l.freedAt
	l.mu.Unlock()
	send := map[string]func(context.Context, string, job.Outcome) error{
		"complete": l.api.Complete, "fail": l.api.Fail, "release": l.api.Release,
	}[how]
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	backoff := 250 * time.Millisecond
	for {
		err := send(ctx, l.jobID, o)
		switch {
		case err == nil:
			l.log.Info("job reported", "as", how, "reason", reason, "step", prog.Step)
			return
		case errors.Is(err, job.ErrLeaseLost), ctx.Err() != nil:
			l.log.Warn("job end not reported", "as", how, "err", err)
			return
		case refused(err) && (o.Progress.Result != nil || len(o.Progress.Metrics) > 0 || len(o.Progress.Series) > 0):
			// A report the service will not take must not keep the job from ending: send it
			// with the bare progress.
			l.log.Error("the service refused the job's report; sending it with the bare progress", "err", err)
			o.Progress = bare(prog)
			continue
		case refused(err):
			l.log.Error("the service refused the job's report", "as", how, "err", err)
			return
		}
		l.log.Warn("report failed; retrying", "as", how, "err", err, "in", backoff)
		select {
		case <-ctx.Done():
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}
