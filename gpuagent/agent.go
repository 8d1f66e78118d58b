// Package gpuagent is the long-lived agent on a GPU node. It claims jobs over the API (never
// touching Redis), prepares each one (its prime-rl config, its environments, the newest
// checkpoint when it resumes), runs the pipeline as a process group, heartbeats with the newest
// metrics, commits checkpoints to object storage as they complete, and reports the end.
//
// A heartbeat answered "stop" terminates the pipeline (SIGTERM, a grace period, SIGKILL) and
// reports it; a heartbeat answered 409 means another holder has the job, and the agent stops
// the pipeline without reporting anything.
package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// API is what the agent needs of the service; client.Client implements it.
type API interface {
	Claim(ctx context.Context, gpus []job.GPU, wait time.Duration) (*job.Claim, error)
	Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error)
	Complete(ctx context.Context, id string, o job.Outcome) error
	Fail(ctx context.Context, id string, o job.Outcome) error
}

// Pipeline says which commands run a job. Templates take {placeholders}: the rl command
// {config}, {output_dir}, {run_name}; the install command {env_id}.
type Pipeline struct {
	// Name is shown to users as the job's runtime.
	Name string
	// Emulated marks the project's emulated prime-rl; users see it on the job.
	Emulated bool
	RL       []string
	// Install runs once per environment before the pipeline; empty skips installation.
	Install []string
}

// DefaultPipeline is real prime-rl, as a GPU node runs it.
func DefaultPipeline() Pipeline {
	return Pipeline{
		Name:    "prime-rl",
		RL:      []string{"uv", "run", "rl", "@", "{config}", "--output-dir", "{output_dir}", "--run.name", "{run_name}"},
		Install: []string{"prime", "env", "install", "{env_id}"},
	}
}

// Config configures an Agent.
type Config struct {
	API      API
	Store    blob.Store
	WorkDir  string
	GPUs     []job.GPU
	Pipeline Pipeline
	// ClaimWait is how long one claim waits for work (default 20 s).
	ClaimWait time.Duration
	// StopGrace is how long a stopped pipeline may take to exit before SIGKILL (default 120 s).
	StopGrace time.Duration
	// PollInterval is how often metrics and checkpoints are looked at (default 1 s).
	PollInterval time.Duration
	Logger       *slog.Logger
}

