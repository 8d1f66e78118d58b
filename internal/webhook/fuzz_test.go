package webhook_test

import (
	"context"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

// fixedResolver resolves every name to one address.
type fixedResolver struct{ addr netip.Addr }

func (r fixedResolver) LookupIPAddr(context.Context, string) ([]net.IPAddr, error) {
	return []net.IPAddr{{IP: net.IP(r.addr.AsSlice())}}, nil
}

// public is what an accepted target must be, judged by the standard library alone.
func public(a netip.Addr) bool {
	a = a.Unmap()
	return a.IsGlobalUnicast() && !a.IsPrivate() && !a.IsLoopback() && !a.IsLinkLocalUnicast() &&
		!a.IsMulticast() && !a.IsUnspecified() && a.Zone() == ""
}

// carried are the IPv4 addresses an IPv6 address delivers to by its form (IPv4-mapped,
// -translated or -compatible, NAT64, 6to4, Teredo), by the RFCs' layouts; ok is false for the
// local-use NAT64 prefix, which is never public.
func carried(a netip.Addr) (v4 []netip.Addr, ok bool) {
	if !a.Is6() || a.Is4In6() {
		return nil, true
	}
	b := a.As16()
	last := netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})
	in := func(p string) bool { return netip.MustParsePrefix(p).Contains(a) }
	switch {
	case in("64:ff9b:1::/48"):
		return nil, false
	case in("64:ff9b::/96"), in("::ffff:0:0:0/96"), in("::/96") && a != netip.IPv6Unspecified() && a != netip.IPv6Loopback():
		return []netip.Addr{last}, true
	case in("2002::/16"):
		return []netip.Addr{netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})}, true
	case in("2001::/32"):
		return []netip.Addr{netip.AddrFrom4([4]byte{b[4], b[5], b[6], b[7]}),
			netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]})}, true
	}
	return nil, true
}

// FuzzCheckURL feeds arbitrary URLs, with names resolving to arbitrary addresses, to the guard
// of webhook targets: it must never panic, and an accepted URL is http(s), names a host,
// carries no credentials, names a port from 1 to 65535 if any, and reaches only a public
// address, which carries (NAT64, 6to4, Teredo, IPv4-translated) only public IPv4 addresses.
func FuzzCheckURL(f *testing.F) {
	for _, seed := range []struct {
		url  string
		addr []byte
	}{
		{"https://hooks.example.com/x", []byte{93, 184, 216, 34}},
		{"http://127.0.0.1:8080/", nil},
		{"http://[::ffff:10.0.0.1]/", nil},
		{"https://metadata.google.internal/", []byte{169, 254, 169, 254}},
		{"http://[2002:7f00:1::]/", nil},
		{"https://user:pw@example.com/", []byte{1, 1, 1, 1}},
		{"https://example.com/", []byte{0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1}},
		{"gopher://example.com/", []byte{1, 1, 1, 1}},
		{"http://[2001:0:5db8:d822::80ff:fffe]/", nil},
		{"http://[64:ff9b:1::a00:1]/", nil},
		{"http://[::ffff:0:7f00:1]/", nil},
		{"https://example.com:0/", []byte{1, 1, 1, 1}},
		{"https://example.com:65536/", []byte{1, 1, 1, 1}},
		{"https://example.com/", []byte{0x20, 0x01, 0, 0, 0x5d, 0xb8, 0xd8, 0x22, 0, 0, 0, 0, 0xf5, 0xff, 0xff, 0xfe}},
	} {
		f.Add(seed.url, seed.addr)
	}
	f.Fuzz(func(t *testing.T, raw string, addr []byte) {
		resolved, ok := netip.AddrFromSlice(addr)
		if !ok {
			resolved = netip.MustParseAddr("93.184.216.34")
		}
		g := &webhook.Guard{Resolver: fixedResolver{resolved}}
		if err := g.CheckURL(context.Background(), raw); err != nil {
			return
		}
		u, err := url.Parse(raw)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Hostname() == "" || u.User != nil {
			t.Fatalf("accepted %q", raw)
		}
		target := resolved
		if a, err := netip.ParseAddr(u.Hostname()); err == nil {
			target = a
		}
		if !public(target) {
			t.Fatalf("accepted %q reaching %s", raw, target)
		}
		v4, ok := carried(target)
		if !ok {
			t.Fatalf("accepted %q reaching the local-use NAT64 address %s", raw, target)
		}
		for _, v := range v4 {
			if !public(v) {
				t.Fatalf("accepted %q reaching %s, which carries %s", raw, target, v)
			}
		}
		if p := u.Port(); p != "" {
			if n, err := strconv.Atoi(p); err != nil || n < 1 || n > 65535 {
				t.Fatalf("accepted %q with port %q", raw, p)
			}
		}
	})
}
