package auth_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// FuzzVerify feeds arbitrary strings to the token verifier: it must never panic, and it may
// accept only a token whose HS256 signature over its first two parts, by the key its kid
// names, is its third part.
func FuzzVerify(f *testing.F) {
	keys, err := auth.NewKeySet()
	if err != nil {
		f.Fatal(err)
	}
	now := time.Now()
	tok, err := keys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead}, TTL: time.Hour}, now)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(tok)
	f.Add("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.eyJzdWIiOiJhY21lIn0.")
	f.Add("a.b.c")
	f.Add(strings.Repeat("A", 4096))
	f.Add(tok[:len(tok)-2] + "xx")
	v := auth.NewVerifier(keys, func() time.Time { return now })
	f.Fuzz(func(t *testing.T, raw string) {
		p, err := v.Verify(raw)
		if err != nil {
			return
		}
		parts := strings.Split(raw, ".")
		if len(parts) != 3 {
			t.Fatalf("accepted %q, which has %d parts", raw, len(parts))
		}
		hb, err := base64.RawURLEncoding.DecodeString(parts[0])
		if err != nil {
			t.Fatalf("accepted %q with an undecodable header", raw)
		}
		var h struct{ Alg, Kid string }
		if err := json.Unmarshal(hb, &h); err != nil || h.Alg != "HS256" {
			t.Fatalf("accepted %q with header %s", raw, hb)
		}
		mac := hmac.New(sha256.New, keys.Keys[h.Kid])
		mac.Write([]byte(parts[0] + "." + parts[1]))
		sig, err := base64.RawURLEncoding.DecodeString(parts[2])
		if err != nil || !hmac.Equal(sig, mac.Sum(nil)) {
			t.Fatalf("accepted %q whose signature is not the key's", raw)
		}
		if p.Org == "" {
			t.Fatalf("accepted %q naming no organization", raw)
		}
	})
}
