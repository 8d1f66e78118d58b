package main

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// primeDeploy runs the prime CLI's own deployment and inference clients
// (testdata/prime_deploy.py) against the stack, with PRIME_INFERENCE_URL at its /api/v1 as
// `prime inference` would be pointed at it.
func (d *devStack) primeDeploy(t *testing.T, args ...string) (json.RawMessage, bool) {
	t.Helper()
	py := upstreamtest.Command(t)[0]
	cmd := exec.Command(py, append([]string{"testdata/prime_deploy.py", upstreamtest.Kit(t)}, args...)...)
	cmd.Env = append(os.Environ(), "PRIME_API_BASE_URL="+d.url, "PRIME_INFERENCE_URL="+d.url+"/api/v1", "PRIME_API_KEY="+d.token,
		"HOME="+t.TempDir(), "PRIME_TEAM_ID=", "PRIME_CONTEXT=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if _, isExit := err.(*exec.ExitError); err != nil && !isExit {
		t.Fatalf("prime deploy %v: %v", args, err)
	}
	line := lastLine(string(out))
	if !json.Valid([]byte(line)) {
		t.Fatalf("prime deploy %v printed %q\n%s", args, out, stderr.String())
	}
	return json.RawMessage(line), err == nil
}

type primeAdapter struct {
	ID               string `json:"id"`
	RFTRunID         string `json:"rft_run_id"`
	BaseModel        string `json:"base_model"`
	Step             int    `json:"step"`
	Status           string `json:"status"`
	DeploymentStatus string `json:"deployment_status"`
}

