package api_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

func TestParseModelsRefusesABadList(t *testing.T) {
	t.Parallel()
	for _, bad := range []string{
		``, `[[model]]` + "\n" + `gpus = 2`, `[[model]]` + "\nname = \"a\"\n", "[[model]]\nname = \"a\"\ngpus = 1\n[[model]]\nname = \"a\"\ngpus = 2\n",
		"[[model]]\nname = \"a\"\ngpus = 1\nprice = 3\n", "[[model]]\nname = \"a\"\ngpus = 1\nprice_per_gpu_hour = -1\n",
	} {
		if _, err := api.ParseModels([]byte(bad)); err == nil {
			t.Errorf("ParseModels(%q) took it", bad)
		}
	}
}

// With the operator's list of models, a training job names one of them (and takes its GPUs
// unless it says), a model the list sizes beyond a node is refused, and other kinds are free.
func TestTheOperatorsModelsList(t *testing.T) {
	t.Parallel()
	models, err := api.ParseModels([]byte(`
[[model]]
name = "Qwen/Qwen3-4B-Instruct-2507"
gpus = 4
price_per_gpu_hour = 2.5

[[model]]
name = "Qwen/Qwen3-235B-A22B"
gpus = 16
`))
	if err != nil {
		t.Fatal(err)
	}
	s := apitest.Start(t, apitest.Options{Models: models})
	writer := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	const env = "\n[[env]]\nid = \"gsm8k\"\n"

	r := call(t, "GET", s.URL+"/v1/models", writer, "", nil)
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"operator_list":true`) || !strings.Contains(string(r.body), `"price_per_gpu_hour":2.5`) {
		t.Errorf("GET /v1/models: %d %s", r.status, r.body)
	}
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-8B\""+env))
	if p := r.problem(t); r.status != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Pointer != "/model" ||
		p.Errors[0].Line != 1 || !strings.Contains(p.Errors[0].Message, "not offered here; the models offered are Qwen/Qwen3-4B-Instruct-2507, Qwen/Qwen3-235B-A22B") {
		t.Errorf("an unlisted model: %d %s", r.status, r.body)
	}
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-235B-A22B\""+env))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), "does not fit 8 H100s") {
		t.Errorf("a model larger than a node: %d %s", r.status, r.body)
	}
	var j job.Job
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\""+env))
	if r.decode(t, &j); r.status != http.StatusCreated || j.Config.Resources.GPUs != 4 {
		t.Errorf("a listed model takes the list's GPUs: %d %s", r.status, r.body)
	}
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nnum_gpus = 2"+env))
	if r.decode(t, &j); r.status != http.StatusCreated || j.Config.Resources.GPUs != 2 {
		t.Errorf("num_gpus wins over the list: %d %s", r.status, r.body)
	}
	// The Prime surface goes through the same check, and names the payload's field.
	r = call(t, "POST", s.URL+"/api/v1/rft/runs", writer, "application/json",
		[]byte(`{"model": {"name": "Qwen/Qwen3-8B"}, "environments": [{"id": "gsm8k"}]}`))
	if r.status != http.StatusUnprocessableEntity || !strings.Contains(string(r.body), `"loc":["body","model","name"]`) {
		t.Errorf("the Prime surface with an unlisted model: %d %s", r.status, r.body)
	}
	// An eval job's model is not a training model.
	r = call(t, "POST", s.URL+"/v1/jobs?kind=eval", writer, "application/toml", []byte("env_id = \"acme/math\"\nmodel = \"Qwen/Qwen3-8B\"\n"))
	if r.status != http.StatusCreated {
		t.Errorf("an eval job: %d %s", r.status, r.body)
	}
}

// max_cost is priced at the operator's price per GPU-hour of the model: 10 at 2.5 is 4
// GPU-hours, the lower of it and max_gpu_hours binds; a model without a price cannot take a
// max_cost (422 at its line), and nothing is stored. PUT /v1/jobs/{id}/budget sets it anew.
func TestABudgetIsPricedAtTheOperatorsPrice(t *testing.T) {
	t.Parallel()
	models, err := api.ParseModels([]byte("[[model]]\nname = \"Qwen/Qwen3-4B-Instruct-2507\"\ngpus = 2\nprice_per_gpu_hour = 2.5\n\n" +
		"[[model]]\nname = \"Qwen/Qwen3-8B\"\ngpus = 2\n"))
	if err != nil {
		t.Fatal(err)
	}
	s := apitest.Start(t, apitest.Options{Models: models})
	writer := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	const env = "\n[[env]]\nid = \"gsm8k\"\n"
	var j job.Job
	r := call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_cost = 10"+env))
	if r.decode(t, &j); r.status != http.StatusCreated || j.BudgetGPUSeconds != 4*3600 {
		t.Fatalf("max_cost 10 at 2.5 a GPU-hour: %d %s", r.status, r.body)
	}
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_cost = 10\nmax_gpu_hours = 1"+env))
	if r.decode(t, &j); r.status != http.StatusCreated || j.BudgetGPUSeconds != 3600 {
		t.Errorf("the lower of the two binds: %d %s", r.status, r.body)
	}
	before := len(s.AllKeys("*"))
	r = call(t, "POST", s.URL+"/v1/jobs", writer, "application/toml", []byte("model = \"Qwen/Qwen3-8B\"\nmax_cost = 10"+env))
	if p := r.problem(t); r.status != http.StatusUnprocessableEntity || len(p.Errors) != 1 || p.Errors[0].Pointer != "/max_cost" ||
		p.Errors[0].Line != 2 || !strings.Contains(p.Errors[0].Message, "no price per GPU-hour") {
		t.Errorf("max_cost without a price: %d %s", r.status, r.body)
	}
	if after := len(s.AllKeys("*")); after != before {
		t.Errorf("a refused job left %d keys", after-before)
	}
	r = call(t, "PUT", s.URL+"/v1/jobs/"+j.ID+"/budget", writer, "application/json", []byte(`{"max_cost": 5}`))
	if r.decode(t, &j); r.status != http.StatusOK || j.BudgetGPUSeconds != 2*3600 {
		t.Errorf("a new budget: %d %s", r.status, r.body)
	}
	r = call(t, "PUT", s.URL+"/v1/jobs/"+j.ID+"/budget", writer, "application/json", []byte(`{}`))
	var none job.Job
	if r.decode(t, &none); r.status != http.StatusOK || none.BudgetGPUSeconds != 0 {
		t.Errorf("no budget: %d %s", r.status, r.body)
	}
	r = call(t, "PUT", s.URL+"/v1/jobs/"+j.ID+"/budget", writer, "application/json", []byte(`{"max_gpu_hours": -1}`))
	if r.status != http.StatusUnprocessableEntity && r.status != http.StatusBadRequest {
		t.Errorf("a negative budget: %d %s", r.status, r.body)
	}
}
