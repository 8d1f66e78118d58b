// Package failure reads why an attempt of a job failed: from where it stopped (the stage),
// its exit status and the last lines of its logs, it names a class, whose fault it was and
// how sure the reading is, with the lines it rests on (job.FailureAnalysis). The service
// retries platform faults on another node and never user faults, so a bug does not burn GPU
// hours three times over.
//
// The rules are messages the real tools print — PyTorch's and vLLM's out-of-memory errors,
// NCCL's and torch.distributed's, the CUDA driver's, the prime CLI's install summary,
// prime-rl's "Config file error" — matched newest line first. A message names the class; where
// none matches, the stage the attempt stopped in decides, with less confidence.
package failure

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// Stage is where an attempt stopped.
type Stage string

const (
	StagePrepare   Stage = "prepare"    // before anything of the user's ran: restore, render, ports
	StageInstall   Stage = "install"    // installing the job's environments
	StagePreflight Stage = "preflight"  // upstream's own check of the written config
	StageServe     Stage = "serve"      // starting the inference server
	StagePipeline  Stage = "pipeline"   // the pipeline ran and exited non-zero
	StageResults   Stage = "results"    // the pipeline exited 0 but its results record failures
	StageStorage   Stage = "storage"    // the job's storage refused its writes
	StageTimeLimit Stage = "time_limit" // the job's time limit was reached
	StageNode      Stage = "node"       // the agent could not start the job's processes (the node's doing)
)

// Line is one log line and the log it came from.
type Line struct {
	Log  string // "trainer.log", "install", ...
	Text string
}

// Input is what is known of a failed attempt.
type Input struct {
	Stage    Stage
	ExitCode int    // the pipeline's, where it ran (-1: killed by a signal)
	Reason   string // the one-line reason the agent reports
	Attempt  int
	// Limits are the limits of its share of the node the attempt reached, as the kernel
	// counted them for the job's control group and file system (never read from the job's
	// output): "memory: ...", "tasks: ...", "disk: ...".
	Limits []string
	// Lines are the last lines of the attempt's logs, oldest first within each log.
	Lines []Line
}

// rule is a message that names a class.
type rule struct {
	class      job.FailureClass
	fault      job.Fault
	confidence float64
	re         *regexp.Regexp
	summary    string
	only       Stage // the one stage the rule reads ("": any)
}

func r(class job.FailureClass, fault job.Fault, conf float64, pattern, summary string) rule {
	return rule{class: class, fault: fault, confidence: conf, re: regexp.MustCompile(pattern), summary: summary}
}

// in restricts a rule to one stage: a network error while installing is the index's; while
// the pipeline runs it is something else's.
func (ru rule) in(stage Stage) rule {
	ru.only = stage
	return ru
}

