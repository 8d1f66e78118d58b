package upstream

import (
	"bytes"
	_ "embed"
	"fmt"
	"sync"

	"github.com/pelletier/go-toml/v2"
)

//go:embed runtime.toml
var runtimeTOML []byte

// Runtime describes how a node runs the pinned upstream: each part's command (run in the
// prime-rl checkout's Python, except Install) and the shapes of the files the commands read.
// It is read from runtime.toml, the one place that changes when the pin moves.
type Runtime struct {
	Name     string `toml:"name"`
	Commands struct {
		RL        []string `toml:"rl"`
		Preflight []string `toml:"preflight"`
		GEPA      []string `toml:"gepa"`
		GEPACheck []string `toml:"gepa_check"`
		EnvCheck  []string `toml:"env_check"`
		Eval      []string `toml:"eval"`
		Serve     []string `toml:"serve"`
		Install   []string `toml:"install"`
	} `toml:"commands"`
	Shapes struct {
		// GEPAConfig is the GEPA config's shape: "legacy" (verifiers' legacy loader).
		GEPAConfig string `toml:"gepa_config"`
		// EnvLoader is how GEPA and evals load an environment: "legacy" (load_environment).
		EnvLoader string `toml:"env_loader"`
	} `toml:"shapes"`
}

// PinnedRuntime is the runtime of the pinned versions.
func PinnedRuntime() Runtime { return pinnedRuntime() }

var pinnedRuntime = sync.OnceValue(func() Runtime {
	var r Runtime
	dec := toml.NewDecoder(bytes.NewReader(runtimeTOML))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&r); err != nil {
		panic(fmt.Sprintf("upstream: runtime.toml: %v", err))
	}
	return r
})
