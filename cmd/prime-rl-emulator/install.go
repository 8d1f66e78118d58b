package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// moduleName is the Python module verifiers imports for a taskset or environment id: the
// name after the owner, without the version, `-` as `_` (verifiers/v1/utils/loaders.py).
func moduleName(id string) string {
	name := id[strings.LastIndex(id, "/")+1:]
	name, _, _ = strings.Cut(name, "@")
	return strings.ToLower(strings.ReplaceAll(name, "-", "_"))
}

// installedDir is where the emulator records the packages installed into a Python
// environment.
func installedDir(venv string) string {
	return filepath.Join(venv, "hostedtrain-emulated-packages")
}

// installed says whether a taskset id imports in the emulated prime-rl's Python: a bare id
// names one of prime-rl's own (its workspace environments, verifiers' built-in tasksets); an
// Environments Hub id must have been installed there.
func installed(venv, id string) bool {
	if !strings.Contains(id, "/") {
		return true
	}
	if venv == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(installedDir(venv), moduleName(id)))
	return err == nil
}

var hubID = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*/[a-z0-9][a-z0-9._-]*(@[A-Za-z0-9._+-]+)?$`)

// runInstall emulates `prime env install ID` (prime CLI 0.6.26, commands/env.py): an id
// without an owner is a local environment in ./environments/<name>; an owner/name id is
// resolved on the Environments Hub and installed with `uv pip install --python` into the
// workspace interpreter — the one UV_PROJECT_ENVIRONMENT or VIRTUAL_ENV names, else the
// prime CLI's own.
func runInstall(ctx context.Context, args []string, out io.Writer) int {
	var em emulation
	rest, err := parseCommon(args, &em)
	if err != nil || len(rest) == 0 {
		return fail(out, 2, "error: usage: env install ID [ID...]")
	}
	for _, id := range rest {
		local, _, _ := strings.Cut(id, "@")
		if !strings.Contains(local, "/") {
			folder := filepath.Join("environments", strings.ReplaceAll(local, "-", "_"))
			if _, err := os.Stat(folder); err != nil {
				fmt.Fprintf(out, "✗ Local environment not found: %s\n", folder)
				return fail(out, 1, "Error: Unable to resolve installable environments")
			}
			continue
		}
		if !hubID.MatchString(strings.ToLower(id)) || strings.Contains(id, "broken") {
			fmt.Fprintf(out, "✗ Failed to resolve %s: 404 Not Found (emulated: ids containing \"broken\" fail)\n", id)
			return fail(out, 1, "Error: Unable to resolve installable environments")
		}
		if strings.Contains(id, "uninstallable") {
			// Resolved, then `uv pip install` failed: the prime CLI reports it in its summary and
			// exits 0 (commands/env.py exits 1 only when nothing resolves).
			fmt.Fprintf(out, "\nInstalling 1 environment...\n✗ Installation failed: Command '['uv', 'pip', 'install', '%s']' returned non-zero exit status 1. (emulated: ids containing \"uninstallable\" fail to install)\n", id)
			fmt.Fprintf(out, "\nFailed to install 1 environment:\n✗ %s - the build of its wheel failed\n", id)
			continue
		}
		python := os.Getenv("UV_PROJECT_ENVIRONMENT")
		if python == "" {
			python = os.Getenv("VIRTUAL_ENV")
		}
		if python == "" {
			home, _ := os.UserHomeDir()
			python = filepath.Join(home, ".local", "share", "uv", "tools", "prime") // the CLI's own tool venv
		}
		select {
		case <-ctx.Done():
			return 143
		case <-time.After(10 * time.Millisecond):
		}
		if err := os.MkdirAll(installedDir(python), 0o755); err != nil {
			return fail(out, 1, "error: %v", err)
		}
		// As uv and pip install a file: a new one written beside, then renamed over the old
		// (never written in place: in a sandboxed job, the old one may be the node's, hard-linked).
		if err := replaceFile(filepath.Join(installedDir(python), moduleName(id)), []byte(id+"\n")); err != nil {
			return fail(out, 1, "error: %v", err)
		}
		fmt.Fprintf(out, "✓ Installed %s into %s (EMULATED: nothing was downloaded)\n", id, python)
	}
	return 0
}

// replaceFile writes data to a new file beside path and renames it over path.
func replaceFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".install-*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}
