// Package job holds the plain types and sentinel errors that the API, the queue and the GPU
// agent all speak. It exists so that none of those packages has to import another to agree
// on what a job, a lease or an event is; it depends on nothing but jobspec and upstream.
package job

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Status is where a job is in its life. The names match the `prime` CLI's run states.
type Status string

// The states of a job. QUEUED → PENDING (claimed, starting) → RUNNING → one of the three
// terminal states. A lapsed lease sends PENDING or RUNNING back to QUEUED.
const (
	Queued    Status = "QUEUED"
	Pending   Status = "PENDING"
	Running   Status = "RUNNING"
	Completed Status = "COMPLETED"
	Failed    Status = "FAILED"
	Stopped   Status = "STOPPED"
)

// Terminal reports whether a job in this state will never change again on its own.
func (s Status) Terminal() bool {
	return s == Completed || s == Failed || s == Stopped
}

// DefaultClaimWait is how long a claim waits for work by default: the agent's ask and the
// queue's cap agree on it, and an HTTP client that claims must outlast it
// (client.DefaultTimeout).
const DefaultClaimWait = 20 * time.Second

// Sentinel errors shared across packages; callers test them with errors.Is.
var (
	// ErrNotFound: no such job (or one the caller may not see, which reads the same).
	ErrNotFound = errors.New("job not found")
	// ErrLeaseLost: the caller's lease token is not the job's current one.
	ErrLeaseLost = errors.New("lease lost: the job is held under another lease or no longer running")
	// ErrConflict: the job is in a state where the request makes no sense (e.g. cancel a
	// completed job).
	ErrConflict = errors.New("job state conflict")
	// ErrExists: a job with this id already exists.
	ErrExists = errors.New("job already exists")
	// ErrRefused: the service refused the request itself (a client error other than a lost
	// lease, a conflict, a timeout or a rate limit): sending it again will not help.
	ErrRefused = errors.New("the service refused the request")
)

// LimitError is a submission past one of its organization's limits.
type LimitError struct {
	Org     string
	Limit   string // "queued", or "bytes": what it holds in the job store
	Current int
	Max     int
}

func (e *LimitError) Error() string {
	if e.Limit == "bytes" {
		return fmt.Sprintf("organization %s holds %d bytes in the job store, its limit is %d", e.Org, e.Current, e.Max)
	}
	return fmt.Sprintf("organization %s has %d jobs %s, its limit is %d", e.Org, e.Current, e.Limit, e.Max)
}

// IdempotencyConflictError is an Idempotency-Key used before with another body.
type IdempotencyConflictError struct {
	JobID string
}

func (e *IdempotencyConflictError) Error() string {
	return "idempotency key already used with another body, for job " + e.JobID
}

// Position is where a QUEUED job stands.
type Position struct {
	RunsAhead int
	Reason    string
}

// OrgSettings are an organization's share of the queue. Zero values take the service's
// defaults (weight 1; the configured limits).
type OrgSettings struct {
	Weight     float64 `json:"weight,omitempty"`
	MaxRunning int     `json:"max_running,omitempty"`
	MaxQueued  int     `json:"max_queued,omitempty"`
	// MonthlyGPUHours is the organization's monthly budget of GPU time (UTC months); 0 for none.
	MonthlyGPUHours float64 `json:"monthly_gpu_hours,omitempty"`
	// CheckpointTTLDays is how long the checkpoints of its jobs are kept after the jobs end
	// (pinned ones always); 0 for as long as the jobs are.
	CheckpointTTLDays int `json:"checkpoint_ttl_days,omitempty"`
}

