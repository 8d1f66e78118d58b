// Package httpserver builds every net/http server the project starts (the API under
// `hostedtrain dev`, the agent's metrics, the emulator's inference servers), so that each has
// the timeouts that keep a slow or idle client from holding a connection, and goroutines with
// it, forever: a client that sends its headers a byte at a time (slowloris), one that never
// finishes its body, one that keeps an idle connection open.
package httpserver

import (
	"net/http"
	"time"
)

const (
	// ReadHeaderTimeout bounds the wait for a request's headers.
	ReadHeaderTimeout = 10 * time.Second
	// ReadTimeout bounds the wait for a whole request, headers and body. The API's bodies are
	// bounded (1 MiB), so this is ample; once the body is read the deadline is lifted, so a
	// handler may take longer (a long-poll claim, an event stream).
	ReadTimeout = 30 * time.Second
	// IdleTimeout bounds how long a kept-alive connection waits for its next request.
	IdleTimeout = 2 * time.Minute
	// MaxHeaderBytes bounds a request's headers (a token and a few more fit many times over).
	MaxHeaderBytes = 64 << 10
)

// New returns a server for h with the timeouts above. It sets no WriteTimeout: that would cut
// the API's Server-Sent Events streams, which end with their job, their client or the API's
// StreamLimit.
func New(h http.Handler) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: ReadHeaderTimeout,
		ReadTimeout:       ReadTimeout,
		IdleTimeout:       IdleTimeout,
		MaxHeaderBytes:    MaxHeaderBytes,
	}
}
