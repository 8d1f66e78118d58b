package auth

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

var now = time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)

func fixedClock() time.Time { return now }

func mustKeys(t *testing.T) *KeySet {
	t.Helper()
	ks, err := NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

func TestIssueAndVerify(t *testing.T) {
	t.Parallel()
	ks := mustKeys(t)
	tok, err := ks.Issue(TokenRequest{Org: "acme", Scopes: []string{ScopeJobsRead}, TTL: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewVerifier(ks, fixedClock).Verify(tok)
	if err != nil {
		t.Fatal(err)
	}
	if p.Org != "acme" || p.Subject != "acme" || !p.Has(ScopeJobsRead) || p.Has(ScopeJobsWrite) {
		t.Errorf("got %+v", p)
	}
	admin := Principal{Scopes: []string{ScopeAdmin}}
	if !admin.Has(ScopeAgent) {
		t.Error("admin should hold every scope")
	}
}

// sign makes a token with arbitrary claims and method, for the refusal cases.
func sign(t *testing.T, ks *KeySet, method jwt.SigningMethod, claims jwt.MapClaims, kid string) string {
	t.Helper()
	tok := jwt.NewWithClaims(method, claims)
	tok.Header["kid"] = kid
	var key any = ks.Keys[ks.Current]
	if method == jwt.SigningMethodNone {
		key = jwt.UnsafeAllowNoneSignatureType
	}
	s, err := tok.SignedString(key)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestVerifyRefuses(t *testing.T) {
	t.Parallel()
	ks := mustKeys(t)
	good := jwt.MapClaims{"iss": Issuer, "aud": Audience, "sub": "x", "org": "acme", "scope": "jobs:read",
		"exp": now.Add(time.Hour).Unix(), "iat": now.Unix(), "jti": "t1"}
	with := func(k string, v any) jwt.MapClaims {
		c := jwt.MapClaims{}
		for a, b := range good {
			c[a] = b
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		return c
	}
	other := mustKeys(t)
	cases := map[string]string{
		"alg none":        sign(t, ks, jwt.SigningMethodNone, good, ks.Current),
		"alg HS384":       sign(t, ks, jwt.SigningMethodHS384, good, ks.Current),
		"wrong issuer":    sign(t, ks, jwt.SigningMethodHS256, with("iss", "someone-else"), ks.Current),
		"wrong audience":  sign(t, ks, jwt.SigningMethodHS256, with("aud", "other-api"), ks.Current),
		"no expiry":       sign(t, ks, jwt.SigningMethodHS256, with("exp", nil), ks.Current),
		"expired":         sign(t, ks, jwt.SigningMethodHS256, with("exp", now.Add(-time.Minute).Unix()), ks.Current),
		"issued later":    sign(t, ks, jwt.SigningMethodHS256, with("iat", now.Add(time.Hour).Unix()), ks.Current),
		"no organization": sign(t, ks, jwt.SigningMethodHS256, with("org", nil), ks.Current),
		// issue 14: an id that cannot be revoked; organizations that would meet others' keys
		"no jti":               sign(t, ks, jwt.SigningMethodHS256, with("jti", nil), ks.Current),
		"org with a separator": sign(t, ks, jwt.SigningMethodHS256, with("org", "acme:jobs"), ks.Current),
		"org with a hash tag":  sign(t, ks, jwt.SigningMethodHS256, with("org", "{ht}"), ks.Current),
		"org too long":         sign(t, ks, jwt.SigningMethodHS256, with("org", strings.Repeat("a", 65)), ks.Current),
		"unknown kid":          sign(t, ks, jwt.SigningMethodHS256, good, "nope"),
		"other key":            sign(t, other, jwt.SigningMethodHS256, good, ks.Current),
		"garbage":              "a.b.c",
	}
	v := NewVerifier(ks, fixedClock)
	if _, err := v.Verify(sign(t, ks, jwt.SigningMethodHS256, good, ks.Current)); err != nil {
		t.Fatalf("the control token fails: %v", err)
	}
	for name, tok := range cases {
		if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
			t.Errorf("%s: got %v, want ErrUnauthenticated", name, err)
		}
	}
}

func TestRotationKeepsOldTokensValid(t *testing.T) {
	t.Parallel()
	old := mustKeys(t)
	tok, err := old.Issue(TokenRequest{Org: "acme", Scopes: []string{ScopeJobsRead}, TTL: time.Hour}, now)
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := ParseKeySet("k2=" + strings.Repeat("A", 44) + "," + strings.SplitN(old.String(), ",", 2)[0])
	if err != nil {
		t.Fatal(err)
	}
	if rotated.Current != "k2" {
		t.Fatalf("current key %q, want k2", rotated.Current)
	}
	if _, err := NewVerifier(rotated, fixedClock).Verify(tok); err != nil {
		t.Errorf("token of the previous key refused after rotation: %v", err)
	}
	fresh, _ := rotated.Issue(TokenRequest{Org: "acme", Scopes: []string{ScopeJobsRead}, TTL: time.Hour}, now)
	if _, err := NewVerifier(old, fixedClock).Verify(fresh); err == nil {
		t.Error("a verifier without the new key accepted its token")
	}
}

func TestIssueChecksItsRequest(t *testing.T) {
	t.Parallel()
	ks := mustKeys(t)
	bad := []TokenRequest{
		{Scopes: []string{ScopeJobsRead}, TTL: time.Hour},
		{Org: "acme", Scopes: []string{"jobs:delete"}, TTL: time.Hour},
		{Org: "acme", Scopes: []string{ScopeJobsRead}},
	}
	for _, r := range bad {
		if _, err := ks.Issue(r, now); err == nil {
			t.Errorf("Issue(%+v) succeeded", r)
		}
	}
	if _, err := ParseKeySet("k1=c2hvcnQ="); err == nil {
		t.Error("a 5-byte key was accepted")
	}
}

// Organizations are minted only with names that cannot meet another's keys (issue 14).
func TestIssueRefusesOrganizationsThatCollide(t *testing.T) {
	t.Parallel()
	ks := mustKeys(t)
	for _, org := range []string{"orge:jobs", "orgd:x", "{ht}", "a b", "", "-lead", strings.Repeat("a", 65)} {
		if _, err := ks.Issue(TokenRequest{Org: org, Scopes: []string{ScopeJobsRead}, TTL: time.Hour}, now); err == nil {
			t.Errorf("a token was minted for organization %q", org)
		}
	}
	for _, org := range []string{"acme", "Acme-2", "org.d", "a_b", strings.Repeat("a", 64)} {
		if _, err := ks.Issue(TokenRequest{Org: org, Scopes: []string{ScopeJobsRead}, TTL: time.Hour}, now); err != nil {
			t.Errorf("organization %q: %v", org, err)
		}
	}
}

// A verified token is remembered, but never past its expiry and the leeway: a caller's later
// requests skip the parse, and an expired token is refused all the same. Another string — one
// character changed — is verified on its own.
func TestARememberedTokenStillExpires(t *testing.T) {
	t.Parallel()
	ks := mustKeys(t)
	clock := now
	v := NewVerifier(ks, func() time.Time { return clock })
	tok, err := ks.Issue(TokenRequest{Org: "acme", Scopes: []string{ScopeJobsRead}, TTL: 10 * time.Second}, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(tok); err != nil {
		t.Fatal(err)
	}
	tampered := tok[:len(tok)-2] + map[bool]string{true: "A", false: "B"}[tok[len(tok)-2] != 'A'] + tok[len(tok)-1:]
	if _, err := v.Verify(tampered); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("a tampered token after the real one was verified: %v", err)
	}
	clock = now.Add(10*time.Second + Leeway - time.Millisecond)
	if _, err := v.Verify(tok); err != nil {
		t.Errorf("within the leeway: %v", err)
	}
	clock = now.Add(10*time.Second + Leeway + time.Millisecond)
	if _, err := v.Verify(tok); !errors.Is(err, ErrUnauthenticated) {
		t.Errorf("past its expiry and the leeway a remembered token was taken: %v", err)
	}
}
