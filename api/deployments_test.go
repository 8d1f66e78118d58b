package api_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// commitCheckpoint writes a committed checkpoint of a job as an agent does: its files, then its
// manifest with each file's size and sha256.
func commitCheckpoint(t *testing.T, store blob.Store, jobID string, step int, files map[string]string) {
	t.Helper()
	prefix := jobdata.CheckpointPrefix(jobID, step)
	m := jobdata.Manifest{JobID: jobID, Step: step}
	for name, data := range files {
		if err := store.Put(context.Background(), prefix+name, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256([]byte(data))
		m.Files = append(m.Files, jobdata.ManifestFile{Path: name, Size: int64(len(data)), SHA256: hex.EncodeToString(sum[:])})
		m.Bytes += int64(len(data))
	}
	body, _ := json.Marshal(m)
	if err := store.Put(context.Background(), prefix+jobdata.ManifestName, bytes.NewReader(body)); err != nil {
		t.Fatal(err)
	}
}

// A deploy checks what it deploys: a step that was never committed (or was pruned, or holds
// no weights) is a 409 naming the committed steps; another organization's job a 404; an
// adapter of a committed step is filed once, deployed on a model server (a serve job), listed
// with Prime's fields by the prime CLI's paths, and unloaded. The agent's serving call needs
// the server's lease.
func TestDeploymentsCheckWhatTheyDeploy(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	post := func(token string, body any) reply {
		b, _ := json.Marshal(body)
		return call(t, "POST", d.s.URL+"/v1/deployments", token, "application/json", b)
	}
	if r := post(d.token, map[string]any{"job": d.jobID}); r.status != http.StatusConflict || !strings.Contains(string(r.body), "no committed checkpoint") {
		t.Fatalf("a job with no checkpoint: %d %s", r.status, r.body)
	}
	commitCheckpoint(t, d.store, d.jobID, 10, map[string]string{
		"weights/adapter_model.safetensors": strings.Repeat("w", 4096), "weights/adapter_config.json": `{"r": 32}`})
	d.put(t, "checkpoints/step_20/trainer/model.safetensors", "unfinished")

	if r := post(d.token, map[string]any{"job": d.jobID, "step": 20}); r.status != http.StatusConflict || !strings.Contains(string(r.body), "committed: 10") {
		t.Errorf("an unfinished step: %d %s", r.status, r.body)
	}
	if r := post(d.s.Token("globex", auth.ScopeJobsRead, auth.ScopeJobsWrite), map[string]any{"job": d.jobID}); r.status != http.StatusNotFound {
		t.Errorf("another organization's job: %d %s", r.status, r.body)
	}
	if r := post(d.token, map[string]any{"job": d.jobID, "step": "newest"}); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Errorf("a step that is no step: %d %s", r.status, r.body)
	}
	r := post(d.token, map[string]any{"job": d.jobID})
	var dep struct {
		ID, Model, Server, Kind string
		Step                    int
		DeploymentStatus        string `json:"deployment_status"`
	}
	r.decode(t, &dep)
	if r.status != http.StatusOK || dep.Step != 10 || dep.DeploymentStatus != "DEPLOYING" || dep.Server == "" || dep.Kind != "lora" ||
		dep.Model != "Qwen/Qwen3-4B-Instruct-2507:"+dep.ID {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	if again := post(d.token, map[string]any{"job": d.jobID, "step": 10}); !strings.Contains(string(again.body), dep.ID) {
		t.Errorf("a second deploy of the step filed another adapter: %s", again.body)
	}
	srv := call(t, "GET", d.s.URL+"/v1/jobs/"+dep.Server, d.token, "", nil)
	if srv.status != 200 || !strings.Contains(string(srv.body), `"kind":"serve"`) {
		t.Errorf("the model server: %d %s", srv.status, srv.body)
	}

	// Prime's paths: the same adapter with Prime's fields; another organization sees none.
	list := call(t, "GET", d.s.URL+"/api/v1/rft/adapters", d.token, "", nil)
	if list.status != 200 || !strings.Contains(string(list.body), `"deploymentStatus":"DEPLOYING"`) || !strings.Contains(string(list.body), `"total":1`) {
		t.Errorf("prime adapters: %d %s", list.status, list.body)
	}
	if other := call(t, "GET", d.s.URL+"/api/v1/rft/adapters/"+dep.ID, d.s.Token("globex", auth.ScopeJobsRead), "", nil); other.status != http.StatusNotFound {
		t.Errorf("another organization's adapter: %d %s", other.status, other.body)
	}
	if ro := call(t, "POST", d.s.URL+"/api/v1/rft/adapters/"+dep.ID+"/unload", d.s.Token("acme", auth.ScopeJobsRead), "", nil); ro.status != http.StatusForbidden {
		t.Errorf("an unload with a read-only token: %d %s", ro.status, ro.body)
	}
	if un := call(t, "POST", d.s.URL+"/api/v1/rft/adapters/"+dep.ID+"/unload", d.token, "", nil); un.status != 200 || !strings.Contains(string(un.body), `"deploymentStatus":"NOT_DEPLOYED"`) {
		t.Errorf("unload of an adapter no agent holds yet: %d %s", un.status, un.body)
	}
	if bad := call(t, "POST", d.s.URL+"/api/v1/rft/checkpoints/"+d.jobID+"-step-20/deploy", d.token, "", nil); bad.status != http.StatusConflict ||
		!strings.Contains(string(bad.body), `"detail"`) {
		t.Errorf("prime deploy of an unfinished checkpoint: %d %s", bad.status, bad.body)
	}
	body, _ := json.Marshal(map[string]any{"token": "not-a-lease"})
	if lost := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+dep.Server+"/serving", d.s.AgentToken("agent-1"), "application/json", body); lost.status != http.StatusConflict {
		t.Errorf("serving without the lease: %d %s", lost.status, lost.body)
	}
}

// Deleting a job forgets its deployments: their weights were its data.
func TestDeletingAJobForgetsItsDeployments(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	commitCheckpoint(t, d.store, d.jobID, 10, map[string]string{"weights/adapter_model.safetensors": strings.Repeat("w", 1024)})
	b, _ := json.Marshal(map[string]any{"job": d.jobID})
	r := call(t, "POST", d.s.URL+"/v1/deployments", d.token, "application/json", b)
	var dep struct{ ID, Server string }
	r.decode(t, &dep)
	if r.status != 200 || dep.ID == "" {
		t.Fatalf("deploy: %d %s", r.status, r.body)
	}
	if c := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/cancel", d.token, "", nil); c.status != 200 {
		t.Fatalf("cancel: %d %s", c.status, c.body)
	}
	if del := call(t, "DELETE", d.s.URL+"/v1/jobs/"+d.jobID, d.token, "", nil); del.status != http.StatusNoContent {
		t.Fatalf("delete: %d %s", del.status, del.body)
	}
	if g := call(t, "GET", d.s.URL+"/v1/deployments/"+dep.ID, d.token, "", nil); g.status != http.StatusNotFound {
		t.Errorf("the deleted job's deployment: %d %s", g.status, g.body)
	}
	if l := call(t, "GET", d.s.URL+"/v1/deployments", d.token, "", nil); !strings.Contains(string(l.body), `"total":0`) {
		t.Errorf("deployments after the delete: %s", l.body)
	}
}
