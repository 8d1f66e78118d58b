package job

import "time"

// An Adapter is the weights of one committed checkpoint step of a job — a LoRA adapter, or a
// full fine-tune's model — as something to serve: what Prime's deployments call an adapter.
// Deploying it puts it on a model server of its organization (a serve job of the queue); its
// model id for inference is "<base>:<id>".
type Adapter struct {
	ID, Org, Job string
	Step         int
	Base         string // the base model it is served on
	Kind         string // AdapterLoRA or AdapterFull
	Name         string // its job's name
	// Status is READY (its weights are committed); Deployment one of the Deploy* states.
	Status, Deployment string
	// Server is the serve job that holds or is to hold it; Node the agent that serves it.
	Server, Node string
	Error        string // why its deployment failed
	// Idle: it was unloaded for being idle, and the next request deploys it again.
	Idle                           bool
	CreatedAt, UpdatedAt           time.Time
	DeployedAt, UsedAt             *time.Time
	Requests, Failures             int64
	PromptTokens, CompletionTokens int64
	// LatencyP50Ms and LatencyP99Ms are over its newest 1,000 requests (0: none yet).
	LatencyP50Ms, LatencyP99Ms float64
}

// The kinds of adapter: a LoRA adapter shares its base model's server with others, a full
// fine-tune's weights get a server of their own.
const (
	AdapterLoRA = "lora"
	AdapterFull = "full"
)

// The deployment states (Prime's): an adapter not served, on its way, served, on its way off,
// or one of those that failed.
const (
	NotDeployed  = "NOT_DEPLOYED"
	Deploying    = "DEPLOYING"
	Deployed     = "DEPLOYED"
	Unloading    = "UNLOADING"
	DeployFailed = "DEPLOY_FAILED"
	UnloadFailed = "UNLOAD_FAILED"
)

// ModelID is the adapter's model id for inference, as the prime CLI writes it: BASE:ADAPTER_ID.
func (a *Adapter) ModelID() string { return a.Base + ":" + a.ID }

// Served is an adapter a serve job's agent is to hold.
type Served struct {
	ID, Job, Kind, Base string
	Step                int
}
