package nolink

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
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

// A named pipe where the agent reads a job's file would block the read for good.
func TestOpenRefusesWhatIsNotARegularFile(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "metrics.jsonl")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadFile(fifo); done <- err }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrNotRegular) {
			t.Errorf("a named pipe: want ErrNotRegular, got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("opening a named pipe blocked")
	}
	if _, err := ReadFile(dir); !errors.Is(err, ErrNotRegular) {
		t.Errorf("a folder: want ErrNotRegular, got %v", err)
	}
}