// rules are tried in order; the first that matches any line wins. The more specific come
// first: an out-of-memory error is often followed by NCCL's complaint that a peer went away,
// and both by the launcher's "Trainer failed".
var rules = []rule{
	r(job.FailCUDAOOM, job.FaultUser, 0.95,
		`(?i)(OutOfMemoryError|CUDA out of memory|CUDA error: out of memory|CUBLAS_STATUS_ALLOC_FAILED|No available memory for the cache blocks)`,
		"a GPU ran out of memory: the model, batch size or sequence length is too large for the job's GPUs (lower batch_size, seq_len or max_tokens, or ask for more GPUs)"),
	r(job.FailGPUHardware, job.FaultPlatform, 0.9,
		`(?i)(uncorrectable ECC error|fallen off the bus|\bXid\b|unspecified launch failure|no CUDA-capable device is detected|cudaErrorDevicesUnavailable|CUDA-capable device\(s\) is/are busy or unavailable|GPU is lost)`,
		"a GPU or its driver failed on the node"),
	r(job.FailNCCLNetwork, job.FaultPlatform, 0.85,
		`(?i)(NCCL error|ncclSystemError|ncclInternalError|ncclRemoteError|ncclUnhandledCudaError|Watchdog caught collective operation timeout|DistNetworkError|DistBackendError|RendezvousConnectionError|RendezvousTimeoutError|Network is unreachable)`,
		"the processes of the run lost each other (NCCL or the node's network)"),
	r(job.FailStorage, job.FaultPlatform, 0.85,
		`(?i)(No space left on device|Errno 28|Disk quota exceeded|Read-only file system|Input/output error)`,
		"the node's disk refused a write"),
	r(job.FailConfigRefused, job.FaultUser, 0.95,
		`(Config file error|validation errors? for|ValidationError|is not a valid config|Extra inputs are not permitted)`,
		"upstream refused the job's config before any work (see the evidence for the key)"),
	r(job.FailEnvInstall, job.FaultPlatform, 0.75,
		`(?i)(Temporary failure in name resolution|Could not resolve host|Connection refused|Connection timed out|Read timed out|503 Service Unavailable|502 Bad Gateway|Failed to download)`,
		"an environment could not be downloaded: the network or the package index failed").in(StageInstall),
	r(job.FailEnvInstall, job.FaultUser, 0.85,
		`(Failed to resolve|Unable to resolve installable environments|Installation failed|Failed to install|No solution found when resolving|No matching distribution|Could not import '.*' environment)`,
		"an environment of the job could not be installed: check its id and version on the Environments Hub"),
	r(job.FailUserCode, job.FaultUser, 0.8,
		`(?i)(reward function|rubric|error in (the )?environment|env(ironment)? server .*(error|failed)|in (score|reward|rollout|setup_state|is_completed|env_response))`,
		"the job's own code raised: an environment or its reward function"),
	// A socket torn down is as often a process of the job that died (an environment server a
	// reward function crashed) as the network: a guess, not retried.
	r(job.FailNCCLNetwork, job.FaultPlatform, 0.5,
		`(?i)(Connection reset by peer|Broken pipe|Connection refused)`,
		"a connection between the run's processes broke (the network, or a process of the run that died)"),
}

// stageDefaults read a failure no message explains from where it stopped.
var stageDefaults = map[Stage]struct {
	class      job.FailureClass
	fault      job.Fault
	confidence float64
	summary    string
}{
	StagePreflight: {job.FailConfigRefused, job.FaultUser, 0.8, "upstream's check refused the job's config"},
	StageInstall:   {job.FailEnvInstall, job.FaultUser, 0.6, "an environment of the job could not be installed"},
	StageStorage:   {job.FailStorage, job.FaultPlatform, 0.95, "object storage refused the job's writes"},
	StageTimeLimit: {job.FailTimeLimit, job.FaultUser, 1, "the job's time limit was reached (raise time_limit to run longer)"},
	StageResults:   {job.FailUserCode, job.FaultUser, 0.6, "the run finished but its results record failures (model calls or the environment)"},
	StageServe:     {job.FailUnknown, job.FaultUnknown, 0.4, "the inference server did not start"},
	StagePrepare:   {job.FailUnknown, job.FaultUnknown, 0.3, "the attempt failed before the pipeline started"},
	StagePipeline:  {job.FailUnknown, job.FaultUnknown, 0.3, "the pipeline failed and its logs do not say why in a way the service knows"},
	StageNode:      {job.FailNodeError, job.FaultPlatform, 0.8, "the node could not start the job's processes (the agent's own failure, not the job's): retried on another node"},
}

// MaxEvidence is how many lines an analysis quotes; maxLine how long each may be.
const (
	MaxEvidence = 5
	maxLine     = 300
)

