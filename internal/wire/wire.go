// Package wire holds the types of the API's answers and requests that both the server (api)
// and its clients (internal/client, the CLI, the agent) use: one definition of each, so the
// server never imports its client.
package wire

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// Problem is the API's problem+json document.
type Problem struct {
	Type     string       `json:"type"`
	Title    string       `json:"title"`
	Status   int          `json:"status"`
	Detail   string       `json:"detail,omitempty"`
	Instance string       `json:"instance,omitempty"`
	Errors   []FieldError `json:"errors,omitempty"`
}

// FieldError names one thing wrong with a request: a body field by JSON pointer (and its
// place in the TOML or JSON document where known) or a parameter.
type FieldError struct {
	Pointer   string `json:"pointer,omitempty"`
	Parameter string `json:"parameter,omitempty"`
	Line      int    `json:"line,omitempty"`
	Column    int    `json:"column,omitempty"`
	Message   string `json:"message"`
}

// String places the message: "line 3 (/sampling/max_token): unknown key ...".
func (f FieldError) String() string {
	switch {
	case f.Line > 0 && f.Pointer != "":
		return fmt.Sprintf("line %d (%s): %s", f.Line, f.Pointer, f.Message)
	case f.Line > 0:
		return fmt.Sprintf("line %d, column %d: %s", f.Line, f.Column, f.Message)
	case f.Pointer != "":
		return f.Pointer + ": " + f.Message
	case f.Parameter != "":
		return "parameter " + f.Parameter + ": " + f.Message
	}
	return f.Message
}

// Preview is a job as it would run, without queueing it.
type Preview struct {
	Config   json.RawMessage `json:"config"`
	Warnings []FieldError    `json:"warnings"`
	GPUs     struct {
		Count int    `json:"count"`
		Type  string `json:"type"`
	} `json:"gpus"`
	Queue struct {
		RunsAhead int `json:"runs_ahead"`
	} `json:"queue"`
	Estimate *Estimate `json:"estimate,omitempty"`
}

// Estimate is what a training job would take, from the step times of past runs of the same
// model on the same number of GPUs (or the service's default where there are none).
type Estimate struct {
	BasedOn         string  `json:"based_on"`
	Runs            int     `json:"runs"`
	Steps           int     `json:"steps"`
	StepSeconds     Range   `json:"step_seconds"`
	DurationSeconds Range   `json:"duration_seconds"`
	GPUHours        Range   `json:"gpu_hours"`
	Cost            *Range  `json:"cost,omitempty"`
	PricePerGPUHour float64 `json:"price_per_gpu_hour,omitempty"`
}

// Range is a low, expected and high figure.
type Range struct {
	Low      float64 `json:"low"`
	Expected float64 `json:"expected"`
	High     float64 `json:"high"`
}

// MetricsPage is a page of a job's metrics, one row a step.
type MetricsPage struct {
	Items       []jobdata.Row `json:"items"`
	NextMinStep *int          `json:"next_min_step,omitempty"`
}

// Checkpoint is one of a job's checkpoints in storage.
type Checkpoint struct {
	Step   int    `json:"step"`
	Status string `json:"status"`
	Pinned bool   `json:"pinned,omitempty"`
	// Metrics are the step's reward and newest eval_reward at or before it.
	Metrics map[string]float64 `json:"metrics,omitempty"`
	// Best marks the committed checkpoint with the highest value of the job's best_metric.
	Best     bool           `json:"best,omitempty"`
	Bytes    int64          `json:"bytes"`
	Files    int            `json:"files"`
	Time     *time.Time     `json:"time,omitempty"`
	Download []DownloadFile `json:"download,omitempty"`
}

// DownloadFile is one file of a committed checkpoint and a short-lived link to it.
type DownloadFile struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256,omitempty"`
	URL    string `json:"url"`
}

// Artifact is one of a job's outputs.
type Artifact struct {
	Name  string     `json:"name"`
	Bytes int64      `json:"bytes"`
	Time  *time.Time `json:"time,omitempty"`
	URL   string     `json:"url,omitempty"`
}

// LogPage is a read of a job's logs.
type LogPage struct {
	Attempt    int64     `json:"attempt,omitempty"`
	Attempts   []int64   `json:"attempts"`
	Components []string  `json:"components,omitempty"`
	Items      []LogLine `json:"items"`
}

