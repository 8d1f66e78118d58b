package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// ended waits for a stream to end by itself; false if it is still open after limit.
func ended(ch chan sseEvent, limit time.Duration) bool {
	deadline := time.After(limit)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return true
			}
		case <-deadline:
			return false
		}
	}
}

// An open stream does not outlive its token: revoked, the stream ends within the stream's
// revocation check (issue 14: it went on for as long as the job ran).
func TestAStreamEndsWhenItsTokenIsRevoked(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	ch, stop := d.stream(t, "/events", "")
	defer stop()
	next(t, ch) // job.queued: the stream is open
	admin := d.s.Token("ops", auth.ScopeAdmin)
	if r := call(t, "POST", d.s.URL+"/v1/admin/tokens/revoke", admin, "application/json",
		[]byte(fmt.Sprintf(`{"token":%q}`, d.token))); r.status != http.StatusOK {
		t.Fatalf("revoke: %d %s", r.status, r.body)
	}
	if !ended(ch, 10*time.Second) {
		t.Fatal("the stream was still open 10 s after its token was revoked")
	}
}

// ... and expired, it ends at its expiry and the verifier's leeway.
func TestAStreamEndsWhenItsTokenExpires(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	short, err := d.s.Keys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead}, TTL: time.Second}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	d.token = short
	ch, stop := d.stream(t, "/events", "")
	defer stop()
	next(t, ch)
	if !ended(ch, time.Second+auth.Leeway+5*time.Second) {
		t.Fatal("the stream outlived its token's expiry")
	}
}
