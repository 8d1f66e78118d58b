package main

import (
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/seal"
)

// A rotation puts a new key first and keeps the old ones after it, so what they signed or
// sealed still verifies or opens.
func TestKeyRingRotation(t *testing.T) {
	t.Parallel()
	old, err := newKeyRing("seal", "", time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	oldRing, err := seal.Parse(old)
	if err != nil {
		t.Fatal(err)
	}
	sealed, err := oldRing.Seal([]byte("sk-live"), "job-1")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := newKeyRing("seal", old, time.Date(2026, 6, 1, 0, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(rotated, "k20260601T000000=") || !strings.HasSuffix(rotated, ","+old) {
		t.Fatalf("rotated ring %q", rotated)
	}
	ring, err := seal.Parse(rotated)
	if err != nil {
		t.Fatal(err)
	}
	if plain, err := ring.Open(sealed, "job-1"); err != nil || string(plain) != "sk-live" {
		t.Errorf("the old key's secret after rotation: %q %v", plain, err)
	}

	jwt, err := newKeyRing("jwt", "", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := auth.ParseKeySet(jwt); err != nil {
		t.Errorf("jwt ring %q: %v", jwt, err)
	}
	if _, err := newKeyRing("jwt", "Xr4nd0mCloudFormationValue", time.Now()); err == nil {
		t.Error("a --keep that is not a key ring was accepted")
	}
	if _, err := newKeyRing("seal", old, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)); err == nil {
		t.Error("a new key named like a kept one was accepted")
	}
}
