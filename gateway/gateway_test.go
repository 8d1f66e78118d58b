package gateway_test

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/queue"
)

// The gateway's tests run a real redis-server (the queue's deployments), the emulated vLLM
// (cmd/prime-rl-emulator's serve, with LoRA at run time) and a real tunnel.

var (
	rdb      *redis.Client
	emulator string
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "gateway-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	emulator = filepath.Join(dir, "prime-rl-emulator")
	if out, err := exec.Command("go", "build", "-o", emulator, "github.com/hostedtrain/hostedtrain/cmd/prime-rl-emulator").CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build the emulator: %v\n%s", err, out)
		return 1
	}
	srv, err := redisproc.Start(context.Background(), redisproc.Options{Dir: filepath.Join(dir, "redis")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer srv.Stop()
	rdb = redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer rdb.Close()
	return m.Run()
}

// stack is a gateway over a queue, with a node serving a base model with LoRA adapters.
type stack struct {
	t       testing.TB
	q       *queue.Client
	keys    *auth.KeySet
	gw      *gateway.Gateway
	url     string
	vllm    string // the emulated vLLM's URL
	server  string // its serve job
	token   string // the serve job's lease token
	stopTun context.CancelFunc
	// gone makes the agent answer its next request 404, as a node whose server moved does.
	gone atomic.Bool
}

var prefixes int

func newStack(t testing.TB, cfg gateway.Config, emulate ...string) *stack {
	t.Helper()
	prefixes++
	q := queue.New(rdb, queue.Config{Prefix: fmt.Sprintf("gw%d-%d", os.Getpid(), prefixes)})
	t.Cleanup(func() { _ = q.Close() })
	keys, err := auth.NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	cfg.Verifier = auth.NewVerifier(keys, nil)
	cfg.Deployments = q
	gw, url := startGateway(t, cfg)
	s := &stack{t: t, q: q, keys: keys, gw: gw, url: url}
	s.vllm = startVLLM(t, emulate...)
	return s
}

// startGateway serves a gateway on a free port; with Routes, it is filed under its own URL.
func startGateway(t testing.TB, cfg gateway.Config) (*gateway.Gateway, string) {
	srv := httptest.NewUnstartedServer(nil)
	url := "http://" + srv.Listener.Addr().String()
	if cfg.Routes != nil {
		r := *cfg.Routes
		r.Advertise = url
		cfg.Routes = &r
	}
	gw := gateway.New(cfg)
	srv.Config.Handler = gw
	srv.Start()
	t.Cleanup(func() { srv.Close(); gw.Close() })
	return gw, url
}

// startVLLM runs the emulated `vllm serve` with runtime LoRA updating on a free port.
func startVLLM(t testing.TB, emulate ...string) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()
	args := append([]string{"serve", "Qwen/Qwen3-4B", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--enable-lora"}, emulate...)
	cmd := exec.Command(emulator, args...)
	cmd.Env = append(os.Environ(), "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True", "VLLM_API_KEY=vk")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	testwait.Until(t, 10*time.Second, "the emulated vLLM answers", func() bool {
		resp, err := http.Get(base + "/health")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == 200
	})
	return base
}

func (s *stack) tokenFor(org string, scopes ...string) string {
	s.t.Helper()
	tok, err := s.keys.Issue(auth.TokenRequest{Subject: "u-" + org, Org: org, Scopes: scopes, TTL: time.Hour}, time.Now())
	if err != nil {
		s.t.Fatal(err)
	}
	return tok
}

// deploy files and deploys adapters of acme's job on one server, claims that server as
// agent-1, loads each adapter into the emulated vLLM (as the agent does: named by its model
// id) and reports them loaded. It returns the adapters and their weights' sha256.
func (s *stack) deploy(steps ...int) ([]*job.Adapter, []string) {
	t := s.t
	t.Helper()
	ctx := context.Background()
	newServer := func(ctx context.Context, a *job.Adapter) (string, error) {
		j, _, err := s.q.Submit(ctx, job.Submission{Org: a.Org, Spec: jobspec.Spec{Kind: jobspec.KindServe, Name: "serve", Model: a.Base,
			Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"}}}, "", "")
		if err != nil {
			return "", err
		}
		return j.ID, nil
	}
	var out []*job.Adapter
	var digests, loaded []string
	for _, step := range steps {
		a, _, err := s.q.PutAdapter(ctx, queue.AdapterSpec{Org: "acme", Job: "job-1", Step: step, Base: "Qwen/Qwen3-4B", Kind: job.AdapterLoRA, Name: "run"})
		if err != nil {
			t.Fatal(err)
		}
		if a, err = s.q.Deploy(ctx, "acme", a.ID, newServer); err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		weights := fmt.Sprintf("weights of step %d", step)
		_ = os.WriteFile(filepath.Join(dir, "adapter_config.json"), []byte(`{"r": 8}`), 0o644)
		_ = os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte(weights), 0o644)
		sum := sha256.Sum256([]byte(weights))
		body := fmt.Sprintf(`{"lora_name": %q, "lora_path": %q}`, a.ModelID(), dir)
		req, _ := http.NewRequest(http.MethodPost, s.vllm+"/v1/load_lora_adapter", strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer vk")
		resp, err := http.DefaultClient.Do(req)
		if err != nil || resp.StatusCode != 200 {
			t.Fatalf("load %s: %v %v", a.ModelID(), resp, err)
		}
		resp.Body.Close()
		out = append(out, a)
		digests = append(digests, hex.EncodeToString(sum[:])[:12])
		loaded = append(loaded, a.ID)
	}
	if s.server == "" {
		cl, err := s.q.Claim(ctx, job.ClaimRequest{AgentID: "agent-1", GPUs: []job.GPU{{Model: "H100", Count: 8}}})
		if err != nil || cl == nil {
			t.Fatalf("claim the server: %v %v", cl, err)
		}
		s.server, s.token = cl.Job.ID, cl.Lease.Token
		if _, err := s.q.Heartbeat(ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.q.Serving(ctx, s.server, s.token, loaded, nil); err != nil {
		t.Fatal(err)
	}
	for i, a := range out {
		if out[i], _ = s.q.GetAdapter(ctx, "acme", a.ID); out[i].Deployment != job.Deployed {
			t.Fatalf("not deployed: %+v", out[i])
		}
	}
	return out, digests
}

// tunnel connects agent-1 to the gateway: each request goes to the local vLLM of the serve job
// it names.
func (s *stack) tunnel() {
	s.t.Helper()
	target, _ := url.Parse(s.vllm)
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.FlushInterval = -1
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get(gateway.ServerHeader) != s.server || s.gone.Swap(false) {
			http.Error(w, "no such server here", http.StatusNotFound)
			return
		}
		r.Header.Set("Authorization", "Bearer vk")
		// The body is read whole first: the server stops reading a request's body once its
		// answer starts, and a proxy still sending it would lose its upstream connection.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		r.Body, r.ContentLength = io.NopCloser(bytes.NewReader(body)), int64(len(body))
		proxy.ServeHTTP(w, r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	s.stopTun = cancel
	s.t.Cleanup(cancel)
	// The agent's token names the agent as its subject.
	agentToken, _ := s.keys.Issue(auth.TokenRequest{Subject: "agent-1", Org: "ops", Scopes: []string{auth.ScopeAgent}, TTL: time.Hour}, time.Now())
	go gateway.Tunnel(ctx, s.url, agentToken, handler, nil, nil)
	testwait.Until(s.t, 10*time.Second, "the agent's tunnel is open", func() bool { return s.gw.Tunnels() == 1 })
}

type reply struct {
	code int
	body string
}

func (s *stack) call(method, path, token string, body any) reply {
	s.t.Helper()
	var rd *strings.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = strings.NewReader(string(b))
	} else {
		rd = strings.NewReader("")
	}
	req, _ := http.NewRequest(method, s.url+path, rd)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sb strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		sb.WriteString(sc.Text() + "\n")
	}
	return reply{resp.StatusCode, sb.String()}
}

func chatBody(model string, stream bool) map[string]any {
	return map[string]any{"model": model, "stream": stream, "messages": []map[string]string{{"role": "user", "content": "hello there"}}}
}

// Two adapters of one base model on one server: each answers as itself through the gateway,
// plain and streamed; /models lists them for their organization alone; another organization's
// call is a 404 as if they did not exist; the requests and tokens are counted per adapter.
func TestTheGatewayRoutesEachAdapterToItsServer(t *testing.T) {
	s := newStack(t, gateway.Config{})
	adapters, digests := s.deploy(10, 20)
	s.tunnel()
	acme, other := s.tokenFor("acme", auth.ScopeJobsRead), s.tokenFor("other", auth.ScopeJobsRead)

	r := s.call(http.MethodGet, "/api/v1/models", acme, nil)
	for _, a := range adapters {
		if r.code != 200 || !strings.Contains(r.body, `"id":"`+a.ModelID()+`"`) {
			t.Fatalf("models: %d %s", r.code, r.body)
		}
	}
	if r := s.call(http.MethodGet, "/api/v1/models", other, nil); r.code != 200 || strings.Contains(r.body, adapters[0].ID) {
		t.Fatalf("another organization's models: %d %s", r.code, r.body)
	}
	if r := s.call(http.MethodGet, "/api/v1/models/"+adapters[0].ModelID(), acme, nil); r.code != 200 || !strings.Contains(r.body, adapters[0].ID) {
		t.Fatalf("one model: %d %s", r.code, r.body)
	}

	for i, a := range adapters {
		r := s.call(http.MethodPost, "/api/v1/chat/completions", acme, chatBody(a.ModelID(), false))
		if r.code != 200 || !strings.Contains(r.body, digests[i]) {
			t.Errorf("chat with %s: %d %s, want its weights %s", a.ModelID(), r.code, r.body, digests[i])
		}
		st := s.call(http.MethodPost, "/api/v1/chat/completions", acme, chatBody(a.ModelID(), true))
		if st.code != 200 || !strings.HasSuffix(strings.TrimSpace(st.body), "data: [DONE]") || !strings.Contains(st.body, `"chat.completion.chunk"`) {
			t.Errorf("stream with %s: %d %s", a.ModelID(), st.code, st.body)
		}
		if strings.Contains(st.body, `"usage"`) {
			t.Errorf("a stream that did not ask for its usage got it: %s", st.body)
		}
	}
	// A node that no longer holds the adapter (its server moved since the route was cached):
	// the gateway looks again and the request is served, not refused.
	s.gone.Store(true)
	if r := s.call(http.MethodPost, "/api/v1/chat/completions", acme, chatBody(adapters[0].ModelID(), false)); r.code != 200 || s.gone.Load() {
		t.Errorf("a request after the server moved: %d %s", r.code, r.body)
	}
	for _, who := range []string{other, ""} {
		r := s.call(http.MethodPost, "/api/v1/chat/completions", who, chatBody(adapters[0].ModelID(), false))
		if want := map[bool]int{true: 404, false: 401}[who != ""]; r.code != want || strings.Contains(r.body, "emulated answer") {
			t.Errorf("a call by %q: %d %s, want %d", who, r.code, r.body, want)
		}
	}
	// Counted in the gateway, added to the adapter's record within a flush.
	testwait.Until(t, 5*time.Second, "the requests to be counted", func() bool {
		a, err := s.q.GetAdapter(context.Background(), "acme", adapters[0].ID)
		return err == nil && a.Requests == 3 && a.CompletionTokens > 0 && a.PromptTokens > 0 && a.UsedAt != nil
	})
	timed := []job.Adapter{*adapters[0]}
	if err := s.q.WithLatencies(context.Background(), timed); err != nil || timed[0].LatencyP50Ms <= 0 || timed[0].LatencyP99Ms < timed[0].LatencyP50Ms {
		t.Errorf("latencies: p50 %v p99 %v (%v)", timed[0].LatencyP50Ms, timed[0].LatencyP99Ms, err)
	}
}

// A stream cut by the node's loss ends with an error event, not a hang; the agent's tunnel
// comes back and the next request is served.
func TestAStreamCutByALostNodeEndsWithAnError(t *testing.T) {
	s := newStack(t, gateway.Config{}, "--emulate.token-time", "300ms")
	adapters, _ := s.deploy(10)
	s.tunnel()
	acme := s.tokenFor("acme", auth.ScopeJobsRead)
	b, _ := json.Marshal(chatBody(adapters[0].ModelID(), true))
	req, _ := http.NewRequest(http.MethodPost, s.url+"/api/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+acme)
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	rest := make(chan string, 1)
	go func() {
		br := bufio.NewReader(resp.Body)
		first, _ := br.ReadString('\n') // the stream has begun
		s.stopTun()                     // and the node is gone: its tunnel closes mid-stream
		all, _ := io.ReadAll(br)
		rest <- first + string(all)
	}()
	select {
	case body := <-rest:
		if !strings.Contains(body, `"upstream_lost"`) || strings.Contains(body, "[DONE]") {
			t.Fatalf("a cut stream: %s", body)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a stream cut by the node's loss hung")
	}
	testwait.Until(t, 10*time.Second, "the lost tunnel is gone", func() bool { return s.gw.Tunnels() == 0 })
	s.tunnel()
	if r := s.call(http.MethodPost, "/api/v1/chat/completions", acme, chatBody(adapters[0].ModelID(), false)); r.code != 200 {
		t.Fatalf("after the tunnel came back: %d %s", r.code, r.body)
	}
}

// An organization past its rate gets 429 with Retry-After; one whose budget is spent gets 402
// with a message the prime CLI prints; a request for an adapter being deployed waits, bounded,
// then gets 503 with Retry-After.
func TestTheGatewaysRefusals(t *testing.T) {
	spent := map[string]bool{"broke": true}
	s := newStack(t, gateway.Config{RatePerOrg: 1, Burst: 2, WakeWait: 300 * time.Millisecond,
		Spent: func(_ context.Context, org string) (string, bool, error) {
			return "the organization's monthly budget is spent", spent[org], nil
		}})
	adapters, _ := s.deploy(10)
	s.tunnel()
	acme := s.tokenFor("acme", auth.ScopeJobsRead)
	codes := []int{}
	for range 4 {
		codes = append(codes, s.call(http.MethodGet, "/api/v1/models", acme, nil).code)
	}
	if codes[len(codes)-1] != 429 {
		t.Errorf("past the rate: %v", codes)
	}
	if r := s.call(http.MethodGet, "/api/v1/models", s.tokenFor("broke", auth.ScopeJobsRead), nil); r.code != 402 || !strings.Contains(r.body, "budget is spent") {
		t.Errorf("a spent budget: %d %s", r.code, r.body)
	}
	if r := s.call(http.MethodGet, "/api/v1/models", s.tokenFor("acme", auth.ScopeWebhooks), nil); r.code != 403 {
		t.Errorf("a token without jobs:read: %d %s", r.code, r.body)
	}

	// A server queued again (its node lost): the adapter is deploying, the request waits and
	// is told to come back.
	s2 := newStack(t, gateway.Config{WakeWait: 300 * time.Millisecond})
	more, _ := s2.deploy(10)
	s2.tunnel()
	if _, err := s2.q.Unload(context.Background(), "acme", more[0].ID, false); err != nil {
		t.Fatal(err)
	}
	if r := s2.call(http.MethodPost, "/api/v1/chat/completions", s2.tokenFor("acme", auth.ScopeJobsRead), chatBody(more[0].ModelID(), false)); r.code != 404 {
		t.Errorf("an unloaded adapter: %d %s", r.code, r.body)
	}
	_ = adapters
}

// Several gateways: a request that reaches a gateway without the tunnel of its adapter's node
// is handed to the one that has it (filed in Redis), which checks the token again and serves
// it; once the tunnel closes, its route is gone.
func TestGatewaysHandARequestToTheOneWithTheTunnel(t *testing.T) {
	prefix := fmt.Sprintf("gw%d-%d", os.Getpid(), prefixes+1)
	routes := &gateway.Routes{Redis: rdb, Prefix: prefix}
	s := newStack(t, gateway.Config{Routes: routes})
	adapters, digests := s.deploy(10)
	s.tunnel()
	other, otherURL := startGateway(t, gateway.Config{Verifier: auth.NewVerifier(s.keys, nil), Deployments: s.q,
		Routes: routes, WakeWait: 300 * time.Millisecond})
	if other.Tunnels() != 0 {
		t.Fatal("the second gateway holds a tunnel")
	}
	acme := s.tokenFor("acme", auth.ScopeJobsRead)
	for _, stream := range []bool{false, true} {
		b, _ := json.Marshal(chatBody(adapters[0].ModelID(), stream))
		req, _ := http.NewRequest(http.MethodPost, otherURL+"/api/v1/chat/completions", bytes.NewReader(b))
		req.Header.Set("Authorization", "Bearer "+acme)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(string(got), digests[0]) {
			t.Fatalf("through the other gateway (stream %v): %d %s", stream, resp.StatusCode, got)
		}
	}
	// A forged hand-over still needs a token of the organization.
	b, _ := json.Marshal(chatBody(adapters[0].ModelID(), false))
	req, _ := http.NewRequest(http.MethodPost, otherURL+"/api/v1/chat/completions", bytes.NewReader(b))
	req.Header.Set(gateway.ForwardedHeader, "1")
	req.Header.Set("Authorization", "Bearer "+s.tokenFor("globex", auth.ScopeJobsRead))
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 404 {
		t.Fatalf("another organization through a hand-over: %v %v", resp, err)
	}
	s.stopTun()
	testwait.Until(t, 10*time.Second, "the closed tunnel's route to go", func() bool {
		return rdb.Exists(context.Background(), "{"+prefix+"}:tunnel:agent-1").Val() == 0
	})
}