// JobProgress is where a run stands.
type JobProgress struct {
	JobID          string             `json:"job_id"`
	Status         job.Status         `json:"status"`
	Step           int                `json:"step"`
	MaxSteps       int                `json:"max_steps"`
	Percent        float64            `json:"percent"`
	Metrics        map[string]float64 `json:"metrics,omitempty"`
	Series         map[string]string  `json:"series,omitempty"`
	Result         *job.Result        `json:"result,omitempty"`
	CheckpointStep int                `json:"checkpoint_step,omitempty"`
	StepSeconds    *float64           `json:"step_seconds,omitempty"`
	ETASeconds     *float64           `json:"eta_seconds,omitempty"`
	ElapsedSeconds *float64           `json:"elapsed_seconds,omitempty"`
	StartedAt      *time.Time         `json:"started_at,omitempty"`
	UpdatedAt      time.Time          `json:"updated_at"`
	// StepsWithSamples are the steps whose rollouts are stored (prime-rl runs only).
	StepsWithSamples []int `json:"steps_with_samples,omitempty"`
}

// ForkRequest is what a fork changes: the step it starts from (0: the newest committed
// checkpoint) and the new run's settings (zero: the job's own).
type ForkRequest struct {
	Step         int     `json:"step,omitempty"`
	MaxSteps     int     `json:"max_steps,omitempty"`
	Name         string  `json:"name,omitempty"`
	LearningRate float64 `json:"learning_rate,omitempty"`
	Priority     *int    `json:"priority,omitempty"`
	TimeLimit    string  `json:"time_limit,omitempty"`
}

// JobUsage is what one job used: GPU time, its price where the operator set one, and the
// tokens its rollouts took.
type JobUsage struct {
	JobID           string     `json:"job_id"`
	Name            string     `json:"name,omitempty"`
	Kind            string     `json:"kind"`
	Status          job.Status `json:"status"`
	Model           string     `json:"model,omitempty"`
	GPUs            int        `json:"gpus"`
	GPUType         string     `json:"gpu_type,omitempty"`
	GPUSeconds      float64    `json:"gpu_seconds"`
	PricePerGPUHour float64    `json:"price_per_gpu_hour,omitempty"`
	CostUSD         *float64   `json:"cost_usd,omitempty"`
	// Projected* are what the whole run will use at its pace so far (a running rl job).
	ProjectedGPUSeconds *float64 `json:"projected_gpu_seconds,omitempty"`
	ProjectedCostUSD    *float64 `json:"projected_cost_usd,omitempty"`
	Step                int      `json:"step"`
	MaxSteps            int      `json:"max_steps,omitempty"`
	// StorageBytes is what the job keeps in object storage as last measured; 0 before.
	StorageBytes int64       `json:"storage_bytes,omitempty"`
	Tokens       TokenCounts `json:"tokens"`
	// JudgeTokens are the tokens of the service's judge calls for the job (billed to its
	// organization); absent when it used none.
	JudgeTokens *TokenCounts `json:"judge_tokens,omitempty"`
	UpdatedAt   time.Time    `json:"updated_at"`
}

// TokenCounts are tokens of the run's rollouts: prompts (input) and completions (output).
type TokenCounts struct {
	Total  int64 `json:"total"`
	Input  int64 `json:"input"`
	Output int64 `json:"output"`
}

// SamplesPage is a page of one step's rollout samples: what the model was asked, what it
// answered, how it scored. Step is nil while the job has none.
type SamplesPage struct {
	JobID      string           `json:"job_id"`
	Step       *int             `json:"step,omitempty"`
	Steps      []int            `json:"steps"`
	Episodes   int              `json:"episodes,omitempty"`
	Samples    []jobdata.Sample `json:"samples"`
	Total      int              `json:"total"`
	Page       int              `json:"page"`
	Limit      int              `json:"limit"`
	TotalPages int              `json:"total_pages"`
}

// DistributionPage is a histogram of a step's rewards or advantages.
type DistributionPage struct {
	JobID string `json:"job_id"`
	Step  *int   `json:"step,omitempty"`
	Type  string `json:"type"`
	Steps []int  `json:"steps"`
	jobdata.Distribution
}

// Usage is GPU time used by the organization and by its jobs.
type Usage struct {
	Organization OrgUsage   `json:"organization"`
	Jobs         []UsageJob `json:"jobs"`
	NextCursor   string     `json:"next_cursor,omitempty"`
	// ByUser and ByToken are the organization's GPU time (and its cost, where priced) by the
	// user and by the token that submitted its jobs, the most used first.
	ByUser  []job.UsageShare `json:"by_user"`
	ByToken []job.UsageShare `json:"by_token"`
}

