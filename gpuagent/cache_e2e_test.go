package gpuagent_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/testwait"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/nodecache"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/queue"
)

// The node's caches across jobs (issue 33), in the sandbox: the first job of a model fetches
// its weights (verified) and installs its environment, and both are kept; the second job of the
// same model and environment on the node fetches and installs nothing — its phases say cached;
// a cached blob corrupted on disk is found before the third job uses it and fetched again.
func TestASecondJobOnTheNodeStartsFromItsCache(t *testing.T) {
	b := setup(t, queue.Config{})
	cfg := b.agentConfig(t, "agent-c", "--emulate.step-time", "20ms")
	cfg.Sandbox = sandboxed(t)

	// The model hub: a mirror of the job's model (a stand-in for huggingface.co).
	weights := bytes.Repeat([]byte("weights!"), 11<<17) // 11 MiB: listed with its sha256, as the hub lists large files
	cache := cacheWithHub(t, "Qwen/Qwen3-4B-Instruct-2507", map[string][]byte{
		"config.json": []byte(`{"architectures":["Qwen3ForCausalLM"]}`), "model.safetensors": weights})
	cfg.Cache = cache
	b.run(t, cfg)

	phases := func() (map[string]job.Phase, *job.Job) {
		t.Helper()
		j := b.submit(t, smallJob)
		done := b.waitFor(t, j.ID, "ended", terminal)
		if done.Status != job.Completed {
			t.Fatalf("job %s: %s (%s)", j.ID, done.Status, done.Error)
		}
		out := map[string]job.Phase{}
		for _, p := range done.Progress.Phases {
			out[p.Name] = p
		}
		return out, done
	}
	first, firstJob := phases()
	if w, in := first[job.PhaseWeights], first[job.PhaseInstall]; w.Cached || w.Bytes < int64(len(weights)) || in.Cached || in.Bytes == 0 {
		t.Fatalf("first job: weights %+v, install %+v; want the weights fetched and the environment installed", w, in)
	}
	if inf := b.logText(t, firstJob.ID, 1, "inference"); !strings.Contains(inf, "Compiling a graph") {
		t.Fatalf("the first job's vLLM log:\n%s\nwant it to compile", inf)
	}
	second, secondJob := phases()
	if w, in := second[job.PhaseWeights], second[job.PhaseInstall]; !w.Cached || w.Bytes != 0 || !in.Cached || in.Bytes != 0 {
		t.Fatalf("second job: weights %+v, install %+v; want both from the node's cache", w, in)
	}
	// And vLLM loads the graph the first job compiled, from the node's compile cache.
	if inf := b.logText(t, secondJob.ID, 1, "inference"); !strings.Contains(inf, "Directly load the compiled graph(s)") || strings.Contains(inf, "Compiling a graph") {
		t.Fatalf("the second job's vLLM log:\n%s\nwant the compiled graph loaded from the cache", inf)
	}
	if notes := b.logText(t, secondJob.ID, 1, "agent"); !strings.Contains(notes, "compile cache: from the node's cache") {
		t.Fatalf("the second job's agent notes:\n%s\nwant the compile cache seeded", notes)
	}
	held := cache.Held(10)
	res := secondJob.Config.Resources
	compile := jobspec.CompileNeed(secondJob.Org, secondJob.Config.Model, res.GPUType, res.GPUs)
	if len(held) != 3 || !slices.Contains(held, compile) {
		t.Fatalf("the node holds %v; want the model, the organization's install and its compile cache %s", held, compile)
	}

	// Corrupt the cached weights in place: the next job's check finds it, and they are fetched
	// again (and the job runs on good ones).
	var blob string
	for _, e := range cache.Entries() {
		if e.Kind == nodecache.KindModel {
			for _, f := range e.Files {
				if f.Size == int64(len(weights)) {
					blob = filepath.Join(cache.HubDir(), "models--Qwen--Qwen3-4B-Instruct-2507", "blobs", f.Path)
				}
			}
		}
	}
	bad := bytes.Clone(weights)
	bad[12345] ^= 0xff
	if err := os.Chmod(blob, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(blob, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	third, _ := phases()
	if w, in := third[job.PhaseWeights], third[job.PhaseInstall]; w.Cached || w.Bytes < int64(len(weights)) || !in.Cached {
		t.Fatalf("after corruption: weights %+v, install %+v; want the weights fetched again, the install still cached", w, in)
	}
	if got, _ := os.ReadFile(blob); !bytes.Equal(got, weights) {
		t.Fatal("the corrupt blob is still in the cache")
	}
	if s := cache.Stats()[nodecache.KindModel]; s.Refetched != 1 || s.Hits != 1 || s.Misses != 2 {
		t.Fatalf("model stats %+v", s)
	}
}

// An operator warms a node ahead of demand (`admin nodes warm`): its agent fetches the model at
// its next report, the node then says it holds it (claims prefer its jobs), and the fleet's
// node list shows the node's cache.
func TestAnOperatorWarmsANode(t *testing.T) {
	b := setup(t, queue.Config{})
	old := gpuagent.CacheReportEvery
	gpuagent.CacheReportEvery = 100 * time.Millisecond
	t.Cleanup(func() { gpuagent.CacheReportEvery = old })
	cache := cacheWithHub(t, "acme/warm-1b", map[string][]byte{"config.json": []byte(`{"architectures":["LlamaForCausalLM"]}`)})
	cfg := b.agentConfig(t, "agent-w")
	cfg.Cache = cache
	b.run(t, cfg)
	admin := client.New(b.stack.URL, b.stack.Token("ops", auth.ScopeAdmin))
	ctx := context.Background()
	if err := admin.WarmNode(ctx, "agent-w", []string{"acme/warm-1b"}); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "the node holds the warmed model", func() bool {
		return slices.Contains(cache.Held(10), "m:acme/warm-1b")
	})
	testwait.Until(t, 20*time.Second, "the node list shows the node's cache", func() bool {
		nodes, err := admin.Nodes(ctx)
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if n.ID == "agent-w" && n.Cache["model"].Entries == 1 && n.Cache["model"].BytesFetched > 0 {
				return true
			}
		}
		return false
	})
	// A model id that is not one is refused, naming the field.
	if err := admin.WarmNode(ctx, "agent-w", []string{"../etc"}); err == nil {
		t.Fatal("a bad model id was accepted")
	}
}

