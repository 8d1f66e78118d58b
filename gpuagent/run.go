package gpuagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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
	agent *Agent
	claim *job.Claim
	dir   string
	log   *slog.Logger

	uploader *uploader
	metrics  metricsTail
	pending  [][]byte // metrics lines not yet in storage

	mu         sync.Mutex
	running    bool
	progress   job.Progress
	unreported []int // steps committed but not yet acknowledged by a heartbeat

	stopped  chan struct{} // closed when the service says stop
	lost     chan struct{} // closed when the lease is lost
	stopOnce sync.Once
	lostOnce sync.Once
}

func newRun(a *Agent, cl *job.Claim) *run {
	dir := filepath.Join(a.cfg.WorkDir, "jobs", cl.Job.ID)
	_ = os.RemoveAll(dir)
	_ = os.MkdirAll(dir, 0o755)
	r := &run{
		agent: a, claim: cl, dir: dir,
		log:      a.cfg.Logger.With("job", cl.Job.ID, "fence", cl.Lease.Fence),
		progress: job.Progress{MaxSteps: cl.Job.Config.MaxSteps},
		stopped:  make(chan struct{}),
		lost:     make(chan struct{}),
	}
	r.metrics.path = filepath.Join(r.outputDir(), cl.Job.ID, "metrics.jsonl")
	return r
}

func (r *run) outputDir() string     { return filepath.Join(r.dir, "outputs") }
func (r *run) runDir() string        { return filepath.Join(r.outputDir(), r.claim.Job.ID) }
func (r *run) checkpointDir() string { return filepath.Join(r.runDir(), "checkpoints") }

func (r *run) setRunning() {
	r.mu.Lock()
	r.running = true
	r.mu.Unlock()
}

// committed records a newly committed step for the next heartbeat to report.
func (r *run) committed(step int) {
	r.mu.Lock()
	r.unreported = append(r.unreported, step)
	r.mu.Unlock()
}

// acknowledged drops the steps a heartbeat has reported. Steps are committed in ascending
// order, so everything up to the newest one sent is known to the service — even when two
// heartbeats overlap.
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

// heartbeats renews the lease until ctx ends. A failed heartbeat (the API unreachable) is
// retried at the next tick while the pipeline keeps running; a 409 means the lease is lost.
func (r *run) heartbeats(ctx context.Context) {
	t := time.NewTicker(r.heartbeatInterval())
	defer t.Stop()
	for {
		if lost := r.beat(ctx); lost {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// beat sends one heartbeat and acts on the answer; it reports whether the lease is lost.
func (r *run) beat(ctx context.Context) bool {
	p := r.agent.cfg.Pipeline
	running, prog, fresh := r.snapshot()
	rep, err := r.agent.cfg.API.Heartbeat(ctx, r.claim.Job.ID, job.Heartbeat{
		Token: r.claim.Lease.Token, Running: running, Progress: &prog, Checkpoints: fresh,
		Runtime: &job.Runtime{Pipeline: p.Name, Emulated: p.Emulated},
	})
	switch {
	case errors.Is(err, job.ErrLeaseLost):
		r.log.Warn("lease lost; stopping the pipeline")
		r.lostOnce.Do(func() { close(r.lost) })
		return true
	case err != nil:
		if ctx.Err() == nil {
			r.log.Warn("heartbeat failed; the pipeline keeps running", "err", err)
		}
	default:
		r.acknowledged(fresh)
		if rep.Action == job.Stop {
			r.stopOnce.Do(func() { close(r.stopped) })
		}
	}
	return false
}

// poll reads new metrics (and stores them) and queues checkpoints that are complete.
func (r *run) poll(ctx context.Context, final bool) {
	samples, lines, err := r.metrics.read()
	if err != nil {
		r.log.Warn("read metrics", "err", err)
	}
	if len(samples) > 0 {
		r.mu.Lock()
		r.progress.Step = r.metrics.step
		r.progress.Metrics = r.metrics.latest
		r.mu.Unlock()
		r.pending = append(r.pending, lines...)
	}
	r.flushMetrics(ctx)
	r.uploader.scan(final)
}

// flushMetrics stores the metrics lines not yet stored as one chunk named by its step range.
// On failure the lines stay and go with the next chunk.
func (r *run) flushMetrics(ctx context.Context) {
	if len(r.pending) == 0 {
		return
	}
	first, last := stepOf(r.pending[0]), stepOf(r.pending[len(r.pending)-1])
	key := fmt.Sprintf("%smetrics/%08d-%08d.jsonl", blob.JobPrefix(r.claim.Job.ID), first, last)
	body := append(bytes.Join(r.pending, []byte{'\n'}), '\n')
	if err := r.agent.cfg.Store.Put(ctx, key, bytes.NewReader(body)); err != nil {
		r.log.Warn("store metrics", "err", err)
		return
	}
	r.pending = nil
}

func stepOf(line []byte) int {
	var s struct {
		Step int `json:"step"`
	}
	_ = json.Unmarshal(line, &s)
	return s.Step
}

// uploadLogs stores the pipeline's logs under logs/attempt_<fence>/.
func (r *run) uploadLogs(ctx context.Context) {
	prefix := fmt.Sprintf("%slogs/attempt_%d/", blob.JobPrefix(r.claim.Job.ID), r.claim.Lease.Fence)
	files := map[string]string{
		"pipeline.log": filepath.Join(r.dir, "pipeline.log"),
		"install.log":  filepath.Join(r.dir, "install.log"),
	}
	latest := filepath.Join(r.runDir(), "logs", "latest")
	_ = filepath.WalkDir(latest+"/", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(latest, p)
			files[filepath.ToSlash(rel)] = p
		}
		return nil
	})
	for name, p := range files {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		if err := r.agent.cfg.Store.Put(ctx, prefix+name, f); err != nil {
			r.log.Warn("store log", "file", name, "err", err)
		}
		f.Close()
	}
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
	last := ""
	for _, p := range candidates {
		f, err := os.Open(p)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			line := strings.TrimSpace(sc.Text())
			if strings.Contains(line, "ERROR") || strings.Contains(line, "Error") {
				last = line
			}
			if last == "" && filepath.Base(p) == "pipeline.log" && line != "" {
				last = line
			}
		}
		f.Close()
	}
	if last == "" {
		return "no error message in the logs"
	}
	if len(last) > 500 {
		last = last[:500] + "..."
	}
	return last
}

// finish reports the end of the job, retrying while the API is unreachable.
func (r *run) finish(ctx context.Context, completed bool, reason string) {
	_, prog, fresh := r.snapshot()
	o := job.Outcome{Token: r.claim.Lease.Token, Progress: &prog, Checkpoints: fresh, Reason: reason}
	backoff := 500 * time.Millisecond
	for attempt := 1; ; attempt++ {
		var err error
		if completed {
			err = r.agent.cfg.API.Complete(ctx, r.claim.Job.ID, o)
		} else {
			err = r.agent.cfg.API.Fail(ctx, r.claim.Job.ID, o)
		}
		switch {
		case err == nil:
			r.log.Info("job reported", "completed", completed, "reason", reason, "step", prog.Step)
			return
		case errors.Is(err, job.ErrLeaseLost), ctx.Err() != nil, attempt >= 10:
			r.log.Warn("job end not reported", "err", err)
			return
		}
		r.log.Warn("report failed; retrying", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 10*time.Second)
	}
}
