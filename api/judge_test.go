package api_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// With the operator's judge endpoint, a job whose taskset grades with a judge it holds no key
// for is accepted and graded through the service: its claim carries its own judge token (not
// the operator's key), the API forwards the job's calls with the operator's key and counts the
// job's tokens, and the token stops working for another job's name or once its job has ended.
// The endpoint stands in for an operator's OpenAI-compatible server (the same role as a
// provider's API, which tests never call).
func TestTheServicesJudgeGradesAJobWithoutAKey(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var seen []string
	upstream := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen = append(seen, r.URL.Path+" "+r.Header.Get("Authorization")+" "+string(body))
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","choices":[{"index":0,"message":{"role":"assistant","content":"yes"},"finish_reason":"stop"}],"usage":{"prompt_tokens":120,"completion_tokens":3,"total_tokens":123}}`)
	}))
	t.Cleanup(upstream.Close)
	s := apitest.Start(t, apitest.Options{Judge: &api.Judge{BaseURL: upstream.URL + "/v1", Key: "operator-secret"}})
	writer := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	agent := s.AgentToken("agent-1")

	r := call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"primeintellect/wiki-search\"\n"))
	if r.status != http.StatusCreated {
		t.Fatalf("a judged job without a key: %d %s", r.status, r.body)
	}
	var j job.Job
	r.decode(t, &j)
	judges, _ := jobspec.Dig(j.Config.Env[0].Args, "task", "judges").([]any)
	if jm, _ := judges[0].(map[string]any); len(judges) != 1 || jm["base_url"] != jobspec.OperatorJudgeURL || jm["api_key_var"] != jobspec.JudgeKeyVar ||
		jm["id"] != "wiki-search" || jm["model"] != "openai/gpt-5.4-nano" {
		t.Fatalf("judges %v", judges)
	}

	var cl job.Claim
	call(t, "POST", s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`)).decode(t, &cl)
	if cl.Job == nil || cl.Job.ID != j.ID || cl.Judge == nil || cl.Judge.URL != s.URL+"/v1/judge" || cl.Judge.Token == "" ||
		strings.Contains(cl.Judge.Token, "operator-secret") || cl.Secrets[jobspec.JudgeKeyVar] != "" {
		t.Fatalf("claim %+v", cl)
	}
	judge := func(token string) reply {
		return call(t, "POST", cl.Judge.URL+"/chat/completions", token, "application/json",
			[]byte(`{"model":"openai/gpt-5.4-nano","messages":[{"role":"user","content":"Is Paris the capital of France?"}]}`))
	}
	r = judge(cl.Judge.Token)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"content":"yes"`) {
		t.Fatalf("a judge call: %d %s", r.status, r.body)
	}
	mu.Lock()
	if len(seen) != 1 || !strings.HasPrefix(seen[0], "/v1/chat/completions Bearer operator-secret {") || !strings.Contains(seen[0], "capital of France") {
		t.Errorf("the endpoint saw %q", seen)
	}
	mu.Unlock()
	var u struct {
		JudgeTokens struct{ Total, Input, Output int64 } `json:"judge_tokens"`
	}
	call(t, "GET", s.URL+"/v1/jobs/"+j.ID+"/usage", writer, "", nil).decode(t, &u)
	if u.JudgeTokens.Input != 120 || u.JudgeTokens.Output != 3 || u.JudgeTokens.Total != 123 {
		t.Errorf("judge tokens %+v", u.JudgeTokens)
	}

	// Not a token: refused; a token of the job once it has ended: refused.
	for _, bad := range []string{"", "x.y", strings.Replace(cl.Judge.Token, ".", "x.", 1), writer} {
		if r := judge(bad); r.status != http.StatusUnauthorized {
			t.Errorf("a judge call with %q: %d %s", bad, r.status, r.body)
		}
	}
	done := fmt.Sprintf(`{"lease_token":%q,"progress":{"step":100,"max_steps":100,"checkpoints":1},"checkpoints":[100]}`, cl.Lease.Token)
	if r := call(t, "POST", s.URL+"/v1/agent/jobs/"+j.ID+"/complete", agent, "application/json", []byte(done)); r.status != http.StatusOK {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	if r := judge(cl.Judge.Token); r.status != http.StatusForbidden {
		t.Errorf("a judge call of an ended job: %d %s", r.status, r.body)
	}
	mu.Lock()
	if len(seen) != 1 {
		t.Errorf("refused calls reached the endpoint: %q", seen)
	}
	mu.Unlock()

	// Without an operator endpoint, the same job is refused at submit, naming the key.
	plain := apitest.Start(t, apitest.Options{})
	r = call(t, "POST", plain.URL+"/v1/jobs", plain.Token("acme", auth.ScopeJobsWrite), "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"primeintellect/wiki-search\"\n"))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "PRIME_API_KEY") {
		t.Errorf("a judged job without a key or a service judge: %d %s", r.status, r.body)
	}
}
