package job

import "time"

// Node is one agent's node as the operator sees it: whether it takes work, since when and why,
// when it last asked for work and with what free, and its recent platform faults.
type Node struct {
	ID string `json:"id"`
	// State is "ok" (takes work), "cordoned" (by an operator: takes no new work), "quarantined"
	// (by the service, after repeated platform faults: takes no new work) or "draining" (by an
	// operator: takes no new work and hands its jobs back to resume elsewhere).
	State  string     `json:"state"`
	Since  *time.Time `json:"since,omitempty"`
	Reason string     `json:"reason,omitempty"`
	// LastSeen is when it last waited for work (nodes busy with long jobs wait rarely).
	LastSeen *time.Time `json:"last_seen,omitempty"`
	// Free are the GPUs it had free when it last waited.
	Free []GPU `json:"free,omitempty"`
	// RecentFaults are its platform faults within the quarantine window.
	RecentFaults int `json:"recent_faults"`
}

// Node states.
const (
	NodeOK          = "ok"
	NodeCordoned    = "cordoned"
	NodeQuarantined = "quarantined"
	NodeDraining    = "draining"
)
