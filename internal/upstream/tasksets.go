package upstream

import (
	"slices"
	"strings"
)

// Taskset is what the pinned upstream says of one verifiers taskset: the agent seats of the
// env it runs in and the harness upstream runs each seat with, and — for the taskset
// packages the pinned verifiers ships (its environments/ folder) — its settings, turns and
// judges as verifiers resolves them with no arguments. The table (tasksets_gen.go) is
// generated from the conformance kit by TestTasksetTable, never typed by hand: upstream's
// own resolution of prime-rl's example configs (the harness each example pins) and of a
// bare config per vendored package (its seats, settings and judges).
type Taskset struct {
	// ID is the taskset's id as upstream writes it ("reverse-text").
	ID string
	// Harness is each seat's harness id, by seat ("agent" for a single-agent env; wordle
	// seats "player"); a seat's is "" when upstream pins none (verifiers would then fall
	// back to its bash coding agent).
	Harness map[string]string
	// HarnessFrom says where Harness comes from: an example config (repository and path at
	// the pinned commit) or the package's own env config.
	HarnessFrom string
	// ExampleSeqLen and ExampleMaxTokens are the sequence length and per-turn completion
	// budget of the first of upstream's examples that trains on the taskset (0: none, or no
	// budget set).
	ExampleSeqLen, ExampleMaxTokens int
	// Vendored: the pinned verifiers ships the package, so the fields below are known.
	Vendored bool
	// Legacy: the package defines load_environment, which verifiers' legacy loader (the one
	// its GEPA and eval scripts use at the pin) calls; a v1-only package cannot be loaded so.
	Legacy bool
	// Fields are the taskset config's settings and their defaults (TasksetConfig's id,
	// task and system_prompt excluded); TaskFields those of its task config (judges, stops,
	// metrics and rewards excluded).
	Fields     map[string]any
	TaskFields map[string]any
	// Judges are the judges a task is graded by when the job does not replace them.
	Judges []Judge
}

// Judge is a model a taskset calls to grade a rollout, and where verifiers calls it.
type Judge struct {
	ID        string
	Model     string
	BaseURL   string
	APIKeyVar string
}

// NullHarness is verifiers' tool-less chat harness: the model answers the task's prompt
// (calling the taskset's own MCP tools, when it has any) and nothing else. It is what
// prime-rl's examples run every chat taskset with, and what hostedtrain runs a seat with
// when neither the job nor upstream's examples name a harness: verifiers' own fallback, the
// bash coding agent, would add a shell and an editor to every rollout of a task that never
// asked for one.
const NullHarness = "null"

// TasksetModule is the module verifiers imports for a taskset id: its name part, lower
// case, '-' as '_' (verifiers/v1/utils/loaders.py, _import_plugin).
func TasksetModule(id string) string {
	if i := strings.LastIndexByte(id, '/'); i >= 0 {
		id = id[i+1:]
	}
	id, _, _ = strings.Cut(id, "@")
	return strings.ToLower(strings.ReplaceAll(id, "-", "_"))
}

// LookupTaskset is what upstream says of the taskset an environment id names: a bare name (the
// installed package) or one of Prime Intellect's on the Environments Hub
// ("primeintellect/name@v", what upstream's examples and packages are published as). ok is
// false for a taskset upstream neither ships nor runs in an example, and for another owner's
// package of the same name, which may be anything.
func LookupTaskset(id string) (Taskset, bool) {
	if owner, _, hasOwner := strings.Cut(id, "/"); hasOwner && !strings.EqualFold(owner, HubOwner) {
		return Taskset{}, false
	}
	t, ok := tasksets[TasksetModule(id)]
	return t, ok
}

// HubOwner is the Environments Hub owner of upstream's own packages.
const HubOwner = "primeintellect"

// Seats are the agent seats of the env a taskset runs in, in order: the table's, else the
// single agent of verifiers' SingleAgentEnv.
func (t Taskset) Seats() []string {
	if len(t.Harness) == 0 {
		return []string{"agent"}
	}
	out := make([]string, 0, len(t.Harness))
	for s := range t.Harness {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}

// SeatHarness is the harness a seat runs with when the job names none: upstream's, else the
// null harness.
func (t Taskset) SeatHarness(seat string) string {
	if h := t.Harness[seat]; h != "" {
		return h
	}
	return NullHarness
}

// MaxTurns is the taskset's own bound on turns (its max_turns setting), 0 when it has none.
func (t Taskset) MaxTurns() int {
	if v, ok := t.Fields["max_turns"].(int); ok {
		return v
	}
	return 0
}
