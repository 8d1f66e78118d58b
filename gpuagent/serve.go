package gpuagent

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"time"
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
func (r *jobRun) startServer(ctx context.Context, s *Serve, key string, timeout time.Duration, abort <-chan struct{}) (*process, error) {
	logPath := filepath.Join(r.dir, "inference.log")
	env := append(r.baseEnv(), LocalKeyVar+"="+key)
	r.note("starting the inference server", "model", s.Model, "port", s.Port, "argv", fmt.Sprint(s.Command))
	p, err := startProcess(r.box, s.Command, r.dir, env, logPath)
	if err != nil {
		return nil, err
	}
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	hc := &http.Client{Timeout: 2 * time.Second, Transport: r.localTransport()}
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

// localTransport reaches the job's own ports: in its network namespace when it has a sandbox.
func (r *jobRun) localTransport() http.RoundTripper {
	if r.box == nil {
		return http.DefaultTransport
	}
	ns := r.box.ns
	return &http.Transport{
		DisableKeepAlives: true,
		DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
			var c net.Conn
			err := ns.do(func() (err error) {
				c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
				return err
			})
			return c, err
		},
	}
}
