package gpuagent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// Pipeline says which commands run a job, one template per kind. Templates take
// {placeholders}, each filled into one argument:
//
//	rl       {config} (the rl.toml written for the job), {output_dir}, {run_name}
//	gepa     {config} (the gepa.toml written for the job), {output_dir}
//	eval     {env_id}, {model}, {num_examples}, {rollouts_per_example}, {output_dir}
//	install  {env_id} (or {id})
//
// An argument that is exactly {eval_flags} becomes the eval's optional flags, or nothing:
// -a with the environment's arguments and -S with the sampling settings as JSON, and -s
// (save results.jsonl, which becomes an artifact).
type Pipeline struct {
	// Name is shown to users as the job's runtime.
	Name string
	// Emulated marks the project's emulated prime-rl; users see it on the job.
	Emulated bool
	RL       []string
	GEPA     []string
	Eval     []string
	// Install runs once per environment before the pipeline; empty skips installation.
	Install []string
}

// DefaultPipeline is real prime-rl and the prime CLI, as a GPU node runs them.
func DefaultPipeline() Pipeline {
	return Pipeline{
		Name:    "prime-rl",
		RL:      []string{"uv", "run", "rl", "@", "{config}", "--output-dir", "{output_dir}", "--run.name", "{run_name}"},
		GEPA:    []string{"prime", "gepa", "run", "{config}"},
		Eval:    []string{"prime", "eval", "run", "{env_id}", "-m", "{model}", "-n", "{num_examples}", "-r", "{rollouts_per_example}", "{eval_flags}"},
		Install: []string{"prime", "env", "install", "{env_id}"},
	}
}

// EmulatedPipeline runs the project's prime-rl-emulator at bin for every kind; flags go to
// each command (--emulate.step-time and the like).
func EmulatedPipeline(bin string, flags ...string) Pipeline {
	p := DefaultPipeline()
	p.Name, p.Emulated = "prime-rl-emulator", true
	p.RL = append([]string{bin, "@", "{config}", "--output-dir", "{output_dir}", "--run.name", "{run_name}"}, flags...)
	p.GEPA = append([]string{bin, "gepa", "run", "{config}"}, flags...)
	p.Eval = append([]string{bin, "eval", "run", "{env_id}", "-m", "{model}", "-n", "{num_examples}", "-r", "{rollouts_per_example}", "{eval_flags}"}, flags...)
	p.Install = []string{bin, "env", "install", "{env_id}"}
	return p
}

// command is a job's pipeline command, ready to start.
type command struct {
	argv []string
	// metrics and logs are where the pipeline writes prime-rl's metrics.jsonl and
	// logs/latest; empty for pipelines that write neither.
	metrics, logs string
}

// prepare writes what the job's pipeline reads (its config) under r.dir and returns the
// command. resume says the rl run continues from a restored checkpoint.
func (p Pipeline) prepare(r *run, resume bool) (command, error) {
	spec := r.claim.Job.Config
	switch spec.Kind {
	case jobspec.KindRL:
		if len(p.RL) == 0 {
			return command{}, fmt.Errorf("this agent has no rl command configured")
		}
		cfg, err := renderRLConfig(r.claim.Job.ID, spec, len(r.devices))
		if err != nil {
			return command{}, err
		}
		path := filepath.Join(r.dir, "rl.toml")
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return command{}, err
		}
		argv := expand(p.RL, map[string]string{"config": path, "output_dir": r.outputDir(), "run_name": r.claim.Job.ID}, nil)
		if resume {
			argv = append(argv, "--resume")
		}
		return command{argv: argv, metrics: filepath.Join(r.runDir(), "metrics.jsonl"), logs: filepath.Join(r.runDir(), "logs", "latest")}, nil
	case jobspec.KindGEPA:
		if len(p.GEPA) == 0 {
			return command{}, fmt.Errorf("this agent has no gepa command configured")
		}
		cfg, err := renderGEPAConfig(r.claim.Job.ID, spec)
		if err != nil {
			return command{}, err
		}
		path := filepath.Join(r.dir, "gepa.toml")
		if err := os.WriteFile(path, cfg, 0o644); err != nil {
			return command{}, err
		}
		return command{argv: expand(p.GEPA, map[string]string{"config": path, "output_dir": r.outputDir()}, nil)}, nil
	case jobspec.KindEval:
		if len(p.Eval) == 0 {
			return command{}, fmt.Errorf("this agent has no eval command configured")
		}
		if len(spec.Env) == 0 || spec.Evaluation == nil {
			return command{}, fmt.Errorf("the eval job has no environment")
		}
		ev := spec.Evaluation
		flags, err := evalFlags(spec)
		if err != nil {
			return command{}, err
		}
		return command{argv: expand(p.Eval, map[string]string{
			"env_id": spec.Env[0].ID, "model": spec.Model, "output_dir": r.outputDir(),
			"num_examples": strconv.Itoa(ev.NumExamples), "rollouts_per_example": strconv.Itoa(ev.RolloutsPerExample),
		}, map[string][]string{"eval_flags": flags})}, nil
	}
	return command{}, fmt.Errorf("unknown job kind %q", spec.Kind)
}

// evalFlags are `prime eval run`'s optional flags for the job.
func evalFlags(s jobspec.Spec) ([]string, error) {
	var flags []string
	if args := s.Env[0].Args; len(args) > 0 {
		b, err := json.Marshal(wholeNumbers(args))
		if err != nil {
			return nil, err
		}
		flags = append(flags, "-a", string(b))
	}
	if sp := s.Sampling; sp != nil {
		m := map[string]any{}
		if sp.MaxTokens > 0 {
			m["max_tokens"] = sp.MaxTokens
		}
		if sp.Temperature != nil {
			m["temperature"] = *sp.Temperature
		}
		if sp.TopP != nil {
			m["top_p"] = *sp.TopP
		}
		for k, v := range sp.ExtraBody {
			m[k] = v
		}
		if len(m) > 0 {
			b, err := json.Marshal(m)
			if err != nil {
				return nil, err
			}
			flags = append(flags, "-S", string(b))
		}
	}
	// Always save: results.jsonl is what an eval job delivers.
	return append(flags, "-s"), nil
}

// expand fills a command template's {placeholders}; an argument that is exactly {name} for a
// name in lists becomes that list's arguments (none when it is empty).
func expand(template []string, vars map[string]string, lists map[string][]string) []string {
	out := make([]string, 0, len(template))
	for _, a := range template {
		if name, ok := strings.CutPrefix(a, "{"); ok {
			if name, ok = strings.CutSuffix(name, "}"); ok {
				if l, ok := lists[name]; ok {
					out = append(out, l...)
					continue
				}
			}
		}
		for k, v := range vars {
			a = strings.ReplaceAll(a, "{"+k+"}", v)
		}
		out = append(out, a)
	}
	return out
}

// ParseCommand splits a command template given as one string on spaces (a flag's value).
// Arguments with spaces are not supported there; configure those in code.
func ParseCommand(s string) []string { return strings.Fields(s) }
