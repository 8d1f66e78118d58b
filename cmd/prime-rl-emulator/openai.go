package main

import (
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// openAI is vLLM's OpenAI-compatible server as the emulator plays it: /health, /v1/models,
// /v1/chat/completions (plain, and streamed as vLLM streams: SSE "data:" chunks ending
// "data: [DONE]"), and — with LoRA enabled and VLLM_ALLOW_RUNTIME_LORA_UPDATING set, as vLLM
// requires — its runtime LoRA endpoints /v1/load_lora_adapter and /v1/unload_lora_adapter,
// with their error cases. An answer is deterministic per model: it names the model (the base
// or the adapter) and the sha256 of the adapter's weights, so a test can tell which adapter
// answered.
type openAI struct {
	base, key string
	logf      func(string)
	lora      loraOptions

	mu       sync.Mutex
	adapters map[string]adapter // loaded, by lora_name
	order    []string
}

// loraOptions are vLLM's LoRA flags and the emulated cost of loading an adapter.
type loraOptions struct {
	enabled   bool // --enable-lora
	runtime   bool // VLLM_ALLOW_RUNTIME_LORA_UPDATING=True: the load/unload endpoints exist
	maxRank   int  // --max-lora-rank (vLLM's default 16)
	loadTime  time.Duration
	tokenTime time.Duration // between streamed tokens
}

type adapter struct {
	path, digest string
	created      int64
}

func newOpenAI(base, key string, logf func(string), lora loraOptions) *openAI {
	if lora.maxRank == 0 {
		lora.maxRank = 16
	}
	return &openAI{base: base, key: key, logf: logf, lora: lora, adapters: map[string]adapter{}}
}

// openAIHandler is the server without LoRA: what rl's and eval's inference servers answer.
func openAIHandler(model, key string, logf func(string)) http.Handler {
	return newOpenAI(model, key, logf, loraOptions{}).handler()
}

var completions sync.Mutex

func (o *openAI) log(msg string) {
	if o.logf != nil {
		completions.Lock()
		o.logf(msg)
		completions.Unlock()
	}
}

func (o *openAI) handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/health", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusOK) })
	mux.HandleFunc("/v1/models", o.authed(o.models))
	mux.HandleFunc("/v1/chat/completions", o.authed(o.chat))
	if o.lora.enabled && o.lora.runtime {
		mux.HandleFunc("POST /v1/load_lora_adapter", o.authed(o.load))
		mux.HandleFunc("POST /v1/unload_lora_adapter", o.authed(o.unload))
	}
	return mux
}

func (o *openAI) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if o.key != "" && r.Header.Get("Authorization") != "Bearer "+o.key {
			http.Error(w, `{"error":"Unauthorized"}`, http.StatusUnauthorized)
			return
		}
		h(w, r)
	}
}

// vllmError answers as vLLM's create_error_response does.
func vllmError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "error", "message": msg, "type": typ, "param": nil, "code": status})
}

