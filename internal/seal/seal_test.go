package seal

import (
	"errors"
	"strings"
	"testing"
)

func ring(t *testing.T, kids ...string) (*Keyring, []string) {
	t.Helper()
	var entries []string
	for _, kid := range kids {
		e, err := NewKey(kid)
		if err != nil {
			t.Fatal(err)
		}
		entries = append(entries, e)
	}
	kr, err := Parse(strings.Join(entries, ","))
	if err != nil {
		t.Fatal(err)
	}
	return kr, entries
}

func TestSealOpenBindsToTheJob(t *testing.T) {
	t.Parallel()
	kr, _ := ring(t, "k1")
	sealed, err := kr.Seal([]byte(`{"OPENAI_API_KEY":"sk-123"}`), "job-a")
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(sealed, "sk-123") || !strings.HasPrefix(sealed, "v1.k1.") {
		t.Fatalf("sealed value %q", sealed)
	}
	pt, err := kr.Open(sealed, "job-a")
	if err != nil || string(pt) != `{"OPENAI_API_KEY":"sk-123"}` {
		t.Fatalf("open: %q %v", pt, err)
	}
	if _, err := kr.Open(sealed, "job-b"); !errors.Is(err, ErrOpen) {
		t.Errorf("opened under another job: %v", err)
	}
	tampered := sealed[:len(sealed)-2] + "AA"
	if _, err := kr.Open(tampered, "job-a"); !errors.Is(err, ErrOpen) {
		t.Errorf("opened a tampered value: %v", err)
	}
}

func TestRotation(t *testing.T) {
	t.Parallel()
	old, oldEntries := ring(t, "k1")
	sealed, _ := old.Seal([]byte("x"), "j")
	fresh, _ := NewKey("k2")
	rotated, err := Parse(fresh + "," + oldEntries[0])
	if err != nil {
		t.Fatal(err)
	}
	if pt, err := rotated.Open(sealed, "j"); err != nil || string(pt) != "x" {
		t.Errorf("old value after rotation: %q %v", pt, err)
	}
	resealed, _ := rotated.Seal([]byte("y"), "j")
	if !strings.HasPrefix(resealed, "v1.k2.") {
		t.Errorf("new values must use the first key: %q", resealed)
	}
	if _, err := old.Open(resealed, "j"); !errors.Is(err, ErrOpen) {
		t.Errorf("a ring without k2 opened its value: %v", err)
	}
}

func TestParseRefusesBadKeys(t *testing.T) {
	t.Parallel()
	for _, s := range []string{"", "k1", "k1=short", "k.1=" + strings.Repeat("A", 44), "k1=!!!"} {
		if _, err := Parse(s); err == nil {
			t.Errorf("Parse(%q) succeeded", s)
		}
	}
}
