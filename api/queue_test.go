package api_test

import (
	"bytes"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

func submitWithKey(t *testing.T, b bundle, key string, body []byte) reply {
	t.Helper()
	req, _ := http.NewRequest("POST", b.s.URL+"/v1/jobs", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+b.writer)
	req.Header.Set("Content-Type", "application/toml")
	req.Header.Set("Idempotency-Key", key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var buf bytes.Buffer
	_, _ = buf.ReadFrom(resp.Body)
	return reply{status: resp.StatusCode, header: resp.Header, body: buf.Bytes()}
}

func TestIdempotencyKeyMakesARetrySafe(t *testing.T) {
	t.Parallel()
	b := setup(t)
	body := fixture(t, "multi-task.toml")
	first := submitWithKey(t, b, "retry-me-1", body)
	again := submitWithKey(t, b, "retry-me-1", body)
	if first.status != http.StatusCreated || again.status != http.StatusCreated {
		t.Fatalf("statuses %d, %d", first.status, again.status)
	}
	var a, c submitted
	first.decode(t, &a)
	again.decode(t, &c)
	if a.ID != c.ID || again.header.Get("Idempotent-Replayed") != "true" || first.header.Get("Idempotent-Replayed") != "" {
		t.Errorf("replay: %s vs %s, header %q", a.ID, c.ID, again.header.Get("Idempotent-Replayed"))
	}
	other := submitWithKey(t, b, "retry-me-1", fixture(t, "hosted-basic.toml"))
	if other.status != http.StatusConflict {
		t.Fatalf("another body under the key: %d, want 409", other.status)
	}
	if p := other.problem(t); !strings.Contains(p.Detail, a.ID) {
		t.Errorf("problem %+v should name the first job", p)
	}
	if n := b.jobCount(t); n != 1 {
		t.Errorf("%d jobs, want 1", n)
	}
}

func TestQueuedLimitAnswers429(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.s.Token("ops", auth.ScopeAdmin)
	r := call(t, "PUT", b.s.URL+"/v1/admin/orgs/acme", admin, "application/json", []byte(`{"max_queued": 1, "max_running": 3, "weight": 2}`))
	if r.status != http.StatusOK {
		t.Fatalf("set org: %d %s", r.status, r.body)
	}
	var st job.OrgStatus
	r.decode(t, &st)
	if st.MaxQueued != 1 || st.MaxRunning != 3 || st.Weight != 2 {
		t.Errorf("org settings %+v", st)
	}
	if r := call(t, "PUT", b.s.URL+"/v1/admin/orgs/acme", b.writer, "application/json", []byte(`{"max_queued": 100}`)); r.status != http.StatusForbidden {
		t.Errorf("a user set their own limits: %d", r.status)
	}
	if r := b.submitTOML(t, fixture(t, "multi-task.toml")); r.status != http.StatusCreated {
		t.Fatalf("first submit: %d", r.status)
	}
	r = b.submitTOML(t, fixture(t, "multi-task.toml"))
	if r.status != http.StatusTooManyRequests {
		t.Fatalf("second submit: %d, want 429", r.status)
	}
	p := r.problem(t)
	if !strings.HasSuffix(p.Type, "/limit-queued") || !strings.Contains(p.Detail, "1 jobs queued, its limit") {
		t.Errorf("problem %+v should say which limit", p)
	}
	r = call(t, "GET", b.s.URL+"/v1/admin/orgs/acme", admin, "", nil)
	r.decode(t, &st)
	if st.Queued != 1 {
		t.Errorf("org status %+v", st)
	}
}

func TestAQueuedJobSaysWhereItStands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var jobs []submitted
	for range 2 {
		var j submitted
		b.submitTOML(t, fixture(t, "hosted-basic.toml")).decode(t, &j) // needs 8×H100
		jobs = append(jobs, j)
	}
	var got job.Job
	call(t, "GET", b.s.URL+"/v1/jobs/"+jobs[1].ID, b.reader, "", nil).decode(t, &got)
	if got.RunsAhead == nil || *got.RunsAhead != 1 || got.QueueReason != "waiting for 8×H100: no agent has that many free now" {
		t.Errorf("runs_ahead %v, queue_reason %q", got.RunsAhead, got.QueueReason)
	}
	r := call(t, "POST", b.s.URL+"/v1/jobs/preview", b.writer, "application/toml", fixture(t, "hosted-basic.toml"))
	if !strings.Contains(string(r.body), `"runs_ahead":2`) {
		t.Errorf("preview: %s", r.body)
	}
}

func TestRestartAndReleaseOverHTTP(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var j submitted
	b.submitTOML(t, fixture(t, "multi-task.toml")).decode(t, &j)
	if r := call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/restart", b.writer, "", nil); r.status != http.StatusConflict {
		t.Fatalf("restart of a queued job: %d, want 409", r.status)
	}
	gpus := []byte(`{"gpus":[{"model":"H100","count":8}]}`)
	var cl job.Claim
	call(t, "POST", b.s.URL+"/v1/agent/claim", b.agent, "application/json", gpus).decode(t, &cl)
	release := fmt.Sprintf(`{"lease_token":%q,"reason":"node draining","checkpoints":[10]}`, cl.Lease.Token)
	r := call(t, "POST", b.s.URL+"/v1/agent/jobs/"+j.ID+"/release", b.agent, "application/json", []byte(release))
	if r.status != http.StatusOK || !strings.Contains(string(r.body), `"QUEUED"`) {
		t.Fatalf("release: %d %s", r.status, r.body)
	}
	call(t, "POST", b.s.URL+"/v1/agent/claim", b.agent, "application/json", gpus).decode(t, &cl)
	if cl.Job.ResumeStep != 10 || cl.Lease.Fence != 2 {
		t.Errorf("reclaimed %+v fence %d", cl.Job, cl.Lease.Fence)
	}
	fail := fmt.Sprintf(`{"lease_token":%q,"reason":"CUDA out of memory"}`, cl.Lease.Token)
	if r := call(t, "POST", b.s.URL+"/v1/agent/jobs/"+j.ID+"/fail", b.agent, "application/json", []byte(fail)); !strings.Contains(string(r.body), `"FAILED"`) {
		t.Fatalf("fail: %d %s", r.status, r.body)
	}
	r = call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/restart", b.writer, "", nil)
	var restarted job.Job
	r.decode(t, &restarted)
	if r.status != http.StatusOK || restarted.Status != job.Queued || restarted.ResumeStep != 10 {
		t.Errorf("restart: %d %+v", r.status, restarted)
	}
	if r := call(t, "POST", b.s.URL+"/v1/jobs/"+j.ID+"/restart", b.other, "", nil); r.status != http.StatusNotFound {
		t.Errorf("restart of another organization's job: %d, want 404", r.status)
	}
}

