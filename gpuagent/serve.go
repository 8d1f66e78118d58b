package gpuagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
)

// newKey is a random key for the inference server the agent starts for one job.
func newKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "ht-" + hex.EncodeToString(b)
}

// startServer starts the job's inference server (an open-weight model on its GPUs, for a
// GEPA or eval job) and waits until it answers /health, up to timeout. It gives up when
// abort closes, or when the server exits (its log's last lines say why).
func (r *jobRun) startServer(ctx context.Context, s *render.Serve, key string, timeout time.Duration, abort <-chan struct{}) (*process, error) {
	return r.startServerEnv(ctx, s, key, timeout, abort, nil)
}

// startServerEnv is startServer with more of the server's environment.
func (r *jobRun) startServerEnv(ctx context.Context, s *render.Serve, key string, timeout time.Duration, abort <-chan struct{}, extra []string) (*process, error) {
	logPath := filepath.Join(r.dir, "inference.log")
	env := append(append(r.baseEnv(), render.LocalKeyVar+"="+key), extra...)
	r.note("starting the inference server", "model", s.Model, "port", s.Port, "argv", fmt.Sprint(s.Command))
	p, err := startProcess(r.box, s.Command, r.dir, env, logPath)
	if err != nil {
		return nil, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	hc := jobClient(r.box, 2*time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d/health", s.Port)
	for {
		select {
		case <-p.done:
			return nil, fmt.Errorf("the inference server exited with status %d before it was ready%s", p.exitCode(), lastLines(logPath, 8))
		case <-deadline.C:
			p.terminate(10 * time.Second)
			return nil, fmt.Errorf("the inference server was not ready after %s%s", timeout, lastLines(logPath, 8))
		case <-abort:
			p.terminate(10 * time.Second)
			return nil, errAborted
		case <-ctx.Done():
			p.terminate(10 * time.Second)
			return nil, ctx.Err()
		case <-tick.C:
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if resp, err := hc.Do(req); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					r.note("the inference server is ready", "url", s.BaseURL())
					return p, nil
				}
			}
		}
	}
}

// jobClient is how the agent calls a job's own servers (its inference server's /health): only
// at a literal loopback address, dialled from a thread inside the job's network namespace when
// it has a sandbox, with no redirect followed. The server is the job's code (any Environments
// Hub package can run at Python's start), and the agent runs as root in the node's network: a
// redirect to http://localhost:… followed from here, or a name resolved and dialled from the
// resolver's threads, would send the agent's request to the node's own ports.
func jobClient(b *sandbox.Box, timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		Transport: &http.Transport{
			DisableKeepAlives: true,
			Proxy:             nil,
			DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				ap, err := netip.ParseAddrPort(addr)
				if err != nil || !ap.Addr().IsLoopback() {
					return nil, fmt.Errorf("the agent calls a job's servers only at a loopback address, not %q", addr)
				}
				// One literal address: the dial makes its socket on this goroutine's thread,
				// never on another thread of the resolver's or a second family's.
				d := &net.Dialer{}
				if b == nil {
					return d.DialContext(ctx, network, addr)
				}
				return b.DialContext(ctx, network, ap.String())
			},
		},
	}
}
