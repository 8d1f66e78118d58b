// Package seal encrypts job secrets at rest with AES-256-GCM. A sealed value names the key
// that sealed it ("v1.<kid>.<base64 nonce+ciphertext>"), so keys can rotate: new values are
// sealed with the first key of the ring, old ones still open while their key stays listed.
// Each value is bound to the job it belongs to (the associated data), so a sealed value copied
// onto another job does not open.
package seal

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
)

// Keyring holds the keys by id; Current seals.
type Keyring struct {
	current string
	aeads   map[string]cipher.AEAD
}

// ErrOpen is any sealed value that cannot be opened: unknown key, tampered, or bound to
// another job.
var ErrOpen = errors.New("seal: cannot open")

// Parse reads "kid=base64key[,kid=base64key...]" (32-byte keys); the first key seals.
func Parse(s string) (*Keyring, error) {
	kr := &Keyring{aeads: map[string]cipher.AEAD{}}
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		kid, b64, ok := strings.Cut(part, "=")
		if !ok || kid == "" || strings.Contains(kid, ".") {
			return nil, fmt.Errorf("seal: key %q: want kid=base64key (kid without dots)", kid)
		}
		key, err := base64.StdEncoding.DecodeString(b64)
		if err != nil {
			return nil, fmt.Errorf("seal: key %q: %w", kid, err)
		}
		if len(key) != 32 {
			return nil, fmt.Errorf("seal: key %q: %d bytes, want 32 (AES-256)", kid, len(key))
		}
		block, err := aes.NewCipher(key)
		if err != nil {
			return nil, err
		}
		aead, err := cipher.NewGCM(block)
		if err != nil {
			return nil, err
		}
		if kr.current == "" {
			kr.current = kid
		}
		kr.aeads[kid] = aead
	}
	if kr.current == "" {
		return nil, errors.New("seal: no keys configured")
	}
	return kr, nil
}

// NewKey returns a fresh key ring entry, "kid=base64key".
func NewKey(kid string) (string, error) {
	k := make([]byte, 32)
	if _, err := rand.Read(k); err != nil {
		return "", err
	}
	return kid + "=" + base64.StdEncoding.EncodeToString(k), nil
}

// LoadOrCreateFile reads a key ring from path, creating one with a fresh key (mode 0600) if
// the file does not exist; for the local stack.
func LoadOrCreateFile(path string) (*Keyring, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		entry, err := NewKey("k1")
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(path, []byte(entry+"\n"), 0o600); err != nil {
			return nil, err
		}
		return Parse(entry)
	}
	if err != nil {
		return nil, err
	}
	return Parse(strings.TrimSpace(string(b)))
}

// Seal encrypts plaintext for the job named by aad.
func (k *Keyring) Seal(plaintext []byte, aad string) (string, error) {
	aead := k.aeads[k.current]
	nonce := make([]byte, aead.NonceSize())
	if _, err := rand.Read(nonce); err != nil {
		return "", err
	}
	out := aead.Seal(nonce, nonce, plaintext, []byte(aad))
	return "v1." + k.current + "." + base64.RawStdEncoding.EncodeToString(out), nil
}

// Open decrypts a value sealed for the job named by aad.
func (k *Keyring) Open(sealed, aad string) ([]byte, error) {
	parts := strings.SplitN(sealed, ".", 3)
	if len(parts) != 3 || parts[0] != "v1" {
		return nil, fmt.Errorf("%w: not a sealed value", ErrOpen)
	}
	aead, ok := k.aeads[parts[1]]
	if !ok {
		return nil, fmt.Errorf("%w: key %q is not configured", ErrOpen, parts[1])
	}
	raw, err := base64.RawStdEncoding.DecodeString(parts[2])
	if err != nil || len(raw) < aead.NonceSize() {
		return nil, fmt.Errorf("%w: malformed", ErrOpen)
	}
	pt, err := aead.Open(nil, raw[:aead.NonceSize()], raw[aead.NonceSize():], []byte(aad))
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrOpen, err)
	}
	return pt, nil
}
