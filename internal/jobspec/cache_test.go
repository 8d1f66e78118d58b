package jobspec

import (
	"slices"
	"testing"
)

// A job's cache needs name its model and its environments' install as one set, ids sorted, as
// the node cache keeps installs: a node holding the install of {a} does not hold {a, b}.
func TestCacheNeedsNameTheInstallOfTheWholeSet(t *testing.T) {
	s := Spec{Model: "Qwen/Qwen3-8B", Resources: Resources{GPUs: 2, GPUType: "h100"},
		Env: []Env{{ID: "o/zeta@1", Weight: 1}, {ID: "o/alpha@2", Weight: 1}, {ID: "local-only", Weight: 1}}}
	got := CacheNeeds("acme", s)
	want := []string{"m:Qwen/Qwen3-8B", "c:acme:Qwen/Qwen3-8B|H100|2", "e:acme:o/alpha@2,o/zeta@1"}
	if !slices.Equal(got, want) {
		t.Fatalf("needs %q, want %q", got, want)
	}
	if CompileNeed("acme", "Qwen/Qwen3-8B", "H100", 2) != got[1] || CompileNeed("zeta", "Qwen/Qwen3-8B", "H100", 2) == got[1] ||
		CompileNeed("acme", "Qwen/Qwen3-8B", "H100", 4) == got[1] {
		t.Fatal("the compile cache's need is not the organization's, model's and GPUs'")
	}
	if EnvSetNeed("acme", []string{"o/zeta@1", "o/alpha@2"}) != got[2] || EnvNeed("acme", "o/alpha@2") == got[2] {
		t.Fatal("the set's need depends on its order, or one environment's need names the set")
	}
	s.Resources.GPUs, s.Env = 0, []Env{{ID: "o/alpha@2", Weight: 1}}
	if got := CacheNeeds("acme", s); !slices.Equal(got, []string{"e:acme:o/alpha@2"}) {
		t.Fatalf("a job without GPUs: needs %q, want only its install", got)
	}
}
