package queue

import (
	"fmt"
	"slices"
	"strings"
)

// Every function of the library takes its arguments by name: Go passes an args map, call
// puts it in the order funcArgs gives, and the Lua function finds each as a local arg_<name>
// (generated from the same list by luaArgs). A name missing on either side is an error at the
// call, not a value in the wrong slot.

// commonArgs come first in every call (begin reads them): the key prefix, the time (ms), the
// usage decay time constant (ms), the service's default running and queued limits per
// organization (0: none), and "1" on a cluster (a job's own keys are then out of a queue
// function's reach: settle.go).
var commonArgs = []string{"prefix", "now", "tau", "max_running", "max_queued", "split", "max_bytes", "shed"}

// restArg ends a function's list when it takes a variable number of values last (checkpoint
// steps): Lua finds them from ARGV[REST] on.
const restArg = "..."

var funcArgs = map[string][]string{
	"submit": {"id", "org", "kind", "name", "config", "max_attempts", "max_steps", "secrets", "priority", "class",
		"gpus", "time_limit", "idem_key", "fingerprint", "idem_ttl", "rank", "budget_ms", "est_ms",
		"by", "token", "price_micro", "cfg_bytes", "sec_bytes"},
	"claim": {"lease_ttl", "agent", "token_rand", "free", "quantum", "lease_expires", "paid_until", "gpu_only",
		"claim_id", "waiter", "wait_until", "filed", "health", "quarantine_after", "quarantine_window"},
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
}

// args are a call's own arguments by name.
type args map[string]any

// argv lays out a call of fn: the common arguments, then fn's own in their order, then rest.
func argv(fn string, common []any, a args, rest []any) ([]any, error) {
	names, ok := funcArgs[fn]
	if !ok {
		return nil, fmt.Errorf("queue: no function %q", fn)
	}
	own := names
	variadic := len(names) > 0 && names[len(names)-1] == restArg
	if variadic {
		own = names[:len(names)-1]
	} else if len(rest) > 0 {
		return nil, fmt.Errorf("queue: %s takes no further values", fn)
	}
	if len(a) != len(own) {
		return nil, fmt.Errorf("queue: %s: %d arguments, want %d (%s)", fn, len(a), len(own), strings.Join(own, ", "))
	}
	out := make([]any, 0, len(common)+len(own)+len(rest))
	out = append(out, common...)
	for _, n := range own {
		v, ok := a[n]
		if !ok {
			return nil, fmt.Errorf("queue: %s: argument %s missing", fn, n)
		}
		out = append(out, v)
	}
	return append(out, rest...), nil
}

// luaArgs is the Lua that opens function fn: its arguments as locals, and REST, the index of
// the first further value, for a function that takes them.
func luaArgs(fn string) string {
	var b strings.Builder
	for i, n := range funcArgs[fn] {
		pos := len(commonArgs) + i + 1
		if n == restArg {
			fmt.Fprintf(&b, "local REST = %d\n", pos)
			continue
		}
		fmt.Fprintf(&b, "local arg_%s = ARGV[%d]\n", n, pos)
	}
	return b.String()
}

// checkArgs is what the library's build checks: every function has its list, every list's
// names are distinct and none shadows a common one.
func checkArgs(funcs []string) error {
	for _, fn := range funcs {
		names, ok := funcArgs[fn]
		if !ok {
			return fmt.Errorf("queue: function %s has no argument list", fn)
		}
		for i, n := range names {
			if slices.Contains(names[:i], n) || slices.Contains(commonArgs, n) {
				return fmt.Errorf("queue: function %s names %s twice", fn, n)
			}
			if n == restArg && i != len(names)-1 {
				return fmt.Errorf("queue: function %s: %s must come last", fn, restArg)
			}
		}
	}
	return nil
}
