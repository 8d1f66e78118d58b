package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
)

// The filesystem weight broadcast as prime-rl writes it (traces: checkpoints-and-process.json,
// broadcasts): each trained step's folder, marked STABLE once its files are written; a LoRA
// run's adapter and its config; step N-2's folder deleted after step N unless N-2 is a
// checkpoint step.
func TestTheBroadcastsAreUpstreams(t *testing.T) {
	dir := t.TempDir()
	tree := map[string]any{"trainer": map[string]any{"model": map[string]any{"lora": map[string]any{"rank": int64(8), "alpha": 16.0}}}}
	r := &rlRun{cfg: &rlConfig{tree: tree, model: "Qwen/Qwen3-4B-Instruct-2507", lora: true, interval: 5}, dir: dir}
	for step := 1; step <= 12; step++ {
		if err := r.broadcast(step); err != nil {
			t.Fatal(err)
		}
	}
	entries, err := os.ReadDir(filepath.Join(dir, "broadcasts"))
	if err != nil {
		t.Fatal(err)
	}
	var kept []string
	for _, e := range entries {
		kept = append(kept, e.Name())
	}
	if want := []string{"step_10", "step_11", "step_12", "step_5"}; !slices.Equal(kept, want) {
		t.Errorf("broadcasts kept %v; want %v (the checkpoint steps and the newest two)", kept, want)
	}
	for _, step := range []int{5, 12} {
		d := filepath.Join(dir, "broadcasts", fmt.Sprintf("step_%d", step))
		for _, f := range []string{"adapter_model.safetensors", "adapter_config.json", "STABLE"} {
			if _, err := os.Stat(filepath.Join(d, f)); err != nil {
				t.Errorf("step %d: %v", step, err)
			}
		}
		var cfg struct {
			Base   string   `json:"base_model_name_or_path"`
			R      int      `json:"r"`
			Alpha  float64  `json:"lora_alpha"`
			Target []string `json:"target_modules"`
		}
		b, _ := os.ReadFile(filepath.Join(d, "adapter_config.json"))
		if err := json.Unmarshal(b, &cfg); err != nil || cfg.Base != "Qwen/Qwen3-4B-Instruct-2507" || cfg.R != 8 || cfg.Alpha != 16 || len(cfg.Target) == 0 {
			t.Errorf("step %d's adapter config: %s (%v)", step, b, err)
		}
	}
	// A full-weight run writes the model's safetensors and their index.
	full := &rlRun{cfg: &rlConfig{tree: map[string]any{}, model: "m", interval: 5}, dir: t.TempDir()}
	if err := full.broadcast(3); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"model.safetensors", "model.safetensors.index.json", "STABLE"} {
		if _, err := os.Stat(filepath.Join(full.dir, "broadcasts", "step_3", f)); err != nil {
			t.Error(err)
		}
	}
}