// Train → deploy → chat, as a Prime user does it with the prime CLI's own clients: a short
// run trained, its newest checkpoint deployed (DEPLOYED once its server's agent loaded the
// weights), BASE:ADAPTER listed by GET /models, chat plain and streamed through the gateway,
// then a second checkpoint of the same base model served beside it by the same server, each
// answering as itself; unloaded, the adapter is refused.
func TestPrimeDeploymentsTrainDeployChat(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	t.Cleanup(func() {
		if t.Failed() {
			log, _ := os.ReadFile(d.data + "/hostedtrain.log")
			for _, l := range strings.Split(string(log), "\n") {
				if strings.Contains(l, "serv") || strings.Contains(l, "gateway") || strings.Contains(l, "adapter") || strings.Contains(l, "ERROR") || strings.Contains(l, "WARN") {
					t.Log(l)
				}
			}
		}
	})
	var run primeRun
	out, ok := d.primeClient(t, "create", "../../examples/quickstart.toml")
	if err := json.Unmarshal(out, &run); !ok || err != nil || run.ID == "" {
		t.Fatalf("create: %s (%v)", out, err)
	}
	v1 := client.New(d.url, d.token)
	testwait.Until(t, 2*time.Minute, "the run to complete", func() bool {
		j, err := v1.GetJob(context.Background(), run.ID)
		return err == nil && j.Status == job.Completed
	})
	if out, code := d.cli(t, "train", "get", run.ID); code != 0 || !strings.Contains(out, "start-up") || !strings.Contains(out, "first step") {
		t.Errorf("train get shows no start-up: %s", out)
	}
	out, ok = d.primeClient(t, "checkpoints", run.ID)
	var cps []map[string]any
	if err := json.Unmarshal(out, &cps); !ok || err != nil || len(cps) < 2 {
		t.Fatalf("checkpoints: %s", out)
	}
	newest, older := cps[len(cps)-1]["id"].(string), cps[len(cps)-2]["id"].(string)

	if out, ok := d.primeDeploy(t, "deployable"); !ok || !strings.Contains(string(out), "Qwen/Qwen3-4B-Instruct-2507") {
		t.Errorf("deployable models: %s", out)
	}
	var a primeAdapter
	out, ok = d.primeDeploy(t, "deploy-checkpoint", newest)
	if err := json.Unmarshal(out, &a); !ok || err != nil || a.ID == "" || a.RFTRunID != run.ID || a.Status != "READY" ||
		(a.DeploymentStatus != job.Deploying && a.DeploymentStatus != job.Deployed) {
		t.Fatalf("deploy %s: %s", newest, out)
	}
	deployed := func(id string) func() bool {
		return func() bool {
			dep, err := v1.Deployment(context.Background(), id)
			return err == nil && dep.DeploymentStatus == job.Deployed
		}
	}
	testwait.Until(t, time.Minute, "the adapter to be deployed", deployed(a.ID))
	if out, ok := d.primeDeploy(t, "adapter", a.ID); !ok || !strings.Contains(string(out), `"deployment_status": "DEPLOYED"`) {
		t.Errorf("adapter: %s", out)
	}
	if out, ok := d.primeDeploy(t, "adapters"); !ok || !strings.Contains(string(out), `"total": 1`) {
		t.Errorf("adapters: %s", out)
	}
	model := a.BaseModel + ":" + a.ID
	standaloneGateway(t, d, model)
	if out, ok := d.primeDeploy(t, "models"); !ok || !strings.Contains(string(out), `"id": "`+model+`"`) {
		t.Fatalf("models: %s", out)
	}
	if out, ok := d.primeDeploy(t, "model", model); !ok || !strings.Contains(string(out), a.ID) {
		t.Errorf("model: %s", out)
	}
	out, ok = d.primeDeploy(t, "chat", model, "say hi")
	if !ok || !strings.Contains(string(out), "emulated answer of adapter "+model) || !strings.Contains(string(out), "say hi") {
		t.Fatalf("chat: %s", out)
	}
	var streamed struct {
		Chunks int
		Text   string
	}
	out, ok = d.primeDeploy(t, "chat-stream", model, "say hi")
	if err := json.Unmarshal(out, &streamed); !ok || err != nil || streamed.Chunks < 3 || !strings.Contains(streamed.Text, "emulated answer of adapter "+model) {
		t.Fatalf("chat streamed: %s", out)
	}

	// A second checkpoint of the same base model: on the same server, each answering as itself.
	var b primeAdapter
	out, ok = d.primeDeploy(t, "deploy-checkpoint", older)
	if err := json.Unmarshal(out, &b); !ok || err != nil || b.ID == "" || b.ID == a.ID {
		t.Fatalf("deploy %s: %s", older, out)
	}
	testwait.Until(t, time.Minute, "the second adapter to be deployed", deployed(b.ID))
	da, _ := v1.Deployment(context.Background(), a.ID)
	db, _ := v1.Deployment(context.Background(), b.ID)
	if da.Server == "" || da.Server != db.Server {
		t.Errorf("two adapters of one base model on servers %q and %q, want one", da.Server, db.Server)
	}
	other := b.BaseModel + ":" + b.ID
	outA, _ := d.primeDeploy(t, "chat", model, "which are you")
	outB, _ := d.primeDeploy(t, "chat", other, "which are you")
	if !strings.Contains(string(outA), "adapter "+model+" (weights") || !strings.Contains(string(outB), "adapter "+other+" (weights") ||
		weightsOf(string(outA)) == weightsOf(string(outB)) {
		t.Errorf("the two adapters answered\n%s\n%s", outA, outB)
	}

	// The same through hostedtrain's own CLI.
	if out, code := d.cli(t, "deployments", "ls"); code != 0 || !strings.Contains(out, model) || !strings.Contains(out, "DEPLOYED") {
		t.Errorf("hostedtrain deployments ls: %d %s", code, out)
	}
	if out, code := d.cli(t, "chat", other, "hello from the CLI"); code != 0 || !strings.Contains(out, "emulated answer of adapter "+other) {
		t.Errorf("hostedtrain chat: %d %s", code, out)
	}
	testwait.Until(t, 10*time.Second, "train usage to count the deployments' requests", func() bool {
		out, code := d.cli(t, "train", "usage")
		return code == 0 && strings.Contains(out, "deployments served") && !strings.Contains(out, "served 0 request")
	})
	// The prime CLI's billing client: the run's inference is what its deployments served.
	testwait.Until(t, 10*time.Second, "the run's usage to count its deployments' tokens", func() bool {
		out, ok := d.primeClient(t, "usage", run.ID)
		var u struct {
			Inference struct {
				InputTokens  int `json:"input_tokens"`
				OutputTokens int `json:"output_tokens"`
			}
		}
		return ok && json.Unmarshal(out, &u) == nil && u.Inference.InputTokens > 0 && u.Inference.OutputTokens > 0
	})
	if out, code := d.cli(t, "deploy", run.ID+"@best", "-o", "json"); code != 0 || !strings.Contains(out, `"deployment_status"`) {
		t.Errorf("hostedtrain deploy JOB@best: %d %s", code, out)
	}

	if out, ok := d.primeDeploy(t, "unload", a.ID); !ok || !strings.Contains(string(out), `"deployment_status": "UNLOADING"`) &&
		!strings.Contains(string(out), `"deployment_status": "NOT_DEPLOYED"`) {
		t.Fatalf("unload: %s", out)
	}
	testwait.Until(t, time.Minute, "the adapter to be unloaded", func() bool {
		dep, err := v1.Deployment(context.Background(), a.ID)
		return err == nil && dep.DeploymentStatus == job.NotDeployed
	})
	if out, ok := d.primeDeploy(t, "chat", model, "still there?"); ok || !strings.Contains(string(out), "404") {
		t.Errorf("chat with an unloaded adapter: %s", out)
	}
	if out, ok := d.primeDeploy(t, "chat", other, "still there?"); !ok {
		t.Errorf("the other adapter after the unload: %s", out)
	}
}

