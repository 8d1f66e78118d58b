package main

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// multiFlag collects a repeated flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// renderOutput is what `gpuagent render -o json` prints.
type renderOutput struct {
	Job       string            `json:"job"`
	Kind      string            `json:"kind"`
	GPUs      int               `json:"gpus"`
	Resume    int               `json:"resume_step,omitempty"`
	Files     map[string]string `json:"files"`
	Preflight []string          `json:"preflight,omitempty"`
	EnvCheck  []string          `json:"env_check,omitempty"`
	Serve     []string          `json:"serve,omitempty"`
	Command   []string          `json:"command"`
	Ports     []int             `json:"ports,omitempty"`
	Notes     []string          `json:"notes,omitempty"`
	Warnings  []string          `json:"warnings,omitempty"`
	// Resolved is what an rl run will really do, upstream's defaults applied.
	Resolved *render.Resolved `json:"resolved,omitempty"`
}

// renderJob writes the files the agent would hand a job's pipeline and prints the commands it
// would run, for a job file as the service would take it (the same checks as a submit) on the
// GPUs given: what will run on a node, before it does.
func renderJob(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("render", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "usage: gpuagent render JOB.toml --gpus H100:N [--nodes K] [--resume] [-e KEY=VALUE]... --out DIR [-o json]")
		fs.PrintDefaults()
	}
	gpus := fs.String("gpus", "", "the GPUs the job is given, MODEL:COUNT (default: what the job asks for)")
	nodes := fs.Int("nodes", 1, "nodes the job spans")
	resume := fs.Bool("resume", false, "render the run as resuming from a committed checkpoint")
	resumeStep := fs.Int("resume-step", 0, "the checkpoint step it resumes from (default: the job's first checkpoint)")
	kind := fs.String("kind", "", "the job's kind when the file does not say (gepa, eval); default rl")
	out := fs.String("out", "", "the folder to write the files into (the job's working folder on a node)")
	format := fs.String("o", "text", "output: text or json")
	var env, envFiles multiFlag
	fs.Var(&env, "e", "a secret KEY=VALUE, or KEY from this environment (repeatable)")
	fs.Var(&envFiles, "env-file", "a secrets file (repeatable)")
	allowOutside := fs.Bool("allow-outside-env-file", false, "read env files the job file names outside its folder")
	pf := pipelineFlags(fs, render.DefaultPipeline())
	file, rest := "", args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		file, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return err
	}
	if file == "" && fs.NArg() > 0 {
		file = fs.Arg(0)
	}
	if file == "" || *out == "" {
		fs.Usage()
		return errors.New("render needs a job file and --out")
	}
	if *nodes > 1 {
		return fmt.Errorf("--nodes %d: a hostedtrain agent runs a job on one node; prime-rl runs across nodes only under SLURM "+
			"(deployment.type = \"multi_node\" requires [slurm]), which agents do not drive. Render the job on one node of up to %d GPUs",
			*nodes, upstream.GPUsPerNode)
	}
	fromFiles, err := envFileFlags(envFiles)
	if err != nil {
		return err
	}
	body, err := jobspec.ReadJobFileWith(file, append(fromFiles, env...), jobspec.ReadOptions{AllowOutsideEnvFile: *allowOutside})
	if err != nil {
		return err
	}
	adm, err := api.NewAdmission()
	if err != nil {
		return err
	}
	got, prob := adm.Admit(*kind, body.ContentType, body.Data)
	if prob != nil {
		return fmt.Errorf("%s: the service would refuse it: %s", file, describeProblem(prob))
	}
	spec := got.Spec
	n := spec.Resources.GPUs
	if *gpus != "" {
		inv, err := job.ParseGPUs(*gpus)
		if err != nil || len(inv) != 1 {
			return fmt.Errorf("--gpus %q: want MODEL:COUNT, e.g. H100:8", *gpus)
		}
		n = inv[0].Count
	}
	step := 0
	if *resume || *resumeStep > 0 {
		step = *resumeStep
		if step == 0 && spec.Checkpoints != nil {
			step = min(spec.Checkpoints.Interval, spec.MaxSteps)
		}
		step = max(step, 1)
	}
	pipeline, err := pf.pipeline()
	if err != nil {
		return err
	}
	dir, err := filepath.Abs(*out)
	if err != nil {
		return err
	}
	jobID := "render-" + strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	names := make([]string, 0, len(got.Secrets))
	for k := range got.Secrets {
		names = append(names, k)
	}
	ep, err := pf.inferenceEndpoint()
	if err != nil {
		return err
	}
	r, err := render.Render(render.RenderInput{
		JobID: jobID, Spec: spec, Secrets: names, GPUs: n, Ports: upstream.Ports{Base: gpuagent.DefaultPortRange[0]},
		Resume: step, Dir: dir, Pipeline: pipeline, Endpoint: ep,
	})
	if err != nil {
		return fmt.Errorf("%s on %d GPUs: %w", file, n, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	res := renderOutput{Job: jobID, Kind: spec.Kind, GPUs: n, Resume: step, Files: map[string]string{},
		Preflight: r.Preflight, EnvCheck: r.EnvCheck, Command: r.Command, Ports: r.Ports, Notes: r.Notes, Resolved: r.Resolved}
	if r.Serve != nil {
		res.Serve = r.Serve.Command
	}
	for _, w := range got.Warnings {
		res.Warnings = append(res.Warnings, strings.TrimPrefix(w.Pointer, "/")+": "+w.Message)
	}
	for _, name := range r.FileNames() {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, r.Files[name], 0o644); err != nil {
			return err
		}
		res.Files[name] = p
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(res)
	}
	fmt.Fprintf(stdout, "%s job on %d GPU(s)", spec.Kind, n)
	if step > 0 {
		fmt.Fprintf(stdout, ", resuming from step %d", step)
	}
	fmt.Fprintln(stdout)
	for _, name := range r.FileNames() {
		fmt.Fprintf(stdout, "wrote %s\n", res.Files[name])
	}
	for _, w := range res.Warnings {
		fmt.Fprintf(stdout, "warning: %s\n", w)
	}
	for _, note := range r.Notes {
		fmt.Fprintf(stdout, "note: %s\n", note)
	}
	if r.Resolved != nil {
		for _, l := range r.Resolved.Lines() {
			fmt.Fprintln(stdout, l)
		}
	}
	if len(r.EnvCheck) > 0 {
		fmt.Fprintf(stdout, "env check: %s\n", shellQuote(r.EnvCheck))
	}
	if len(r.Preflight) > 0 {
		fmt.Fprintf(stdout, "preflight: %s\n", shellQuote(r.Preflight))
	}
	if r.Serve != nil {
		fmt.Fprintf(stdout, "serve: %s\n", shellQuote(r.Serve.Command))
	}
	fmt.Fprintf(stdout, "run: %s\n", shellQuote(r.Command))
	return nil
}

func envFileFlags(files []string) ([]string, error) {
	// Secrets files on the command line are read like the job's own env files: godotenv.
	var out []string
	for _, f := range files {
		vals, err := readDotenv(f)
		if err != nil {
			return nil, fmt.Errorf("--env-file %s: %w", f, err)
		}
		for k, v := range vals {
			out = append(out, k+"="+v)
		}
	}
	return out, nil
}

func describeProblem(p *api.Problem) string {
	var parts []string
	for _, e := range p.Errors {
		where := e.Pointer
		if e.Line > 0 {
			where = fmt.Sprintf("line %d (%s)", e.Line, e.Pointer)
		}
		parts = append(parts, where+": "+e.Message)
	}
	if len(parts) == 0 {
		return p.Detail
	}
	return p.Detail + ": " + strings.Join(parts, "; ")
}

// shellQuote prints a command so it can be pasted into a shell.
func shellQuote(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n\"'\\$`;&|<>(){}*?[]#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
