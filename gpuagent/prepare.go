package gpuagent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/failure"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// prepared is a job ready to run: its files written, environments installed, config checked.
type prepared struct {
	rendered    *render.Rendered
	resume      int
	key         string // the key of the inference server the agent starts for it ("" for none)
	stopUploads context.CancelFunc
}

// prepare gets the job ready: for an rl run, the newest committed checkpoint restored (the
// run resumes from it) and the uploader started; the pipeline's files rendered and written;
// the job's environments installed into prime-rl's Python; the written config checked with
// the installed upstream code. It ends early if the job is stopped or lost or the agent
// drains. On any failure it returns the outcome instead.
func (r *jobRun) prepare(drain, ctx context.Context) (*prepared, outcome) {
	cfg := r.deps.cfg
	spec := r.claim.Job.Config
	p := &prepared{stopUploads: func() {}}
	prep, endPrep := until(ctx, drain.Done(), r.lease.stopped, r.lease.lost, r.lease.released)
	defer endPrep()
	ready := false
	defer func() {
		if !ready {
			p.stopUploads()
		}
	}()
	stopped := func(out outcome) (*prepared, outcome) {
		if o, stop := r.interrupted(drain); stop {
			return nil, o
		}
		return nil, out
	}

	if sb := r.deps.sandbox; sb != nil {
		gpus := make([]int, len(r.devices))
		for i, d := range r.devices {
			gpus[i] = d.Index
		}
		b, err := sb.OpenBox(r.dir, gpus, func(msg string) { r.note(msg) })
		if err != nil {
			return nil, failedIn(failure.StageNode, "sandbox: %v", err)
		}
		r.box = b
		r.phases.mark(job.PhaseSandbox)
	}

	runDir := RunDir(r.dir, r.claim.Job.ID)
	if jobspec.RunsPrimeRL(spec.Kind) {
		committed, err := jobdata.CommittedSteps(ctx, r.store, r.claim.Job.ID)
		if err != nil {
			return nil, failedIn(failure.StageStorage, "list checkpoints: %v", err)
		}
		keep := jobspec.DefaultKeepCloud
		if spec.Checkpoints != nil {
			keep = spec.Checkpoints.KeepCloud
		}
		up := newUploader(r.store, r.claim.Job.ID, jobdata.CheckpointsDir(runDir), keep, committed, r.log, func(step int) {
			r.note("checkpoint committed", "step", step)
			r.lease.committedStep(step)
		}, r.deps.tel)
		up.tries, up.fault, up.maxStep = cfg.StorageTries, r.storage, spec.MaxSteps
		up.onSkip = func(step int) {
			r.warn(fmt.Sprintf("checkpoint of step %d skipped: the trainer completes checkpoints faster than they can be stored", step))
		}
		// A warm start's checkpoint is another job's: restored here, never stored again as this
		// job's own (its first own checkpoint is the next one the trainer writes).
		warm := spec.WarmStart
		if len(committed) > 0 {
			warm = nil // the job has checkpoints of its own by now: it resumes from them
		}
		if warm != nil {
			up.seen[warm.Step] = true
		}
		r.data.uploader = up
		r.lease.reportCommitted(up.committedSteps)
		upCtx, cancelUploads := context.WithCancel(ctx)
		uploading := make(chan struct{})
		go func() {
			defer close(uploading)
			up.run(upCtx)
		}()
		// Stopping the uploads waits for the uploader to let go of the job's folder.
		p.stopUploads = func() { cancelUploads(); <-uploading }
		if len(committed) > 0 {
			began := time.Now()
			step, err := restoreNewest(prep, r.store, r.claim.Job.ID, committed, jobdata.CheckpointsDir(runDir), r.log)
			if err != nil {
				return stopped(failedIn(failure.StageStorage, "restore checkpoint: %v", err))
			}
			r.phases.mark(job.PhaseRestore)
			if step > 0 {
				p.resume = step
				r.deps.tel.restoreSeconds.Observe(time.Since(began).Seconds())
				r.note("checkpoint restored and verified; the run resumes from it", "step", step, "took", time.Since(began).Round(time.Millisecond))
				// A previous run may have committed it and died before reporting it: report it,
				// so the service's record (and the job's events) know the newest checkpoint.
				r.lease.committedStep(step)
			}
		}
		if warm != nil {
			began := time.Now()
			if err := restore(prep, r.store, warm.Job, warm.Step, jobdata.StepDir(jobdata.CheckpointsDir(runDir), warm.Step)); err != nil {
				return stopped(failed("warm start from the checkpoint of job %s at step %d: %v (a checkpoint its job's keep_cloud has since dropped cannot be read)", warm.Job, warm.Step, err))
			}
			p.resume = warm.Step
			r.phases.mark(job.PhaseRestore)
			r.note("warm start: the checkpoint of another job restored and verified; the run resumes from it",
				"job", warm.Job, "step", warm.Step, "took", time.Since(began).Round(time.Millisecond))
		}
	}
	r.data.metrics = jobdata.NewMetricsWriter(r.store, r.claim.Job.ID, r.claim.Lease.Fence, p.resume+1)
	r.firstStepAfter = p.resume

	judgeURL := ""
	if j := r.claim.Judge; j != nil {
		judgeURL = j.URL
	} else if spec.UsesOperatorJudge() {
		return nil, failed("the job is graded by the service's judge, and its claim named none (the service's judge endpoint is no longer configured): restart it, or give it a key for its judge")
	}
	rendered, err := render.Render(render.RenderInput{
		JobID: r.claim.Job.ID, Spec: spec, Secrets: secretNames(r.claim.Secrets), GPUs: len(r.devices),
		Ports: r.ports, Resume: p.resume, Dir: r.dir, Pipeline: cfg.Pipeline, Endpoint: cfg.Endpoint, Providers: cfg.Providers,
		JudgeURL: judgeURL,
	})
	if err != nil {
		return nil, failed("prepare the %s pipeline: %v", spec.Kind, err)
	}
	p.rendered = rendered
	r.runDir = rendered.RunDir
	for _, name := range rendered.FileNames() {
		if err := os.WriteFile(filepath.Join(r.dir, name), rendered.Files[name], 0o644); err != nil {
			return nil, failed("write %s: %v", name, err)
		}
	}
	for _, n := range rendered.Notes {
		r.note(n)
	}
	if rendered.Resolved != nil {
		for _, l := range rendered.Resolved.Lines() {
			r.note(l)
		}
	}
	if rendered.Serve != nil {
		p.key = newKey()
	}
	if rendered.RunDir != "" {
		r.data.tail.path = filepath.Join(rendered.RunDir, "metrics.jsonl")
		r.data.rollouts = &rolloutShipper{store: r.store, jobID: r.claim.Job.ID, dir: filepath.Join(rendered.RunDir, "rollouts"),
			next: p.resume + 1, maxStep: spec.MaxSteps}
		r.data.logs.Dir(filepath.Join(rendered.RunDir, "logs", "latest"))
	}
	if o, stop := r.interrupted(drain); stop {
		return nil, o
	}
	if err := r.fetchModel(prep); err != nil {
		return stopped(failedIn(stageOr(err, failure.StageNode), "model weights: %v", err))
	}
	if err := r.seedCompile(); err != nil {
		return stopped(failedIn(stageOr(err, failure.StageNode), "%v", err))
	}
	cached, installed, err := r.installEnvironments(prep)
	if err != nil {
		return stopped(failedIn(stageOr(err, failure.StageInstall), "%v", err))
	}
	if len(spec.Env) > 0 {
		r.phases.markFrom(job.PhaseInstall, cached, installed)
	}
	if len(rendered.EnvCheck) > 0 {
		if err := r.preflight(prep, rendered.EnvCheck); err != nil {
			return stopped(failedIn(stageOr(err, failure.StagePreflight), "%v", err))
		}
	}
	if len(rendered.Preflight) > 0 {
		if err := r.preflight(prep, rendered.Preflight); err != nil {
			return stopped(failedIn(stageOr(err, failure.StagePreflight), "%v", err))
		}
	}
	if len(rendered.Preflight) > 0 || len(rendered.EnvCheck) > 0 {
		r.phases.mark(job.PhasePreflight)
	}
	if o, stop := r.interrupted(drain); stop {
		return nil, o
	}
	for _, port := range rendered.Ports {
		// In a sandbox the ports are in the job's own network namespace: no one else's.
		if r.box == nil && !portFree(port) {
			return nil, failed("port %d, which the job's config names, is taken on this node", port)
		}
	}
	ready = true
	return p, outcome{}
}

