package queue

import "github.com/hostedtrain/hostedtrain/internal/redisfn"

// Every function of the library takes its arguments by name (internal/redisfn): Go passes an
// args map, call puts it in the order funcArgs gives, and the Lua function finds each as a
// local arg_<name>. A name missing on either side is an error at the call, not a value in the
// wrong slot.

// commonArgs come first in every call (begin reads them): the key prefix, the time (ms), the
// usage decay time constant (ms), the service's default running and queued limits per
// organization (0: none), and "1" on a cluster (a job's own keys are then out of a queue
// function's reach: settle.go).
var commonArgs = []string{"prefix", "now", "tau", "max_running", "max_queued", "split", "max_bytes", "shed"}

// restArg ends a function's list when it takes a variable number of values last (checkpoint
// steps): Lua finds them from ARGV[REST] on.
const restArg = redisfn.Rest

var funcArgs = map[string][]string{
	"submit": {"id", "org", "kind", "name", "config", "max_attempts", "max_steps", "secrets", "priority", "class",
		"gpus", "time_limit", "idem_key", "fingerprint", "idem_ttl", "rank", "budget_ms", "est_ms",
		"by", "token", "price_micro", "cfg_bytes", "sec_bytes", "needs", "weights"},
	"claim": {"lease_ttl", "agent", "token_rand", "free", "quantum", "lease_expires", "paid_until", "gpu_only",
		"claim_id", "waiter", "wait_until", "filed", "health", "quarantine_after", "quarantine_window", "held",
		"weights_rate", "held_ttl"},
	"unwait": {"waiter"},
	"heartbeat": {"id", "token", "lease_expires", "lease_ttl", "running", "progress", "pipeline", "emulated", "upstream",
		"log_bytes", "alerts", "grace", restArg},
	"finish": {"id", "token", "how", "reason", "progress", "freed_at", "failure", "failure_retried", "backoff_base",
		"backoff_cap", "jitter", "avoid_ms", "node_check", "quarantine_after", "quarantine_window", restArg},
	"release":      {"id", "token", "reason", "progress", "freed_at", restArg},
	"cancel":       {"id", "grace"},
	"restart":      {"id", "grace", "revive", "progress", "nfields", restArg},
	"reap":         {"batch", "backoff_base", "backoff_cap", "jitter", "grace", "agent_ttl", "avoid_ms", "quarantine_window"},
	"position":     {"id", "org", "class", "priority", "fresh_ms"},
	"abandon":      {"claim_id", "agent", "mark_ttl"},
	"set_org":      {"org", "weight", "org_max_running", "org_max_queued", "month_budget_ms", "ckpt_ttl_ms"},
	"archive":      {"id", "finished_at", "org", "bytes"},
	"delete_begin": {"id"},
	"set_budget":   {"budget_ms", "seen"},
	"stream":       {"org", "stream", "until", "max", "how"},
	"settle":       {"id", "finished_at", "events"},
	"put_own":      {"id", "finished_at", "progress", "nfields", restArg},
	"stored":       {"org", "id", "bytes", "how", "member", "taken", "every_ms"},
	// deployments.go
	"adapter_put":    {"id", "org", "job", "step", "base", "kind", "name", "max"},
	"deploy":         {"id", "org", "key", "server", "max"},
	"unload":         {"id", "org", "idle"},
	"serving":        {"id", "token", "loaded", restArg},
	"adapter_check":  {"id", "idle_ms"},
	"server_check":   {"member"},
	"adapter_forget": {"id", "org"},
}

// args are a call's own arguments by name.
type args map[string]any
