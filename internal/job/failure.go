package job

// FailureAnalysis is why one attempt of a job failed, as the service understands it: a class,
// whose fault it was, how sure the reading is and the log lines it rests on. The agent that
// ran the attempt writes it from the exit status and the last lines of the job's logs
// (internal/failure); the reaper writes it for an agent that went silent (node_lost).
type FailureAnalysis struct {
	Class FailureClass `json:"class"`
	Fault Fault        `json:"fault"`
	// Confidence is how sure the reading is, 0 to 1: 0.9 and above for a message that says
	// what happened in so many words, lower for a guess from where the attempt stopped.
	Confidence float64 `json:"confidence"`
	// Summary says what happened and what to do about it, in plain words.
	Summary string `json:"summary"`
	// Evidence are the log lines the reading rests on, each "<log>: <line>", newest last.
	Evidence []string `json:"evidence,omitempty"`
	// Attempt is the attempt it was read from.
	Attempt int `json:"attempt,omitempty"`
	// Retried says whether the service queued the job again for it (on another node).
	Retried bool `json:"retried"`
	// NodeCheck is what the agent's own check of its node found, where the failure made it
	// look (the logs named a GPU or network fault, or a process could not start): the only
	// reading of a failure that counts against the node.
	NodeCheck *NodeCheck `json:"node_check,omitempty"`
}

// NodeCheck is an agent's check of its own node: the GPU driver's answers (nvidia-smi), the
// kernel's log as the agent reads it, and the agent's own probes (open files, free disk) —
// evidence no job can write. Only a failed check counts against a node (quarantine).
type NodeCheck struct {
	Failed bool `json:"failed"`
	// Evidence says what the check found, a line each (failed or not).
	Evidence []string `json:"evidence,omitempty"`
}

// FailureClass names what went wrong.
type FailureClass string

const (
	FailConfigRefused FailureClass = "config_refused"      // upstream refused the job's config
	FailEnvInstall    FailureClass = "environment_install" // an environment did not install
	FailCUDAOOM       FailureClass = "cuda_oom"            // a GPU ran out of memory
	FailNCCLNetwork   FailureClass = "nccl_network"        // NCCL or the network between processes failed
	FailGPUHardware   FailureClass = "gpu_hardware"        // a GPU or its driver failed
	FailNodeLost      FailureClass = "node_lost"           // the node went silent (its lease lapsed)
	FailUserCode      FailureClass = "user_code"           // the job's own code raised (reward function, environment)
	FailStorage       FailureClass = "storage"             // object storage or the node's disk failed
	FailTimeLimit     FailureClass = "time_limit"          // the job's time limit was reached
	FailBudget        FailureClass = "budget"              // the job's budget was spent
	FailStalled       FailureClass = "stalled"             // the run stopped stepping (on_stall = restart)
	FailResourceLimit FailureClass = "resource_limit"      // the job went past its share of the node (memory, tasks, disk)
	FailNodeError     FailureClass = "node_error"          // the node could not start the job's processes
	FailUnknown       FailureClass = "unknown"             // nothing in the logs says
)

// FailureClasses lists every class, in the contract's order.
var FailureClasses = []FailureClass{FailConfigRefused, FailEnvInstall, FailCUDAOOM, FailNCCLNetwork, FailGPUHardware,
	FailNodeLost, FailUserCode, FailStorage, FailTimeLimit, FailBudget, FailStalled, FailResourceLimit, FailNodeError, FailUnknown}

// Fault is whose fault a failure was: the platform's (hardware, network, storage: worth
// another try on another node) or the user's (the config, the code: another try would burn
// GPU hours on the same bug).
type Fault string

const (
	FaultPlatform Fault = "platform"
	FaultUser     Fault = "user"
	FaultUnknown  Fault = "unknown"
)

// RetryConfidence is how sure a platform fault must be to be retried: below it, the service
// does not spend GPU hours on a guess.
const RetryConfidence = 0.7

// Retryable says whether the failure is worth another attempt on another node.
func (a *FailureAnalysis) Retryable() bool {
	return a != nil && a.Fault == FaultPlatform && a.Confidence >= RetryConfidence
}

// NodeFault says whether the failure counts against the node it ran on (node health): the
// agent's own check of the node failed with it. What the job printed never does.
func (a *FailureAnalysis) NodeFault() bool {
	return a != nil && a.NodeCheck != nil && a.NodeCheck.Failed
}