// cacheWithHub is a node cache fetching from a hub (nodecache.HubServer, a stand-in for
// huggingface.co) that serves model's files, both stopped when the test ends.
func cacheWithHub(t *testing.T, model string, files map[string][]byte) *nodecache.Cache {
	t.Helper()
	models := t.TempDir()
	for name, data := range files {
		p := filepath.Join(models, model, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hub := httptest.NewServer(&nodecache.HubServer{Dir: models})
	t.Cleanup(hub.Close)
	cache, err := nodecache.Open(nodecache.Config{Dir: t.TempDir(), Hub: &nodecache.Hub{URL: hub.URL}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cache.Close)
	return cache
}

// An agent newer than its API: once the node holds a compile cache, its claims say so (c:…),
// which an API from before compile caches were a claim's need refuses (422 naming /held). The
// agent claims on without saying what it holds, and takes work, rather than retrying the
// refused claim for ever.
func TestAnAgentNewerThanItsAPIClaimsWithoutItsCache(t *testing.T) {
	b := setup(t, queue.Config{})
	u, err := url.Parse(b.stack.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(u)
	var refused, bareAfter atomic.Int32 // claims refused; claims without held after a refusal
	older := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.URL.Path == "/v1/agent/claim" {
			body, _ := io.ReadAll(r.Body)
			var req struct {
				Held []string `json:"held"`
			}
			_ = json.Unmarshal(body, &req)
			for i, h := range req.Held {
				if !strings.HasPrefix(h, "m:") && !strings.HasPrefix(h, "e:") {
					// What the contract before 2026-11-29 answered (held: ^[me]:…).
					refused.Add(1)
					w.Header().Set("Content-Type", "application/problem+json")
					w.WriteHeader(http.StatusUnprocessableEntity)
					fmt.Fprintf(w, `{"type":"about:blank","title":"Unprocessable Entity","status":422,"detail":"the request body does not validate: 1 problem(s)","errors":[{"pointer":"/held/%d","message":"string doesn't match the regular expression \"^[me]:[^\\s]{1,300}$\""}]}`, i)
					return
				}
			}
			if len(req.Held) == 0 && refused.Load() > 0 {
				bareAfter.Add(1)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
			r.ContentLength = int64(len(body))
		}
		proxy.ServeHTTP(w, r)
	}))
	t.Cleanup(older.Close)
	cfg := b.agentConfig(t, "agent-n", "--emulate.step-time", "20ms")
	cfg.API = client.New(older.URL, b.stack.AgentToken("agent-n"))
	cfg.Cache = cacheWithHub(t, "Qwen/Qwen3-4B-Instruct-2507", map[string][]byte{"config.json": []byte(`{"architectures":["Qwen3ForCausalLM"]}`)})
	b.run(t, cfg)
	run := func(what string) {
		t.Helper()
		j := b.submit(t, smallJob)
		if done := b.waitFor(t, j.ID, "ended", terminal); done.Status != job.Completed {
			t.Fatalf("%s: %s (%s)", what, done.Status, done.Error)
		}
	}
	// The first job leaves a compile cache: the agent's next claim says so and is refused.
	run("the first job")
	testwait.Until(t, 30*time.Second, "a claim naming the compile cache refused, then claims without held", func() bool {
		return refused.Load() >= 1 && bareAfter.Load() >= 2
	})
	// The agent takes work still, and says nothing of its cache again.
	run("a job after the refusal")
	if n := refused.Load(); n != 1 {
		t.Fatalf("%d claims refused; want 1, then none: the agent claims without its cache", n)
	}
}
