package webhook

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"
)

// The test vector the Standard Webhooks specification publishes.
func TestSignatureMatchesTheSpecificationsVector(t *testing.T) {
	t.Parallel()
	sig, err := Sign("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
		time.Unix(1614265330, 0), []byte(`{"test": 2432232314}`))
	if err != nil {
		t.Fatal(err)
	}
	if sig != "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=" {
		t.Errorf("got %s", sig)
	}
}

// During a rotation a delivery carries both signatures; a receiver with either secret verifies
// it, one with neither does not, and a stale timestamp fails.
func TestHeadersAndVerify(t *testing.T) {
	t.Parallel()
	newSecret, _ := NewSecret()
	oldSecret, _ := NewSecret()
	other, _ := NewSecret()
	now := time.Unix(1_800_000_000, 0)
	body := []byte(`{"type":"job.completed"}`)
	h, err := Headers("msg_1", now, body, newSecret, oldSecret)
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(h.Get(HeaderSignature))); n != 2 {
		t.Fatalf("%d signatures, want 2", n)
	}
	for _, s := range []string{newSecret, oldSecret} {
		if err := Verify(s, h, body, now.Add(time.Minute)); err != nil {
			t.Errorf("verify: %v", err)
		}
	}
	if err := Verify(other, h, body, now); err == nil {
		t.Error("a stranger's secret verified")
	}
	if err := Verify(newSecret, h, []byte(`{"type":"job.failed"}`), now); err == nil {
		t.Error("an altered body verified")
	}
	if err := Verify(newSecret, h, body, now.Add(10*time.Minute)); err == nil {
		t.Error("a stale timestamp verified")
	}
	if !strings.HasPrefix(newSecret, "whsec_") || len(newSecret) < 30 {
		t.Errorf("secret %q", newSecret)
	}
}

// mapResolver answers lookups from a table; a name may answer differently each time (DNS
// rebinding).
type mapResolver struct {
	mu      sync.Mutex
	answers map[string][][]string
}

func (m *mapResolver) LookupIPAddr(_ context.Context, host string) ([]net.IPAddr, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	seq := m.answers[host]
	if len(seq) == 0 {
		return nil, errors.New("no such host")
	}
	ans := seq[0]
	if len(seq) > 1 {
		m.answers[host] = seq[1:]
	}
	var out []net.IPAddr
	for _, a := range ans {
		out = append(out, net.IPAddr{IP: net.ParseIP(a)})
	}
	return out, nil
}

func TestTargetsInsideOurNetworkAreRefused(t *testing.T) {
	t.Parallel()
	g := &Guard{Resolver: &mapResolver{answers: map[string][][]string{
		"hooks.example.com":     {{"93.184.216.34"}},
		"loop.example.com":      {{"127.0.0.1"}},
		"mixed.example.com":     {{"93.184.216.34", "10.1.2.3"}},
		"metadata.example.com":  {{"169.254.169.254"}},
		"v6private.example.com": {{"fd00:ec2::254"}},
	}}}
	ctx := context.Background()
	refused := map[string]string{
		"http://127.0.0.1/hook":                              "loopback",
		"http://127.1.2.3:8080/hook":                         "loopback",
		"http://[::1]/hook":                                  "loopback",
		"http://localhost:9000/hook":                         "this machine",
		"http://loop.example.com/hook":                       "resolves to 127.0.0.1",
		"http://10.0.0.8/hook":                               "private",
		"http://172.20.1.1/hook":                             "private",
		"http://192.168.1.10/hook":                           "private",
		"http://169.254.169.254/latest/meta-data/":           "link-local",
		"http://metadata.example.com/":                       "link-local",
		"http://100.64.0.1/hook":                             "carrier-grade NAT",
		"http://224.0.0.1/hook":                              "multicast",
		"http://[ff02::1]/hook":                              "multicast",
		"http://[fd12:3456::1]/hook":                         "unique-local",
		"http://v6private.example.com/hook":                  "unique-local",
		"http://[fe80::1]/hook":                              "link-local",
		"http://[::ffff:127.0.0.1]/hook":                     "loopback",
		"http://[::ffff:169.254.169.254]/hook":               "link-local",
		"http://[64:ff9b::a00:1]/hook":                       "private",
		"http://[2002:a00:1::1]/hook":                        "private",
		"http://[2002:a9fe:a9fe::]/hook":                     "link-local",
		"http://[64:ff9b::7f00:1]/hook":                      "loopback",
		"http://[64:ff9b::169.254.169.254]/hook":             "link-local",
		"http://[64:ff9b:1::a00:1]/hook":                     "local-use NAT64",
		"http://[64:ff9b:1:ffff::5db8:d822]/hook":            "local-use NAT64",
		"http://[::ffff:0:7f00:1]/hook":                      "loopback",
		"http://[::ffff:0:a9fe:a9fe]/hook":                   "link-local",
		"http://[::ffff:0:10.1.2.3]/hook":                    "private",
		"http://[2001:0:5db8:d822::80ff:fffe]/hook":          "loopback",   // Teredo: client 127.0.0.1, inverted
		"http://[2001:0:5db8:d822::f5ff:fffe]/hook":          "private",    // Teredo: client 10.0.0.1
		"http://[2001:0:a00:1::a247:2ddd]/hook":              "private",    // Teredo: server 10.0.0.1
		"http://[2001:0:5db8:d822::5601:5656]/hook":          "link-local", // Teredo: client 169.254.169.169
		"http://hooks.example.com:0/hook":                    "port",
		"http://hooks.example.com:65536/hook":                "port",
		"http://hooks.example.com:99999999999999999999/hook": "port",
		"http://hooks.example.com:http/hook":                 "port",
		"http://[2606:4700::1111]:0/hook":                    "port",
		"http://0.0.0.0/hook":                                "this network",
		"http://mixed.example.com/hook":                      "private",
		"ftp://hooks.example.com/hook":                       "scheme",
		"file:///etc/passwd":                                 "scheme",
		"https:///nohost":                                    "no host",
		"https://user:pw@hooks.example.com/":                 "user name",
		"https://unknown.example.com/":                       "does not resolve",
	}
	for u, why := range refused {
		err := g.CheckURL(ctx, u)
		if err == nil || !IsTargetError(err) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v; want a refusal mentioning %q", u, err, why)
		}
	}
	for _, u := range []string{"https://hooks.example.com/hook", "http://93.184.216.34:8080/x", "https://[2606:4700::1111]/hook",
		"https://hooks.example.com:65535/hook", "https://hooks.example.com:1/hook", "https://hooks.example.com:/hook",
		"http://[2002:5db8:d822::1]/hook",           // 6to4 of a public address
		"http://[64:ff9b::5db8:d822]/hook",          // NAT64 of a public address
		"http://[2001:0:5db8:d822::a247:2ddd]/hook", // Teredo: server and client public
	} {
		if err := g.CheckURL(ctx, u); err != nil {
			t.Errorf("%s refused: %v", u, err)
		}
	}
	loopbackOK := &Guard{AllowLoopback: true, Resolver: g.Resolver}
	for _, u := range []string{"http://127.0.0.1:9000/hook", "http://localhost:9000/hook", "http://[::1]:9000/"} {
		if err := loopbackOK.CheckURL(ctx, u); err != nil && !strings.Contains(err.Error(), "does not resolve") {
			t.Errorf("with loopback allowed, %s refused: %v", u, err)
		}
	}
	if err := loopbackOK.CheckURL(ctx, "http://10.0.0.1/"); err == nil {
		t.Error("allowing loopback allowed a private address")
	}
}

