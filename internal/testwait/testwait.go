// Package testwait waits in tests for a condition that another process or goroutine makes
// true, where nothing pushes a notice: a file a child process writes, a job state behind an
// API that has no push yet. It polls the condition, never a fixed time.
package testwait

import (
	"testing"
	"time"
)

// Until calls cond every few milliseconds until it returns true, failing t if that takes
// longer than timeout. what names the condition in the failure.
func Until(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		<-tick.C
	}
}
