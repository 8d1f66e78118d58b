// Package upstreamtest runs the upstream conformance kit — pinned, unchanged copies of
// prime-rl's, verifiers' and the prime CLI's config code with check.py, which validates a
// file exactly as the real tools do — for tests. The kit sits beside the project checkout
// (../shared/upstream); HOSTEDTRAIN_UPSTREAM_KIT names another folder. A test that needs it
// fails when it is missing: a skipped conformance test proves nothing.
package upstreamtest

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
)

// Kit is the kit's folder.
func Kit(tb testing.TB) string {
	tb.Helper()
	dir := os.Getenv("HOSTEDTRAIN_UPSTREAM_KIT")
	if dir == "" {
		dir = filepath.Join(filepath.Dir(jobspectest.Root(tb)), "shared", "upstream")
	}
	if _, err := os.Stat(filepath.Join(dir, "check.py")); err != nil {
		tb.Fatalf("the upstream conformance kit is not at %s (check.py: %v); put it beside the checkout as ../shared/upstream or set HOSTEDTRAIN_UPSTREAM_KIT", dir, err)
	}
	return dir
}

var pydanticOnce sync.Once
var pydanticErr error

// Command is the command line that runs check.py: python3 and the script.
func Command(tb testing.TB) []string {
	tb.Helper()
	kit := Kit(tb)
	pydanticOnce.Do(func() {
		out, err := exec.Command("python3", "-c", "import pydantic,sys; sys.exit(0 if pydantic.VERSION.startswith('2') else 1)").CombinedOutput()
		if err != nil {
			pydanticErr = errors.New("python3 with pydantic 2 is needed for the upstream kit (make test installs it): " + string(out) + err.Error())
		}
	})
	if pydanticErr != nil {
		tb.Fatal(pydanticErr)
	}
	return []string{"python3", filepath.Join(kit, "check.py")}
}

// Error is one thing upstream refuses in a file.
type Error struct {
	Loc string `json:"loc"`
	Msg string `json:"msg"`
}

// Result is check.py's verdict on one file.
type Result struct {
	File            string         `json:"file"`
	OK              bool           `json:"ok"`
	Errors          []Error        `json:"errors"`
	Warnings        []string       `json:"warnings"`
	StartsInference bool           `json:"starts_inference"`
	Details         map[string]any `json:"details"`
}

// Check runs `check.py KIND ARGS...` and returns one result per file it checked.
func Check(tb testing.TB, kind string, args ...string) []Result {
	tb.Helper()
	cmd := Command(tb)
	c := exec.Command(cmd[0], append(append(cmd[1:], kind), args...)...)
	var stderr bytes.Buffer
	c.Stderr = &stderr
	out, err := c.Output()
	var ee *exec.ExitError
	if err != nil && (!errors.As(err, &ee) || ee.ExitCode() != 1) {
		tb.Fatalf("check.py %s: %v\n%s", kind, err, stderr.String())
	}
	var res []Result
	for _, line := range bytes.Split(bytes.TrimSpace(out), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var r Result
		if err := json.Unmarshal(line, &r); err != nil {
			tb.Fatalf("check.py printed %q: %v", line, err)
		}
		res = append(res, r)
	}
	return res
}

// SandboxFlags are the gpuagent (and hostedtrain dev) flags that let a sandboxed job run
// Command: the kit and the Python with pydantic 2 that runs it, read-only, that Python first
// on PATH. Outside /usr they are invisible to a job otherwise.
func SandboxFlags(tb testing.TB) []string {
	tb.Helper()
	cmd := Command(tb)
	out, err := exec.Command(cmd[0], "-c", "import sys; print(sys.prefix)").Output()
	if err != nil {
		tb.Fatalf("where is python3: %v", err)
	}
	prefix := string(bytes.TrimSpace(out))
	return []string{"--sandbox-ro", prefix, "--sandbox-path", filepath.Join(prefix, "bin"), "--sandbox-ro", Kit(tb)}
}
