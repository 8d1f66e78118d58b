package sandbox

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

// The node's own addresses are refused even where the guard's ranges would let them through
// (a public address on the node's network card, where a service listens on all addresses).
func TestTheEgressProxyRefusesTheNodesOwnAddresses(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := startEgressProxy(ln, nil, nil)
	defer p.close()
	if len(p.guard.Own) == 0 {
		t.Fatal("the node's addresses were not read")
	}
	public := netip.MustParseAddr("8.8.8.8") // as if it were this node's
	p.guard.Own[public] = true
	_, err = p.dial(context.Background(), "tcp", "8.8.8.8:443")
	var te *webhook.TargetError
	if !errors.As(err, &te) || !strings.Contains(err.Error(), "this machine's own address") {
		t.Fatalf("got %v, want a refusal naming the node's own address", err)
	}
}

// The egress proxy refuses every range the guard's table holds (the table is the one list),
// whatever port is asked for.
func TestTheEgressProxyRefusesEveryBlockedRange(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := startEgressProxy(ln, nil, nil)
	defer p.close()
	for _, pfx := range webhook.BlockedPrefixes() {
		addr := netip.AddrPortFrom(pfx.Masked().Addr(), 443).String()
		var te *webhook.TargetError
		if _, err := p.dial(context.Background(), "tcp", addr); !errors.As(err, &te) {
			t.Errorf("%s (in %s): %v; want the guard's refusal", addr, pfx, err)
		}
	}
}