// Every range of the guard's table is refused, from its first address to its last, with what
// the table says it is: the table is the one place a range is added (red team, issue 29: the
// wire-server and site-local addresses were missing).
func TestEveryBlockedRangeIsRefusedEndToEnd(t *testing.T) {
	t.Parallel()
	g := &Guard{}
	for _, b := range blocked {
		for _, a := range []netip.Addr{b.prefix.Masked().Addr(), lastOf(b.prefix)} {
			err := g.CheckAddr(a)
			if err == nil || !strings.Contains(err.Error(), b.what) {
				t.Errorf("%s (in %s): %v; want a refusal saying it is %s", a, b.prefix, err, b.what)
			}
		}
	}
	for _, a := range []string{"168.63.129.16", "168.63.129.15", "fec0::1", "feff::1", "192.88.99.1"} {
		err := g.CheckAddr(netip.MustParseAddr(a))
		if a == "168.63.129.15" { // beside it: public
			if err != nil {
				t.Errorf("%s: %v", a, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("%s was let through", a)
		}
	}
}

// lastOf is the last address of p.
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Masked().Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// A name that passed when it was registered but resolves inside our network when the delivery
// connects (DNS rebinding) is refused at the dial, before a byte is sent.
func TestTheDialedAddressIsChecked(t *testing.T) {
	t.Parallel()
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	res := &mapResolver{answers: map[string][][]string{"rebind.example.com": {{"93.184.216.34"}, {"127.0.0.1"}}}}
	g := &Guard{Resolver: res}
	if err := g.CheckURL(context.Background(), "http://rebind.example.com:"+port+"/hook"); err != nil {
		t.Fatalf("registration: %v", err)
	}
	resp, err := g.Client(5*time.Second).Post("http://rebind.example.com:"+port+"/hook", "application/json", strings.NewReader("{}"))
	if err == nil {
		resp.Body.Close()
		t.Fatal("the delivery reached 127.0.0.1")
	}
	if !strings.Contains(err.Error(), "loopback") || hits != 0 {
		t.Errorf("err %v, hits %d", err, hits)
	}
	// A literal loopback URL is refused at the dial too, not only at registration.
	if _, err := g.Client(5 * time.Second).Get(srv.URL); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Errorf("dialing %s: %v", srv.URL, err)
	}
}

func TestTheClientDoesNotFollowRedirects(t *testing.T) {
	t.Parallel()
	followed := false
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed = true
			return
		}
		http.Redirect(w, r, "/elsewhere", http.StatusFound)
	}))
	defer srv.Close()
	resp, err := (&Guard{AllowLoopback: true}).Client(5 * time.Second).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || followed {
		t.Errorf("status %d, followed %v", resp.StatusCode, followed)
	}
}
