package jobspec

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// What one job may hold of the service's job store (Redis) while it lives: its config (the
// normalized job, args included) and its sealed secrets. A job upstream writes for users holds
// a few kilobytes; these bounds are tens of times that, and keep one tenant's submits from
// filling Redis (red team: 524 KB of args and 655 KB of secrets a job).
const (
	// MaxConfigBytes bounds a job's config as stored (Encode).
	MaxConfigBytes = 64 << 10
	// MaxArgsBytes bounds one environment's args as stored.
	MaxArgsBytes = 16 << 10
	// MaxSecretsBytes bounds a job's secrets, names and values together.
	MaxSecretsBytes = 64 << 10
)

// Encode is the JSON the service stores of v: without the HTML escapes encoding/json adds by
// default (each <, > or & would take six bytes), so a stored config is no bigger than the job
// written.
func Encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// sizes refuses a job bigger than the service keeps: an environment's args, the whole config,
// the secrets.
func (n *normalizer) sizes(s *Spec, secrets map[string]string) {
	args := func(ptr string, envs []Env) {
		for i, e := range envs {
			if b, err := Encode(e.Args); err == nil && len(b) > MaxArgsBytes {
				n.fail(fmt.Sprintf("%s/%d/args", ptr, i), "these args take %d bytes; an environment's args may take %d (%d KiB): "+
					"pass data to an environment by name (a dataset, a split), not inline", len(b), MaxArgsBytes, MaxArgsBytes>>10)
			}
		}
	}
	args("/env", s.Env)
	if s.Eval != nil {
		args("/eval/env", s.Eval.Env)
	}
	if b, err := Encode(s); err == nil && len(b) > MaxConfigBytes {
		n.fail("", "the job takes %d bytes as the service stores it; a job may take %d (%d KiB): a job upstream writes takes a few KiB, "+
			"so look for large inline values (args, prompts)", len(b), MaxConfigBytes, MaxConfigBytes>>10)
	}
	total := 0
	for k, v := range secrets {
		total += len(k) + len(v)
	}
	if total > MaxSecretsBytes {
		n.fail("/secrets", "the secrets take %d bytes (names and values); a job's may take %d (%d KiB)", total, MaxSecretsBytes, MaxSecretsBytes>>10)
	}
}
