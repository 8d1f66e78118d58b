// Package jobspec turns the job files users write (the hosted TOML of `prime train`, its
// self-hosted prime-rl form, or the same object as JSON) into one normalized Spec.
//
// Schema validation happens before this package sees a value: the OpenAPI document is the
// contract for types, ranges and unknown keys. This package maps the aliases users bring
// (`model_name`, a single `[env]` table, `[checkpointing]`) onto the one shape and fills
// defaults, so that what the API echoes back is what will run.
package jobspec

import (
	"encoding/json"
	"fmt"
)

// Job kinds.
const (
	KindRL   = "rl"
	KindGEPA = "gepa"
	KindEval = "eval"
)

// Defaults taken from the public `prime` CLI, so a file means the same thing here and there.
const (
	DefaultMaxSteps           = 100
	DefaultBatchSize          = 128
	DefaultRolloutsPerExample = 8
	DefaultCheckpointInterval = 50
	DefaultKeepCloud          = 5
)

// Spec is the normalized job: every alias resolved, every default filled in.
type Spec struct {
	Kind               string      `json:"kind"`
	Name               string      `json:"name,omitempty"`
	Model              string      `json:"model"`
	MaxSteps           int         `json:"max_steps"`
	BatchSize          int         `json:"batch_size"`
	RolloutsPerExample int         `json:"rollouts_per_example"`
	LearningRate       float64     `json:"learning_rate,omitempty"`
	Sampling           Sampling    `json:"sampling"`
	Env                []Env       `json:"env"`
	Wandb              *Wandb      `json:"wandb,omitempty"`
	Checkpoints        Checkpoints `json:"checkpoints"`
	// EnvFiles are the secret files the job named; the CLI reads them, the server never does.
	EnvFiles []string `json:"env_files,omitempty"`
}

// Sampling holds the rollout sampling parameters.
type Sampling struct {
	MaxTokens   int      `json:"max_tokens,omitempty"`
	Temperature *float64 `json:"temperature,omitempty"`
	TopP        *float64 `json:"top_p,omitempty"`
}

// Env is one Environments Hub environment to train on.
type Env struct {
	ID     string         `json:"id"`
	Args   map[string]any `json:"args,omitempty"`
	Weight float64        `json:"weight"`
}

// Wandb says where the run logs to Weights & Biases.
type Wandb struct {
	Entity  string `json:"entity,omitempty"`
	Project string `json:"project,omitempty"`
	Name    string `json:"name,omitempty"`
}

// Checkpoints says how often the trainer saves and how many saved steps the service keeps.
type Checkpoints struct {
	Interval int `json:"interval"`
	// KeepCloud is how many of the newest checkpoints stay in object storage; -1 keeps all.
	KeepCloud int `json:"keep_cloud"`
}

// FromValue normalizes a schema-valid job value (decoded from TOML or JSON) into a Spec.
// The value is not modified.
func FromValue(v map[string]any) (Spec, error) {
	m := make(map[string]any, len(v))
	for k, e := range v {
		m[k] = e
	}
	rename(m, "model_name", "model")
	if envs, ok := m["env"].(map[string]any); ok { // a single [env] table
		m["env"] = []any{envs}
	}
	if f, ok := m["env_file"]; ok {
		delete(m, "env_file")
		switch f := f.(type) {
		case string:
			m["env_files"] = []any{f}
		default:
			m["env_files"] = f
		}
	}
	if c, ok := m["checkpointing"].(map[string]any); ok {
		delete(m, "checkpointing")
		ck := map[string]any{}
		if x, ok := c["save_every_n_steps"]; ok {
			ck["interval"] = x
		}
		if x, ok := c["keep_n_checkpoints"]; ok {
			ck["keep_cloud"] = x
		}
		m["checkpoints"] = ck
	}

	raw, err := json.Marshal(m)
	if err != nil {
		return Spec{}, fmt.Errorf("jobspec: encode: %w", err)
	}
	s := Spec{Checkpoints: Checkpoints{KeepCloud: DefaultKeepCloud}}
	if err := json.Unmarshal(raw, &s); err != nil {
		return Spec{}, fmt.Errorf("jobspec: decode: %w", err)
	}
	s.fillDefaults()
	return s, nil
}

func rename(m map[string]any, from, to string) {
	if x, ok := m[from]; ok {
		delete(m, from)
		if _, taken := m[to]; !taken {
			m[to] = x
		}
	}
}

func (s *Spec) fillDefaults() {
	if s.Kind == "" {
		s.Kind = KindRL
	}
	if s.MaxSteps == 0 {
		s.MaxSteps = DefaultMaxSteps
	}
	if s.BatchSize == 0 {
		s.BatchSize = DefaultBatchSize
	}
	if s.RolloutsPerExample == 0 {
		s.RolloutsPerExample = DefaultRolloutsPerExample
	}
	for i := range s.Env {
		if s.Env[i].Weight == 0 {
			s.Env[i].Weight = 1
		}
	}
	if s.Checkpoints.Interval == 0 {
		s.Checkpoints.Interval = min(DefaultCheckpointInterval, s.MaxSteps)
	}
}
