package api

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
)

// newAdmission is what the API does with a job file before anything is stored (Admission):
// it needs neither Redis nor a network.
func newAdmission(tb testing.TB) *Admission {
	tb.Helper()
	a, err := NewAdmission()
	if err != nil {
		tb.Fatal(err)
	}
	return a
}

func fixtureFiles(tb testing.TB) map[string][]byte {
	tb.Helper()
	paths, err := filepath.Glob(filepath.Join("..", "testdata", "jobs", "*.toml"))
	if err != nil || len(paths) == 0 {
		tb.Fatalf("fixtures: %v", err)
	}
	out := map[string][]byte{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			tb.Fatal(err)
		}
		out[filepath.Base(p)] = jobspectest.WithSecrets(tb, b)
	}
	return out
}

// BenchmarkJobAdmission measures decode + validate + normalize of each fixture; run it with
// `make bench-jobs` (one core). The aim is under 200 µs a job.
func BenchmarkJobAdmission(b *testing.B) {
	a := newAdmission(b)
	for name, body := range fixtureFiles(b) {
		kind := jobspectest.Kind(name)
		b.Run(strings.TrimSuffix(name, ".toml"), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, prob := a.Admit(kind, "application/toml", body); prob != nil {
					b.Fatalf("%s refused: %+v", name, prob)
				}
			}
		})
	}
}

// FuzzJobAdmission feeds arbitrary bytes, as TOML and as JSON, through admission: it must
// never panic, and must answer either a job or a 4xx problem.
func FuzzJobAdmission(f *testing.F) {
	a := newAdmission(f)
	for _, body := range fixtureFiles(f) {
		f.Add(body, false)
	}
	f.Add([]byte(`{"model":"Qwen/Qwen3-4B","env":[{"id":"gsm8k"}],"secrets":{"K":"v"}}`), true)
	f.Add([]byte("model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"a\"\n[env.args]\nx = [1, {y = 2}]\n"), false)
	f.Fuzz(func(t *testing.T, body []byte, isJSON bool) {
		ctype := "application/toml"
		if isJSON {
			ctype = "application/json"
		}
		for _, kind := range []string{"", "gepa", "eval"} {
			adm, prob := a.Admit(kind, ctype, body)
			switch {
			case prob != nil && (prob.Status < 400 || prob.Status > 499):
				t.Fatalf("status %d for %q", prob.Status, body)
			case prob == nil && adm == nil:
				t.Fatalf("neither a job nor a problem for %q", body)
			case prob == nil && adm.Spec.Model == "":
				t.Fatalf("admitted a job without a model: %q", body)
			}
		}
	})
}

// BenchmarkLargestAdmission admits the costliest job files the API reads through: the largest
// it accepts (args, config and secrets at their bounds), and a file at the TOML key limit (the
// costliest to parse, refused afterwards for its args' size) — make bench-jobs,
// docs/performance.md.
func BenchmarkLargestAdmission(b *testing.B) {
	a := newAdmission(b)
	var keys strings.Builder
	keys.WriteString("model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"acme/env\"\n[env.args]\n")
	for i := range jobspec.MaxTOMLKeys - 4 {
		fmt.Fprintf(&keys, "key_number_%d = %d\n", i, i)
	}
	for name, body := range map[string][]byte{"accepted": jobspectest.LargestJob(), "keys": []byte(keys.String())} {
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				_, prob := a.Admit("", "application/toml", body)
				if name == "accepted" && prob != nil {
					b.Fatalf("refused: %+v", prob)
				}
			}
		})
	}
}
