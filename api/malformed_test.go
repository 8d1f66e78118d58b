package api_test

import (
	"bytes"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// Malformed requests get a 4xx problem+json, never a 5xx, and change nothing.
func TestMalformedRequestsAre4xx(t *testing.T) {
	t.Parallel()
	st := apitest.Start(t, apitest.Options{})
	writer := st.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite, auth.ScopeWebhooks)
	agent := st.AgentToken("agent-1")
	good := `{"model":"Qwen/Qwen3-4B","env":[{"id":"primeintellect/alphabet-sort"}],"max_steps":10}`
	deep := strings.Repeat(`{"a":`, 100000) + "1" + strings.Repeat("}", 100000)
	deepArr := `{"model":"Qwen/Qwen3-4B","env":[{"id":"e","args":{"x":` + strings.Repeat("[", 50000) + strings.Repeat("]", 50000) + `}}]}`
	deepTOML := "model = \"Qwen/Qwen3-4B\"\nx = " + strings.Repeat("[", 50000) + strings.Repeat("]", 50000) + "\n"
	cases := []struct {
		name, method, path, token, ctype string
		body                             []byte
	}{
		{"huge body", "POST", "/v1/jobs", writer, "application/json", bytes.Repeat([]byte("a"), 3<<20)},
		{"huge TOML", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"" + strings.Repeat("m", 2<<20) + "\"\n")},
		{"deep nesting", "POST", "/v1/jobs", writer, "application/json", []byte(deep)},
		{"deep array in args", "POST", "/v1/jobs", writer, "application/json", []byte(deepArr)},
		{"deep TOML array", "POST", "/v1/jobs", writer, "application/toml", []byte(deepTOML)},
		{"invalid UTF-8 JSON", "POST", "/v1/jobs", writer, "application/json", []byte("{\"model\":\"m\xff\xfe\",\"env\":[{\"id\":\"e\"}]}")},
		{"invalid UTF-8 TOML", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"m\xff\"\n[[env]]\nid = \"e\"\n")},
		{"NaN", "POST", "/v1/jobs", writer, "application/json", []byte(`{"model":"Qwen/Qwen3-4B","env":[{"id":"e"}],"max_steps":NaN}`)},
		{"TOML nan", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B\"\nmax_steps = nan\n[[env]]\nid = \"e\"\n")},
		{"TOML inf learning rate", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B\"\nlearning_rate = inf\n[[env]]\nid = \"e\"\n")},
		{"huge number", "POST", "/v1/jobs", writer, "application/json", []byte(`{"model":"Qwen/Qwen3-4B","env":[{"id":"e"}],"max_steps":1e400}`)},
		{"huge integer", "POST", "/v1/jobs", writer, "application/json", []byte(`{"model":"Qwen/Qwen3-4B","env":[{"id":"e"}],"max_steps":123456789012345678901234567890}`)},
		{"huge TOML integer", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B\"\nmax_steps = 99999999999999999999\n[[env]]\nid = \"e\"\n")},
		{"duplicate JSON keys", "POST", "/v1/jobs", writer, "application/json", []byte(`{"model":"Qwen/Qwen3-4B","model":"n","env":[{"id":"e"}]}`)},
		{"duplicate TOML keys", "POST", "/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B\"\nmodel = \"n\"\n[[env]]\nid = \"e\"\n")},
		{"text/plain", "POST", "/v1/jobs", writer, "text/plain", []byte(good)},
		{"application/xml", "POST", "/v1/jobs", writer, "application/xml", []byte(`<job/>`)},
		{"no content type", "POST", "/v1/jobs", writer, "", []byte(good)},
		{"broken content type", "POST", "/v1/jobs", writer, "application/json; charset", []byte(good)},
		{"empty body", "POST", "/v1/jobs", writer, "application/json", nil},
		{"truncated JSON", "POST", "/v1/jobs", writer, "application/json", []byte(good[:20])},
		{"JSON array", "POST", "/v1/jobs", writer, "application/json", []byte(`[1,2,3]`)},
		{"trailing garbage", "POST", "/v1/jobs", writer, "application/json", []byte(good + "{}")},
		{"NUL in a string", "POST", "/v1/jobs", writer, "application/json", []byte(`{"model":"m\u0000","env":[{"id":"e"}]}`)},
		{"webhook deep", "POST", "/v1/webhooks", writer, "application/json", []byte(deep)},
		{"heartbeat NaN", "POST", "/v1/agent/jobs/x/heartbeat", agent, "application/json", []byte(`{"lease_token":"1.a","progress":{"step":NaN}}`)},
		{"heartbeat huge", "POST", "/v1/agent/jobs/x/heartbeat", agent, "application/json", bytes.Repeat([]byte(" "), 2<<20)},
		{"claim wrong type", "POST", "/v1/agent/claim", agent, "application/json", []byte(`{"wait_seconds":"forever"}`)},
		{"invalid UTF-8 in the path", "GET", "/v1/jobs/%ff%fe", writer, "", nil},
		{"query NaN", "GET", "/v1/jobs?limit=NaN", writer, "", nil},
		{"query huge", "GET", "/v1/jobs?limit=99999999999999999999999", writer, "", nil},
		{"query invalid UTF-8", "GET", "/v1/jobs?kind=%ff", writer, "", nil},
	}
	for _, c := range cases {
		r := call(t, c.method, st.URL+c.path, c.token, c.ctype, c.body)
		if r.status < 400 || r.status > 499 {
			t.Errorf("%s: %d %.300s, want 4xx", c.name, r.status, r.body)
			continue
		}
		r.problem(t)
	}
	var list struct{ Items []any }
	call(t, "GET", st.URL+"/v1/jobs", writer, "", nil).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("malformed requests made %d jobs", len(list.Items))
	}
	if r := call(t, "POST", st.URL+"/v1/jobs", writer, "application/json", []byte(good)); r.status != http.StatusCreated {
		t.Errorf("a good request after them: %d %s", r.status, r.body)
	}
}