// OrgStatus is an organization's settings in effect and what it uses now.
type OrgStatus struct {
	Org         string  `json:"org"`
	Weight      float64 `json:"weight"`
	MaxRunning  int     `json:"max_running"`
	MaxQueued   int     `json:"max_queued"`
	Queued      int     `json:"queued"`
	Running     int     `json:"running"`
	RunningGPUs int     `json:"running_gpus"`
	// UsageGPUHours is GPU time used, decayed with the configured half-life: what the fair
	// share weighs.
	UsageGPUHours float64 `json:"usage_gpu_hours"`
	// GPUSeconds is all the GPU time the organization's jobs have held, not decayed.
	GPUSeconds float64 `json:"gpu_seconds"`
	// MonthlyGPUHours is its monthly budget (0: none); MonthGPUHours what it has spent in this
	// UTC month (GPU time charged: a running job's a lease quantum ahead); BudgetHeld says the
	// budget is spent and nothing of the organization runs until it is raised or the month ends.
	MonthlyGPUHours float64 `json:"monthly_gpu_hours,omitempty"`
	MonthGPUHours   float64 `json:"month_gpu_hours"`
	BudgetHeld      bool    `json:"budget_held,omitempty"`
	// CheckpointTTLDays is its checkpoint TTL (OrgSettings'); 0 for none.
	CheckpointTTLDays int `json:"checkpoint_ttl_days,omitempty"`
	// StorageBytes is what its jobs keep in object storage (checkpoints, metrics, logs,
	// artifacts, rollouts), as the storage meter last measured it (queue/storage.go).
	StorageBytes int64 `json:"storage_bytes"`
	// JobStoreBytes is what its jobs hold in the service's job store (Redis) by its count: live
	// jobs' configs and secrets, every job's record and events; past JobStoreLimitBytes (0:
	// none) a submit or restart is refused.
	JobStoreBytes      int64 `json:"job_store_bytes"`
	JobStoreLimitBytes int64 `json:"job_store_limit_bytes,omitempty"`
}

// ListFilter narrows a job listing; zero fields do not filter.
type ListFilter struct {
	Statuses []Status
	Kind     string
	// CreatedAfter (inclusive) and CreatedBefore (exclusive) bound the creation time.
	CreatedAfter, CreatedBefore time.Time
}

