// Package upstream is what hostedtrain knows of the programs its GPU agents run: prime-rl,
// verifiers and the prime CLI, at the commits hostedtrain is pinned to. It holds facts read
// from their public sources — the versions, the chat renderers prime-rl has for each model,
// the ports its processes bind and the keys that move them, how its launcher splits a node's
// GPUs, and which models are served by a provider's API rather than from open weights — so
// that the API (refusing at submit what prime-rl would refuse on a node) and the agent
// (writing the files prime-rl reads) agree. It depends on nothing else in the project.
//
// Every fact here names its source: a file of PrimeIntellect-ai/prime-rl, /verifiers or
// /prime at the pinned commit. Moving the pin means re-reading those files; see
// docs/operations.md ("The pin").
package upstream

import (
	"fmt"
	"strings"
)

// The pinned upstream versions. prime-rl's verifiers submodule (deps/verifiers) is at
// VerifiersCommit, so the two agree; the prime CLI is the release that prime-rl's lock allows.
const (
	PrimeRLCommit   = "559b44772e471d1538537b8805cc77f3824a5e64"
	VerifiersCommit = "a60a606ecc4d309247edf9ff92c3eabca362781f"
	PrimeCLIVersion = "0.6.26"
	// PrimeCLICommit is the commit of PrimeIntellect-ai/prime that released PrimeCLIVersion.
	PrimeCLICommit = "66fb4b704377aa56b0f580756c80f3bc824a797a"
)

// Versions are the upstream versions installed on a node (or pinned): prime-rl and verifiers
// as git commits, the prime CLI as its release.
type Versions struct {
	PrimeRL   string `json:"prime_rl,omitempty"`
	Verifiers string `json:"verifiers,omitempty"`
	PrimeCLI  string `json:"prime_cli,omitempty"`
}

// Pinned is the versions hostedtrain is built against.
func Pinned() Versions {
	return Versions{PrimeRL: PrimeRLCommit, Verifiers: VerifiersCommit, PrimeCLI: PrimeCLIVersion}
}

// Short shows commits by their first 7 characters, as git does.
func (v Versions) Short() Versions {
	return Versions{PrimeRL: short(v.PrimeRL), Verifiers: short(v.Verifiers), PrimeCLI: v.PrimeCLI}
}

func short(commit string) string {
	if len(commit) > 7 && isHex(commit) {
		return commit[:7]
	}
	return commit
}

func isHex(s string) bool {
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// String is "prime-rl 559b447, verifiers a60a606, prime 0.6.26" (what is known).
func (v Versions) String() string {
	s := v.Short()
	var parts []string
	for _, p := range [][2]string{{"prime-rl", s.PrimeRL}, {"verifiers", s.Verifiers}, {"prime", s.PrimeCLI}} {
		if p[1] != "" {
			parts = append(parts, p[0]+" "+p[1])
		}
	}
	if len(parts) == 0 {
		return "unknown"
	}
	return strings.Join(parts, ", ")
}

// CheckPinned reports how installed differs from the pin: prime-rl must be the pinned commit
// (a commit prefix of at least 7 characters matches); verifiers and the prime CLI, when
// known, likewise. Nil when they agree.
func CheckPinned(installed Versions) error {
	pin := Pinned()
	var diffs []string
	same := func(got, want string) bool {
		if len(got) >= 7 && strings.HasPrefix(want, got) {
			return true
		}
		return got == want
	}
	if !same(installed.PrimeRL, pin.PrimeRL) {
		diffs = append(diffs, fmt.Sprintf("prime-rl is %s, pinned %s", orUnknown(short(installed.PrimeRL)), short(pin.PrimeRL)))
	}
	if installed.Verifiers != "" && !same(installed.Verifiers, pin.Verifiers) {
		diffs = append(diffs, fmt.Sprintf("verifiers is %s, pinned %s", short(installed.Verifiers), short(pin.Verifiers)))
	}
	if installed.PrimeCLI != "" && installed.PrimeCLI != pin.PrimeCLI {
		diffs = append(diffs, fmt.Sprintf("the prime CLI is %s, pinned %s", installed.PrimeCLI, pin.PrimeCLI))
	}
	if len(diffs) == 0 {
		return nil
	}
	return fmt.Errorf("installed upstream differs from the pin: %s", strings.Join(diffs, "; "))
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
