package nolink

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

func TestOpenRefusesLinks(t *testing.T) {
	dir := t.TempDir()
	secret := filepath.Join(t.TempDir(), "agent.env")
	if err := os.WriteFile(secret, []byte("HOSTEDTRAIN_AGENT_TOKEN=x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "metrics.jsonl"), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A file that is a link, and a folder that is a link, as a job could leave them.
	if err := os.Symlink(secret, filepath.Join(dir, "checkpoint.bin")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(secret), filepath.Join(dir, "run")); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadFile(filepath.Join(dir, "metrics.jsonl")); err != nil || string(b) != "{}\n" {
		t.Fatalf("a plain file: %q, %v", b, err)
	}
	for _, p := range []string{filepath.Join(dir, "checkpoint.bin"), filepath.Join(dir, "run", "agent.env")} {
		if _, err := ReadFile(p); !errors.Is(err, syscall.ELOOP) {
			t.Errorf("%s: want ELOOP, got %v", p, err)
		}
	}
}
