package gpuagent

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// openJobBox opens a job's sandbox, in a sandbox of its own, as the agent does for a job without
// GPUs. It needs root, as the agent does on a node and in CI.
func openJobBox(t *testing.T) (b *sandbox.Box, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the sandbox tests need root, as the agent does on a node: run make test as root (CI does)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap is missing: make test installs Debian's bubblewrap")
	}
	sb, err := sandbox.Open(sandbox.Config{UIDBase: 62000 + os.Getpid()%1000*8, ProxyPort: 3128}, t.TempDir(), 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	dir = filepath.Join(t.TempDir(), "jobs", "job")
	for _, d := range append([]string{""}, sandbox.WritableDirs...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	b, err = sb.OpenBox(dir, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, dir
}

// The agent's calls to a job's servers stay in the job's network (red team, issue 29): a job's
// inference server that answers /health with a redirect to the node's loopback, and names that
// resolve there, reach nothing on the node — the redirect is not followed, and only a literal
// loopback address is dialled, from inside the job's network namespace.
func TestTheAgentsCallsToAJobStayInItsNetwork(t *testing.T) {
	// A canary on the node's loopback, IPv4 and IPv6, at one port.
	var canary atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	canaryPort := ln.Addr().(*net.TCPAddr).Port
	listeners := []net.Listener{ln}
	if ln6, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", canaryPort)); err == nil {
		defer ln6.Close()
		listeners = append(listeners, ln6)
	}
	for _, l := range listeners {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				canary.Add(1)
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				c.Close()
			}
		}()
	}
	b, dir := openJobBox(t)
	// The job's "inference server": every answer is a redirect to the node's canary.
	jobPort := freePort(t)
	server := fmt.Sprintf(`
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(302)
        self.send_header("Location", "http://localhost:%[1]d/pwned" if self.path == "/health" else "http://[::1]:%[1]d/pwned")
        self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", %[2]d), H).serve_forever()
`, canaryPort, jobPort)
	log := filepath.Join(t.TempDir(), "server.log")
	p, err := startProcess(b, []string{"/usr/bin/python3", "-c", server}, dir, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.terminate(time.Second)
	hc := jobClient(b, 2*time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d/", jobPort)
	testwait.Until(t, 20*time.Second, "the job's server listens", func() bool {
		c, err := b.DialContext(context.Background(), "tcp", fmt.Sprintf("127.0.0.1:%d", jobPort))
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	for _, u := range []string{url + "health", url + "other", fmt.Sprintf("http://localhost:%d/health", canaryPort),
		fmt.Sprintf("http://[::1]:%d/health", canaryPort)} {
		resp, err := hc.Get(u)
		switch {
		case err == nil:
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound {
				t.Errorf("%s: %d, want the redirect itself, not followed", u, resp.StatusCode)
			}
		case strings.HasPrefix(u, url):
			t.Errorf("%s: %v, want the job's own answer", u, err)
		}
	}
	if n := canary.Load(); n != 0 {
		t.Fatalf("the node's loopback was reached %d times through the agent", n)
	}
}

// freePort is a port free on the node's loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