// weightsOf is the weights digest an emulated answer names.
func weightsOf(answer string) string {
	_, after, _ := strings.Cut(answer, "(weights ")
	digest, _, _ := strings.Cut(after, ")")
	return digest
}

// BenchmarkDeployToDeployed is make bench-inference's deploy figure: a short run trained on
// hostedtrain dev, then the time from the deploy call (POST /v1/deployments) to DEPLOYED —
// the model server claimed, started, the adapter's weights fetched, checked and loaded — with
// the emulator's load time (none here; a real vLLM's is its own).
func BenchmarkDeployToDeployed(b *testing.B) {
	for range b.N {
		d := startDev(b, "20ms")
		cmd := exec.Command(binDir+"/hostedtrain", "train", "submit", "../../examples/quickstart.toml", "-o", "json")
		cmd.Env = append(os.Environ(), "HOSTEDTRAIN_URL="+d.url, "HOSTEDTRAIN_TOKEN="+d.token)
		out, err := cmd.Output()
		var j struct{ ID string }
		if err != nil || json.Unmarshal(out, &j) != nil || j.ID == "" {
			b.Fatalf("submit: %v %s", err, out)
		}
		v1 := client.New(d.url, d.token)
		testwait.Until(b, 2*time.Minute, "the run to complete", func() bool {
			got, err := v1.GetJob(context.Background(), j.ID)
			return err == nil && got.Status == job.Completed
		})
		began := time.Now()
		dep, err := v1.Deploy(context.Background(), j.ID, "latest")
		if err != nil {
			b.Fatal(err)
		}
		testwait.Until(b, time.Minute, "DEPLOYED", func() bool {
			got, err := v1.Deployment(context.Background(), dep.ID)
			return err == nil && got.DeploymentStatus == job.Deployed
		})
		b.ReportMetric(time.Since(began).Seconds(), "deploy-to-deployed-s")
	}
}

// standaloneGateway runs `hostedtrain gateway` beside the stack, on its Redis and keys (as the
// functions' settings name them), and checks it answers: healthy, and the deployment listed.
func standaloneGateway(t *testing.T, d *devStack, model string) {
	t.Helper()
	keys, err := auth.LoadKeySetFile(filepath.Join(d.data, "jwt-keys.json"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`redis\s+(127\.0\.0\.1:\d+)`).FindStringSubmatch(d.out.String())
	if m == nil {
		t.Fatalf("no redis address in hostedtrain dev's output:\n%s", d.out.String())
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), "gateway", "--addr", addr, "--api", d.url)
	cmd.Env = append(os.Environ(), "HOSTEDTRAIN_REDIS_URL=redis://"+m[1], "HOSTEDTRAIN_JWT_KEYS="+keys.String())
	var out syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	testwait.Until(t, 20*time.Second, "hostedtrain gateway to answer /healthz", func() bool {
		resp, err := http.Get("http://" + addr + "/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/api/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !strings.Contains(string(body), model) {
		t.Errorf("hostedtrain gateway's models: %d %s\n%s", resp.StatusCode, body, out.String())
	}
}