// OrgUsage is the organization's GPU time and what runs now.
type OrgUsage struct {
	Org         string  `json:"org"`
	GPUSeconds  float64 `json:"gpu_seconds"`
	Running     int     `json:"running"`
	RunningGPUs int     `json:"running_gpus"`
	// StorageBytes is what its jobs keep in object storage, as last measured.
	StorageBytes int64 `json:"storage_bytes"`
	// Inference is what the organization's deployments served through the gateway.
	Inference *InferenceUsage `json:"inference,omitempty"`
}

// UsageJob is one job's line of the organization's usage.
type UsageJob struct {
	ID         string     `json:"id"`
	Name       string     `json:"name,omitempty"`
	Kind       string     `json:"kind"`
	Status     job.Status `json:"status"`
	GPUs       int        `json:"gpus"`
	GPUType    string     `json:"gpu_type,omitempty"`
	GPUSeconds float64    `json:"gpu_seconds"`
	// StorageBytes is what the job keeps in object storage, as last measured; 0 before.
	StorageBytes int64     `json:"storage_bytes,omitempty"`
	CreatedAt    time.Time `json:"created_at"`
}

// Model is one model a job may train without naming a renderer.
type Model struct {
	Name            string  `json:"name"`
	GPUs            int     `json:"gpus"`
	PricePerGPUHour float64 `json:"price_per_gpu_hour,omitempty"`
	Renderer        string  `json:"renderer,omitempty"`
	// IdleNodes is how many nodes wait for work with the model's GPUs free right now.
	IdleNodes int `json:"idle_nodes"`
}

// GPUType is a GPU type jobs run on: the most one job takes (a node's), and how many nodes
// wait for work now with at least n GPUs free (IdleNodes[n-1]).
type GPUType struct {
	GPUType   string `json:"gpu_type"`
	PerNode   int    `json:"per_node"`
	IdleNodes []int  `json:"idle_nodes"`
}

// ModelList is what training jobs may name: the operator's list, or the models prime-rl
// renders by itself (then any other model trains too, with a renderer named).
type ModelList struct {
	Items        []Model `json:"items"`
	OperatorList bool    `json:"operator_list"`
}

// LogLine is one line of a job's log.
type LogLine = jobdata.LogLine

// Deployment is a committed checkpoint deployed for inference (an adapter), as
// /v1/deployments answers it.
type Deployment struct {
	ID               string     `json:"id"`
	Model            string     `json:"model"`
	Job              string     `json:"job"`
	JobName          string     `json:"job_name,omitempty"`
	Step             int        `json:"step"`
	BaseModel        string     `json:"base_model"`
	Kind             string     `json:"kind"`
	Status           string     `json:"status"`
	DeploymentStatus string     `json:"deployment_status"`
	Server           string     `json:"server,omitempty"`
	Node             string     `json:"node,omitempty"`
	Error            string     `json:"error,omitempty"`
	Idle             bool       `json:"idle,omitempty"`
	CreatedAt        time.Time  `json:"created_at"`
	UpdatedAt        time.Time  `json:"updated_at"`
	DeployedAt       *time.Time `json:"deployed_at,omitempty"`
	LastUsedAt       *time.Time `json:"last_used_at,omitempty"`
	Requests         int64      `json:"requests"`
	Failures         int64      `json:"failures"`
	PromptTokens     int64      `json:"prompt_tokens"`
	CompletionTokens int64      `json:"completion_tokens"`
	// LatencyP50Ms and LatencyP99Ms are over its newest 1,000 requests through the gateway.
	LatencyP50Ms float64 `json:"latency_p50_ms,omitempty"`
	LatencyP99Ms float64 `json:"latency_p99_ms,omitempty"`
}

// ServedAdapter is an adapter a model server's agent is to hold: its model id (the name it is
// loaded under), and its weights' files with links (POST /v1/agent/jobs/{id}/serving).
type ServedAdapter struct {
	ID    string         `json:"id"`
	Model string         `json:"model"`
	Job   string         `json:"job"`
	Step  int            `json:"step"`
	Kind  string         `json:"kind"`
	Files []DownloadFile `json:"files"`
}

// InferenceUsage is what an organization's deployments served: requests and tokens.
type InferenceUsage struct {
	Requests         int64 `json:"requests"`
	PromptTokens     int64 `json:"prompt_tokens"`
	CompletionTokens int64 `json:"completion_tokens"`
}
