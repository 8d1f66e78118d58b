package render_test

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/jobspec/jobspectest"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/upstream/upstreamtest"
)

// conformanceJob is a job file to render: one of testdata/jobs, or a `prime train` file
// upstream wrote for its users (the kit's real-configs/prime-train).
type conformanceJob struct {
	name, kind string
	body       []byte
}

// rendered is one render of a job: the file upstream is asked about and what to say if it
// refuses it.
type rendered struct {
	what    string // "hosted-basic.toml on 8 GPUs, resuming from step 50"
	file    string
	resume  int
	ports   upstream.Ports
	spec    jobspec.Spec
	secrets []string
	ours    *render.Resolved // what the agent reports the run will do
}

// TestConformance renders every job the service accepts — the fixtures, the README's example
// and upstream's own `prime train` files — as the agent would hand it to the pipeline, on 1, 2 and 8 GPUs where
// the job allows, fresh and resuming, and asks the pinned upstream code (the conformance
// kit's check.py) whether it accepts each: every rl.toml must pass prime-rl's RLConfig with
// an inference server started on the node and every port in the job's block; every GEPA
// config must pass verifiers' loader. `make conformance` runs just this.
func TestConformance(t *testing.T) {
	adm, err := api.NewAdmission()
	if err != nil {
		t.Fatal(err)
	}
	var jobs []conformanceJob
	for _, name := range jobspectest.Names(t) {
		jobs = append(jobs, conformanceJob{name: name, kind: jobspectest.Kind(name), body: jobspectest.Fixture(t, name)})
	}
	// A GEPA job on an open-weight model (served on the job's GPU), and one whose reflection
	// model is a provider's (reached through verifiers' endpoint registry).
	gepa := string(jobspectest.Fixture(t, "gepa.toml"))
	jobs = append(jobs,
		conformanceJob{name: "gepa.toml, open-weight model", kind: "gepa", body: []byte(strings.Replace(strings.Replace(gepa,
			`model = "google/gemini-3-flash-preview"`, `model = "Qwen/Qwen3-4B-Instruct-2507"`, 1),
			`reflection_model = "google/gemini-3-exp-ultra-preview"`, `reflection_model = "Qwen/Qwen3-4B-Instruct-2507"`, 1))},
		conformanceJob{name: "gepa.toml, open-weight model, provider reflection", kind: "gepa", body: []byte(strings.Replace(gepa,
			`model = "google/gemini-3-flash-preview"`, `model = "Qwen/Qwen3-4B-Instruct-2507"`, 1))},
	)
	// The README's quickstart, which `make demo` runs, and the GPU check's real run.
	examples, _ := filepath.Glob(filepath.Join(jobspectest.Root(t), "examples", "*.toml"))
	gpuExamples, _ := filepath.Glob(filepath.Join(jobspectest.Root(t), "examples", "gpu", "*.toml"))
	examples = append(examples, gpuExamples...)
	// What `hostedtrain train init` writes.
	examples = append(examples, filepath.Join(jobspectest.Root(t), "cmd", "hostedtrain", "testdata", "init-template.toml"))
	if len(examples) == 0 {
		t.Fatal("no examples/*.toml")
	}
	for _, f := range examples {
		body, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(jobspectest.Root(t), f)
		jobs = append(jobs, conformanceJob{name: rel, body: body})
	}
	realConfigs, err := filepath.Glob(filepath.Join(upstreamtest.Kit(t), "real-configs", "prime-train", "*.toml"))
	if err != nil || len(realConfigs) == 0 {
		t.Fatalf("no real-configs/prime-train in the kit: %v", err)
	}
	// verifiers' own GEPA files (configs/gepa), as `hostedtrain gepa submit` reads them: each
	// beside the endpoint registry its endpoints_path names, with the keys its user holds.
	gepaConfigs, _ := filepath.Glob(filepath.Join(upstreamtest.Kit(t), "real-configs", "gepa", "*.toml"))
	if len(gepaConfigs) == 0 {
		t.Fatal("no real-configs/gepa in the kit")
	}
	gepaDir := filepath.Join(t.TempDir(), "configs")
	if err := os.MkdirAll(filepath.Join(gepaDir, "gepa"), 0o755); err != nil {
		t.Fatal(err)
	}
	copyFile(t, filepath.Join("testdata", "verifiers-endpoints.toml"), filepath.Join(gepaDir, "endpoints.toml"))
	for _, f := range gepaConfigs {
		at := filepath.Join(gepaDir, "gepa", filepath.Base(f))
		copyFile(t, f, at)
		body, err := jobspec.ReadJobFile(at, []string{"PRIME_API_KEY=prime-example", "OPENAI_API_KEY=openai-example"})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, conformanceJob{name: "real-configs/gepa/" + filepath.Base(f), kind: "gepa", body: body.Data})
	}
	var refusedAtSubmit []string
	for _, f := range realConfigs {
		// With the keys its user would hold: W&B's, and the judge's provider's.
		body, err := jobspec.ReadJobFile(f, []string{"WANDB_API_KEY=wandb-example", "OPENAI_API_KEY=openai-example"})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, conformanceJob{name: "real-configs/prime-train/" + filepath.Base(f), kind: "", body: body.Data})
	}
	// The corpus that tries each key of the prime CLI: the files it accepts (and we do,
	// TestPrimeTrainVerdicts) must render to configs prime-rl accepts; the rest are refused at
	// submit, which is TestPrimeTrainVerdicts's business.
	corpus, _ := filepath.Glob(filepath.Join(jobspectest.Root(t), "testdata", "prime-train", "*.toml"))
	if len(corpus) == 0 {
		t.Fatal("no testdata/prime-train/*.toml")
	}
	for _, f := range corpus {
		body, err := jobspec.ReadJobFile(f, primeTrainSecrets)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, conformanceJob{name: "testdata/prime-train/" + filepath.Base(f), body: body.Data})
	}
	corpusRendered := 0

	dir := t.TempDir()
	var rl, gp []rendered
	skipped := map[string][]string{}
	for i, j := range jobs {
		got, prob := adm.Admit(j.kind, "application/toml", j.body)
		if prob != nil {
			if strings.HasPrefix(j.name, "testdata/prime-train/") {
				continue
			}
			if strings.HasPrefix(j.name, "real-configs/prime-train/") {
				refusedAtSubmit = append(refusedAtSubmit, fmt.Sprintf("%s (%s)", j.name, firstError(prob)))
				continue
			}
			t.Fatalf("%s: refused at submit: %s %+v", j.name, prob.Detail, prob.Errors)
		}
		spec := got.Spec
		if strings.HasPrefix(j.name, "testdata/prime-train/") {
			corpusRendered++
		}
		var secrets []string
		for k := range got.Secrets {
			secrets = append(secrets, k)
		}
		gpuCounts := []int{1, 2, 8}
		if spec.Kind != jobspec.KindRL {
			gpuCounts = []int{spec.Resources.GPUs}
		}
		for _, gpus := range gpuCounts {
			if spec.Kind == jobspec.KindRL {
				if _, _, err := spec.Layout(gpus); err != nil {
					skipped[j.name] = append(skipped[j.name], fmt.Sprintf("%d GPUs (%v)", gpus, err))
					continue
				}
			}
			resumes := []int{0}
			if jobspec.RunsPrimeRL(spec.Kind) {
				resumes = append(resumes, min(spec.Checkpoints.Interval, spec.MaxSteps))
			}
			for _, resume := range resumes {
				base := portBase + (len(rl)+len(gp))%150*upstream.PortBlockSize
				out := filepath.Join(dir, strconv.Itoa(i), fmt.Sprintf("%dgpu-resume%d", gpus, resume))
				r, err := render.Render(render.RenderInput{JobID: "conformance", Spec: spec, Secrets: secrets, GPUs: gpus,
					Ports: upstream.Ports{Base: base}, Resume: resume, Dir: out, Pipeline: render.DefaultPipeline()})
				if err != nil {
					t.Errorf("%s on %d GPUs: render: %v", j.name, gpus, err)
					continue
				}
				if err := os.MkdirAll(out, 0o755); err != nil {
					t.Fatal(err)
				}
				for name, data := range r.Files {
					if err := os.WriteFile(filepath.Join(out, name), data, 0o644); err != nil {
						t.Fatal(err)
					}
				}
				what := fmt.Sprintf("%s on %d GPU(s)", j.name, gpus)
				if resume > 0 {
					what += fmt.Sprintf(", resuming from step %d", resume)
				}
				switch spec.Kind {
				case jobspec.KindRL, jobspec.KindFFT:
					rl = append(rl, rendered{what: what, file: filepath.Join(out, "rl.toml"), resume: resume, ports: upstream.Ports{Base: base},
						spec: spec, secrets: secrets, ours: r.Resolved})
				case jobspec.KindGEPA:
					gp = append(gp, rendered{what: what, file: filepath.Join(out, "gepa.toml"), spec: spec, secrets: secrets})
				}
			}
		}
	}
	// Multi-node: no job asks for more than one node (agents run a job on one node), so no
	// render of 2 nodes × 8 GPUs exists to check; `gpuagent render --nodes 2` says so.
	okRL := checkAll(t, "prime-rl", rl)
	okGEPA := checkAll(t, "gepa", gp)
	names := make([]string, 0, len(skipped))
	for n := range skipped {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("not rendered (the job does not allow it): %s on %s", n, strings.Join(skipped[n], "; "))
	}
	for _, r := range refusedAtSubmit {
		fmt.Printf("conformance: refused at submit, not rendered: %s\n", r)
	}
	fmt.Printf("conformance: rl %d/%d, gepa %d/%d accepted by upstream\n", okRL, len(rl), okGEPA, len(gp))
	if corpusRendered < 15 {
		t.Errorf("only %d files of testdata/prime-train were rendered", corpusRendered)
	}
	if len(rl) < 20 || len(gp) < 3+len(gepaConfigs) {
		t.Errorf("only %d rl and %d GEPA renders were checked", len(rl), len(gp))
	}
}

