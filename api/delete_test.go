package api_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// DELETE of a job: refused while it lives, then its data and the job go; another
// organization cannot; the Prime surface's delete is the same.
func TestDeleteJob(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	del := func(path, token string) reply {
		return call(t, "DELETE", d.s.URL+path, token, "", nil)
	}
	r := del("/v1/jobs/"+d.jobID, d.token)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "stop it first") {
		t.Fatalf("delete of a queued job: %d %s", r.status, r.body)
	}
	if r := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/cancel", d.token, "", nil); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	d.put(t, "metrics/000001-00000001-00000002-0001.jsonl", `{"step":1,"loss/mean":0.1}`+"\n")
	d.put(t, "checkpoints/step_1/trainer/.metadata", "m")
	d.put(t, "rollouts/step_1.json", "{}")
	reader := d.s.Token("acme", auth.ScopeJobsRead)
	if r := del("/v1/jobs/"+d.jobID, reader); r.status != http.StatusForbidden {
		t.Fatalf("delete with a read-only token: %d %s", r.status, r.body)
	}
	other := d.s.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	if r := del("/v1/jobs/"+d.jobID, other); r.status != http.StatusNotFound {
		t.Fatalf("delete by another organization: %d %s", r.status, r.body)
	}
	if r := del("/v1/jobs/"+d.jobID, d.token); r.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", r.status, r.body)
	}
	if objs, err := d.store.List(d.ctx, jobdata.JobPrefix(d.jobID)); err != nil || len(objs) != 0 {
		t.Fatalf("the job's data after the delete: %d objects, %v", len(objs), err)
	}
	if r := d.get(t, "", nil); r.status != http.StatusNotFound {
		t.Fatalf("get after the delete: %d %s", r.status, r.body)
	}
	if r := del("/v1/jobs/"+d.jobID, d.token); r.status != http.StatusNotFound {
		t.Fatalf("a second delete: %d %s", r.status, r.body)
	}

	// A live job's /v1 delete is refused with the reason, unless it asks to stop it first; the
	// Prime surface always does (Prime's delete of a running run): a queued run goes at once.
	sub := call(t, "POST", d.s.URL+"/v1/jobs", d.token, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 10\n[[env]]\nid = \"acme/env\"\n"))
	var j struct{ ID string }
	sub.decode(t, &j)
	if r := del("/v1/jobs/"+j.ID, d.token); r.status != http.StatusConflict || !strings.Contains(string(r.body), "stop=true") {
		t.Fatalf("delete of a queued job: %d %s", r.status, r.body)
	}
	if r := del("/api/v1/rft/runs/"+j.ID, d.token); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "{}" {
		t.Fatalf("prime delete of a queued run: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", d.s.URL+"/api/v1/rft/runs/"+j.ID, d.token, "", nil); r.status != http.StatusNotFound {
		t.Fatalf("prime get after the delete: %d %s", r.status, r.body)
	}
}

// holdingStore holds every Delete until release closes, telling held when the first arrives.
type holdingStore struct {
	blob.Store
	held    chan struct{}
	release chan struct{}
	once    sync.Once
}

func (s *holdingStore) Delete(ctx context.Context, key string) error {
	s.once.Do(func() { close(s.held) })
	select {
	case <-s.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return s.Store.Delete(ctx, key)
}

// A delete decides before it deletes anything (red team, issue 29: a restart that landed while
// the checkpoints were being deleted made the delete answer 409 with the checkpoints gone): a
// restart sent while the job's data is being deleted is refused, and the delete finishes.
func TestARestartDuringADeleteIsRefused(t *testing.T) {
	t.Parallel()
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	hold := &holdingStore{Store: dir, held: make(chan struct{}), release: make(chan struct{})}
	d := setupData(t, func(o *apitest.Options) { o.Store = hold })
	d.store = dir
	if r := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/cancel", d.token, "", nil); r.status != 200 {
		t.Fatalf("stop: %d %s", r.status, r.body)
	}
	d.put(t, "checkpoints/step_1/trainer/.metadata", "m")
	deleted := make(chan reply, 1)
	go func() { deleted <- call(t, "DELETE", d.s.URL+"/v1/jobs/"+d.jobID, d.token, "", nil) }()
	select {
	case <-hold.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the delete never reached the job's data")
	}
	r := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/restart", d.token, "", nil)
	if r.status != http.StatusConflict || !strings.Contains(string(r.body), "being deleted") {
		t.Errorf("a restart during the delete: %d %s; want 409 saying it is being deleted", r.status, r.body)
	}
	close(hold.release)
	select {
	case r := <-deleted:
		if r.status != http.StatusNoContent {
			t.Fatalf("the delete: %d %s", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the delete did not finish")
	}
	if r := d.get(t, "", nil); r.status != http.StatusNotFound {
		t.Fatalf("get after the delete: %d %s", r.status, r.body)
	}
}
