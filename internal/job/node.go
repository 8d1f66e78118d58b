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
	// Cache is what its agent last reported of its node cache, by kind.
	Cache map[string]CacheStats `json:"cache,omitempty"`
}

// Node states.
const (
	NodeOK          = "ok"
	NodeCordoned    = "cordoned"
	NodeQuarantined = "quarantined"
	NodeDraining    = "draining"
)

// CacheStats are a node cache's counts of one kind (model, env, compile) since its agent
// started, and what it holds now.
type CacheStats struct {
	Hits         int64 `json:"hits"`
	Misses       int64 `json:"misses"`
	Refetched    int64 `json:"refetched,omitempty"`
	BytesFetched int64 `json:"bytes_fetched"`
	Bytes        int64 `json:"bytes"`
	Entries      int   `json:"entries"`
}

// HitRate is hits over lookups (0 with none).
func (s CacheStats) HitRate() float64 {
	if n := s.Hits + s.Misses; n > 0 {
		return float64(s.Hits) / float64(n)
	}
	return 0
}