// checkAll asks check.py about every file of a kind (one process for each resume step, the
// only flag that differs) and reports each refusal with the file's job, GPUs and upstream's
// words. It returns how many upstream accepted.
func checkAll(t *testing.T, kind string, files []rendered) int {
	t.Helper()
	groups := map[int][]rendered{}
	for _, r := range files {
		groups[r.resume] = append(groups[r.resume], r)
	}
	ok := 0
	for resume, group := range groups {
		args := make([]string, 0, len(group)+6)
		for _, r := range group {
			args = append(args, r.file)
		}
		if kind == "prime-rl" {
			args = append(args, "--output-dir", "/work/outputs", "--run-name", "conformance")
			if resume > 0 {
				args = append(args, "--set", "resume.step="+strconv.Itoa(resume))
			}
		}
		res := upstreamtest.Check(t, kind, args...)
		if len(res) != len(group) {
			t.Fatalf("check.py %s answered %d results for %d files", kind, len(res), len(group))
		}
		for i, r := range res {
			what := group[i].what
			switch {
			case !r.OK:
				var errs []string
				for _, e := range r.Errors {
					errs = append(errs, e.Loc+": "+e.Msg)
				}
				t.Errorf("%s: upstream refuses its %s config: %s", what, kind, strings.Join(errs, "; "))
			case kind == "prime-rl" && !r.StartsInference:
				t.Errorf("%s: the rl.toml starts no inference server on the node", what)
			case kind == "prime-rl" && !portsInBlock(r.Details, group[i].ports):
				t.Errorf("%s: a port is outside the job's block at %d: %v", what, group[i].ports.Base, r.Details)
			default:
				ok++
			}
			if kind == "prime-rl" && r.OK {
				for _, p := range resolvedProblems(group[i], r.Details) {
					t.Errorf("%s: as upstream resolves it, %s", what, p)
				}
			}
			if kind == "gepa" && r.OK {
				for _, p := range gepaProblems(group[i], r.Details) {
					t.Errorf("%s: as verifiers' loader resolves it, %s", what, p)
				}
			}
		}
	}
	return ok
}