// Job is one submitted job and everything the service knows of it. Secrets never appear here.
type Job struct {
	ID          string       `json:"id"`
	Org         string       `json:"org"`
	Kind        string       `json:"kind"`
	Name        string       `json:"name,omitempty"`
	Status      Status       `json:"status"`
	Config      jobspec.Spec `json:"config"`
	Attempt     int          `json:"attempt"`
	MaxAttempts int          `json:"max_attempts"`
	// Run is how many times the job has been claimed (its lease fence): its logs are kept per
	// run, and `logs --attempt N` reads run N. Attempt counts only the runs its retries spent
	// since it was last restarted, so the two differ after a restart or a hand-back.
	Run   int    `json:"run,omitempty"`
	Error string `json:"error,omitempty"`
	// FailureAnalysis is why its newest failed attempt failed: on a FAILED job, and on a job
	// queued again after a platform fault (until a restart).
	FailureAnalysis *FailureAnalysis `json:"failure_analysis,omitempty"`
	// StopRequested is set when a user stopped a job that an agent holds; the agent hears of
	// it on its next heartbeat.
	StopRequested bool     `json:"stop_requested,omitempty"`
	Progress      Progress `json:"progress"`
	Runtime       *Runtime `json:"runtime,omitempty"`
	// RunsAhead and QueueReason say where a QUEUED job stands and why it waits.
	RunsAhead   *int   `json:"runs_ahead,omitempty"`
	QueueReason string `json:"queue_reason,omitempty"`
	// RetryAt is when a job waiting out a retry backoff becomes claimable again.
	RetryAt *time.Time `json:"retry_at,omitempty"`
	// ResumeStep is the checkpoint a requeued or restarted job resumes from (0: the start).
	ResumeStep int `json:"resume_step,omitempty"`
	// GPUSeconds is the GPU time the job has held, over all its runs (GPUs × time claimed).
	GPUSeconds float64 `json:"gpu_seconds"`
	// BudgetGPUSeconds is the GPU time it may use over all its runs (0: no budget).
	BudgetGPUSeconds float64    `json:"budget_gpu_seconds,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	StartedAt        *time.Time `json:"started_at,omitempty"`
	FinishedAt       *time.Time `json:"finished_at,omitempty"`
	// LogBytes is how many bytes of log the current attempt's agent says it has stored: log
	// followers read storage when it grows. Not part of the API's answer.
	LogBytes int64 `json:"-"`
	// CreatedBy is the subject of the token that submitted the job, TokenID that token's id
	// (its jti, by which it is revoked): usage is reported by both.
	CreatedBy string `json:"created_by,omitempty"`
	TokenID   string `json:"token_id,omitempty"`
	// HoldGPUSeconds is the GPU time of the hold the job has now (0 when none): the part of
	// GPUSeconds not yet in its organization's usage counters. Not part of the API's answer.
	HoldGPUSeconds float64 `json:"-"`
}

// UsageShare is what one user or one token of an organization has used: GPU time, and its cost
// where the operator prices the models it ran.
type UsageShare struct {
	Who        string  `json:"who"`
	GPUSeconds float64 `json:"gpu_seconds"`
	CostUSD    float64 `json:"cost_usd,omitempty"`
}

// Progress is what the agent last reported of a running pipeline.
type Progress struct {
	Step     int `json:"step"`
	MaxSteps int `json:"max_steps"`
	// Metrics are the newest values of the headline series, by prime-rl's names (a bounded
	// summary: every metric of every step is in the job's metrics).
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Series says which of prime-rl's names holds each headline series (reward, loss, ...)
	// in this job (see jobdata.Headline).
	Series         map[string]string `json:"series,omitempty"`
	CheckpointStep int               `json:"checkpoint_step,omitempty"`
	Checkpoints    int               `json:"checkpoints"`
	// Result is what a GEPA or eval job produced, once it has.
	Result *Result `json:"result,omitempty"`
	// Phases are the current run's start-up, each stretch as its agent timed it, in order:
	// from the claim to the first step (or a model server's first adapter loaded).
	Phases []Phase `json:"phases,omitempty"`
}

// Phase is one stretch of a run's start-up.
type Phase struct {
	Name    string  `json:"name"`
	Seconds float64 `json:"seconds"`
	// Cached: the node's cache served it (weights not downloaded, environments not installed).
	Cached bool `json:"cached,omitempty"`
	// Bytes is what the stretch fetched (weights) or installed (environments).
	Bytes int64 `json:"bytes,omitempty"`
}

// The phases of a run's start-up, as they come: the claim's round trip; the job's storage,
// ports, GPUs and disk; its sandbox; its newest checkpoint restored; its model's weights on the
// node (from the node's cache, or fetched into it); its environments installed; the preflight checks; its inference server healthy; its pipeline started; its
// first step (a model server: its first adapter loaded).
const (
	PhaseClaim      = "claim"
	PhaseStorage    = "storage"
	PhaseSandbox    = "sandbox"
	PhaseRestore    = "restore"
	PhaseWeights    = "weights"
	PhaseInstall    = "install"
	PhasePreflight  = "preflight"
	PhaseInference  = "inference"
	PhaseStart      = "start"
	PhaseFirstStep  = "first_step"
	PhaseFirstModel = "first_model"
)

// Result is the outcome of a GEPA or eval job, as job data (its files are its artifacts).
type Result struct {
	Eval []EvalSummary `json:"eval,omitempty"`
	GEPA *GEPASummary  `json:"gepa,omitempty"`
}

// EvalSummary is one environment's evaluation: what verifiers' eval wrote in metadata.json.
type EvalSummary struct {
	Env                string   `json:"env"`
	Model              string   `json:"model,omitempty"`
	NumExamples        int      `json:"num_examples"`
	RolloutsPerExample int      `json:"rollouts_per_example"`
	Rollouts           int      `json:"rollouts,omitempty"`
	AvgReward          *float64 `json:"avg_reward,omitempty"`
	// AvgError is the share of rollouts that ended in an error (verifiers stores a failed
	// model call on its rollout and goes on); FirstError is the first of them.
	AvgError   *float64           `json:"avg_error,omitempty"`
	FirstError string             `json:"first_error,omitempty"`
	AvgMetrics map[string]float64 `json:"avg_metrics,omitempty"`
	// Rewards is the distribution of the scored rollouts' rewards (results.jsonl).
	Rewards *Distribution `json:"rewards,omitempty"`
}

// Distribution is a histogram of one value (rewards, advantages) over a set of rollouts.
type Distribution struct {
	Count int     `json:"count"`
	Mean  float64 `json:"mean"`
	Std   float64 `json:"std"`
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Bins  []Bin   `json:"bins"`
}

// Bin is one bar of a histogram: the values in [Min, Max) (the last bin includes Max).
type Bin struct {
	Min   float64 `json:"min"`
	Max   float64 `json:"max"`
	Count int     `json:"count"`
}

// GEPASummary is a GEPA optimization's outcome: its best prompt and score.
type GEPASummary struct {
	BestScore   *float64 `json:"best_score,omitempty"`
	BestPrompt  string   `json:"best_prompt,omitempty"`
	Candidates  int      `json:"candidates"`
	MetricCalls int      `json:"metric_calls,omitempty"`
	// PromptTruncated says BestPrompt was cut to MaxPromptBytes; the whole prompt is the
	// artifact system_prompt.txt.
	PromptTruncated bool `json:"prompt_truncated,omitempty"`
	// Pareto is GEPA's Pareto frontier (pareto_frontier.jsonl): per validation row, the best
	// score any candidate reached on it and the candidates that reached it; the first
	// MaxParetoRows rows of ParetoRows.
	Pareto     []ParetoRow `json:"pareto,omitempty"`
	ParetoRows int         `json:"pareto_rows,omitempty"`
}

// ParetoRow is one validation row of GEPA's Pareto frontier.
type ParetoRow struct {
	Row        int     `json:"row"`
	BestScore  float64 `json:"best_score"`
	Candidates []int   `json:"candidates"`
}

// MaxParetoRows bounds the Pareto frontier kept as job data; the whole of it is the artifact
// pareto_frontier.jsonl. MaxParetoCandidates bounds the candidates named on a row.
const (
	MaxParetoRows       = 64
	MaxParetoCandidates = 8
)

// MaxPromptBytes bounds a GEPA result's best prompt as job data.
const MaxPromptBytes = 16 << 10

// Runtime says who runs the job and with what.
type Runtime struct {
	AgentID  string `json:"agent_id,omitempty"`
	Pipeline string `json:"pipeline,omitempty"`
	// Emulated is true when the pipeline is the project's emulated prime-rl, not a real one.
	Emulated bool `json:"emulated,omitempty"`
	// Upstream are the versions of prime-rl, verifiers and the prime CLI the agent runs.
	Upstream *upstream.Versions `json:"upstream,omitempty"`
}

// Lease is an agent's right to run a job. Every agent write carries Token; Fence grows with
// every claim of the job, so a newer holder always has a larger one.
type Lease struct {
	Token     string    `json:"token"`
	Fence     int64     `json:"fence"`
	ExpiresAt time.Time `json:"expires_at"`
}

// ClaimRequest is what an idle agent asks for.
type ClaimRequest struct {
	AgentID string
	GPUs    []GPU
	// Wait bounds how long a claim may wait for a job to arrive when none is queued.
	Wait time.Duration
	// GPUJobsOnly skips jobs that need no GPU: the agent runs as many of those as it will.
	GPUJobsOnly bool
	// ClaimID names this claim, so that an agent that gives up waiting for the answer can
	// take it back (abandon it) whether or not it was made; "" for none.
	ClaimID string
	// Runtime says what the agent runs jobs with (its pipeline, the upstream versions it found
	// installed). It travels with every claim; a claimed job records it from the agent's first
	// heartbeat, which follows the claim at once.
	Runtime *Runtime
	// Health is the agent's newest check of its node where it failed: the claim takes nothing,
	// and the node is quarantined (queue.Config.QuarantineAfter). nil: no failed check.
	Health *NodeCheck
	// Held is what the agent's node cache holds (jobspec.CacheNeeds names: "m:MODEL",
	// "e:OWNER/ENV@VERSION"): of the next few jobs in fair order, the claim prefers one whose
	// needs the node holds.
	Held []string
}

// ClaimBody is a claim on the wire (POST /v1/agent/claim), as the agent's client sends it and
// the API reads it: a ClaimRequest less the agent, which the API takes from its token.
type ClaimBody struct {
	GPUs        []GPU      `json:"gpus,omitempty"`
	WaitSeconds float64    `json:"wait_seconds"`
	GPUJobsOnly bool       `json:"gpu_jobs_only,omitempty"`
	ClaimID     string     `json:"claim_id,omitempty"`
	Runtime     *Runtime   `json:"runtime,omitempty"`
	Health      *NodeCheck `json:"health,omitempty"`
	Held        []string   `json:"held,omitempty"`
}

// Body is a claim as it is sent.
func (r ClaimRequest) Body() ClaimBody {
	return ClaimBody{GPUs: r.GPUs, WaitSeconds: r.Wait.Seconds(), GPUJobsOnly: r.GPUJobsOnly, ClaimID: r.ClaimID,
		Runtime: r.Runtime, Health: r.Health, Held: r.Held}
}

// Request is a claim as it was sent, by the agent the API knows from its token.
func (b ClaimBody) Request(agentID string) ClaimRequest {
	return ClaimRequest{AgentID: agentID, GPUs: b.GPUs, Wait: time.Duration(b.WaitSeconds * float64(time.Second)),
		GPUJobsOnly: b.GPUJobsOnly, ClaimID: b.ClaimID, Runtime: b.Runtime, Health: b.Health, Held: b.Held}
}

// GPU is a kind of accelerator and how many of it an agent has free.
type GPU struct {
	Model string `json:"model"`
	Count int    `json:"count"`
}

// Claim is a job handed to an agent with its lease (and, on the wire, how often to heartbeat
// and the job's secrets, decrypted for the lease holder alone).
type Claim struct {
	Job                      *Job              `json:"job"`
	Lease                    Lease             `json:"lease"`
	HeartbeatIntervalSeconds float64           `json:"heartbeat_interval_seconds"`
	Secrets                  map[string]string `json:"secrets,omitempty"`
	// Storage reaches this job's data alone, when the service hands out scoped credentials.
	Storage *StorageGrant `json:"storage,omitempty"`
	// Judge is the service's judge, for a job graded by it (jobspec.OperatorJudgeURL): where
	// it answers and the job's own token for it.
	Judge *JudgeAccess `json:"judge,omitempty"`
	// SealedSecrets is the stored, encrypted form; it never leaves the service.
	SealedSecrets string `json:"-"`
}

// JudgeAccess is the service's judge endpoint (OpenAI-compatible; /v1/judge) and the token
// one job calls it with (jobspec.JudgeKeyVar in the job's environment).
type JudgeAccess struct {
	URL   string `json:"url"`
	Token string `json:"token"`
}

// StorageGrant is object-storage access limited to one job's data (Prefix + "jobs/{id}/"),
// for the agent that holds the job's lease, until Expiration.
type StorageGrant struct {
	Bucket          string    `json:"bucket"`
	Prefix          string    `json:"prefix,omitempty"`
	Region          string    `json:"region"`
	Endpoint        string    `json:"endpoint,omitempty"`
	AccessKeyID     string    `json:"access_key_id"`
	SecretAccessKey string    `json:"secret_access_key"`
	SessionToken    string    `json:"session_token,omitempty"`
	Expiration      time.Time `json:"expiration"`
}

// Submission is a validated, normalized job to store and queue.
type Submission struct {
	ID   string
	Org  string
	Spec jobspec.Spec
	// SealedSecrets are the job's secrets, encrypted by the API (seal package); "" for none.
	SealedSecrets string
	// BudgetGPUMs is the GPU time (GPU-milliseconds) the job may use over all its runs, from
	// its max_gpu_hours and max_cost at the operator's price (the lower); 0 for none.
	BudgetGPUMs int64
	// CreatedBy and TokenID name who submitted the job (Job's); PricePerGPUHour is the
	// operator's price for its model at submit (0: none), for its organization's usage by user
	// and token.
	CreatedBy, TokenID string
	PricePerGPUHour    float64
	// EstimateGPUMs is the GPU time the job is expected to take (the dry run's expected
	// figure), where its organization has a monthly budget: a claim passes over a job whose
	// estimate is more than what is left of it. 0 for none.
	EstimateGPUMs int64
}

// NewID returns a new job id: a UUIDv7, so ids sort by creation time.
func NewID() (string, error) {
	id, err := uuid.NewV7()
	if err != nil {
		return "", fmt.Errorf("job: new id: %w", err)
	}
	return id.String(), nil
}

// Heartbeat is an agent's periodic report on a job it holds.
type Heartbeat struct {
	Token string `json:"lease_token"`
	// Running is false while the agent is still preparing (installing environments,
	// downloading a checkpoint); the first heartbeat with Running set moves the job to RUNNING.
	Running  bool      `json:"running"`
	Progress *Progress `json:"progress,omitempty"`
	Runtime  *Runtime  `json:"runtime,omitempty"`
	// Checkpoints are the steps committed to storage, ascending; each new one becomes a
	// job.checkpoint event.
	Checkpoints []int `json:"checkpoints,omitempty"`
	// StorageRefresh asks for fresh storage credentials: the claim's are near expiry.
	StorageRefresh bool `json:"storage_refresh,omitempty"`
	// LogBytes is how many bytes of log the attempt has written to storage so far: log
	// followers read storage only when it grows.
	LogBytes int64 `json:"log_bytes,omitempty"`
	// Alerts are what the agent's watch over the run raised since the last heartbeat: each
	// becomes an event of its type (job.stalled, job.alert).
	Alerts []Alert `json:"alerts,omitempty"`
}

// Alert is a sign of a run gone wrong that does not end it: no new step for far longer than
// its steps take (EventStalled), or a collapse in its metrics (EventAlert).
type Alert struct {
	Type   string `json:"type"`
	Detail string `json:"detail"`
}

// MaxAlerts is how many alerts one heartbeat may carry.
const MaxAlerts = 4

// Action is what the service tells an agent in answer to a heartbeat.
type Action string

// The actions a heartbeat can be answered with.
const (
	Continue Action = "continue"
	Stop     Action = "stop"
	// Release: the node is being drained by its operator; hand the job back to resume elsewhere.
	Release Action = "release"
)

// HeartbeatReply answers a heartbeat.
type HeartbeatReply struct {
	Action         Action    `json:"action"`
	LeaseExpiresAt time.Time `json:"lease_expires_at"`
	// Storage is fresh storage credentials, when the heartbeat asked for them.
	Storage *StorageGrant `json:"storage,omitempty"`
}

// Outcome is how an agent finished with a job: completed, or failed with a reason.
type Outcome struct {
	Token       string    `json:"lease_token"`
	Progress    *Progress `json:"progress,omitempty"`
	Checkpoints []int     `json:"checkpoints,omitempty"`
	// Reason says why a job failed; empty for a completion.
	Reason string `json:"reason,omitempty"`
	// Failure is the agent's reading of a failure: a platform fault is retried on another
	// node while the job has attempts left.
	Failure *FailureAnalysis `json:"failure_analysis,omitempty"`
	// GPUsFreedAt is when the pipeline ended and the agent gave the job's GPUs back: its GPU
	// time stops there, not when the report arrives.
	GPUsFreedAt *time.Time `json:"gpus_freed_at,omitempty"`
}

// Event is one fact in a job's history, numbered per job from 1.
type Event struct {
	Seq    int64     `json:"seq"`
	Type   string    `json:"type"`
	JobID  string    `json:"job_id"`
	Status Status    `json:"status"`
	Time   time.Time `json:"time"`
	// Detail is a short human-readable note (the failure reason, the checkpoint step...).
	Detail string `json:"detail,omitempty"`
}

// Event types. Each state change appends exactly one of them.
const (
	EventQueued     = "job.queued"
	EventPending    = "job.pending"
	EventStarted    = "job.started"
	EventCheckpoint = "job.checkpoint"
	EventCompleted  = "job.completed"
	EventFailed     = "job.failed"
	EventStopped    = "job.stopped"
	EventRetrying   = "job.retrying"
	EventStopping   = "job.stopping"
	EventStalled    = "job.stalled" // no new step for far longer than the run's steps take
	EventAlert      = "job.alert"   // the run's metrics collapsed (reward spread, entropy)
	EventBudget     = "job.budget"  // the job used 50, 80 or 100 % of its budget
)

// ParseGPUs reads an inventory written as MODEL:COUNT[,MODEL:COUNT], e.g. "H100:8".
func ParseGPUs(s string) ([]GPU, error) {
	var out []GPU
	for part := range strings.SplitSeq(s, ",") {
		model, count, ok := strings.Cut(strings.TrimSpace(part), ":")
		n, err := strconv.Atoi(count)
		if !ok || model == "" || err != nil || n < 1 {
			return nil, fmt.Errorf("GPU inventory %q: want MODEL:COUNT, e.g. H100:8", part)
		}
		out = append(out, GPU{Model: model, Count: n})
	}
	return out, nil
}