// Classify reads a failed attempt.
func Classify(in Input) job.FailureAnalysis {
	a := job.FailureAnalysis{Attempt: in.Attempt}
	// A limit the kernel enforced on the job is what ended it, whatever its logs say after.
	if len(in.Limits) > 0 {
		a.Class, a.Fault, a.Confidence = job.FailResourceLimit, job.FaultUser, 0.95
		a.Summary = "the job went past its share of the node (" + strings.Join(in.Limits, "; ") +
			"): lower what it uses (data loader workers, environment processes, what it writes) or ask for more GPUs, whose share is larger"
		for _, l := range in.Limits {
			a.Evidence = quote(a.Evidence, "node: "+l)
		}
		return a
	}
	// The stage decides where it always means one thing, whatever the logs say about it.
	switch in.Stage {
	case StageStorage, StageTimeLimit, StageNode:
		d := stageDefaults[in.Stage]
		a.Class, a.Fault, a.Confidence, a.Summary = d.class, d.fault, d.confidence, d.summary
		a.Evidence = quote(nil, in.Reason)
		return a
	}
	// The logs first; the reason (which often repeats a log's last lines) where they say nothing.
	lines := in.Lines
	if matched(&a, in.Stage, lines) {
		return a
	}
	if in.Reason != "" && matched(&a, in.Stage, []Line{{Log: "reason", Text: in.Reason}}) {
		return a
	}
	d, ok := stageDefaults[in.Stage]
	if !ok {
		d = stageDefaults[StagePipeline]
	}
	a.Class, a.Fault, a.Confidence, a.Summary = d.class, d.fault, d.confidence, d.summary
	if in.Stage == StagePipeline && in.ExitCode < 0 {
		a.Summary = "the pipeline was killed by a signal it did not send itself (the node may have run out of memory)"
		a.Class, a.Fault, a.Confidence = job.FailUnknown, job.FaultPlatform, 0.5
	}
	// The newest error lines are the best evidence there is.
	var tail []string
	for i := len(lines) - 1; i >= 0 && len(tail) < 3; i-- {
		if t := lines[i].Text; strings.Contains(t, "ERROR") || strings.Contains(t, "Error") || strings.Contains(t, "error") {
			tail = append(tail, lines[i].Log+": "+t)
		}
	}
	for i := len(tail) - 1; i >= 0; i-- {
		a.Evidence = quote(a.Evidence, tail[i])
	}
	if len(a.Evidence) == 0 {
		a.Evidence = quote(nil, in.Reason)
	}
	return a
}

// matched reads a by the first rule that matches one of the lines, quoting the newest lines
// it matches; it reports whether one did.
func matched(a *job.FailureAnalysis, stage Stage, lines []Line) bool {
	for _, ru := range rules {
		if ru.only != "" && ru.only != stage {
			continue
		}
		var hits []string
		for i := len(lines) - 1; i >= 0 && len(hits) < MaxEvidence; i-- {
			if ru.re.MatchString(lines[i].Text) {
				hits = append(hits, lines[i].Log+": "+lines[i].Text)
			}
		}
		if len(hits) == 0 {
			continue
		}
		a.Class, a.Fault, a.Confidence, a.Summary = ru.class, ru.fault, ru.confidence, ru.summary
		for i := len(hits) - 1; i >= 0; i-- {
			a.Evidence = quote(a.Evidence, hits[i])
		}
		return true
	}
	return false
}

// NodeLost is the reading of an attempt whose agent went silent.
func NodeLost(agent string, attempt int) job.FailureAnalysis {
	return job.FailureAnalysis{Class: job.FailNodeLost, Fault: job.FaultPlatform, Confidence: 0.9, Attempt: attempt,
		Summary:  "the node running the job stopped answering (its lease lapsed)",
		Evidence: []string{fmt.Sprintf("service: no heartbeat from %s before its lease ran out", agent)}}
}

// quote adds a line of evidence: its first line, cut to maxLine.
func quote(ev []string, s string) []string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	s = strings.TrimSpace(s)
	if s == "" || len(ev) >= MaxEvidence {
		return ev
	}
	if len(s) > maxLine {
		s = strings.ToValidUTF8(s[:maxLine], "") + "..."
	}
	return append(ev, s)
}
