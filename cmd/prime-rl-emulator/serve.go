package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/httpserver"
)

// runServe emulates `vllm serve MODEL --host H --port P`: an OpenAI-compatible server that
// answers /health once "loaded" (--emulate.serve-delay), lists MODEL (and the LoRA adapters
// loaded) at /v1/models and answers /v1/chat/completions, all behind the key in VLLM_API_KEY
// when it is set (vLLM's --api-key). With --enable-lora and VLLM_ALLOW_RUNTIME_LORA_UPDATING=True
// it loads and unloads adapters at run time (openai.go; --emulate.lora-load-time each), and
// --emulate.token-time paces a stream's tokens. SIGTERM stops it.
func runServe(ctx context.Context, args []string, out io.Writer) int {
	var em emulation
	rest, err := parseCommon(args, &em)
	if err != nil || len(rest) == 0 {
		return fail(out, 2, "error: usage: serve MODEL --host H --port P [--tensor-parallel-size T] [--max-model-len N]")
	}
	model := rest[0]
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.SetOutput(out)
	host := fs.String("host", "", "host")
	port := fs.Int("port", 8000, "port")
	fs.Int("tensor-parallel-size", 1, "tensor parallelism")
	fs.Int("max-model-len", 0, "the longest sequence served (vLLM's --max-model-len)")
	enableLora := fs.Bool("enable-lora", false, "serve LoRA adapters")
	served := fs.String("served-model-name", "", "the name the model is served under (default MODEL)")
	fs.Int("max-loras", 1, "LoRA adapters in one batch")
	fs.Int("max-cpu-loras", 0, "LoRA adapters kept in CPU memory")
	maxRank := fs.Int("max-lora-rank", 16, "the highest LoRA rank served")
	if err := fs.Parse(rest[1:]); err != nil {
		return 2
	}
	var mu sync.Mutex
	logf := func(msg string) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintln(out, vllmLine("INFO", msg))
	}
	logf(banner)
	ln, err := net.Listen("tcp", net.JoinHostPort(*host, strconv.Itoa(*port)))
	if err != nil {
		fmt.Fprintln(out, vllmLine("ERROR", fmt.Sprintf("OSError: [Errno 98] Address already in use: %d", *port)))
		return 1
	}
	ready := time.Now().Add(em.serveDelay)
	if *served != "" {
		model = *served
	}
	api := newOpenAI(model, os.Getenv("VLLM_API_KEY"), logf, loraOptions{
		enabled: *enableLora, runtime: strings.EqualFold(os.Getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING"), "true"),
		maxRank: *maxRank, loadTime: em.loraLoadTime, tokenTime: em.tokenTime,
	}).handler()
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if time.Now().Before(ready) {
			http.Error(w, "loading", http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, r)
	}))
	logf(fmt.Sprintf("Starting vLLM API server on http://%s", ln.Addr()))
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case <-ctx.Done():
		logf("Shutting down")
		_ = srv.Close()
		return 0
	case err := <-done:
		if errors.Is(err, http.ErrServerClosed) {
			return 0
		}
		fmt.Fprintln(out, vllmLine("ERROR", err.Error()))
		return 1
	}
}
