package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// pipelineOptions are the flags that choose what a job runs, shared by the agent and
// `gpuagent render`.
type pipelineOptions struct {
	primeRL                                                       *string
	rl, preflight, gepa, gepaCheck, eval, serve, install, version *string
	emulated                                                      *bool
	emulator, emulateFlags, emulateCheck                          *string
	endpoint, endpointKey                                         *string
}

func pipelineFlags(fs *flag.FlagSet, def render.Pipeline) *pipelineOptions {
	j := func(t []string) string { return strings.Join(t, " ") }
	return &pipelineOptions{
		primeRL:   fs.String("prime-rl", def.PrimeRL, "the pinned prime-rl checkout (with its .venv), {prime_rl} in the commands"),
		rl:        fs.String("rl-command", j(def.RL), "the rl pipeline ({config} {output_dir} {run_name} {resume})"),
		preflight: fs.String("preflight-command", j(def.Preflight), "checks an rl job's config with the installed prime-rl before it runs, as the rl command takes it; empty skips"),
		gepa:      fs.String("gepa-command", j(def.GEPA), "the GEPA pipeline ({config})"),
		gepaCheck: fs.String("gepa-check-command", "", "checks a GEPA config with the installed verifiers before it runs ({config}); empty uses verifiers' own loader"),
		eval: fs.String("eval-command", j(def.Eval),
			"the eval pipeline ({env} {model} {num_examples} {rollouts_per_example} {base_url} {key_var} {output_dir} {eval_flags})"),
		serve:        fs.String("serve-command", j(def.Serve), "serves an open-weight model for GEPA and evals ({model} {port} {tp}); its key is in VLLM_API_KEY"),
		install:      fs.String("install-command", j(def.Install), "installs one Environments Hub environment into prime-rl's Python ({env_id}); empty skips"),
		version:      fs.String("versions-command", "", "prints the installed upstream versions as JSON; default: `gpuagent versions --prime-rl DIR`"),
		emulated:     fs.Bool("emulated", false, "run every kind with prime-rl-emulator (no GPU work; shown to users as emulated)"),
		emulator:     fs.String("emulator", "", "the prime-rl-emulator binary for --emulated (default: beside gpuagent, else on PATH)"),
		emulateFlags: fs.String("emulate-flags", "", "extra flags for the emulator, e.g. \"--emulate.step-time 50ms\""),
		emulateCheck: fs.String("emulate-check", "", "the command the emulator checks configs with, as upstream would (the conformance kit: \"python3 .../check.py\")"),
		endpoint:     fs.String("inference-endpoint", "", "an OpenAI-compatible endpoint that serves open-weight models for GEPA and evals, instead of a server on the job's GPUs"),
		endpointKey:  fs.String("inference-endpoint-key-var", "", "the variable of the agent's environment that holds --inference-endpoint's key"),
	}
}

// inferenceEndpoint is the operator's own model server, if one is given.
func (o *pipelineOptions) inferenceEndpoint() (*render.Endpoint, error) {
	if *o.endpoint == "" {
		return nil, nil
	}
	if *o.endpointKey == "" {
		return nil, errors.New("--inference-endpoint needs --inference-endpoint-key-var: the variable that holds its key")
	}
	return &render.Endpoint{BaseURL: *o.endpoint, KeyVar: *o.endpointKey}, nil
}

func (o *pipelineOptions) pipeline() (render.Pipeline, error) {
	if *o.emulated {
		bin, err := findEmulator(*o.emulator)
		if err != nil {
			return render.Pipeline{}, err
		}
		flags := render.ParseCommand(*o.emulateFlags)
		if *o.emulateCheck != "" {
			flags = append(flags, "--emulate.check", *o.emulateCheck)
		}
		p := render.EmulatedPipeline(bin, *o.primeRL, flags...)
		if *o.preflight != strings.Join(render.DefaultPipeline().Preflight, " ") {
			p.Preflight = render.ParseCommand(*o.preflight)
		}
		if *o.gepaCheck != "" {
			p.GEPACheck = render.ParseCommand(*o.gepaCheck)
		}
		return p, nil
	}
	def := render.DefaultPipeline()
	p := render.Pipeline{
		Name: "prime-rl", PrimeRL: *o.primeRL,
		RL: render.ParseCommand(*o.rl), Preflight: render.ParseCommand(*o.preflight),
		GEPA: render.ParseCommand(*o.gepa), GEPACheck: def.GEPACheck, EnvCheck: def.EnvCheck,
		Eval: render.ParseCommand(*o.eval), Serve: render.ParseCommand(*o.serve),
		Install: render.ParseCommand(*o.install), Versions: render.ParseCommand(*o.version),
	}
	if *o.gepaCheck != "" {
		p.GEPACheck = render.ParseCommand(*o.gepaCheck)
	}
	if len(p.Versions) == 0 {
		self, err := os.Executable()
		if err != nil {
			return p, err
		}
		p.Versions = []string{self, "versions", "--prime-rl", *o.primeRL}
	}
	return p, nil
}

// readVersions runs the pipeline's versions command.
func readVersions(ctx context.Context, p render.Pipeline) (upstream.Versions, error) {
	if len(p.Versions) == 0 {
		return upstream.Versions{}, nil
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Versions[0], p.Versions[1:]...)
	cmd.WaitDelay = 5 * time.Second // a child that keeps the output open does not hold the start
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) && len(ee.Stderr) > 0 {
			err = fmt.Errorf("%w: %s", err, strings.TrimSpace(string(ee.Stderr)))
		}
		return upstream.Versions{}, fmt.Errorf("read the installed upstream versions (%s): %w", strings.Join(p.Versions, " "), err)
	}
	var v upstream.Versions
	if err := json.Unmarshal(out, &v); err != nil {
		return upstream.Versions{}, fmt.Errorf("read the installed upstream versions: %q is not a JSON object of versions", strings.TrimSpace(string(out)))
	}
	return v, nil
}

// versions prints the upstream versions installed on this node: prime-rl's and its verifiers
// submodule's commits, from the prime-rl checkout, and the prime CLI's release.
func versions(args []string, out *os.File) error {
	fs := flag.NewFlagSet("versions", flag.ContinueOnError)
	dir := fs.String("prime-rl", render.DefaultPrimeRL, "the prime-rl checkout")
	prime := fs.String("prime", "prime", "the prime CLI")
	if err := fs.Parse(args); err != nil {
		return err
	}
	var v upstream.Versions
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	git := func(d string) string {
		b, err := exec.CommandContext(ctx, "git", "-C", d, "rev-parse", "HEAD").Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(b))
	}
	v.PrimeRL = git(*dir)
	v.Verifiers = git(filepath.Join(*dir, "deps", "verifiers"))
	if b, err := exec.CommandContext(ctx, *prime, "--version").Output(); err == nil {
		// "Prime CLI version: 0.6.26"
		f := strings.Fields(string(b))
		if len(f) > 0 {
			v.PrimeCLI = f[len(f)-1]
		}
	}
	if v.PrimeRL == "" {
		return fmt.Errorf("no prime-rl checkout at %s (git rev-parse failed)", *dir)
	}
	return json.NewEncoder(out).Encode(v)
}

func findEmulator(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "prime-rl-emulator")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("prime-rl-emulator")
	if err != nil {
		return "", errors.New("--emulated: prime-rl-emulator is neither beside gpuagent nor on PATH; set --emulator")
	}
	return p, nil
}

func readDotenv(path string) (map[string]string, error) { return jobspec.ReadEnvFile(path) }
