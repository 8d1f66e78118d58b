package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

// egressProxy is a sandboxed job's only way out of its network namespace: an HTTP proxy
// (CONNECT for TLS, plain forwarding for http://) that listens inside the namespace and dials
// from the agent's, refusing whatever webhook.Guard refuses — loopback (the agent's and the
// node's ports), private and link-local addresses (the cloud metadata service) — on the
// address actually dialled, so a name that resolves there is refused too. Model downloads,
// Environments Hub installs, W&B and provider APIs go through it: their clients read
// HTTPS_PROXY.
type egressProxy struct {
	srv   *http.Server
	guard *webhook.Guard
	tr    *http.Transport
	logf  func(string)

	// conns bounds the connections the job has open through the proxy at once.
	conns chan struct{}
	// allow are the host:port addresses the operator lets jobs reach whatever the guard says
	// (Config.Allow: an inference endpoint of its own in its network).
	allow map[string]bool

	mu      sync.Mutex
	refused map[string]bool // said once per host, in the job's notes
}

func startEgressProxy(ln net.Listener, allow []string, logf func(string)) *egressProxy {
	// The node's own interface addresses: a service listening on all of them would be reached
	// through a public one, which the guard's ranges let through.
	g := &webhook.Guard{Own: map[netip.Addr]bool{}}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				g.Own[pfx.Addr().Unmap()] = true
			}
		}
	}
	p := &egressProxy{guard: g, logf: logf, refused: map[string]bool{}, allow: map[string]bool{},
		conns: make(chan struct{}, maxEgressConns)}
	for _, a := range allow {
		p.allow[a] = true
	}
	// Idle upstream connections are the agent's descriptors too: a few, briefly.
	p.tr = &http.Transport{DialContext: p.dial, Proxy: nil, ResponseHeaderTimeout: 5 * time.Minute,
		MaxIdleConns: 16, MaxIdleConnsPerHost: 4, IdleConnTimeout: 30 * time.Second}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 30 * time.Second, IdleTimeout: 2 * time.Minute}
	go func() { _ = p.srv.Serve(ln) }()
	return p
}

func (p *egressProxy) close() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_ = p.srv.Shutdown(ctx)
	_ = p.srv.Close()
	p.tr.CloseIdleConnections()
}

func (p *egressProxy) refuse(w http.ResponseWriter, host string, err error) {
	p.mu.Lock()
	first := !p.refused[host]
	p.refused[host] = true
	p.mu.Unlock()
	if first && p.logf != nil {
		p.logf(fmt.Sprintf("egress to %s refused: %v", host, err))
	}
	http.Error(w, "hostedtrain egress proxy: "+err.Error(), http.StatusForbidden)
}

// maxEgressConns bounds one job's connections through its proxy at once.
const maxEgressConns = 512

// dial reaches addr for the job: an allowed address as it is, any other through the guard,
// which refuses the node's own addresses too.
func (p *egressProxy) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	if p.allow[addr] {
		return (&net.Dialer{Timeout: 10 * time.Second}).DialContext(ctx, network, addr)
	}
	return p.guard.DialContext(ctx, network, addr)
}

// hopHeaders are a proxy's own, never forwarded.
var hopHeaders = []string{"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func (p *egressProxy) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case p.conns <- struct{}{}:
	default:
		http.Error(w, fmt.Sprintf("hostedtrain egress proxy: more than %d connections at once", maxEgressConns), http.StatusTooManyRequests)
		return
	}
	release := sync.OnceFunc(func() { <-p.conns })
	if r.Method == http.MethodConnect {
		p.connect(w, r, release) // a tunnel holds its place until it closes
		return
	}
	defer release()
	if r.URL.Scheme != "http" || r.URL.Host == "" {
		http.Error(w, "hostedtrain egress proxy: only absolute http:// URLs and CONNECT", http.StatusBadRequest)
		return
	}
	out := r.Clone(r.Context())
	out.RequestURI = ""
	for _, h := range hopHeaders {
		out.Header.Del(h)
	}
	resp, err := p.tr.RoundTrip(out)
	if err != nil {
		p.fail(w, r.URL.Host, err)
		return
	}
	defer resp.Body.Close()
	for _, h := range hopHeaders {
		resp.Header.Del(h)
	}
	for k, vs := range resp.Header {
		w.Header()[k] = vs
	}
	w.WriteHeader(resp.StatusCode)
	_, _ = io.Copy(w, resp.Body)
}

// fail answers a dial that went wrong: 403 where the guard refused it, 502 otherwise.
func (p *egressProxy) fail(w http.ResponseWriter, host string, err error) {
	var te *webhook.TargetError
	if errors.As(err, &te) {
		p.refuse(w, host, te)
		return
	}
	http.Error(w, "hostedtrain egress proxy: "+err.Error(), http.StatusBadGateway)
}

func (p *egressProxy) connect(w http.ResponseWriter, r *http.Request, release func()) {
	tunnel := false
	defer func() {
		if !tunnel {
			release()
		}
	}()
	ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
	defer cancel()
	up, err := p.dial(ctx, "tcp", r.Host)
	if err != nil {
		p.fail(w, r.Host, err)
		return
	}
	hj, ok := w.(http.Hijacker)
	if !ok {
		up.Close()
		http.Error(w, "hostedtrain egress proxy: cannot tunnel", http.StatusInternalServerError)
		return
	}
	down, buf, err := hj.Hijack()
	if err != nil {
		up.Close()
		return
	}
	if _, err := down.Write([]byte("HTTP/1.1 200 Connection established\r\n\r\n")); err != nil {
		up.Close()
		down.Close()
		return
	}
	tunnel = true
	go func() {
		defer release()
		defer up.Close()
		defer down.Close()
		done := make(chan struct{}, 2)
		go func() { _, _ = io.Copy(up, buf); done <- struct{}{} }()
		go func() { _, _ = io.Copy(down, up); done <- struct{}{} }()
		<-done
	}()
}