func (c *Config) validate() error {
	if c.API == nil || c.Store == nil || c.WorkDir == "" {
		return errors.New("gpuagent: Config needs API, Store and WorkDir")
	}
	if len(c.Pipeline.RL) == 0 {
		return errors.New("gpuagent: Config.Pipeline.RL is empty")
	}
	if c.ClaimWait == 0 {
		c.ClaimWait = 20 * time.Second
	}
	if c.StopGrace == 0 {
		c.StopGrace = 120 * time.Second
	}
	if c.PollInterval == 0 {
		c.PollInterval = time.Second
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Agent claims and runs jobs, one at a time.
type Agent struct {
	cfg Config
}

// New returns an agent.
func New(cfg Config) (*Agent, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.WorkDir, 0o755); err != nil {
		return nil, fmt.Errorf("gpuagent: %w", err)
	}
	return &Agent{cfg: cfg}, nil
}

// Run claims and runs jobs until ctx ends. A job in progress when ctx ends has its pipeline
// stopped; its lease then lapses and the job resumes elsewhere.
func (a *Agent) Run(ctx context.Context) error {
	backoff := time.Second
	for ctx.Err() == nil {
		cl, err := a.cfg.API.Claim(ctx, a.cfg.GPUs, a.cfg.ClaimWait)
		if err != nil {
			if ctx.Err() != nil {
				break
			}
			a.cfg.Logger.Warn("claim failed; retrying", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		backoff = time.Second
		if cl == nil {
			continue
		}
		a.runJob(ctx, cl)
	}
	return nil
}

func (a *Agent) gpuCount() int {
	n := 0
	for _, g := range a.cfg.GPUs {
		n += g.Count
	}
	return n
}

func (a *Agent) runJob(ctx context.Context, cl *job.Claim) {
	r := newRun(a, cl)
	r.log.Info("job claimed", "attempt", cl.Job.Attempt, "kind", cl.Job.Kind)
	defer os.RemoveAll(r.dir)

	hbCtx, stopHeartbeats := context.WithCancel(ctx)
	defer stopHeartbeats()
	go r.heartbeats(hbCtx)

	res := r.execute(ctx)
	stopHeartbeats()
	switch {
	case res.abandon:
		r.log.Warn("job abandoned", "reason", res.reason)
	case res.completed:
		r.finish(ctx, true, "")
	default:
		r.finish(ctx, false, res.reason)
	}
}

// result is how a run ended for the agent.
type result struct {
	completed bool
	abandon   bool // lease lost or agent stopping: report nothing
	reason    string
}

func (r *run) execute(ctx context.Context) result {
	a := r.agent
	spec := r.claim.Job.Config
	if spec.Kind != jobspec.KindRL {
		return result{reason: fmt.Sprintf("agent has no %s pipeline configured; it runs rl jobs", spec.Kind)}
	}
	if err := os.MkdirAll(r.outputDir(), 0o755); err != nil {
		return result{reason: "work dir: " + err.Error()}
	}
	cfgPath := filepath.Join(r.dir, "rl.toml")
	cfg, err := renderRLConfig(r.claim.Job.ID, spec, a.gpuCount())
	if err == nil {
		err = os.WriteFile(cfgPath, cfg, 0o644)
	}
	if err != nil {
		return result{reason: "prime-rl config: " + err.Error()}
	}

	committed, err := committedSteps(ctx, a.cfg.Store, r.claim.Job.ID)
	if err != nil {
		return result{reason: "list checkpoints: " + err.Error()}
	}
	upCtx, stopUploads := context.WithCancel(context.WithoutCancel(ctx))
	defer stopUploads()
	up := newUploader(a.cfg.Store, r.claim.Job.ID, r.checkpointDir(), spec.Checkpoints.KeepCloud, committed, r.log, r.committed)
	r.mu.Lock()
	r.uploader = up
	r.mu.Unlock()
	go up.run(upCtx)

	resumeFrom := 0
	if len(committed) > 0 {
		if resumeFrom, err = restoreNewest(ctx, a.cfg.Store, r.claim.Job.ID, r.checkpointDir(), r.log); err != nil {
			return result{reason: "restore checkpoint: " + err.Error()}
		}
	}
	if err := r.installEnvs(ctx); err != nil {
		if res, stopped := r.interrupted(ctx); stopped {
			return res
		}
		return result{reason: err.Error()}
	}
	if res, stopped := r.interrupted(ctx); stopped {
		return res
	}

	argv := expand(a.cfg.Pipeline.RL, map[string]string{
		"config": cfgPath, "output_dir": r.outputDir(), "run_name": r.claim.Job.ID,
	})
	if resumeFrom > 0 {
		argv = append(argv, "--resume")
		r.log.Info("resuming", "from_step", resumeFrom)
	}
	proc, err := startProcess(argv, r.dir, r.env(), filepath.Join(r.dir, "pipeline.log"))
	if err != nil {
		return result{reason: "start pipeline: " + err.Error()}
	}
	r.setRunning()
	r.log.Info("pipeline started", "argv", argv)
	// Say so now rather than at the next tick: a short pipeline may end before it.
	r.beat(ctx)

	tick := time.NewTicker(a.cfg.PollInterval)
	defer tick.Stop()
	stopped := false
	for done := false; !done; {
		select {
		case <-proc.done:
			done = true
		case <-tick.C:
			r.poll(ctx, false)
		case <-r.stopped:
			if !stopped {
				stopped = true
				r.log.Info("stop requested; terminating the pipeline", "grace", a.cfg.StopGrace)
				go proc.terminate(a.cfg.StopGrace)
			}
		case <-r.lost:
			proc.terminate(10 * time.Second)
			return result{abandon: true, reason: "lease lost: another agent holds the job or it ended"}
		case <-ctx.Done():
			proc.terminate(a.cfg.StopGrace)
			return result{abandon: true, reason: "agent shutting down"}
		}
	}
	clean := proc.exitCode() == 0 && !stopped
	r.poll(ctx, clean)
	r.uploader.wait(ctx)
	r.uploadLogs(ctx)
	switch {
	case clean:
		return result{completed: true}
	case stopped:
		return result{reason: "stopped on request"}
	default:
		return result{reason: fmt.Sprintf("pipeline exited with status %d: %s", proc.exitCode(), r.lastError())}
	}
}

// interrupted reports whether the job was stopped or lost, or the agent is stopping.
func (r *run) interrupted(ctx context.Context) (result, bool) {
	select {
	case <-r.lost:
		return result{abandon: true, reason: "lease lost"}, true
	case <-r.stopped:
		return result{reason: "stopped on request"}, true
	default:
	}
	if ctx.Err() != nil {
		return result{abandon: true, reason: "agent shutting down"}, true
	}
	return result{}, false
}

func (r *run) installEnvs(ctx context.Context) error {
	tmpl := r.agent.cfg.Pipeline.Install
	if len(tmpl) == 0 {
		return nil
	}
	for _, e := range r.claim.Job.Config.Env {
		argv := expand(tmpl, map[string]string{"env_id": e.ID})
		if err := runCommand(ctx, argv, r.dir, r.env(), filepath.Join(r.dir, "install.log")); err != nil {
			return fmt.Errorf("install environment %s: %w", e.ID, err)
		}
	}
	return nil
}

// env is what the pipeline gets on top of the agent's environment: the job's secrets go here
// and nowhere else (not the config file, not the command line, not the logs).
func (r *run) env() []string {
	env := []string{"HOSTEDTRAIN_JOB_ID=" + r.claim.Job.ID}
	for k, v := range r.claim.Secrets {
		env = append(env, k+"="+v)
	}
	return env
}
