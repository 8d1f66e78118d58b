package gateway

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/yamux"
)

// A tunnel is one agent's multiplexed connection (yamux) to the gateway. The agent dials out
// — a GPU node behind NAT accepts no connection — with an HTTP Upgrade authenticated by its
// agent token, and then serves HTTP on every stream the gateway opens: each user request is
// one stream, so a slow stream never holds up another and no framing of ours is involved.

// upgradeProto is the protocol the tunnel's Upgrade names.
const upgradeProto = "hostedtrain-tunnel"

// TunnelPath is where agents dial their tunnel.
const TunnelPath = "/v1/agent/tunnel"

// ServerHeader names, on a request through a tunnel, the serve job (the model server on the
// agent's node) it is for.
const ServerHeader = "X-Hostedtrain-Server"

// yamuxConfig is both ends' session settings: a keepalive every few seconds, so a dead node's
// streams end within seconds instead of hanging.
func yamuxConfig() *yamux.Config {
	c := yamux.DefaultConfig()
	c.KeepAliveInterval = 5 * time.Second
	c.ConnectionWriteTimeout = 10 * time.Second
	c.MaxStreamWindowSize = 1 << 20
	c.LogOutput = io.Discard
	return c
}

// Tunnel keeps an agent's tunnel to the gateway at url (its TunnelPath) until ctx ends:
// dialed with token, served with handler, dialed again after a loss (backing off up to 10 s).
// connected, if not nil, hears each session that opens.
func Tunnel(ctx context.Context, url, token string, handler http.Handler, logger *slog.Logger, connected func()) {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		sess, err := dialTunnel(ctx, url, token)
		if err != nil {
			logger.Warn("gateway tunnel: dial failed; trying again", "err", err, "in", backoff)
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
			backoff = min(2*backoff, 10*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		logger.Info("gateway tunnel open", "url", url)
		if connected != nil {
			connected()
		}
		srv := &http.Server{Handler: handler, ReadHeaderTimeout: 30 * time.Second}
		stop := context.AfterFunc(ctx, func() { _ = sess.Close() })
		err = srv.Serve(sess)
		stop()
		_ = sess.Close()
		if ctx.Err() == nil {
			logger.Warn("gateway tunnel lost; dialing again", "err", err)
		}
	}
}

// dialTunnel opens one tunnel: the Upgrade, then a yamux session whose streams the gateway
// opens.
func dialTunnel(ctx context.Context, url, token string) (*yamux.Session, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(url, "/")+TunnelPath, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", upgradeProto)
	// No client timeout: it would wrap the upgraded connection; the transport bounds the dial
	// and the wait for the answer instead.
	resp, err := dialClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		resp.Body.Close()
		return nil, fmt.Errorf("gateway answered %s: %s", resp.Status, strings.TrimSpace(string(body)))
	}
	conn, ok := resp.Body.(io.ReadWriteCloser)
	if !ok {
		resp.Body.Close()
		return nil, errors.New("gateway's upgrade gave no connection")
	}
	return yamux.Client(conn, yamuxConfig())
}

var dialClient = &http.Client{Transport: &http.Transport{
	Proxy:                 http.ProxyFromEnvironment,
	DialContext:           (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
	TLSHandshakeTimeout:   10 * time.Second,
	ResponseHeaderTimeout: 30 * time.Second,
}}

// tunnels are the gateway's open tunnels, by agent.
type tunnels struct {
	mu      sync.Mutex
	byAgent map[string]*tunnel
	routes  *Routes // with several gateways: where the others find the tunnels held here
}

type tunnel struct {
	agent string
	sess  *yamux.Session
	http  *http.Client
}

func newTunnels(routes *Routes) *tunnels {
	return &tunnels{byAgent: map[string]*tunnel{}, routes: routes}
}

func (t *tunnels) get(agent string) *tunnel {
	t.mu.Lock()
	defer t.mu.Unlock()
	tn := t.byAgent[agent]
	if tn != nil && tn.sess.IsClosed() {
		delete(t.byAgent, agent)
		return nil
	}
	return tn
}

// count is how many tunnels are open.
func (t *tunnels) count() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.byAgent)
}

// accept takes an agent's Upgrade: the connection becomes the agent's tunnel, replacing one it
// had (an agent that dialed again after a loss the gateway had not noticed yet).
func (t *tunnels) accept(w http.ResponseWriter, agent string) error {
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return err
	}
	// The server's read and write deadlines of the request are the tunnel's no more.
	if err := conn.SetDeadline(time.Time{}); err != nil {
		conn.Close()
		return err
	}
	if _, err := rw.WriteString("HTTP/1.1 101 Switching Protocols\r\nUpgrade: " + upgradeProto + "\r\nConnection: Upgrade\r\n\r\n"); err != nil {
		conn.Close()
		return err
	}
	if err := rw.Flush(); err != nil {
		conn.Close()
		return err
	}
	sess, err := yamux.Server(bufferedConn{conn, rw.Reader}, yamuxConfig())
	if err != nil {
		conn.Close()
		return err
	}
	tn := &tunnel{agent: agent, sess: sess, http: &http.Client{Transport: &http.Transport{
		DialContext:         func(context.Context, string, string) (net.Conn, error) { return sess.Open() },
		MaxIdleConnsPerHost: 64,
		IdleConnTimeout:     90 * time.Second,
	}}}
	t.mu.Lock()
	old := t.byAgent[agent]
	t.byAgent[agent] = tn
	t.mu.Unlock()
	if old != nil {
		_ = old.sess.Close()
	}
	if t.routes != nil {
		held, release := context.WithCancel(context.Background())
		go t.routes.hold(held, agent)
		go func() { <-sess.CloseChan(); release() }()
	}
	go func() {
		<-sess.CloseChan()
		t.mu.Lock()
		if t.byAgent[agent] == tn {
			delete(t.byAgent, agent)
		}
		t.mu.Unlock()
	}()
	return nil
}

// closeAll ends every tunnel (the gateway stopping).
func (t *tunnels) closeAll() {
	t.mu.Lock()
	defer t.mu.Unlock()
	for agent, tn := range t.byAgent {
		_ = tn.sess.Close()
		delete(t.byAgent, agent)
	}
}

// bufferedConn reads what the hijack's reader holds before the connection.
type bufferedConn struct {
	net.Conn
	r *bufio.Reader
}

func (c bufferedConn) Read(p []byte) (int, error) { return c.r.Read(p) }
