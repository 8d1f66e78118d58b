package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// submitted is the answer to a submit.
type submitted struct {
	job.Job
	Warnings []api.FieldError `json:"warnings"`
}

func (b bundle) submitKind(t *testing.T, kind, ctype string, body []byte) reply {
	t.Helper()
	url := b.s.URL + "/v1/jobs"
	if kind != "" {
		url += "?kind=" + kind
	}
	return call(t, "POST", url, b.writer, ctype, body)
}

func TestEveryFixtureIsAcceptedAndNormalized(t *testing.T) {
	t.Parallel()
	b := setup(t)
	cases := []struct {
		file, kind string
		check      func(t *testing.T, s jobspec.Spec)
	}{
		{"hosted-basic.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, s.MaxSteps == 500 && s.BatchSize == 256 && s.Sampling.MaxTokens == 512 && s.Env[0].Args["difficulty"] == "medium", s)
		}},
		{"hosted-reference.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, *s.Sampling.Temperature == 1 && len(s.EnvFiles) == 1 && s.EnvFiles[0] == "secrets.env" && s.Wandb.Name == "qwen3-30b-alphabet-sort", s)
		}},
		{"multi-task.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, len(s.Env) == 3 && s.Env[2].Weight == 0.5 && s.Resources.GPUs == 2, s)
		}},
		{"self-hosted-style.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, s.Model == "Qwen/Qwen3-30B-A3B-Instruct-2507" && len(s.Env) == 1 && s.Env[0].ID == "wiki-search" &&
				*s.Checkpoints == jobspec.Checkpoints{Interval: 50, KeepCloud: 10} &&
				*s.LoRA == jobspec.LoRA{Rank: 64, Alpha: 128} && s.DifficultyFiltering.Threshold == 0.3 &&
				s.Parallelism.TensorParallelSize == 4 && s.Resources.GPUs == 8 && *s.Sampling.TopP == 0.9, s)
			// The legacy args, as verifiers v1 takes them: the seat's bound on turns, and the
			// judge's model at OpenAI, called with the job's own key.
			judges, _ := jobspec.Dig(s.Env[0].Args, "task", "judges").([]any)
			want(t, s.Env[0].MaxTurns == 10 && s.Env[0].Args["max_turns"] == nil && s.Env[0].Args["judge_model"] == nil && len(judges) == 1, s)
			j, _ := judges[0].(map[string]any)
			want(t, j["id"] == "wiki-search" && j["model"] == "gpt-4.1-mini" && j["api_key_var"] == "OPENAI_API_KEY" &&
				j["base_url"] == "https://api.openai.com/v1", s)
		}},
		{"small-qwen.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, s.Env[0].ID == "primeintellect/alphabet-sort@0.1.5" && s.Checkpoints.Interval == 100 && s.LearningRate == 1e-6, s)
		}},
		{"prime-cli-full.toml", "", func(t *testing.T, s jobspec.Spec) {
			want(t, s.Name == "alphabet-sort-lora" && s.MaxInflightRollouts == 16 && s.LoRA.Alpha == 64 &&
				s.Sampling.TempScheduler.Type == "cosine" && !*s.Sampling.EnableThinking &&
				s.Eval.Interval == 50 && s.Eval.Env[0].ID == "primeintellect/alphabet-sort" &&
				s.Checkpoints.KeepCloud == 3 && s.Wandb.Entity == "my-team" && s.EnvFiles[0] == "secrets.env", s)
		}},
		{"gepa.toml", "gepa", func(t *testing.T, s jobspec.Spec) {
			want(t, s.Kind == "gepa" && s.Env[0].ID == "my-env" && s.GEPA.ReflectionModel == "google/gemini-3-exp-ultra-preview" &&
				s.GEPA.MaxCalls == 1000 && s.GEPA.MinibatchSize == 5 && *s.GEPA.PerfectScore == 1 &&
				len(s.GEPA.StateColumns) == 2 && s.Resources.GPUs == 0 && s.MaxSteps == 0, s)
		}},
		{"eval.toml", "eval", func(t *testing.T, s jobspec.Spec) {
			want(t, s.Kind == "eval" && s.Env[0].ID == "my-env" && s.Evaluation.NumExamples == 100 &&
				s.Evaluation.RolloutsPerExample == 5 && s.Resources.GPUs == 1 && s.Checkpoints == nil, s)
		}},
	}
	for _, c := range cases {
		t.Run(c.file, func(t *testing.T) {
			r := b.submitKind(t, c.kind, "application/toml", fixture(t, c.file))
			if r.status != http.StatusCreated {
				t.Fatalf("status %d: %s", r.status, r.body)
			}
			var j submitted
			r.decode(t, &j)
			c.check(t, j.Config)
		})
	}
}

