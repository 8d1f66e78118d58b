package webhook_test

import (
	"context"
	"net"
	"net/netip"
	"net/url"
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

// FuzzCheckURL feeds arbitrary URLs, with names resolving to arbitrary addresses, to the guard
// of webhook targets: it must never panic, and an accepted URL is http(s), names a host,
// carries no credentials, and reaches only a public address.
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
	})
}