func (o *openAI) models(w http.ResponseWriter, _ *http.Request) {
	o.mu.Lock()
	data := []map[string]any{{"id": o.base, "object": "model", "created": time.Now().Unix(), "owned_by": "vllm", "root": o.base, "parent": nil}}
	for _, name := range o.order {
		a := o.adapters[name]
		data = append(data, map[string]any{"id": name, "object": "model", "created": a.created, "owned_by": "vllm", "root": a.path, "parent": o.base})
	}
	o.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

// load is vLLM's POST /v1/load_lora_adapter {"lora_name", "lora_path"}.
func (o *openAI) load(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
		Path string `json:"lora_path"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.Name == "" || req.Path == "" {
		vllmError(w, http.StatusBadRequest, "InvalidUserInput", "Both 'lora_name' and 'lora_path' must be provided.")
		return
	}
	o.mu.Lock()
	_, loaded := o.adapters[req.Name]
	o.mu.Unlock()
	if loaded {
		vllmError(w, http.StatusBadRequest, "InvalidUserInput", fmt.Sprintf("The lora adapter '%s' has already been loaded.", req.Name))
		return
	}
	digest, refused := o.readAdapter(req.Path)
	if refused != nil {
		vllmError(w, refused.status, refused.typ, fmt.Sprintf("Loading lora %s failed: %s", req.Name, refused.msg))
		return
	}
	time.Sleep(o.lora.loadTime)
	o.mu.Lock()
	if _, loaded := o.adapters[req.Name]; !loaded {
		o.adapters[req.Name] = adapter{path: req.Path, digest: digest, created: time.Now().Unix()}
		o.order = append(o.order, req.Name)
	}
	o.mu.Unlock()
	o.log(fmt.Sprintf("Loaded new LoRA adapter: name '%s', path '%s'", req.Name, req.Path))
	fmt.Fprintf(w, "Success: LoRA adapter '%s' added successfully.", req.Name)
}

// refusal is an error vLLM answers: its status, type and message.
type refusal struct {
	status   int
	typ, msg string
}

// readAdapter checks a LoRA adapter as vLLM's PEFT loader does (adapter_config.json with a
// rank within --max-lora-rank, adapter_model.safetensors) and returns its weights' sha256.
func (o *openAI) readAdapter(dir string) (string, *refusal) {
	read := func(name string) ([]byte, *refusal) {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if errors.Is(err, os.ErrNotExist) {
			return nil, &refusal{http.StatusNotFound, "NotFoundError", "No adapter found for " + dir}
		}
		if err != nil {
			return nil, &refusal{http.StatusBadRequest, "BadRequestError", err.Error()}
		}
		return b, nil
	}
	cfg, refused := read("adapter_config.json")
	if refused != nil {
		return "", refused
	}
	var c struct {
		R int `json:"r"`
	}
	if err := json.Unmarshal(cfg, &c); err != nil {
		return "", &refusal{http.StatusBadRequest, "BadRequestError", "adapter_config.json: " + err.Error()}
	}
	if c.R > o.lora.maxRank {
		return "", &refusal{http.StatusBadRequest, "BadRequestError", fmt.Sprintf("LoRA rank %d is greater than max_lora_rank %d.", c.R, o.lora.maxRank)}
	}
	weights, refused := read("adapter_model.safetensors")
	if refused != nil {
		return "", refused
	}
	sum := sha256.Sum256(weights)
	return hex.EncodeToString(sum[:]), nil
}

// unload is vLLM's POST /v1/unload_lora_adapter {"lora_name"}.
func (o *openAI) unload(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Name string `json:"lora_name"`
	}
	_ = json.NewDecoder(r.Body).Decode(&req)
	if req.Name == "" {
		vllmError(w, http.StatusBadRequest, "InvalidUserInput", "either 'lora_name' and 'lora_int_id' needs to be provided.")
		return
	}
	o.mu.Lock()
	_, loaded := o.adapters[req.Name]
	if loaded {
		delete(o.adapters, req.Name)
		o.order = slices.DeleteFunc(o.order, func(n string) bool { return n == req.Name })
	}
	o.mu.Unlock()
	if !loaded {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The lora adapter '%s' cannot be found.", req.Name))
		return
	}
	o.log(fmt.Sprintf("Removed LoRA adapter: name '%s'", req.Name))
	fmt.Fprintf(w, "Success: LoRA adapter '%s' removed successfully.", req.Name)
}

// chatRequest is what the emulator reads of a chat completion request.
type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role    string `json:"role"`
		Content any    `json:"content"`
	} `json:"messages"`
	Stream        bool `json:"stream"`
	StreamOptions *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
}

func (o *openAI) chat(w http.ResponseWriter, r *http.Request) {
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		vllmError(w, http.StatusBadRequest, "BadRequestError", "invalid JSON: "+err.Error())
		return
	}
	answer, ok := o.answer(req)
	if !ok {
		vllmError(w, http.StatusNotFound, "NotFoundError", fmt.Sprintf("The model `%s` does not exist.", req.Model))
		return
	}
	o.log("POST /v1/chat/completions 200")
	prompt := 0
	for _, m := range req.Messages {
		prompt += len(strings.Fields(fmt.Sprint(m.Content))) + 4
	}
	words := strings.SplitAfter(answer, " ")
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": len(words), "total_tokens": prompt + len(words)}
	id, created := "chatcmpl-"+rand.Text()[:16], time.Now().Unix()
	if !req.Stream {
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{"id": id, "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "message": map[string]any{"role": "assistant", "content": answer},
				"logprobs": nil, "finish_reason": "stop", "stop_reason": nil}},
			"usage": usage})
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	flusher, _ := w.(http.Flusher)
	send := func(v any) bool {
		b, _ := json.Marshal(v)
		if _, err := fmt.Fprintf(w, "data: %s\n\n", b); err != nil {
			return false
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	chunk := func(delta map[string]any, finish any) map[string]any {
		return map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []map[string]any{{"index": 0, "delta": delta, "logprobs": nil, "finish_reason": finish}}}
	}
	if !send(chunk(map[string]any{"role": "assistant", "content": ""}, nil)) {
		return
	}
	for _, word := range words {
		if o.lora.tokenTime > 0 {
			select {
			case <-time.After(o.lora.tokenTime):
			case <-r.Context().Done():
				return
			}
		}
		if !send(chunk(map[string]any{"content": word}, nil)) {
			return
		}
	}
	send(chunk(map[string]any{"content": ""}, "stop"))
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		send(map[string]any{"id": id, "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{}, "usage": usage})
	}
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	if flusher != nil {
		flusher.Flush()
	}
}

// answer is the emulated model's reply to req, and false for a model the server does not hold.
func (o *openAI) answer(req chatRequest) (string, bool) {
	last := ""
	if n := len(req.Messages); n > 0 {
		last = fmt.Sprint(req.Messages[n-1].Content)
	}
	if req.Model == o.base {
		return fmt.Sprintf("emulated answer of %s to: %s", o.base, last), true
	}
	o.mu.Lock()
	a, ok := o.adapters[req.Model]
	o.mu.Unlock()
	if !ok {
		return "", false
	}
	return fmt.Sprintf("emulated answer of adapter %s (weights %s) to: %s", req.Model, a.digest[:12], last), true
}
