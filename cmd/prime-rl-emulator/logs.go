package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// loguru is one line as prime-rl's loguru setup writes it (src/prime_rl/utils/logger.py):
// `<dim>{time:HH:mm:ss}</dim> <level>{level: >7}</level> <level>\x1b[22m{message}\x1b[0m</level>`,
// colour codes included even into files.
func loguru(level, msg string) string {
	colour := map[string]string{"DEBUG": "34", "INFO": "1", "SUCCESS": "32;1", "WARNING": "33;1", "ERROR": "31;1", "CRITICAL": "41;1"}[level]
	if colour == "" {
		colour = "1"
	}
	return fmt.Sprintf("\x1b[2m%s\x1b[0m \x1b[%sm%7s\x1b[0m \x1b[%sm\x1b[22m%s\x1b[0m",
		time.Now().Format("15:04:05"), colour, level, colour, msg)
}

// vllmLine is a line as vLLM's logging writes it: `INFO 08-21 14:03:07 [api_server.py:1] msg`.
func vllmLine(level, msg string) string {
	return fmt.Sprintf("%s %s [api_server.py:1] %s", level, time.Now().Format("01-02 15:04:05"), msg)
}

// componentLogs are an attempt's log files: logs/attempt_N/{trainer,orchestrator,inference}.log
// and envs/{train,eval}/<source>.log, with logs/latest pointing at the attempt.
type componentLogs struct {
	mu    sync.Mutex
	files map[string]*os.File
}

func envLog(split, name string) string { return "envs/" + split + "/" + name }

// openLogs starts logs/attempt_N (N one above the last) and points logs/latest at it.
func openLogs(runDir string, c *rlConfig) (*componentLogs, error) {
	logs := filepath.Join(runDir, "logs")
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return nil, err
	}
	attempt := 1
	entries, _ := os.ReadDir(logs)
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "attempt_"); ok {
			if a, err := strconv.Atoi(n); err == nil && a >= attempt {
				attempt = a + 1
			}
		}
	}
	name := fmt.Sprintf("attempt_%d", attempt)
	latest := filepath.Join(logs, "latest")
	comps := []string{"trainer", "orchestrator"}
	if c.inference {
		comps = append(comps, "inference")
	}
	for _, s := range c.train {
		comps = append(comps, envLog("train", s))
	}
	for _, s := range c.eval {
		comps = append(comps, envLog("eval", s))
	}
	l := &componentLogs{files: map[string]*os.File{}}
	for _, comp := range comps {
		p := filepath.Join(logs, name, filepath.FromSlash(comp)+".log")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return nil, err
		}
		f, err := os.OpenFile(p, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			return nil, err
		}
		l.files[comp] = f
	}
	tmp := latest + ".tmp"
	_ = os.Remove(tmp)
	if err := os.Symlink(name, tmp); err != nil {
		return nil, err
	}
	if err := os.Rename(tmp, latest); err != nil {
		return nil, err
	}
	return l, nil
}

func (l *componentLogs) log(component, level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.files[component]; f != nil {
		fmt.Fprintln(f, loguru(level, msg))
	}
}

func (l *componentLogs) vllm(level, msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if f := l.files["inference"]; f != nil {
		fmt.Fprintln(f, vllmLine(level, msg))
	}
}

func (l *componentLogs) close() {
	for _, f := range l.files {
		f.Close()
	}
}

// exitError is a command that ran and failed.
type exitError = exec.ExitError

func execOutput(ctx context.Context, name string, args ...string) ([]byte, error) {
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.Stderr = os.Stderr
	return cmd.Output()
}