// stageOr is where an attempt stopped with err: the node's stage where the agent could not
// start a process, else stage.
func stageOr(err error, stage failure.Stage) failure.Stage {
	if nodeFailed(err) {
		return failure.StageNode
	}
	return stage
}

// RunDir is where prime-rl writes an rl job's run (--output-dir outputs --run.name JOB).
func RunDir(jobDir, jobID string) string { return filepath.Join(jobDir, "outputs", jobID) }

// preflight checks the written config with the installed upstream code (prime-rl's own config
// loading, or verifiers' GEPA loader) before the pipeline takes any GPU time. A config
// upstream refuses fails the job with upstream's message.
func (r *jobRun) preflight(ctx context.Context, argv []string) error {
	logPath := filepath.Join(r.dir, "preflight.log")
	r.note("checking the config with the installed upstream code", "argv", fmt.Sprint(argv))
	if err := runCommand(ctx, r.box, argv, r.dir, r.baseEnv(), logPath); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		if nodeFailed(err) {
			return err
		}
		if msg := upstreamVerdict(logPath); msg != "" {
			return fmt.Errorf("upstream refused the config before the run: %s", msg)
		}
		return fmt.Errorf("upstream refused the config before the run (%v)%s", err, lastLines(logPath, 12))
	}
	r.note("the config passed upstream's check")
	return nil
}

// upstreamVerdict reads the refusal of a checker that answers as the upstream conformance
// kit's check.py does (a JSON object with ok and errors [{loc, msg}]); "" for other output.
func upstreamVerdict(logPath string) string {
	data, err := os.ReadFile(logPath)
	if err != nil {
		return ""
	}
	var parts []string
	for _, line := range strings.Split(string(data), "\n") {
		var v struct {
			OK     *bool `json:"ok"`
			Errors []struct {
				Loc string `json:"loc"`
				Msg string `json:"msg"`
			} `json:"errors"`
		}
		if json.Unmarshal([]byte(strings.TrimSpace(line)), &v) != nil || v.OK == nil || *v.OK {
			continue
		}
		for _, e := range v.Errors {
			if e.Loc != "" {
				parts = append(parts, e.Loc+": "+e.Msg)
			} else {
				parts = append(parts, e.Msg)
			}
		}
	}
	return strings.Join(parts, "; ")
}

func secretNames(secrets map[string]string) []string {
	names := make([]string, 0, len(secrets))
	for k := range secrets {
		names = append(names, k)
	}
	return names
}