func want(t *testing.T, ok bool, s jobspec.Spec) {
	t.Helper()
	if !ok {
		b, _ := json.MarshalIndent(s, "", "  ")
		t.Errorf("normalized job is not as expected:\n%s", b)
	}
}

// fieldWant is one field error a bad job must get.
type fieldWant struct {
	pointer  string
	line     int
	contains string
}

func TestBadJobsGetTheirOwnErrors(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const env = "\n[[env]]\nid = \"gsm8k\"\n"
	// A full fine-tune's prime-rl config, less its [deployment] and [inference] (8 lines).
	const fft = "max_steps = 5\n[model]\nname = \"Qwen/Qwen3-0.6B\"\n[orchestrator]\nbatch_size = 8\n[[orchestrator.train.source]]\nenv.taskset.id = \"gsm8k\"\n[trainer]\n"
	cases := []struct {
		name   string
		kind   string
		ctype  string
		body   string
		status int
		errors []fieldWant
	}{
		{"a setting the taskset does not have", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"primeintellect/alphabet-sort\"\nargs = { min_turns = 2, num_names = 4 }\n", 422,
			[]fieldWant{{"/env/0/args/num_names", 4, "not a setting of the taskset alphabet-sort"}}},
		{"a task setting the taskset does not have", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\ntaskset = { id = \"alphabet-sort\", task = { power = 2 } }\n", 422,
			[]fieldWant{{"/env/0/taskset/task/power", 3, "not a task setting of the taskset alphabet-sort"}}},
		{"legacy max_examples in a training environment", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"primeintellect/alphabet-sort\"\nargs = { split = \"train\", max_examples = 1000 }\n", 422,
			[]fieldWant{{"/env/0/args/max_examples", 4, "no verifiers v1 equivalent for training"}}},
		{"a judge without its key", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"wiki-search\"\n", 422,
			[]fieldWant{{"/env/0/id", 3, "add OPENAI_API_KEY to the job's secrets to call openai's API (or PRIME_API_KEY"}}},
		{"a provider judge without its key", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"wiki-search\"\nargs = { judge_model = \"gpt-4.1-mini\" }\n", 422,
			[]fieldWant{{"/env/0/args/task/judges/0", 4, "add OPENAI_API_KEY to the job's secrets"}}},
		{"a judge without an id", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"wiki-search\"\n[[env.args.task.judges]]\nmodel = \"openai/gpt-4.1-mini\"\n[secrets]\nOPENAI_API_KEY = \"k\"\n", 422,
			[]fieldWant{{"/env/0/args/task/judges/0/id", 4, `needs an id: a judge plugin (reference, rubric) or an installed package (the taskset's own is id = "wiki-search")`}}},
		{"a judge that names a key the job lacks", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"acme/my-judged-env\"\n[[env.args.task.judges]]\nid = \"reference\"\nmodel = \"acme/judge\"\nbase_url = \"https://judge.example/v1\"\napi_key_var = \"JUDGE_KEY\"\n", 422,
			[]fieldWant{{"/env/0/args/task/judges/0", 4, "JUDGE_KEY, which is not among the job's secrets"}}},
		{"a model no node holds", "", "application/toml", "model = \"Qwen/Qwen3-235B-A22B\"" + env, 422,
			[]fieldWant{{"/model", 1, "does not fit 8 H100s for an rl run"}}},
		{"full fine-tuning past its GPUs", "", "application/toml", "model = \"Qwen/Qwen3-30B-A3B-Instruct-2507\"\nnum_gpus = 8\nuse_lora = false" + env, 422,
			[]fieldWant{{"/num_gpus", 2, "try LoRA (use_lora = true)"}}},
		{"a GEPA setting given twice", "gepa", "application/toml", "env_id = \"acme/e\"\nmodel = \"Qwen/Qwen3-4B\"\nmax_calls = 5\n[gepa]\nmax_calls = 6\n", 422,
			[]fieldWant{{"/gepa/max_calls", 5, "keep one"}}},
		{"a GEPA model alias with no registry", "gepa", "application/toml", "model = \"qwen3-30b-i\"\nendpoints_path = \"../endpoints.toml\"\n[[env]]\nenv_id = \"acme/e\"\n", 422,
			[]fieldWant{{"/endpoints_path", 2, "an alias of the endpoint registry"}}},
		{"a GEPA endpoint whose key the job lacks", "gepa", "application/toml", "model = \"qwen3-30b-i\"\n[[env]]\nenv_id = \"acme/e\"\n[[endpoints]]\nendpoint_id = \"qwen3-30b-i\"\nmodel = \"qwen/qwen3-30b-a3b-instruct-2507\"\nurl = \"https://api.pinference.ai/api/v1\"\nkey = \"PRIME_API_KEY\"\n", 422,
			[]fieldWant{{"/model", 1, "PRIME_API_KEY (its endpoint entry), which is not among the job's secrets"}}},
		{"a temperature schedule in an eval", "eval", "application/toml", "env_id = \"acme/e\"\nmodel = \"Qwen/Qwen3-4B\"\n[sampling.temp_scheduler]\ntype = \"linear\"\n", 422,
			[]fieldWant{{"/sampling/temp_scheduler", 3, "has none: set sampling.temperature"}}},
		{"an eval on fewer GPUs than its model needs", "eval", "application/toml", "env_id = \"acme/e\"\nmodel = \"Qwen/Qwen3-235B-A22B\"\ntensor_parallel_size = 2\n", 422,
			[]fieldWant{{"/tensor_parallel_size", 3, "needs 8 GPUs (tensor parallelism 8)"}}},
		{"TOML that does not parse", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmax_steps = [\n", 400,
			[]fieldWant{{"", 2, "array is incomplete"}}},
		{"JSON that does not parse", "", "application/json", "{\n  \"model\": \"m\",\n  \"env\": [,]\n}", 400,
			[]fieldWant{{"", 3, "invalid character ','"}}},
		{"unknown key, near a known one", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[sampling]\nmax_token = 5" + env, 422,
			[]fieldWant{{"/sampling/max_token", 3, "did you mean max_tokens?"}}},
		{"unknown key, a prefix of a known one", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nrollouts = 4" + env, 422,
			[]fieldWant{{"/rollouts", 2, "did you mean rollouts_per_example?"}}},
		{"a GEPA key in an rl job", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nnum_train = 5" + env, 422,
			[]fieldWant{{"/num_train", 2, "setting of gepa jobs; submit such a file with `hostedtrain gepa submit`"}}},
		{"an rl key in an eval job", "eval", "application/toml", "env_id = \"e\"\nmodel = \"Qwen/Qwen3-4B\"\nmax_steps = 4\n", 422,
			[]fieldWant{{"/max_steps", 3, "setting of rl jobs"}}},
		{"wrong type", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmax_steps = \"many\"" + env, 422,
			[]fieldWant{{"/max_steps", 2, "must be an integer"}}},
		{"out of range", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[sampling]\ntemperature = 9.0" + env, 422,
			[]fieldWant{{"/sampling/temperature", 3, "at most 2"}}},
		{"bad enum", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[sampling]\nreasoning_effort = \"max\"" + env, 422,
			[]fieldWant{{"/sampling/reasoning_effort", 3, "allowed values"}}},
		{"too long", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nname = \"" + strings.Repeat("x", 129) + "\"" + env, 422,
			[]fieldWant{{"/name", 2, "maximum string length is 128"}}},
		{"env is neither a list nor a table", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nenv = \"gsm8k\"\n", 422,
			[]fieldWant{{"/env", 2, "must be a list or a table"}}},
		{"env without an id", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nweight = 2\n", 422,
			[]fieldWant{{"/env/0/id", 2, `an environment needs id = "owner/name", or taskset = { id = "owner/name" }`}}},
		{"env id that could reach a shell", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"a/b;rm -rf ~\"\n", 422,
			[]fieldWant{{"/env/0/id", 3, "an environment id is `name` or `owner/name`"}}},
		{"env id that could reach a path", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"../../etc/passwd\"\n", 422,
			[]fieldWant{{"/env/0/id", 3, "an environment id is"}}},
		{"env id with dots", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"owner/a..b\"\n", 422,
			[]fieldWant{{"/env/0/id", 3, "must not contain `..`"}}},
		{"version twice, disagreeing", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[[env]]\nid = \"a/b@1.0\"\nversion = \"2.0\"\n", 422,
			[]fieldWant{{"/env/0/version", 4, "disagrees"}}},
		{"no environment", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmax_steps = 3\n", 422,
			[]fieldWant{{"/env", 0, "at least one environment"}}},
		{"no environment in a GEPA job", "gepa", "application/toml", "model = \"Qwen/Qwen3-4B\"\n", 422,
			[]fieldWant{{"/env_id", 0, "needs an environment"}}},
		{"no model", "", "application/toml", "max_steps = 3" + env, 422,
			[]fieldWant{{"/model", 0, "a job needs a model"}}},
		{"model and model_name", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmodel_name = \"Qwen/Qwen3-8B\"" + env, 422,
			[]fieldWant{{"/model_name", 2, "not both"}}},
		{"batch not a multiple of the group", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nbatch_size = 100\nrollouts_per_example = 8" + env, 422,
			[]fieldWant{{"/batch_size", 2, "must be a multiple of rollouts_per_example (8): "}}},
		{"inflight below the group", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmax_inflight_rollouts = 4" + env, 422,
			[]fieldWant{{"/max_inflight_rollouts", 2, "at least rollouts_per_example (8)"}}},
		{"inflight with oversampling", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nmax_inflight_rollouts = 16\noversampling_factor = 2.0" + env, 422,
			[]fieldWant{{"/oversampling_factor", 3, "not both"}}},
		{"thinking and reasoning effort", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[sampling]\nenable_thinking = true\nreasoning_effort = \"high\"" + env, 422,
			[]fieldWant{{"/sampling/reasoning_effort", 4, "not both"}}},
		{"tensor parallelism that leaves the trainer no GPU", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nnum_gpus = 4\ntensor_parallel_size = 4" + env, 422,
			[]fieldWant{{"/tensor_parallel_size", 3, "leaves no GPU for the trainer out of 4"}}},
		{"one GPU for an rl run", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nnum_gpus = 1" + env, 422,
			[]fieldWant{{"/num_gpus", 2, "needs at least 2 GPUs"}}},
		{"a model prime-rl has no renderer for", "", "application/toml", "model = \"acme/brand-new-7b\"" + env, 422,
			[]fieldWant{{"/model", 1, "no chat renderer for acme/brand-new-7b"}}},
		{"a renderer prime-rl does not have", "", "application/toml", "model = \"acme/brand-new-7b\"\nrenderer = \"qwen9\"" + env, 422,
			[]fieldWant{{"/renderer", 2, `renderer "qwen9" is not one of prime-rl's`}}},
		{"thinking for a model whose renderer has no switch", "", "application/toml", "model = \"meta-llama/Llama-3.2-1B-Instruct\"\n[sampling]\nenable_thinking = false" + env, 422,
			[]fieldWant{{"/sampling/enable_thinking", 3, `"llama-3" renderer, which has no thinking switch`}}},
		{"a provider's model in an rl job", "", "application/toml", "model = \"openai/gpt-4.1-mini\"" + env, 422,
			[]fieldWant{{"/model", 1, "rl trains open weights"}}},
		{"an eval on a provider's model without its key", "eval", "application/toml", "env_id = \"e\"\nmodel = \"anthropic/claude-sonnet-4\"\n", 422,
			[]fieldWant{{"/model", 2, "add ANTHROPIC_API_KEY to the job's secrets"}}},
		{"sft without a teacher", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nloss = \"sft\"" + env, 422,
			[]fieldWant{{"/loss", 2, "add teacher"}}},
		{"GEPA with two open-weight models", "gepa", "application/toml", "env_id = \"e\"\nmodel = \"Qwen/Qwen3-4B\"\nreflection_model = \"Qwen/Qwen3-8B\"\n", 422,
			[]fieldWant{{"/reflection_model", 3, "both open-weight models"}}},
		{"teacher without sft", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\nteacher = \"t\"" + env, 422,
			[]fieldWant{{"/teacher", 2, `only with loss = "sft"`}}},
		{"both checkpoint tables", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[checkpoints]\ninterval = 5\n[checkpointing]\nsave_every_n_steps = 5" + env, 422,
			[]fieldWant{{"/checkpointing", 4, "not both"}}},
		{"keep no checkpoints", "", "application/toml", "model = \"Qwen/Qwen3-4B\"\n[checkpoints]\nkeep_cloud = 0" + env, 422,
			[]fieldWant{{"/checkpoints/keep_cloud", 3, "nothing to resume from"}}},
		{"bad secret name", "", "application/toml", "model = \"Qwen/Qwen3-4B\"" + env + "[secrets]\n\"BAD-NAME\" = \"sk-value\"\n", 422,
			[]fieldWant{{"/secrets/BAD-NAME", 5, "environment variable name"}}},
		{"unknown kind", "", "application/toml", "kind = \"ppo\"\nmodel = \"Qwen/Qwen3-4B\"" + env, 422,
			[]fieldWant{{"/kind", 1, `kind must be "rl", "gepa", "eval" or "fft"`}}},
		{"kind that disagrees with the command", "gepa", "application/toml", "kind = \"rl\"\nmodel = \"Qwen/Qwen3-4B\"" + env, 422,
			[]fieldWant{{"/kind", 1, "submitted as a gepa job"}}},
		{"JSON errors have lines too", "", "application/json", "{\n  \"model\": \"m\",\n  \"max_stepz\": 3,\n  \"env\": [{\"id\": \"gsm8k\"}]\n}", 422,
			[]fieldWant{{"/max_stepz", 3, "did you mean max_steps?"}}},
		{"a full fine-tune on two nodes", "", "application/toml", fft + "[deployment]\ntype = \"multi_node\"\nnum_train_nodes = 2\n[inference]\n", 422,
			[]fieldWant{{"/deployment", 9, "one node"}}},
		{"a full fine-tune larger than a node", "", "application/toml", fft + "[deployment]\nnum_train_gpus = 8\nnum_infer_gpus = 2\n[inference]\n", 422,
			[]fieldWant{{"/deployment", 9, "at most 8"}}},
		{"a full fine-tune without inference", "", "application/toml", fft + "[deployment]\nnum_train_gpus = 1\n", 422,
			[]fieldWant{{"/inference", 0, "add an [inference] table"}}},
		{"a full fine-tune that picks its processes' GPUs", "", "application/toml", fft + "[deployment]\nnum_train_gpus = 1\n[inference]\n[trainer.env_vars]\nCUDA_VISIBLE_DEVICES = \"0\"\n", 422,
			[]fieldWant{{"/trainer/env_vars/CUDA_VISIBLE_DEVICES", 13, "the service sets"}}},
		{"a full fine-tune on SLURM", "", "application/toml", "type = \"full_finetune\"\n" + fft + "[inference]\n[slurm]\njob_name = \"x\"\n", 422,
			[]fieldWant{{"/slurm", 11, "not a SLURM cluster"}}},
		{"a full fine-tune without a model", "", "application/toml", "type = \"full_finetune\"\n[inference]\n[[orchestrator.train.source]]\nenv.taskset.id = \"gsm8k\"\n", 422,
			[]fieldWant{{"/model", 0, "names its model"}}},
		{"a bad kind parameter", "ppo", "application/toml", "model = \"Qwen/Qwen3-4B\"" + env, 400, nil},
		{"another content type", "", "text/yaml", "model: m\n", 415, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := b.submitKind(t, c.kind, c.ctype, []byte(c.body))
			if r.status != c.status {
				t.Fatalf("status %d, want %d: %s", r.status, c.status, r.body)
			}
			p := r.problem(t)
			if len(p.Errors) != len(c.errors) && c.errors != nil {
				t.Errorf("got %d errors, want %d: %+v", len(p.Errors), len(c.errors), p.Errors)
			}
			for i, w := range c.errors {
				if i >= len(p.Errors) {
					break
				}
				got := p.Errors[i]
				if got.Pointer != w.pointer || got.Line != w.line || !strings.Contains(got.Message, w.contains) {
					t.Errorf("error %d: got %s line %d %q; want %s line %d containing %q",
						i, got.Pointer, got.Line, got.Message, w.pointer, w.line, w.contains)
				}
			}
		})
	}
	if n := b.jobCount(t); n != 0 {
		t.Errorf("%d jobs stored after only bad requests, want 0", n)
	}
}

func TestWarningsDoNotStopAJob(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 20\nuse_lora = false\nlora_rank = 8\n" +
		"[checkpoints]\ninterval = 50\n[[env]]\nid = \"gsm8k\"\n[wandb]\nproject = \"p\"\n"
	// W&B monitoring without its key is refused, as the prime CLI refuses it.
	r := b.submitKind(t, "", "application/toml", []byte(body))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"pointer":"/wandb","line":9`) ||
		!strings.Contains(string(r.body), "WANDB_API_KEY is required when W\\u0026B monitoring is configured") {
		t.Fatalf("W&B without its key: status %d: %s", r.status, r.body)
	}
	r = b.submitKind(t, "", "application/toml", []byte(body+"[secrets]\nWANDB_API_KEY = \"k\"\n"))
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j submitted
	r.decode(t, &j)
	got := map[string]int{}
	for _, w := range j.Warnings {
		got[w.Pointer] = w.Line
	}
	wantWarnings := map[string]int{"/lora_rank": 4, "/checkpoints/interval": 6}
	if fmt.Sprint(got) != fmt.Sprint(wantWarnings) {
		t.Errorf("warnings %+v, want pointers and lines %v", j.Warnings, wantWarnings)
	}
	if j.Config.LoRA != nil {
		t.Errorf("use_lora = false still gave LoRA %+v", j.Config.LoRA)
	}
}

func TestPreviewQueuesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	for range 2 {
		if r := b.submitKind(t, "", "application/toml", fixture(t, "multi-task.toml")); r.status != http.StatusCreated {
			t.Fatalf("submit: %d", r.status)
		}
	}
	r := call(t, "POST", b.s.URL+"/v1/jobs/preview?kind=gepa", b.writer, "application/toml", fixture(t, "gepa.toml"))
	if r.status != http.StatusOK {
		t.Fatalf("preview: %d %s", r.status, r.body)
	}
	var p struct {
		Config   jobspec.Spec
		Warnings []api.FieldError
		GPUs     struct {
			Count int
			Type  string
		}
		Queue struct {
			RunsAhead int `json:"runs_ahead"`
		}
	}
	r.decode(t, &p)
	if p.Config.Kind != "gepa" || p.GPUs.Count != 0 || p.GPUs.Type != "H100" || p.Queue.RunsAhead != 2 || p.Warnings == nil {
		t.Errorf("preview %+v", p)
	}
	if n := b.jobCount(t); n != 2 {
		t.Errorf("%d jobs after a preview, want the 2 submitted", n)
	}
	if r := call(t, "POST", b.s.URL+"/v1/jobs/preview", b.writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B\"\n")); r.status != http.StatusUnprocessableEntity {
		t.Errorf("preview of a bad job: %d, want 422", r.status)
	}
}

// A job's problems come in the order of its file, whatever order the checks found them in.
func TestProblemsInLineOrder(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	r := call(t, "POST", s.URL+"/v1/jobs", s.Token("acme", auth.ScopeJobsWrite), "application/toml",
		[]byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nzeta = 1\nbatch_size = -1\n[sampling]\nfoo = 2\n[[env]]\nid = \"a/b\"\nalpha = 3\n"))
	p := r.problem(t)
	var lines []int
	for _, e := range p.Errors {
		lines = append(lines, e.Line)
	}
	if r.status != http.StatusUnprocessableEntity || fmt.Sprint(lines) != "[2 3 5 8]" {
		t.Errorf("problems at lines %v (%d): %s", lines, r.status, r.body)
	}
}

// verifiers' own GEPA files (its configs/gepa) are GEPA jobs as they are: [[env]] with
// env_id, [gepa], [sampling]; served on the GPUs the model needs, with a completion limit.
func TestVerifiersGEPAFilesAreTakenAsWritten(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := "model = \"openai/gpt-oss-20b\"\nreflection_model = \"openai/gpt-oss-20b\"\n\n[[env]]\nenv_id = \"primeintellect/reverse-text\"\n\n" +
		"[gepa]\nmax_calls = 500\nnum_train = 100\nnum_val = 50\nminibatch_size = 3\nmax_concurrent = 32\n\n[sampling]\nmax_tokens = 1024\nreasoning_effort = \"low\"\n"
	r := b.submitKind(t, "gepa", "application/toml", []byte(body))
	if r.status != http.StatusCreated {
		t.Fatalf("status %d: %s", r.status, r.body)
	}
	var j submitted
	r.decode(t, &j)
	g := j.Config.GEPA
	want(t, len(j.Config.Env) == 1 && j.Config.Env[0].ID == "primeintellect/reverse-text" && g.MaxCalls == 500 && g.NumTrain == 100 &&
		g.MaxConcurrent == 32 && g.Sampling.MaxTokens == 1024 && g.Sampling.ReasoningEffort == "low" &&
		j.Config.Resources.GPUs == 1 && j.Config.ContextLength == 2048, j.Config)
	// The deprecated [execution] table is read as verifiers' loader reads it, with its warning.
	r = b.submitKind(t, "gepa", "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[env]\nenv_id = \"acme/e\"\nenv_args = { n = 3 }\n"+
		"[execution]\nmax_concurrent = 8\nseed = 7\nsampling_args = { max_tokens = 512, temperature = 0.7 }\n"))
	if r.status != http.StatusCreated || !strings.Contains(string(r.body), "[execution] is deprecated") {
		t.Fatalf("[execution]: %d %s", r.status, r.body)
	}
	r.decode(t, &j)
	g = j.Config.GEPA
	want(t, g.MaxConcurrent == 8 && *g.Seed == 7 && g.Sampling.MaxTokens == 512 && *g.Sampling.Temperature == 0.7 && j.Config.Env[0].Args["n"] == 3.0, j.Config)
}