// portsInBlock checks the ports upstream resolved (the inference server, the client, the env
// servers) are in the job's block.
func portsInBlock(details map[string]any, ports upstream.Ports) bool {
	in := func(p int) bool { return p >= ports.Base && p < ports.Base+upstream.PortBlockSize }
	port, _ := details["inference_port"].(float64)
	if !in(int(port)) {
		return false
	}
	if u, _ := details["client_base_url"].(string); !strings.Contains(u, fmt.Sprintf(":%d/", int(port))) {
		return false
	}
	addrs, _ := details["env_addresses"].(map[string]any)
	for _, a := range addrs {
		s, _ := a.(string)
		i := strings.LastIndexByte(s, ':')
		p, err := strconv.Atoi(s[i+1:])
		if err != nil || !in(p) {
			return false
		}
	}
	return true
}

func firstError(p *api.Problem) string {
	if len(p.Errors) > 0 {
		return p.Errors[0].Pointer + ": " + p.Errors[0].Message
	}
	return p.Detail
}

// resolvedProblems checks what upstream will run (check.py's details.resolved, prime-rl's
// validated config with its defaults applied), not only that it accepts the file: no seat runs
// a tool harness that neither the job nor upstream's example for its taskset chose; every
// source has a completion limit and the sequence holds its turns; vLLM's context holds the
// sequence; every judge is called with a key the job has; every sampling setting the job gave
// reaches the model.
func resolvedProblems(r rendered, details map[string]any) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	res, _ := details["resolved"].(map[string]any)
	if res == nil {
		return []string{"check.py gave no resolution"}
	}
	s := r.spec
	seqLen := num(dig(res, "seq_len", "trainer"))
	// What the agent reports (gpuagent render -o json, its log) is upstream's resolution.
	if o := r.ours; o != nil {
		v := o.VLLM
		if float64(o.SeqLen) != seqLen || float64(v.TensorParallelSize) != num(dig(res, "vllm", "tensor_parallel_size")) ||
			float64(v.DataParallelSize) != num(dig(res, "vllm", "data_parallel_size")) || float64(v.MaxModelLen) != num(dig(res, "vllm", "max_model_len")) {
			add("the agent reports seq_len %d and vLLM %+v; upstream resolves seq_len %v and vLLM %v", o.SeqLen, v, seqLen, res["vllm"])
		}
		var upTrain []any
		upTrain, _ = res["train_sources"].([]any)
		var ourTrain []render.ResolvedSource
		for _, src := range o.Sources {
			if src.Group == "train" {
				ourTrain = append(ourTrain, src)
			}
		}
		if len(ourTrain) != len(upTrain) {
			add("the agent reports %d train sources; upstream resolves %d", len(ourTrain), len(upTrain))
		} else {
			for i, x := range upTrain {
				h, _ := dig(x, "harness").(map[string]any)
				if fmt.Sprint(h) != fmt.Sprint(ourTrain[i].Harness) {
					add("the agent reports source %s's harness %v; upstream resolves %v", ourTrain[i].Name, ourTrain[i].Harness, h)
				}
				if mt := num(dig(x, "sampling", "max_completion_tokens")); mt != float64(intOf(ourTrain[i].Sampling["max_completion_tokens"])) {
					add("the agent reports source %s's max_completion_tokens %v; upstream resolves %v", ourTrain[i].Name, ourTrain[i].Sampling["max_completion_tokens"], mt)
				}
			}
		}
	}
	maxLen := num(dig(res, "vllm", "max_model_len"))
	if maxLen < seqLen {
		add("vLLM's max_model_len is %v, shorter than seq_len %v (or the model's whole context)", dig(res, "vllm", "max_model_len"), seqLen)
	}
	// Every replica fits its cards: weights and the KV cache of a max_model_len sequence
	// within gpu_memory_utilization.
	model, _ := details["model"].(string)
	tp := int(num(dig(res, "vllm", "tensor_parallel_size")))
	if b, known := fit.Replica(model, tp, int(maxLen)); known && b > num(dig(res, "vllm", "gpu_memory_utilization"))*fit.Card {
		add("a vLLM replica of %s at tensor parallelism %d needs %.1f GiB a card for a %v-token sequence, past %v of the card", model, tp, b/(1<<30), maxLen, dig(res, "vllm", "gpu_memory_utilization"))
	}
	// The job's environments, by source, for what the job asked of each.
	var envs []jobspec.Env
	if s.Kind == jobspec.KindRL {
		envs = s.Env
	}
	sources, _ := res["train_sources"].([]any)
	for i, x := range sources {
		src, _ := x.(map[string]any)
		name, _ := src["name"].(string)
		taskset, _ := src["taskset"].(map[string]any)
		id, _ := taskset["id"].(string)
		ts, _ := upstream.LookupTaskset(id)
		var env *jobspec.Env
		if i < len(envs) {
			env = &envs[i]
		}
		harness, _ := src["harness"].(map[string]any)
		if len(harness) == 0 || harness["error"] != nil {
			add("source %s has no harness resolution: %v", name, harness)
		}
		for seat, h := range harness {
			want := ts.SeatHarness(seat)
			if env != nil && env.Harness["id"] != nil {
				want, _ = env.Harness["id"].(string)
			}
			if s.Kind == jobspec.KindFFT && h != want && h != "bash" {
				continue // the job's own prime-rl config chose it
			}
			if h != want {
				add("source %s seat %s runs harness %v; want %q (the job's, else upstream's example's for %s, else null)", name, seat, h, want, id)
			}
		}
		// Judges: called with a key among the job's secrets.
		judges, _ := dig(taskset, "task", "judges").([]any)
		for _, j := range judges {
			jm, _ := j.(map[string]any)
			if key, _ := jm["api_key_var"].(string); key != "" && !slices.Contains(r.secrets, key) {
				add("source %s: judge %v is called with %s, which the job's secrets lack", name, jm["model"], key)
			}
		}
		sampling, _ := src["sampling"].(map[string]any)
		perTurn := num(sampling["max_completion_tokens"])
		if s.Kind == jobspec.KindFFT {
			// The job's own config, run as written: its completions are bounded by vLLM's
			// context, which must not outgrow the sequence; samples longer than the sequence
			// were warned of at submit.
			if ml := num(dig(res, "vllm", "max_model_len")); ml == 0 || ml > seqLen && perTurn == 0 {
				add("source %s has no completion limit and vLLM's context (%v) is not bounded by seq_len %v", name, dig(res, "vllm", "max_model_len"), seqLen)
			}
			continue
		}
		if perTurn == 0 {
			add("source %s has no completion limit (max_completion_tokens): generation could fill the model's context", name)
		}
		turns := 1.0
		if mt := num(taskset["max_turns"]); mt > 0 {
			turns = mt
		}
		if env != nil && env.MaxTurns > 0 {
			turns = float64(env.MaxTurns)
		}
		if perTurn*turns > seqLen {
			add("source %s: %v turns × %v tokens do not fit seq_len %v", name, turns, perTurn, seqLen)
		}
		// Sampling the job gave, as the model gets it.
		if s.Kind != jobspec.KindRL {
			continue
		}
		want := map[string]any{}
		if sp := s.Sampling; sp != nil {
			if sp.Temperature != nil {
				want["temperature"] = *sp.Temperature
			}
			if sp.MaxTokens > 0 {
				want["max_completion_tokens"] = float64(sp.MaxTokens)
			}
		}
		if env != nil && env.Sampling != nil {
			if env.Sampling.Temperature != nil {
				want["temperature"] = *env.Sampling.Temperature
			}
			if env.Sampling.MaxTokens > 0 {
				want["max_completion_tokens"] = float64(env.Sampling.MaxTokens)
			}
		}
		for k, v := range want {
			if got := sampling[k]; got != v {
				add("source %s samples with %s = %v; the job set %v", name, k, got, v)
			}
		}
	}
	// Eval sources: every sampling setting the job gave its evaluation.
	if s.Kind == jobspec.KindRL && s.Eval != nil {
		srcs, _ := dig(res, "eval", "sources").([]any)
		for i, x := range srcs {
			if i >= len(s.Eval.Env) {
				break
			}
			want := map[string]any{}
			for _, sp := range []*jobspec.Sampling{s.Eval.Sampling, s.Eval.Env[i].Sampling} {
				if sp == nil {
					continue
				}
				if sp.Temperature != nil {
					want["temperature"] = *sp.Temperature
				}
				if sp.TopP != nil {
					want["top_p"] = *sp.TopP
				}
				if sp.MaxTokens > 0 {
					want["max_completion_tokens"] = float64(sp.MaxTokens)
				}
				if sp.ReasoningEffort != "" {
					want["reasoning_effort"] = sp.ReasoningEffort
				}
			}
			sampling, _ := dig(x, "sampling").(map[string]any)
			if num(sampling["max_completion_tokens"]) == 0 {
				add("eval source %v has no completion limit", dig(x, "name"))
			}
			for k, v := range want {
				if sampling[k] != v {
					add("eval source %v samples with %s = %v; the job set %v", dig(x, "name"), k, sampling[k], v)
				}
			}
		}
	}
	return out
}

