package main

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeAdapter writes a LoRA adapter as prime-rl broadcasts one (adapter_config.json,
// adapter_model.safetensors) and returns its folder and its weights' sha256.
func writeAdapter(t *testing.T, rank int, weights string) (string, string) {
	t.Helper()
	dir := t.TempDir()
	cfg, _ := json.Marshal(map[string]any{"r": rank, "lora_alpha": 32, "peft_type": "LORA"})
	if err := os.WriteFile(filepath.Join(dir, "adapter_config.json"), cfg, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "adapter_model.safetensors"), []byte(weights), 0o644); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(weights))
	return dir, hex.EncodeToString(sum[:])
}

type vllmClient struct {
	t   *testing.T
	url string
}

func (c vllmClient) post(path string, body any) (int, string) {
	c.t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, c.url+path, strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		c.t.Fatal(err)
	}
	defer resp.Body.Close()
	var out strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		out.WriteString(sc.Text() + "\n")
	}
	return resp.StatusCode, out.String()
}

// The emulated vLLM loads and unloads LoRA adapters at run time as vLLM does, refuses what vLLM
// refuses with vLLM's messages, and answers as the adapter asked for.
func TestTheEmulatedServerServesLoRAAdaptersAtRunTime(t *testing.T) {
	srv := httptest.NewServer(newOpenAI("Qwen/Qwen3-4B", "k", nil, loraOptions{enabled: true, runtime: true}).handler())
	defer srv.Close()
	c := vllmClient{t, srv.URL}
	a, digestA := writeAdapter(t, 8, "weights of a")
	b, digestB := writeAdapter(t, 8, "weights of b")

	for _, load := range []struct{ name, path string }{{"run1-step10", a}, {"run1-step20", b}} {
		if code, body := c.post("/v1/load_lora_adapter", map[string]string{"lora_name": load.name, "lora_path": load.path}); code != 200 ||
			!strings.Contains(body, "Success: LoRA adapter '"+load.name+"' added successfully.") {
			t.Fatalf("load %s: %d %s", load.name, code, body)
		}
	}
	refusals := []struct {
		path string
		body map[string]string
		code int
		msg  string
	}{
		{"/v1/load_lora_adapter", map[string]string{"lora_name": "run1-step10", "lora_path": a}, 400, "The lora adapter 'run1-step10' has already been loaded."},
		{"/v1/load_lora_adapter", map[string]string{"lora_name": "x"}, 400, "Both 'lora_name' and 'lora_path' must be provided."},
		{"/v1/load_lora_adapter", map[string]string{"lora_name": "x", "lora_path": filepath.Join(a, "nope")}, 404, "No adapter found for"},
		{"/v1/unload_lora_adapter", map[string]string{"lora_name": "never"}, 404, "The lora adapter 'never' cannot be found."},
		{"/v1/chat/completions", map[string]string{"model": "never"}, 404, "The model `never` does not exist."},
	}
	big, _ := writeAdapter(t, 64, "rank 64")
	refusals = append(refusals, struct {
		path string
		body map[string]string
		code int
		msg  string
	}{"/v1/load_lora_adapter", map[string]string{"lora_name": "big", "lora_path": big}, 400, "LoRA rank 64 is greater than max_lora_rank 16."})
	for _, r := range refusals {
		if code, body := c.post(r.path, r.body); code != r.code || !strings.Contains(body, r.msg) || !strings.Contains(body, `"object":"error"`) {
			t.Errorf("%s %v: %d %s, want %d %q", r.path, r.body, code, body, r.code, r.msg)
		}
	}

	// Each adapter answers as itself; the base model as the base.
	for model, want := range map[string]string{"run1-step10": digestA[:12], "run1-step20": digestB[:12], "Qwen/Qwen3-4B": "Qwen/Qwen3-4B"} {
		code, body := c.post("/v1/chat/completions", map[string]any{"model": model, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
		var out struct {
			Choices []struct {
				Message struct{ Content string }
			}
			Usage struct {
				CompletionTokens int `json:"completion_tokens"`
			}
		}
		if err := json.Unmarshal([]byte(body), &out); err != nil || code != 200 || len(out.Choices) != 1 ||
			!strings.Contains(out.Choices[0].Message.Content, want) || out.Usage.CompletionTokens == 0 {
			t.Errorf("chat %s: %d %s", model, code, body)
		}
	}

	// Streamed: a role chunk, content chunks, a stop chunk, the usage asked for, then [DONE].
	code, body := c.post("/v1/chat/completions", map[string]any{"model": "run1-step20", "stream": true,
		"stream_options": map[string]bool{"include_usage": true}, "messages": []map[string]string{{"role": "user", "content": "hi"}}})
	lines := strings.Split(strings.TrimSpace(body), "\n\n")
	if code != 200 || len(lines) < 5 || lines[len(lines)-1] != "data: [DONE]" {
		t.Fatalf("stream: %d %q", code, body)
	}
	var text strings.Builder
	for _, l := range lines[:len(lines)-1] {
		var ch struct {
			Choices []struct {
				Delta        struct{ Content string }
				FinishReason *string `json:"finish_reason"`
			}
		}
		if err := json.Unmarshal([]byte(strings.TrimPrefix(l, "data: ")), &ch); err != nil {
			t.Fatalf("chunk %q: %v", l, err)
		}
		for _, c := range ch.Choices {
			text.WriteString(c.Delta.Content)
		}
	}
	if !strings.Contains(text.String(), digestB[:12]) {
		t.Errorf("streamed answer %q is not run1-step20's", text.String())
	}

	// /v1/models lists the base and each adapter with the base as its parent; an unloaded one
	// is gone and answers no more.
	if code, body := c.post("/v1/unload_lora_adapter", map[string]string{"lora_name": "run1-step10"}); code != 200 ||
		!strings.Contains(body, "Success: LoRA adapter 'run1-step10' removed successfully.") {
		t.Fatalf("unload: %d %s", code, body)
	}
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer k")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct{ ID, Parent string }
	}
	_ = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if len(models.Data) != 2 || models.Data[1].ID != "run1-step20" || models.Data[1].Parent != "Qwen/Qwen3-4B" {
		t.Errorf("models: %+v", models.Data)
	}
	if code, _ := c.post("/v1/chat/completions", map[string]any{"model": "run1-step10"}); code != 404 {
		t.Errorf("an unloaded adapter answered %d", code)
	}
}

// Without VLLM_ALLOW_RUNTIME_LORA_UPDATING vLLM has no load endpoint; without the key nothing
// answers.
func TestTheEmulatedServerKeepsVLLMsGates(t *testing.T) {
	srv := httptest.NewServer(newOpenAI("m", "k", nil, loraOptions{enabled: true}).handler())
	defer srv.Close()
	c := vllmClient{t, srv.URL}
	if code, _ := c.post("/v1/load_lora_adapter", map[string]string{"lora_name": "a", "lora_path": "/x"}); code != 404 {
		t.Errorf("load without runtime updating: %d, want 404", code)
	}
	resp, err := http.Post(srv.URL+"/v1/chat/completions", "application/json", strings.NewReader(`{"model":"m"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 401 {
		t.Errorf("no key: %d, want 401", resp.StatusCode)
	}
}
