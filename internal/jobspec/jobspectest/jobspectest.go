// Package jobspectest reads the job files of testdata/jobs for tests, as the CLI would send
// them: a file that names secrets.env gets that file's values appended as a [secrets] table
// (the server never reads files; `hostedtrain train submit` sends their contents).
package jobspectest

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// Root is the module's root folder (where go.mod is), found from the test's working folder.
func Root(tb testing.TB) string {
	tb.Helper()
	dir, err := os.Getwd()
	if err != nil {
		tb.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			tb.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// Dir is testdata/jobs.
func Dir(tb testing.TB) string { return filepath.Join(Root(tb), "testdata", "jobs") }

// Names lists the job files, sorted.
func Names(tb testing.TB) []string {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join(Dir(tb), "*.toml"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("no job files in testdata/jobs: %v", err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, filepath.Base(p))
	}
	sort.Strings(names)
	return names
}

// Kind is the kind a job file is submitted as: gepa.toml and eval.toml by their names.
func Kind(name string) string {
	switch {
	case strings.HasPrefix(name, "gepa"):
		return "gepa"
	case strings.HasPrefix(name, "eval"):
		return "eval"
	}
	return "rl"
}

// Raw is a job file as written.
func Raw(tb testing.TB, name string) []byte {
	tb.Helper()
	b, err := os.ReadFile(filepath.Join(Dir(tb), name))
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

// Fixture is a job file with the secrets of the files it names appended, as the CLI sends it.
func Fixture(tb testing.TB, name string) []byte {
	tb.Helper()
	return WithSecrets(tb, Raw(tb, name))
}

// Secrets are the values of testdata/jobs/secrets.env.
func Secrets(tb testing.TB) map[string]string {
	tb.Helper()
	env, err := os.ReadFile(filepath.Join(Dir(tb), "secrets.env"))
	if err != nil {
		tb.Fatal(err)
	}
	out := map[string]string{}
	for line := range strings.SplitSeq(string(env), "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), "=")
		if ok && !strings.HasPrefix(k, "#") {
			out[k] = v
		}
	}
	return out
}

// WandbKey is the W&B key a test passes for a fixture with [wandb] and no secrets file, as a
// user passes -e WANDB_API_KEY (the service refuses W&B monitoring without its key, as the
// prime CLI does).
const WandbKey = "wandb-example-not-a-real-key"

// WithSecrets appends secrets.env's values as a [secrets] table to a TOML job that names it;
// a job with [wandb] that names none gets WANDB_API_KEY, as `-e WANDB_API_KEY=…` gives it.
func WithSecrets(tb testing.TB, b []byte) []byte {
	tb.Helper()
	if !bytes.Contains(b, []byte("secrets.env")) {
		if bytes.Contains(b, []byte("\n[wandb]")) {
			return fmt.Appendf(bytes.Clone(b), "\n[secrets]\nWANDB_API_KEY = %q\n", WandbKey)
		}
		return b
	}
	sec := Secrets(tb)
	keys := make([]string, 0, len(sec))
	for k := range sec {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	out := append(bytes.Clone(b), "\n[secrets]\n"...)
	for _, k := range keys {
		out = fmt.Appendf(out, "%s = %q\n", k, sec[k])
	}
	return out
}

// LargestJob is the largest job file the service accepts: three environments with args at their
// bound (each '<', which a JSON encoder that escapes HTML would make six bytes), a config near
// its bound, and secrets at theirs.
func LargestJob() []byte {
	var b strings.Builder
	b.WriteString("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 10\n")
	for i := range 3 {
		fmt.Fprintf(&b, "[[env]]\nid = \"acme/env-%d\"\n[env.args]\nprompt = \"%s\"\n", i, strings.Repeat("<", jobspec.MaxArgsBytes-64))
	}
	b.WriteString("[secrets]\n")
	for i := range 4 {
		fmt.Fprintf(&b, "S%d = \"%s\"\n", i, strings.Repeat("k", jobspec.MaxSecretsBytes/4-16))
	}
	return []byte(b.String())
}
