package httpserver_test

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/httpserver"
)

// serve runs srv on a loopback port until the test ends.
func serve(t *testing.T, srv *http.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ln.Addr().String()
}

func TestNewSetsEveryTimeoutButWrite(t *testing.T) {
	t.Parallel()
	srv := httpserver.New(http.NotFoundHandler())
	if srv.ReadHeaderTimeout <= 0 || srv.ReadTimeout <= 0 || srv.IdleTimeout <= 0 || srv.MaxHeaderBytes <= 0 {
		t.Errorf("got %+v, want header, read and idle timeouts and a header limit", srv)
	}
	if srv.WriteTimeout != 0 {
		t.Errorf("got WriteTimeout %s, want none (it would cut event streams)", srv.WriteTimeout)
	}
}

// slowHeaders sends a request's headers a line at a time, every gap, and returns how many
// lines went out before the server closed the connection.
func slowHeaders(t *testing.T, addr string, lines int, gap time.Duration) int {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
	if _, err := fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	for i := range lines {
		select {
		case <-closed:
			return i
		case <-time.After(gap):
		}
		if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", i); err != nil {
			return i
		}
	}
	return lines
}

func TestASlowlorisClientIsCutOff(t *testing.T) {
	t.Parallel()
	srv := httpserver.New(http.NotFoundHandler())
	srv.ReadHeaderTimeout = 300 * time.Millisecond
	addr := serve(t, srv)
	// 100 lines 50 ms apart would take 5 s; the server hangs up long before.
	if sent := slowHeaders(t, addr, 100, 50*time.Millisecond); sent == 100 {
		t.Error("the server took 100 slow header lines without closing the connection")
	}
}

func TestAnIdleConnectionIsClosed(t *testing.T) {
	t.Parallel()
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, "ok") }))
	srv.IdleTimeout = 200 * time.Millisecond
	addr := serve(t, srv)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	fmt.Fprint(c, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	// Then nothing: the server must close the connection (EOF), not keep it for ever.
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Errorf("got %v from an idle kept-alive connection, want the server to close it (EOF)", err)
	}
}

// An event stream outlives ReadTimeout: the deadline is lifted once the request is read.
func TestAStreamOutlivesTheReadTimeout(t *testing.T) {
	t.Parallel()
	const events = 6
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "text/event-stream")
		for i := range events {
			fmt.Fprintf(w, "data: %d\n\n", i)
			http.NewResponseController(w).Flush()
			select {
			case <-r.Context().Done():
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}))
	srv.ReadTimeout = 150 * time.Millisecond // the stream lasts four times as long
	addr := serve(t, srv)
	resp, err := http.Post("http://"+addr+"/", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Count(string(b), "data: "); got != events {
		t.Errorf("got %d events, want %d:\n%s", got, events, b)
	}
}
