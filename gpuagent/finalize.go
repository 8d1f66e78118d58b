package gpuagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/failure"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// finalize commits what the run produced and says how it ended. The GPUs go back first: the
// uploads need none. The newest complete checkpoints are committed however the run ended —
// prime-rl exits 1 on SIGTERM, so the exit status says nothing of what is on disk, and
// completeness is read from the checkpoint folders themselves. A GEPA or eval run that
// succeeded has its outputs stored as artifacts and its results turned into job data.
func (r *jobRun) finalize(drain, ctx context.Context, p *prepared, run ran) outcome {
	r.deps.freeGPUs()
	final := ctx
	if run.cause == causeDrain || drain.Err() != nil {
		var cancel context.CancelFunc
		final, cancel = context.WithTimeout(ctx, r.deps.cfg.DrainTimeout)
		defer cancel()
	}
	if run.cause == causeLost {
		o, _ := run.cause.outcome(r.claim.Job.Config)
		return o
	}
	// A lease lost meanwhile (the service ended the job: a stop's grace passed while a write
	// hung, say) ends what is left: the service takes no more of this run, and a store that
	// never answers must not hold the job here for good.
	final, giveUp := context.WithCancel(final)
	defer giveUp()
	go func() {
		select {
		case <-r.lease.lost:
			giveUp()
		case <-final.Done():
		}
	}()
	// A stop asked for while the run's data is read and stored (the run ended by itself first)
	// ends the loops over what the job wrote — metrics read a few MiB at a time, rollouts a step
	// at a time — whose length is the job's to choose: the user asked for the end.
	loops, endLoops := context.WithCancel(final)
	defer endLoops()
	if run.cause != causeStop {
		go func() {
			select {
			case <-r.lease.stopped:
				endLoops()
			case <-loops.Done():
			}
		}()
	}
	r.poll(final)
	for r.data.tail.behind && loops.Err() == nil { // much written at the end: a read at a time
		_ = r.flushMetrics(loops)
		r.poll(loops)
	}
	kind := r.claim.Job.Config.Kind
	evalFailed := ""
	if !jobspec.RunsPrimeRL(kind) && run.started && run.code == 0 && run.cause == causeNone {
		r.uploadArtifacts(final, p.rendered.OutputDir)
		if res, rows := r.collectResults(p.rendered.OutputDir); res != nil {
			evalFailed = failedEvals(res)
			for _, msg := range r.data.addRows(rows) {
				r.warn("result row not stored: " + msg)
			}
			r.lease.setProgress(func(pr *job.Progress) {
				pr.Result = res
				pr.Step, pr.Metrics, pr.Series = r.data.summary.Step, cloneMap(r.data.summary.Values), cloneMap(r.data.summary.Series)
			})
		}
	}
	if r.data.uploader != nil {
		r.data.uploader.wait(final)
	}
	if r.data.rollouts != nil {
		// the run is over: every step it wrote episodes for is whole (or as whole as it gets)
		r.data.trained = max(r.data.trained, r.data.rollouts.lastStep())
		r.data.ended = true
		if err := r.shipRollouts(loops); err != nil && loops.Err() != nil && final.Err() == nil {
			r.warn("the rollouts of the steps left were not stored: the job was stopped while they were")
			r.data.rollouts = nil
		}
	}
	r.flush(final)
	if err := r.storage.get(); err != nil {
		return failedIn(failure.StageStorage, "%v", err)
	}
	if o, ended := run.cause.outcome(r.claim.Job.Config); ended {
		return o
	}
	switch {
	case run.err != nil:
		return failedIn(stageOr(run.err, failure.StageServe), "%s", describeStart(run.err))
	case run.code == 0 && evalFailed != "":
		// verifiers stores a failed model call on its rollout and exits 0.
		return failedIn(failure.StageResults, "%s", evalFailed)
	case run.code == 0:
		return outcome{kind: endCompleted}
	}
	o := failedIn(failure.StagePipeline, "pipeline exited with %s: %s", run.exit, r.lastError(p))
	o.code = run.code
	return o
}

// lastError finds the most telling line for a failure: the newest ERROR (or CRITICAL) line of
// the pipeline's components — prime-rl's trainer, orchestrator and environment servers, the
// inference server — else of the pipeline's own output (the launcher's "X failed with exit
// code 1"), else the last line the pipeline printed.
func (r *jobRun) lastError(p *prepared) string {
	var components []string
	if p != nil {
		components = r.componentLogs(p.rendered.RunDir)
	}
	pipeline := filepath.Join(r.dir, "pipeline.log")
	msg, _ := newestError(components)
	if msg == "" {
		var last string
		msg, last = newestError([]string{pipeline})
		if msg == "" {
			msg = last
		}
	}
	if msg == "" {
		return "no error message in the logs"
	}
	if len(msg) > 500 {
		msg = msg[:500] + "..."
	}
	return msg
}

// componentLogs are the log files of the pipeline's components: prime-rl's trainer,
// orchestrator and environment servers (its newest run's logs), and the inference server.
func (r *jobRun) componentLogs(runDir string) []string {
	var components []string
	if runDir != "" {
		// prime-rl's logs/latest is a link to the newest run's folder beside it; one that
		// leads out of the job's folder is not followed.
		latest, err := filepath.EvalSymlinks(filepath.Join(runDir, "logs", "latest"))
		if err != nil || !strings.HasPrefix(latest, r.dir+"/") {
			latest = ""
		}
		_ = filepath.WalkDir(latest, func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(path, ".log") {
				components = append(components, path)
			}
			return nil
		})
	}
	return append(components, filepath.Join(r.dir, "inference.log"))
}

// newestError is the newest ERROR or CRITICAL line of the files (without its time and level),
// and the last line of the last file.
func newestError(files []string) (msg, last string) {
	var worst *jobdata.LogLine
	for _, f := range files {
		data, err := nolink.ReadFile(f)
		if err != nil {
			continue
		}
		lines := jobdata.ParseLogLines(filepath.Base(f), data, time.Now())
		for i := range lines {
			l := lines[i]
			if l.Level == "ERROR" || l.Level == "CRITICAL" {
				if worst == nil || l.Time == nil || worst.Time == nil || !l.Time.Before(*worst.Time) {
					worst = &lines[i]
				}
			}
		}
		if len(lines) > 0 {
			last = lines[len(lines)-1].Line
		}
	}
	if worst == nil {
		return "", last
	}
	text := strings.TrimSpace(worst.Line)
	if i := strings.Index(text, worst.Level); i >= 0 && i < 24 {
		text = strings.TrimSpace(text[i+len(worst.Level):])
	}
	return text, last
}