func dig(v any, keys ...string) any {
	for _, k := range keys {
		m, _ := v.(map[string]any)
		v = m[k]
	}
	return v
}

func num(v any) float64 {
	f, _ := v.(float64)
	return f
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(to, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

func intOf(v any) int {
	switch x := v.(type) {
	case int:
		return x
	case int64:
		return int(x)
	case float64:
		return int(x)
	}
	return 0
}

// gepaProblems checks a GEPA config as verifiers' loader resolves it: every sampling setting
// the job gave (and the completion limit) reaches sampling_args, every environment is there.
func gepaProblems(r rendered, details map[string]any) []string {
	var out []string
	res, _ := details["resolved"].(map[string]any)
	g := r.spec.GEPA
	if res == nil || g == nil {
		return []string{"no resolution"}
	}
	sa, _ := res["sampling_args"].(map[string]any)
	if sp := g.Sampling; sp == nil || sp.MaxTokens == 0 || num(sa["max_tokens"]) != float64(sp.MaxTokens) {
		out = append(out, fmt.Sprintf("sampling_args %v has no completion limit, or not the job's", sa))
	} else {
		if sp.Temperature != nil && num(sa["temperature"]) != *sp.Temperature {
			out = append(out, fmt.Sprintf("temperature %v; the job set %v", sa["temperature"], *sp.Temperature))
		}
		if sp.ReasoningEffort != "" && sa["reasoning_effort"] != sp.ReasoningEffort {
			out = append(out, fmt.Sprintf("reasoning_effort %v; the job set %v", sa["reasoning_effort"], sp.ReasoningEffort))
		}
		if sp.EnableThinking != nil && dig(sa, "extra_body", "chat_template_kwargs", "enable_thinking") != *sp.EnableThinking {
			out = append(out, fmt.Sprintf("enable_thinking is not sent: %v", sa))
		}
	}
	if envs, _ := res["envs"].([]any); len(envs) != len(r.spec.Env) {
		out = append(out, fmt.Sprintf("%d environments; the job has %d", len(envs), len(r.spec.Env)))
	}
	if mc := g.MaxConcurrent; mc > 0 && num(res["max_concurrent"]) != float64(mc) {
		out = append(out, fmt.Sprintf("max_concurrent %v; the job set %d", res["max_concurrent"], mc))
	}
	return out
}

// portBase is where the renders' port blocks start: the agent's default port range.
const portBase = 20000
