package render_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// A job graded by the service's judge gets the claim's judge URL in its rl.toml, never the
// marker its spec holds; and upstream's resolution calls the judge there with the job's token.
func TestTheServicesJudgeIsWrittenWhereTheClaimSays(t *testing.T) {
	t.Parallel()
	res, err := jobspec.NormalizeWith(map[string]any{"model": "Qwen/Qwen3-4B-Instruct-2507",
		"env": []any{map[string]any{"id": "primeintellect/wiki-search"}}}, jobspec.Options{OperatorJudge: true})
	if err != nil || len(res.Errors) > 0 {
		t.Fatalf("%v %+v", err, res.Errors)
	}
	dir := t.TempDir()
	r, err := render.Render(render.RenderInput{JobID: "judged", Spec: res.Spec, GPUs: 2, Ports: upstream.Ports{Base: 20000},
		Dir: dir, Pipeline: render.DefaultPipeline(), JudgeURL: "https://api.hostedtrain.example/v1/judge"})
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(r.Files["rl.toml"])
	if !strings.Contains(cfg, "base_url = 'https://api.hostedtrain.example/v1/judge'") || strings.Contains(cfg, jobspec.OperatorJudgeURL) ||
		!strings.Contains(cfg, "api_key_var = '"+jobspec.JudgeKeyVar+"'") {
		t.Fatalf("rl.toml:\n%s", cfg)
	}
	if err := os.WriteFile(filepath.Join(dir, "rl.toml"), r.Files["rl.toml"], 0o644); err != nil {
		t.Fatal(err)
	}
	res2 := upstreamtest.Check(t, "prime-rl", filepath.Join(dir, "rl.toml"), "--output-dir", dir, "--run-name", "judged")
	judges, _ := dig(res2[0].Details, "resolved", "train_sources").([]any)
	if !res2[0].OK || len(judges) != 1 {
		t.Fatalf("upstream: %+v", res2[0])
	}
	j, _ := dig(judges[0], "taskset", "task", "judges").([]any)
	jm, _ := j[0].(map[string]any)
	if len(j) != 1 || jm["base_url"] != "https://api.hostedtrain.example/v1/judge" || jm["api_key_var"] != jobspec.JudgeKeyVar || jm["model"] != "openai/gpt-5.4-nano" {
		t.Errorf("upstream resolves the judge as %v", j)
	}
}
