package render

import (
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Pipeline says which commands run a job's parts, one template per part. Templates take
// {placeholders}, each filled into one argument:
//
//	rl        {config} (the rl.toml written for the job), {output_dir}, {run_name};
//	          {resume} becomes `--resume.step N` when the run resumes, else nothing
//	preflight the same as rl: validates the written rl.toml with the installed prime-rl;
//	          {resume_set} becomes `--set resume.step=N` (the upstream kit's check.py form)
//	gepa      {config} (the GEPA config written for the job)
//	gepa_check {config}: validates the GEPA config with the installed verifiers
//	env_check {envs}: the installed environments of a GEPA or eval job can be loaded by the
//	          loader it runs (before its model server starts)
//	eval      {env}, {model}, {num_examples}, {rollouts_per_example}, {base_url}, {key_var},
//	          {output_dir}; {eval_flags} becomes -a (environment arguments) and -S (sampling)
//	serve     {model}, {port}, {tp}: an OpenAI-compatible server of an open-weight model on
//	          the job's GPUs, for GEPA and evals; {max_model_len} becomes `--max-model-len N`
//	          (the job's longest sequence); the job's random key is in VLLM_API_KEY
//	install   {env_id}: installs one Environments Hub environment into prime-rl's Python
//	versions  prints the installed upstream versions as JSON
//
// Every template may use {prime_rl}, the prime-rl checkout the node runs (PrimeRL).
type Pipeline struct {
	// Name is shown to users as the job's runtime.
	Name string
	// Emulated marks the project's emulated prime-rl; users see it on the job.
	Emulated bool
	// PrimeRL is the folder of the pinned prime-rl checkout (with its .venv), {prime_rl}.
	PrimeRL   string
	RL        []string
	Preflight []string
	GEPA      []string
	GEPACheck []string
	// EnvCheck runs before a GEPA or eval job's model server: its environments can be loaded.
	EnvCheck []string
	Eval     []string
	Serve    []string
	// Install runs once per Environments Hub environment before the pipeline; empty skips.
	Install  []string
	Versions []string
}

// DefaultPrimeRL is where infra/gpu-node puts the pinned prime-rl checkout.
const DefaultPrimeRL = "/opt/prime-rl"

// DefaultPipeline is real prime-rl and verifiers, in the prime-rl checkout at PrimeRL, as a
// GPU node runs them: the commands of the pinned runtime's description
// (internal/upstream/runtime.toml), each but Install run in prime-rl's Python with uv.
func DefaultPipeline() Pipeline {
	rt := upstream.PinnedRuntime()
	uvRun := []string{"uv", "run", "--no-sync", "--project", "{prime_rl}"}
	with := func(args []string) []string { return append(append([]string{}, uvRun...), args...) }
	c := rt.Commands
	return Pipeline{
		Name:      "prime-rl",
		PrimeRL:   DefaultPrimeRL,
		RL:        with(c.RL),
		Preflight: with(c.Preflight),
		GEPA:      with(c.GEPA),
		GEPACheck: with(c.GEPACheck),
		EnvCheck:  with(c.EnvCheck),
		Eval:      with(c.Eval),
		Serve:     with(c.Serve),
		Install:   append([]string{}, c.Install...),
		Versions:  nil, // cmd/gpuagent fills in its own `versions` subcommand
	}
}

// EmulatedPipeline runs the project's prime-rl-emulator at bin for every part; flags go to
// each command (--emulate.step-time and the like). primeRL is the folder the emulator treats
// as the prime-rl checkout (environments are installed into its .venv).
func EmulatedPipeline(bin, primeRL string, flags ...string) Pipeline {
	with := func(args ...string) []string {
		return append(append(append([]string{bin}, args...), "--emulate.venv", "{prime_rl}/.venv"), flags...)
	}
	return Pipeline{
		Name:     "prime-rl-emulator",
		Emulated: true,
		PrimeRL:  primeRL,
		RL:       with("rl", "@", "{config}", "--output-dir", "{output_dir}", "--run.name", "{run_name}", "{resume}"),
		GEPA:     with("gepa", "{config}"),
		Eval: with("eval", "{env}", "-m", "{model}", "-n", "{num_examples}", "-r", "{rollouts_per_example}",
			"-b", "{base_url}", "-k", "{key_var}", "-s", "-o", "{output_dir}", "{eval_flags}"),
		Serve:    with("serve", "{model}", "--host", "127.0.0.1", "--port", "{port}", "--tensor-parallel-size", "{tp}", "{max_model_len}"),
		Install:  []string{bin, "env", "install", "{env_id}"},
		Versions: []string{bin, "versions"},
	}
}

// Expand fills a command template's {placeholders}; an argument that is exactly {name} for a
// name in lists becomes that list's arguments (none when it is empty).
func Expand(template []string, vars map[string]string, lists map[string][]string) []string {
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
