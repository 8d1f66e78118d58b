package main

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// torchCompile plays vLLM's torch.compile cache (vllm/compilation/backends.py): the engine
// compiles its model's graph into $VLLM_CACHE_ROOT/torch_compile_cache/<hash>/rank_0_0 (the
// hash of the model and its parallelism), and an engine that finds a compiled graph there loads
// it instead, saying so in its log; a cache it cannot write (a read-only one) costs a warning,
// never the run. The default root is ~/.cache/vllm, as vLLM's.
func torchCompile(logs *componentLogs, model string, tp int) error {
	root := os.Getenv("VLLM_CACHE_ROOT")
	if root == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return err
		}
		root = filepath.Join(home, ".cache", "vllm")
	}
	sum := sha256.Sum256([]byte(model + "|tp" + strconv.Itoa(tp)))
	hash := hex.EncodeToString(sum[:])[:10]
	dir := filepath.Join(root, "torch_compile_cache", hash, "rank_0_0")
	logs.vllm("INFO", fmt.Sprintf("Using cache directory: %s for vLLM's torch.compile", dir))
	start := time.Now()
	index := filepath.Join(dir, "vllm_compile_cache.py")
	if _, err := os.Stat(index); err == nil {
		logs.vllm("INFO", fmt.Sprintf("Directly load the compiled graph(s) for dynamic shape from the cache, took %.3f s", time.Since(start).Seconds()))
		logs.vllm("INFO", fmt.Sprintf("torch.compile takes %.2f s in total", time.Since(start).Seconds()))
		return nil
	} else if !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	artifact := filepath.Join(dir, "inductor_cache", hash[:2], "c"+hash+".py")
	if err := os.MkdirAll(filepath.Dir(artifact), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(artifact, []byte("# emulated inductor output of "+model+"\n"), 0o644); err != nil {
		return err
	}
	logs.vllm("INFO", fmt.Sprintf("Compiling a graph for dynamic shape takes %.2f s", time.Since(start).Seconds()))
	rel, _ := filepath.Rel(dir, artifact)
	if err := os.WriteFile(index, []byte(fmt.Sprintf("{(None, 0, 'inductor'): ('c%s', %q)}\n", hash, rel)), 0o644); err != nil {
		return err
	}
	logs.vllm("INFO", fmt.Sprintf("torch.compile takes %.2f s in total", time.Since(start).Seconds()))
	return nil
}
