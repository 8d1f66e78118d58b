// Package auth issues and verifies the service's bearer tokens: JWTs signed with HS256 under
// a key id (`kid`), so keys can rotate, carrying the organization and the scopes of the caller.
//
// Verification pins the algorithm, requires an expiry, and checks issuer and audience, so a
// token minted for anything else, or with `alg: none`, is refused.
package auth

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v5"
)

// Scopes a token can carry.
const (
	ScopeJobsRead  = "jobs:read"
	ScopeJobsWrite = "jobs:write"
	ScopeWebhooks  = "webhooks"
	ScopeAgent     = "agent"
	ScopeAdmin     = "admin"
)

// AllScopes lists every scope the service knows, for validating what an operator asks for.
var AllScopes = []string{ScopeJobsRead, ScopeJobsWrite, ScopeWebhooks, ScopeAgent, ScopeAdmin}

// Issuer and Audience are written into and demanded of every token.
const (
	Issuer   = "hostedtrain"
	Audience = "hostedtrain-api"
)

// Leeway is how far past its expiry (or before its start) a token is still taken, for clocks
// that differ a little. A revocation must outlive the token's expiry by at least this much.
const Leeway = 5 * time.Second

// orgName is what an organization may be called: the OpenAPI document's pattern for the
// {org} path parameter. No ':' (the queue's key separator), no braces (its hash tag), no
// spaces; at most 64 characters.
var orgName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$`)

// ValidOrg says what is wrong with an organization's name, nil if nothing. Tokens are minted
// and accepted only for valid names: an organization called "acme:jobs" would meet acme's
// keys in Redis.
func ValidOrg(org string) error {
	if !orgName.MatchString(org) {
		return fmt.Errorf("organization %q is not a valid name: 1 to 64 of A-Z a-z 0-9 _ . -, starting with a letter or digit", org)
	}
	return nil
}

// ErrUnauthenticated is any token that cannot be trusted: missing, malformed, expired,
// signed with an unknown key or for another audience. The caller answers 401.
var ErrUnauthenticated = errors.New("unauthenticated")

// Claims are the registered claims plus the organization and the space-separated scopes.
type Claims struct {
	jwt.RegisteredClaims
	Org   string `json:"org"`
	Scope string `json:"scope"`
}

// Principal is the verified caller.
type Principal struct {
	Subject string
	Org     string
	Scopes  []string
	// TokenID is the token's jti, by which it can be revoked; ExpiresAt is when it ends.
	TokenID   string
	ExpiresAt time.Time
}

// Has reports whether the caller holds scope; admin holds every scope.
func (p Principal) Has(scope string) bool {
	return slices.Contains(p.Scopes, scope) || slices.Contains(p.Scopes, ScopeAdmin)
}

// KeySet holds the HMAC keys by key id. Tokens are signed with Current; any key in the set
// verifies, so an old key can stay for the life of its tokens after a rotation.
type KeySet struct {
	Current string            `json:"current"`
	Keys    map[string][]byte `json:"keys"`
}

// NewKeySet makes a key set with one fresh 256-bit key.
func NewKeySet() (*KeySet, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("auth: new key: %w", err)
	}
	kid := "k" + time.Now().UTC().Format("20060102T150405")
	return &KeySet{Current: kid, Keys: map[string][]byte{kid: k}}, nil
}

// ParseKeySet reads the form used in configuration: "kid=base64key[,kid=base64key...]";
// the first key signs.
func ParseKeySet(s string) (*KeySet, error) {
	ks := &KeySet{Keys: map[string][]byte{}}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kid, b64, ok := strings.Cut(part, "=")
		if !ok || kid == "" {
			return nil, fmt.Errorf("auth: key %q: want kid=base64key", part)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("auth: key %q: %w", kid, err)
		}
		if len(key) < 32 {
			return nil, fmt.Errorf("auth: key %q: %d bytes, want at least 32", kid, len(key))
		}
		if ks.Current == "" {
			ks.Current = kid
		}
		ks.Keys[kid] = key
	}
	if ks.Current == "" {
		return nil, errors.New("auth: no keys configured")
	}
	return ks, nil
}

// String renders the key set in the form ParseKeySet reads, signing key first.
func (ks *KeySet) String() string {
	parts := []string{ks.Current + "=" + base64.StdEncoding.EncodeToString(ks.Keys[ks.Current])}
	for kid, k := range ks.Keys {
		if kid != ks.Current {
			parts = append(parts, kid+"="+base64.StdEncoding.EncodeToString(k))
		}
	}
	return strings.Join(parts, ",")
}

// LoadKeySetFile reads a key set written by SaveFile.
func LoadKeySetFile(path string) (*KeySet, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("auth: read keys: %w", err)
	}
	var ks KeySet
	if err := json.Unmarshal(b, &ks); err != nil {
		return nil, fmt.Errorf("auth: parse %s: %w", path, err)
	}
	if _, ok := ks.Keys[ks.Current]; !ok {
		return nil, fmt.Errorf("auth: %s: current key %q missing", path, ks.Current)
	}
	return &ks, nil
}

// SaveFile writes the key set readable by its owner only.
func (ks *KeySet) SaveFile(path string) error {
	b, err := json.Marshal(ks)
	if err != nil {
		return err
	}
	return os.WriteFile(path, b, 0o600)
}

// TokenRequest is what a new token should say.
type TokenRequest struct {
	Subject string
	Org     string
	Scopes  []string
	TTL     time.Duration
}

// Issue signs a token.
func (ks *KeySet) Issue(req TokenRequest, now time.Time) (string, error) {
	if req.Org == "" {
		return "", errors.New("auth: a token needs an organization")
	}
	if err := ValidOrg(req.Org); err != nil {
		return "", fmt.Errorf("auth: %w", err)
	}
	for _, s := range req.Scopes {
		if !slices.Contains(AllScopes, s) {
			return "", fmt.Errorf("auth: unknown scope %q (known: %s)", s, strings.Join(AllScopes, ", "))
		}
	}
	if req.TTL <= 0 {
		return "", errors.New("auth: a token needs a positive lifetime")
	}
	jti := make([]byte, 12)
	if _, err := rand.Read(jti); err != nil {
		return "", err
	}
	sub := req.Subject
	if sub == "" {
		sub = req.Org
	}
	claims := Claims{
		RegisteredClaims: jwt.RegisteredClaims{
			Issuer:    Issuer,
			Audience:  jwt.ClaimStrings{Audience},
			Subject:   sub,
			IssuedAt:  jwt.NewNumericDate(now),
			NotBefore: jwt.NewNumericDate(now.Add(-30 * time.Second)),
			ExpiresAt: jwt.NewNumericDate(now.Add(req.TTL)),
			ID:        base64.RawURLEncoding.EncodeToString(jti),
		},
		Org:   req.Org,
		Scope: strings.Join(req.Scopes, " "),
	}
	t := jwt.NewWithClaims(jwt.SigningMethodHS256, claims)
	t.Header["kid"] = ks.Current
	return t.SignedString(ks.Keys[ks.Current])
}

// Verifier checks bearer tokens against a key set.
type Verifier struct {
	keys *KeySet
	now  func() time.Time

	// verified remembers the tokens this process has verified, so that a caller's every
	// request after its first costs a map lookup, not a parse of the token: an entry is the
	// exact token string's principal, kept until the token expires (with the leeway) or for
	// verifiedFor, whichever comes first. Revocation is checked apart, on every request.
	mu       sync.Mutex
	verified map[string]verifiedToken
}

type verifiedToken struct {
	p     Principal
	until time.Time
}

// verifiedFor bounds how long a verified token is remembered; maxVerified, how many.
const (
	verifiedFor = time.Minute
	maxVerified = 8192
)

// NewVerifier returns a Verifier; now is the clock that expiry is judged by (nil: time.Now).
func NewVerifier(keys *KeySet, now func() time.Time) *Verifier {
	if now == nil {
		now = time.Now
	}
	return &Verifier{keys: keys, now: now}
}

// Verify checks a raw token and returns the caller it names. Every failure wraps
// ErrUnauthenticated.
func (v *Verifier) Verify(raw string) (Principal, error) {
	now := v.now()
	v.mu.Lock()
	hit, ok := v.verified[raw]
	v.mu.Unlock()
	if ok && now.Before(hit.until) {
		return hit.p, nil
	}
	p, err := v.verify(raw)
	if err != nil {
		return p, err
	}
	until := now.Add(verifiedFor)
	if !p.ExpiresAt.IsZero() && p.ExpiresAt.Add(Leeway).Before(until) {
		until = p.ExpiresAt.Add(Leeway)
	}
	v.mu.Lock()
	if len(v.verified) >= maxVerified || v.verified == nil {
		v.verified = make(map[string]verifiedToken, 64) // start over: the callers of the last minute come back
	}
	v.verified[raw] = verifiedToken{p: p, until: until}
	v.mu.Unlock()
	return p, nil
}

func (v *Verifier) verify(raw string) (Principal, error) {
	var c Claims
	_, err := jwt.ParseWithClaims(raw, &c, v.keyFor,
		jwt.WithValidMethods([]string{jwt.SigningMethodHS256.Alg()}),
		jwt.WithIssuer(Issuer),
		jwt.WithAudience(Audience),
		jwt.WithExpirationRequired(),
		jwt.WithIssuedAt(),
		jwt.WithTimeFunc(v.now),
		jwt.WithLeeway(Leeway),
	)
	if err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if c.Org == "" {
		return Principal{}, fmt.Errorf("%w: token has no organization", ErrUnauthenticated)
	}
	if err := ValidOrg(c.Org); err != nil {
		return Principal{}, fmt.Errorf("%w: %w", ErrUnauthenticated, err)
	}
	if c.ID == "" {
		return Principal{}, fmt.Errorf("%w: token has no id (jti), so it could not be revoked", ErrUnauthenticated)
	}
	p := Principal{Subject: c.Subject, Org: c.Org, Scopes: strings.Fields(c.Scope), TokenID: c.ID}
	if c.ExpiresAt != nil {
		p.ExpiresAt = c.ExpiresAt.Time
	}
	return p, nil
}

// TokenID reads a token's id (jti) and expiry without verifying it, for revoking it: a
// revocation of a token that was never issued refuses nothing.
func TokenID(raw string) (string, time.Time, error) {
	var c Claims
	if _, _, err := jwt.NewParser().ParseUnverified(strings.TrimSpace(raw), &c); err != nil {
		return "", time.Time{}, fmt.Errorf("auth: not a token: %w", err)
	}
	if c.ID == "" || c.ExpiresAt == nil {
		return "", time.Time{}, errors.New("auth: the token has no id (jti) or no expiry")
	}
	return c.ID, c.ExpiresAt.Time, nil
}

func (v *Verifier) keyFor(t *jwt.Token) (any, error) {
	kid, _ := t.Header["kid"].(string)
	key, ok := v.keys.Keys[kid]
	if !ok {
		return nil, fmt.Errorf("unknown key id %q", kid)
	}
	return key, nil
}

// Sign is a MAC of payload for one purpose with the key set's current key, as "<kid>.<mac>":
// a credential the service makes for itself (a job's judge token) that every instance with
// the key set checks, and that survives key rotation while its key is kept.
func (v *Verifier) Sign(purpose, payload string) string {
	kid := v.keys.Current
	return kid + "." + base64.RawURLEncoding.EncodeToString(purposeMAC(v.keys.Keys[kid], purpose, payload))
}

// CheckSigned says whether sig is Sign's of payload for purpose, by a key the set still has.
func (v *Verifier) CheckSigned(purpose, payload, sig string) bool {
	kid, mac64, ok := strings.Cut(sig, ".")
	key, known := v.keys.Keys[kid]
	mac, err := base64.RawURLEncoding.DecodeString(mac64)
	return ok && known && err == nil && hmac.Equal(mac, purposeMAC(key, purpose, payload))
}

func purposeMAC(key []byte, purpose, payload string) []byte {
	m := hmac.New(sha256.New, key)
	m.Write([]byte("hostedtrain-" + purpose + "\n" + payload))
	return m.Sum(nil)
}
