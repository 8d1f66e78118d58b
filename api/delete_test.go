package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
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

	// The Prime surface: a running run's delete is refused with the reason, a stopped one goes.
	sub := call(t, "POST", d.s.URL+"/v1/jobs", d.token, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 10\n[[env]]\nid = \"acme/env\"\n"))
	var j struct{ ID string }
	sub.decode(t, &j)
	if r := del("/api/v1/rft/runs/"+j.ID, d.token); r.status != http.StatusConflict || !strings.Contains(string(r.body), `"detail"`) {
		t.Fatalf("prime delete of a queued run: %d %s", r.status, r.body)
	}
	call(t, "POST", d.s.URL+"/v1/jobs/"+j.ID+"/cancel", d.token, "", nil)
	if r := del("/api/v1/rft/runs/"+j.ID, d.token); r.status != http.StatusOK || strings.TrimSpace(string(r.body)) != "{}" {
		t.Fatalf("prime delete: %d %s", r.status, r.body)
	}
	if r := call(t, "GET", d.s.URL+"/api/v1/rft/runs/"+j.ID, d.token, "", nil); r.status != http.StatusNotFound {
		t.Fatalf("prime get after the delete: %d %s", r.status, r.body)
	}
}
