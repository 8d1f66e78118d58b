package webhook

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// blocked are the address ranges a delivery may never reach: our own network and the
// machine's neighbours. Each says what it is, for the error a user sees.
var blocked = []struct {
	prefix netip.Prefix
	what   string
}{
	{netip.MustParsePrefix("0.0.0.0/8"), "a \"this network\" address"},
	{netip.MustParsePrefix("10.0.0.0/8"), "a private address"},
	{netip.MustParsePrefix("100.64.0.0/10"), "a carrier-grade NAT (shared) address"},
	{netip.MustParsePrefix("127.0.0.0/8"), "a loopback address"},
	{netip.MustParsePrefix("169.254.0.0/16"), "a link-local address (the cloud metadata service lives there)"},
	{netip.MustParsePrefix("172.16.0.0/12"), "a private address"},
	{netip.MustParsePrefix("192.0.0.0/24"), "an IETF protocol address"},
	{netip.MustParsePrefix("192.0.2.0/24"), "a documentation address"},
	{netip.MustParsePrefix("192.168.0.0/16"), "a private address"},
	{netip.MustParsePrefix("198.18.0.0/15"), "a benchmarking address"},
	{netip.MustParsePrefix("198.51.100.0/24"), "a documentation address"},
	{netip.MustParsePrefix("203.0.113.0/24"), "a documentation address"},
	{netip.MustParsePrefix("224.0.0.0/4"), "a multicast address"},
	{netip.MustParsePrefix("240.0.0.0/4"), "a reserved address"},
	{netip.MustParsePrefix("::/128"), "the unspecified address"},
	{netip.MustParsePrefix("::1/128"), "a loopback address"},
	{netip.MustParsePrefix("fc00::/7"), "an IPv6 unique-local address"},
	{netip.MustParsePrefix("fe80::/10"), "an IPv6 link-local address"},
	{netip.MustParsePrefix("ff00::/8"), "a multicast address"},
	{netip.MustParsePrefix("2001:db8::/32"), "a documentation address"},
	{netip.MustParsePrefix("100::/64"), "a discard-only address"},
	// Public in form, but a cloud host's own: Azure's wire server (the platform endpoint its
	// guest agent and instance metadata use) answers every VM at this address.
	{netip.MustParsePrefix("168.63.129.16/32"), "a cloud host's wire-server address"},
	{netip.MustParsePrefix("192.88.99.0/24"), "a 6to4 relay anycast address"},
	{netip.MustParsePrefix("fec0::/10"), "an IPv6 site-local address"},
}

// BlockedPrefixes are the ranges the guard refuses, in its own order: for tests of what is built
// on the guard (the agent's egress proxy), which must refuse each of them too.
func BlockedPrefixes() []netip.Prefix {
	out := make([]netip.Prefix, len(blocked))
	for i, b := range blocked {
		out[i] = b.prefix
	}
	return out
}

// embedded are IPv6 forms that carry an IPv4 address in their last 32 bits; the IPv4 address
// is what they reach. (IPv4-mapped ::ffff:0:0/96 is unmapped before anything else.)
var embedded = []netip.Prefix{
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64, RFC 6052
	netip.MustParsePrefix("::ffff:0:0:0/96"), // IPv4-translated, RFC 2765
	netip.MustParsePrefix("::/96"),           // IPv4-compatible (deprecated)
}

var (
	// localNAT64 is the local-use NAT64 prefix (RFC 8215): it translates to IPv4 inside
	// someone's own network, wherever in it the operator chose to put the IPv4 address, so
	// none of it is a public destination.
	localNAT64 = netip.MustParsePrefix("64:ff9b:1::/48")
	// sixToFour carries an IPv4 address in bits 16..47 (2002:V4ADDR::/48).
	sixToFour = netip.MustParsePrefix("2002::/16")
	// teredo carries its server's IPv4 address in bits 32..63 and its client's, inverted,
	// in the last 32 bits; the relay delivers to the client's.
	teredo = netip.MustParsePrefix("2001::/32")
)

// Resolver looks names up; net.DefaultResolver is one.
type Resolver interface {
	LookupIPAddr(ctx context.Context, host string) ([]net.IPAddr, error)
}

// Guard keeps webhook deliveries to the public internet: it refuses URLs whose host is, or
// resolves to, an address in our network, and — since a name can resolve differently when
// the delivery is made (DNS rebinding) — checks the address actually dialled on every
// connection.
type Guard struct {
	// AllowLoopback lets deliveries reach 127.0.0.0/8 and ::1 (the local stack's receivers);
	// never in production.
	AllowLoopback bool
	// Resolver looks names up (default net.DefaultResolver).
	Resolver Resolver
	// Own are more addresses refused, whatever their range: the machine's own (a public
	// address on its network card reaches whatever listens on all of them).
	Own map[netip.Addr]bool
}

// TargetError says why a URL or an address is refused.
type TargetError struct{ Msg string }

func (e *TargetError) Error() string { return e.Msg }

func (g *Guard) resolver() Resolver {
	if g.Resolver != nil {
		return g.Resolver
	}
	return net.DefaultResolver
}

