package api_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
	"github.com/hostedtrain/hostedtrain/queue"
)

// clock is the queue's clock, moved by the test.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func submitTOML(t *testing.T, s *apitest.Stack, token, toml string) job.Job {
	t.Helper()
	r := call(t, "POST", s.URL+"/v1/jobs", token, "application/toml", []byte(toml))
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j job.Job
	r.decode(t, &j)
	return j
}

func claimJob(t *testing.T, s *apitest.Stack, agent string) job.Claim {
	t.Helper()
	var cl job.Claim
	r := call(t, "POST", s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`))
	if r.status != http.StatusOK {
		t.Fatalf("claim: %d %s", r.status, r.body)
	}
	r.decode(t, &cl)
	return cl
}

// A job that ended more than the retention ago is gone from Redis — SCAN finds none of its keys
// — and its state, events, logs, metrics and checkpoints still answer, from object storage
// (a real S3 server), as they did; only lists leave it out.
func TestArchivedJobStillAnswers(t *testing.T) {
	t.Parallel()
	store, _ := s3test.Store(t)
	clk := &clock{now: time.Now()}
	s := apitest.Start(t, apitest.Options{Store: store, Queue: queue.Config{Store: store, Now: clk.Now}})
	token := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	other := s.Token("globex", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	agent := s.AgentToken("agent-1")
	ctx := context.Background()

	j := submitTOML(t, s, token, "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 20\n[[env]]\nid = \"acme/env\"\n")
	cl := claimJob(t, s, agent)
	// What the agent writes: metrics, a log, a committed checkpoint.
	w := jobdata.NewMetricsWriter(store, j.ID, cl.Lease.Fence, 1)
	for step := 1; step <= 20; step++ {
		row, err := jobdata.ParseLine([]byte(fmt.Sprintf(`{"step":%d,"loss/mean":%g}`, step, 1/float64(step))))
		if err != nil {
			t.Fatal(err)
		}
		if err := w.Add(row); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	put := func(key, data string) {
		if err := store.Put(ctx, jobdata.JobPrefix(j.ID)+key, strings.NewReader(data)); err != nil {
			t.Fatal(err)
		}
	}
	put(fmt.Sprintf("logs/attempt_%d/trainer/000000000000.log", cl.Lease.Fence), logLine(time.Now(), "INFO", "step 20 | loss 0.05"))
	put("checkpoints/step_20/trainer/model.safetensors", "weights")
	m, _ := json.Marshal(jobdata.Manifest{JobID: j.ID, Step: 20, Bytes: 7, Files: []jobdata.ManifestFile{{Path: "trainer/model.safetensors", Size: 7}}})
	put("checkpoints/step_20/manifest.json", string(m))
	done := fmt.Sprintf(`{"lease_token":%q,"progress":{"step":20,"max_steps":20,"checkpoints":1,"checkpoint_step":20},"checkpoints":[20]}`, cl.Lease.Token)
	if r := call(t, "POST", s.URL+"/v1/agent/jobs/"+j.ID+"/complete", agent, "application/json", []byte(done)); r.status != 200 {
		t.Fatalf("complete: %d %s", r.status, r.body)
	}
	reads := []string{"", "/events?limit=100", "/logs", "/metrics", "/progress"}
	before := map[string]string{}
	for _, p := range reads {
		r := call(t, "GET", s.URL+"/v1/jobs/"+j.ID+p, token, "", nil)
		if r.status != 200 {
			t.Fatalf("GET %s: %d %s", p, r.status, r.body)
		}
		before[p] = string(r.body)
	}

	clk.Advance(queue.DefaultRetention + time.Hour)
	if _, err := queue.NewReaper(s.Queue, time.Second, nil).RunOnce(ctx); err != nil {
		t.Fatal(err)
	}
	if left := s.AllKeys("*" + j.ID + "*"); len(left) != 0 {
		t.Fatalf("keys of the job left in Redis: %v", left)
	}

	for _, p := range reads {
		r := call(t, "GET", s.URL+"/v1/jobs/"+j.ID+p, token, "", nil)
		if r.status != 200 || string(r.body) != before[p] {
			t.Errorf("GET %s of the archived job: %d\n%s\nwant\n%s", p, r.status, r.body, before[p])
		}
	}
	var cps struct{ Items []struct{ Step int } }
	if r := call(t, "GET", s.URL+"/v1/jobs/"+j.ID+"/checkpoints", token, "", nil); r.status != 200 {
		t.Errorf("checkpoints of the archived job: %d %s", r.status, r.body)
	} else if r.decode(t, &cps); len(cps.Items) != 1 || cps.Items[0].Step != 20 {
		t.Errorf("checkpoints of the archived job: %s", r.body)
	}
	if !strings.Contains(before["/logs"], "loss 0.05") || !strings.Contains(before["/metrics"], `"step":20`) ||
		!strings.Contains(before[""], `"COMPLETED"`) || !strings.Contains(before["/events?limit=100"], "job.completed") {
		t.Errorf("the reads compared hold too little to prove anything: %v", before)
	}
	// Still another organization's: it reads as missing.
	if r := call(t, "GET", s.URL+"/v1/jobs/"+j.ID, other, "", nil); r.status != http.StatusNotFound {
		t.Errorf("another organization reads the archived job: %d", r.status)
	}
	var list struct{ Items []job.Job }
	call(t, "GET", s.URL+"/v1/jobs", token, "", nil).decode(t, &list)
	if len(list.Items) != 0 {
		t.Errorf("the archived job is listed: %+v", list.Items)
	}
	r := call(t, "POST", s.URL+"/v1/jobs/"+j.ID+"/restart", token, "", nil)
	if p := r.problem(t); r.status != http.StatusConflict || !strings.Contains(p.Detail, "submit it again") {
		t.Errorf("restart of an archived job: %d %+v", r.status, p)
	}
}

// A restart takes a place under the queued limit: at the limit it is 429, as a submit is.
func TestRestartAtTheQueuedLimit(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{Queue: queue.Config{MaxQueued: 1}})
	token := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	file := "model = \"Qwen/Qwen3-4B-Instruct-2507\"\n[[env]]\nid = \"acme/env\"\n"
	a := submitTOML(t, s, token, file)
	if r := call(t, "POST", s.URL+"/v1/jobs/"+a.ID+"/cancel", token, "", nil); r.status != 200 {
		t.Fatalf("cancel: %d", r.status)
	}
	submitTOML(t, s, token, file)
	r := call(t, "POST", s.URL+"/v1/jobs/"+a.ID+"/restart", token, "", nil)
	if p := r.problem(t); r.status != http.StatusTooManyRequests || !strings.HasSuffix(p.Type, "/limit-queued") {
		t.Fatalf("restart at the limit: %d %+v", r.status, p)
	}
	var got job.Job
	call(t, "GET", s.URL+"/v1/jobs/"+a.ID, token, "", nil).decode(t, &got)
	if got.Status != job.Stopped {
		t.Errorf("a refused restart left the job %s", got.Status)
	}
}

// Checkpoint steps from an agent: a step past the job's max_steps, or one no job can have, is
// a 422 naming the step and records nothing; a heartbeat listing 10,000 steps adds 16 events.
func TestHeartbeatCheckpointSteps(t *testing.T) {
	t.Parallel()
	s := apitest.Start(t, apitest.Options{})
	token := s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	agent := s.AgentToken("agent-1")
	j := submitTOML(t, s, token, "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 20000\n[[env]]\nid = \"acme/env\"\n")
	cl := claimJob(t, s, agent)
	events := func() []job.Event {
		var evs struct{ Items []job.Event }
		call(t, "GET", s.URL+"/v1/jobs/"+j.ID+"/events?limit=100", token, "", nil).decode(t, &evs)
		return evs.Items
	}
	heartbeat := func(steps string) reply {
		return call(t, "POST", s.URL+"/v1/agent/jobs/"+j.ID+"/heartbeat", agent, "application/json",
			[]byte(fmt.Sprintf(`{"lease_token":%q,"running":true,"checkpoints":%s}`, cl.Lease.Token, steps)))
	}
	was := len(events())
	for _, c := range []struct{ steps, pointer string }{
		{"[9223372036854775807]", "/checkpoints/0"},
		{"[10, 20001]", "/checkpoints/1"},
		{"[100001]", "/checkpoints/0"},
	} {
		r := heartbeat(c.steps)
		p := r.problem(t)
		if r.status != http.StatusUnprocessableEntity || len(p.Errors) == 0 || p.Errors[0].Pointer != c.pointer {
			t.Errorf("heartbeat with steps %s: %d %+v, want 422 at %s", c.steps, r.status, p, c.pointer)
		}
		if n := len(events()); n != was {
			t.Errorf("a refused heartbeat added %d events", n-was)
		}
	}
	steps := make([]string, 10000)
	for i := range steps {
		steps[i] = fmt.Sprint(i + 1)
	}
	if r := heartbeat("[" + strings.Join(steps, ",") + "]"); r.status != 200 {
		t.Fatalf("heartbeat with 10,000 steps: %d %s", r.status, r.body)
	}
	checkpoints := 0
	for _, e := range events()[was:] {
		if e.Type == job.EventCheckpoint {
			checkpoints++
		}
	}
	if checkpoints != queue.MaxCheckpointEvents {
		t.Errorf("10,000 steps in a heartbeat made %d checkpoint events, want %d", checkpoints, queue.MaxCheckpointEvents)
	}
}