// An organization's monthly budget set by an operator: a job whose dry-run estimate is more than
// what is left of it is held, and says so (with the figure the dry run gives); raised, it waits
// only for its turn. The organization's status shows the budget and the month's spending.
func TestAJobOverTheMonthlyBudgetIsHeldAndSaysSo(t *testing.T) {
	t.Parallel()
	b := setup(t)
	admin := b.s.Token("ops", auth.ScopeAdmin)
	var pre struct {
		Estimate struct {
			GPUHours struct{ Expected float64 } `json:"gpu_hours"`
		} `json:"estimate"`
	}
	r := call(t, "POST", b.s.URL+"/v1/jobs/preview", b.writer, "application/toml", fixture(t, "multi-task.toml"))
	if r.decode(t, &pre); r.status != http.StatusOK || pre.Estimate.GPUHours.Expected <= 0 {
		t.Fatalf("preview: %d %s", r.status, r.body)
	}
	est := pre.Estimate.GPUHours.Expected
	budget := fmt.Sprintf(`{"monthly_gpu_hours": %g}`, est/2)
	if r := call(t, "PUT", b.s.URL+"/v1/admin/orgs/acme", admin, "application/json", []byte(budget)); r.status != http.StatusOK {
		t.Fatalf("set the budget: %d %s", r.status, r.body)
	}
	var j submitted
	b.submitTOML(t, fixture(t, "multi-task.toml")).decode(t, &j)
	var got job.Job
	call(t, "GET", b.s.URL+"/v1/jobs/"+j.ID, b.writer, "", nil).decode(t, &got)
	want := fmt.Sprintf("held: its estimate (%.2f GPU-hours) is more than what is left of its organization's monthly budget (%.2f GPU-hours)", est, est/2)
	if !strings.HasPrefix(got.QueueReason, want) {
		t.Errorf("queue reason %q; want it to start %q", got.QueueReason, want)
	}
	if r := call(t, "PUT", b.s.URL+"/v1/admin/orgs/acme", admin, "application/json", []byte(fmt.Sprintf(`{"monthly_gpu_hours": %g}`, est*2))); r.status != http.StatusOK {
		t.Fatalf("raise the budget: %d %s", r.status, r.body)
	}
	call(t, "GET", b.s.URL+"/v1/jobs/"+j.ID, b.writer, "", nil).decode(t, &got)
	if strings.Contains(got.QueueReason, "budget") {
		t.Errorf("after the raise the job still says %q", got.QueueReason)
	}
	var st job.OrgStatus
	call(t, "GET", b.s.URL+"/v1/admin/orgs/acme", admin, "", nil).decode(t, &st)
	if st.MonthlyGPUHours != est*2 || st.BudgetHeld || st.MonthGPUHours != 0 {
		t.Errorf("org status %+v", st)
	}
	if r := call(t, "PUT", b.s.URL+"/v1/admin/orgs/acme", admin, "application/json", []byte(`{"monthly_gpu_hours": -1}`)); r.status != http.StatusBadRequest && r.status != http.StatusUnprocessableEntity {
		t.Errorf("a negative budget: %d %s", r.status, r.body)
	} else if p := r.problem(t); !strings.Contains(string(r.body), "monthly_gpu_hours") {
		t.Errorf("the problem does not name the field: %+v", p)
	}
}