// CheckAddr refuses an address in our network.
func (g *Guard) CheckAddr(a netip.Addr) error {
	a = a.Unmap() // ::ffff:127.0.0.1 is 127.0.0.1
	if g.Own[a] {
		return &TargetError{Msg: fmt.Sprintf("%s is this machine's own address", a)}
	}
	if a.Is6() {
		b := a.As16()
		for _, p := range embedded {
			if p.Contains(a) && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback() {
				return g.CheckAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
			}
		}
		if localNAT64.Contains(a) {
			return &TargetError{Msg: fmt.Sprintf("%s is a local-use NAT64 address (it reaches IPv4 inside a private network); webhooks go only to public internet addresses", a)}
		}
		var carried []netip.Addr
		switch {
		case sixToFour.Contains(a):
			carried = append(carried, netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]}))
		case teredo.Contains(a):
			carried = append(carried, netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
				netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}))
		}
		for _, v4 := range carried {
			if err := g.CheckAddr(v4); err != nil {
				return &TargetError{Msg: fmt.Sprintf("%s carries an IPv4 address: %s", a, err.Error())}
			}
		}
	}
	if g.AllowLoopback && a.IsLoopback() {
		return nil
	}
	for _, b := range blocked {
		if b.prefix.Contains(a) {
			return &TargetError{Msg: fmt.Sprintf("%s is %s; webhooks go only to public internet addresses", a, b.what)}
		}
	}
	if a.Zone() != "" {
		return &TargetError{Msg: fmt.Sprintf("%s has a zone; webhooks go only to public internet addresses", a)}
	}
	return nil
}

// CheckURL vets a URL when an endpoint is registered: http or https, a host, and every
// address the host resolves to now outside our network. (Deliveries check again when they
// connect.)
func (g *Guard) CheckURL(ctx context.Context, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return &TargetError{Msg: fmt.Sprintf("not a URL: %v", err)}
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return &TargetError{Msg: fmt.Sprintf("the scheme must be http or https, not %q", u.Scheme)}
	}
	host := u.Hostname()
	if host == "" {
		return &TargetError{Msg: "the URL has no host"}
	}
	if u.User != nil {
		return &TargetError{Msg: "the URL must not carry a user name or password; the signature authenticates deliveries"}
	}
	if p := u.Port(); p != "" {
		if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
			return &TargetError{Msg: fmt.Sprintf("the port %q is not one from 1 to 65535", p)}
		}
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return g.CheckAddr(a)
	}
	if strings.EqualFold(strings.TrimSuffix(host, "."), "localhost") || strings.HasSuffix(strings.ToLower(strings.TrimSuffix(host, ".")), ".localhost") {
		if !g.AllowLoopback {
			return &TargetError{Msg: fmt.Sprintf("%s is this machine; webhooks go only to public internet addresses", host)}
		}
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, err := g.resolver().LookupIPAddr(ctx, host)
	if err != nil || len(addrs) == 0 {
		return &TargetError{Msg: fmt.Sprintf("%s does not resolve: %v", host, err)}
	}
	for _, ia := range addrs {
		a, ok := netip.AddrFromSlice(ia.IP)
		if !ok {
			continue
		}
		if err := g.CheckAddr(a); err != nil {
			return &TargetError{Msg: fmt.Sprintf("%s resolves to %s", host, err.Error())}
		}
	}
	return nil
}

// DialContext resolves the host itself, refuses any address in our network, and dials a
// permitted one; the socket's Control hook checks the address once more as it connects.
func (g *Guard) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(host); err == nil {
		addrs = []netip.Addr{a}
	} else {
		ips, err := g.resolver().LookupIPAddr(ctx, host)
		if err != nil {
			return nil, err
		}
		for _, ip := range ips {
			if a, ok := netip.AddrFromSlice(ip.IP); ok {
				addrs = append(addrs, a)
			}
		}
	}
	d := net.Dialer{Timeout: 10 * time.Second, Control: g.control}
	var firstErr error
	for _, a := range addrs {
		if err := g.CheckAddr(a); err != nil {
			if firstErr == nil {
				firstErr = fmt.Errorf("refused: %s resolves to %w", host, err)
			}
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(a.String(), port))
		if err == nil {
			return c, nil
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("%s has no address", host)
	}
	return nil, firstErr
}

// control checks the address the socket is about to connect to.
func (g *Guard) control(_, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return err
	}
	return g.CheckAddr(ap.Addr())
}

// Client is an HTTP client for deliveries: guarded dials, no proxy (one could reach what the
// guard refuses), no redirects (a 3xx is the answer, and a failure), timeout for the whole
// exchange.
func (g *Guard) Client(timeout time.Duration) *http.Client {
	return &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.DialContext,
			ForceAttemptHTTP2:     true,
			MaxIdleConnsPerHost:   4,
			IdleConnTimeout:       90 * time.Second,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: timeout,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// IsTargetError reports whether err is a refusal of the target.
func IsTargetError(err error) bool {
	var te *TargetError
	return errors.As(err, &te)
}
