package api_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// dataBundle is an API over a local-folder store that the test writes job data into as an
// agent would.
type dataBundle struct {
	s      *apitest.Stack
	store  *blob.Dir
	token  string
	jobID  string
	ctx    context.Context
	writes map[string]string
}

func setupData(t *testing.T, adjust ...func(*apitest.Options)) *dataBundle {
	t.Helper()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o := apitest.Options{Store: store}
	for _, f := range adjust {
		f(&o)
	}
	s := apitest.Start(t, o)
	d := &dataBundle{s: s, store: store, token: s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite), ctx: context.Background(), writes: map[string]string{}}
	r := call(t, "POST", s.URL+"/v1/jobs", d.token, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 100\n[[env]]\nid = \"acme/env\"\n"))
	if r.status != http.StatusCreated {
		t.Fatalf("submit: %d %s", r.status, r.body)
	}
	var j job.Job
	r.decode(t, &j)
	d.jobID = j.ID
	return d
}

func (d *dataBundle) put(t *testing.T, key, data string) {
	t.Helper()
	if err := d.store.Put(d.ctx, jobdata.JobPrefix(d.jobID)+key, strings.NewReader(data)); err != nil {
		t.Fatal(err)
	}
}

func (d *dataBundle) get(t *testing.T, path string, v any) reply {
	t.Helper()
	r := call(t, "GET", d.s.URL+"/v1/jobs/"+d.jobID+path, d.token, "", nil)
	if v != nil && r.status == 200 {
		r.decode(t, v)
	}
	return r
}

func logLine(at time.Time, level, msg string) string {
	return fmt.Sprintf("%s %s %s\n", at.UTC().Format(time.RFC3339Nano), level, msg)
}

type logReply struct {
	Attempt    int64
	Attempts   []int64
	Components []string
	Items      []jobdata.LogLine
}

func TestJobLogs(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	t0 := time.Date(2026, 11, 22, 10, 0, 0, 0, time.UTC)
	d.put(t, "logs/attempt_1/trainer/000000000000.log", logLine(t0, "INFO", "first attempt"))
	var trainer, orch strings.Builder
	for i := range 10 {
		trainer.WriteString(logLine(t0.Add(time.Duration(2*i)*time.Second), "INFO", fmt.Sprintf("step %d | loss 0.1", i)))
		orch.WriteString(logLine(t0.Add(time.Duration(2*i+1)*time.Second), "INFO", fmt.Sprintf("step %d | reward 0.5", i)))
	}
	trainer.WriteString(logLine(t0.Add(30*time.Second), "ERROR", "RuntimeError: CUDA out of memory"))
	trainer.WriteString("  traceback line without a time\n")
	// Two chunks for the trainer: the second starts where the first ends.
	first := trainer.String()[:300]
	first = first[:strings.LastIndexByte(first, '\n')+1]
	d.put(t, "logs/attempt_2/trainer/000000000000.log", first)
	d.put(t, fmt.Sprintf("logs/attempt_2/trainer/%012d.log", len(first)), trainer.String()[len(first):])
	d.put(t, "logs/attempt_2/orchestrator/000000000000.log", orch.String())
	d.put(t, "logs/attempt_2/envs/train/gsm8k/000000000000.log", logLine(t0.Add(5*time.Second), "WARNING", "slow rollout"))
	d.put(t, "logs/attempt_2/preflight/000000000000.log", logLine(t0.Add(-time.Second), "INFO", "the config passed"))

	var all logReply
	d.get(t, "/logs?tail_lines=1000", &all)
	if all.Attempt != 2 || len(all.Attempts) != 2 || len(all.Items) != 24 {
		t.Fatalf("attempt %d of %v, %d lines; want the newest attempt's 24", all.Attempt, all.Attempts, len(all.Items))
	}
	for i := 1; i < len(all.Items); i++ {
		a, b := all.Items[i-1], all.Items[i]
		if a.Time != nil && b.Time != nil && b.Time.Before(*a.Time) {
			t.Errorf("line %d (%s) before line %d (%s)", i, b.Line, i-1, a.Line)
		}
	}
	last := all.Items[len(all.Items)-1]
	if last.Component != "trainer" || !strings.Contains(last.Line, "traceback") {
		t.Errorf("a continuation line stays after its line: %+v", last)
	}
	cases := []struct {
		query string
		n     int
		check func(jobdata.LogLine) bool
	}{
		{"?tail_lines=5", 5, nil},
		{"?component=envs", 1, func(l jobdata.LogLine) bool { return l.Component == "envs/train/gsm8k" && l.Level == "WARNING" }},
		{"?component=envs/train", 1, func(l jobdata.LogLine) bool { return l.Component == "envs/train/gsm8k" }},
		{"?component=envs/train/gsm8k", 1, func(l jobdata.LogLine) bool { return l.Component == "envs/train/gsm8k" }},
		{"?component=envs/eval", 0, nil},
		{"?component=preflight", 1, func(l jobdata.LogLine) bool { return l.Component == "preflight" }},
		{"?component=orchestrator&search=STEP%203", 1, func(l jobdata.LogLine) bool { return strings.Contains(l.Line, "step 3 ") }},
		{"?level=WARNING", 3, func(l jobdata.LogLine) bool { return l.Level != "INFO" || l.Time == nil }},
		{"?since=" + t0.Add(15*time.Second).Format(time.RFC3339) + "&component=trainer", 4, nil}, // the traceback goes with its line
		{"?attempt=1", 1, func(l jobdata.LogLine) bool { return l.Line[len(l.Line)-13:] == "first attempt" }},
	}
	for _, c := range cases {
		var page logReply
		if r := d.get(t, "/logs"+c.query, &page); r.status != 200 {
			t.Errorf("%s: %d %s", c.query, r.status, r.body)
			continue
		}
		if len(page.Items) != c.n {
			t.Errorf("%s: %d lines, want %d: %+v", c.query, len(page.Items), c.n, page.Items)
		}
		for _, l := range page.Items {
			if c.check != nil && !c.check(l) {
				t.Errorf("%s: line %+v", c.query, l)
			}
		}
	}
	if r := d.get(t, "/logs?component=kernel", nil); r.status != http.StatusBadRequest || !strings.Contains(string(r.body), "a component") {
		t.Errorf("a bad component: %d %s", r.status, r.body)
	}
}

// sseEvent is one event of a stream.
type sseEvent struct {
	id, name, data string
}

// readSSE reads events from a stream into ch until it ends.
func readSSE(body io.Reader, ch chan<- sseEvent) {
	defer close(ch)
	sc := bufio.NewScanner(body)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "":
			if ev.data != "" {
				ch <- ev
			}
			ev = sseEvent{}
		case strings.HasPrefix(line, "id: "):
			ev.id = line[4:]
		case strings.HasPrefix(line, "event: "):
			ev.name = line[7:]
		case strings.HasPrefix(line, "data: "):
			ev.data = line[6:]
		}
	}
}

func (d *dataBundle) stream(t *testing.T, path, lastEventID string) (chan sseEvent, func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(d.ctx)
	req, _ := http.NewRequestWithContext(ctx, "GET", d.s.URL+"/v1/jobs/"+d.jobID+path, nil)
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Accept", "text/event-stream")
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream %s: %d %s", path, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ch := make(chan sseEvent, 100)
	go readSSE(resp.Body, ch)
	return ch, func() { cancel(); resp.Body.Close() }
}

func next(t *testing.T, ch chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("the stream ended")
		}
		return ev
	case <-time.After(30 * time.Second):
		t.Fatal("no event in 30 s")
	}
	return sseEvent{}
}

// Following the logs: the tail, then new lines as the open chunk grows, and a reconnect with
// Last-Event-ID goes on where it left off; the stream ends when the job has ended. New lines
// come when the agent says it wrote them (its heartbeat's log_bytes): the follower's own
// re-check is an hour here, so nothing else could bring them.
func TestFollowingLogs(t *testing.T) {
	t.Parallel()
	d := setupData(t, func(o *apitest.Options) { o.LogRecheck = time.Hour })
	agent := d.s.AgentToken("agent-1")
	cl := claimJob(t, d.s, agent)
	stored := 0
	put := func(key, data string) {
		d.put(t, key, data)
		stored += len(data)
		body := fmt.Sprintf(`{"lease_token":%q,"running":true,"log_bytes":%d}`, cl.Lease.Token, stored)
		if r := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+d.jobID+"/heartbeat", agent, "application/json", []byte(body)); r.status != 200 {
			t.Fatalf("heartbeat: %d %s", r.status, r.body)
		}
	}
	t0 := time.Now().UTC()
	chunk := logLine(t0, "INFO", "one") + logLine(t0, "INFO", "two")
	put("logs/attempt_1/trainer/000000000000.log", chunk)
	ch, stop := d.stream(t, "/logs?follow=true&tail_lines=1", "")
	first := next(t, ch)
	var l jobdata.LogLine
	_ = json.Unmarshal([]byte(first.data), &l)
	if first.name != "log" || !strings.HasSuffix(l.Line, "two") {
		t.Fatalf("tail: %+v", first)
	}
	chunk += logLine(t0, "INFO", "three") + "half a li" // the agent rewrites the open chunk
	put("logs/attempt_1/trainer/000000000000.log", chunk)
	ev := next(t, ch)
	_ = json.Unmarshal([]byte(ev.data), &l)
	if !strings.HasSuffix(l.Line, "three") {
		t.Fatalf("followed: %+v", ev)
	}
	stop()
	// A reconnect resumes after "three"; the half line arrives when it is whole.
	chunk += "ne\n"
	put("logs/attempt_1/trainer/000000000000.log", chunk)
	ch, stop = d.stream(t, "/logs?follow=true", ev.id)
	defer stop()
	ev = next(t, ch)
	_ = json.Unmarshal([]byte(ev.data), &l)
	if l.Line != "half a line" {
		t.Fatalf("resumed with %+v", ev)
	}
	// A newer attempt is followed from its start.
	put("logs/attempt_2/trainer/000000000000.log", logLine(t0, "INFO", "resumed elsewhere"))
	if ev = next(t, ch); ev.name != "attempt" || !strings.Contains(ev.data, `"attempt":2`) {
		t.Fatalf("attempt event: %+v", ev)
	}
	if ev = next(t, ch); !strings.Contains(ev.data, "resumed elsewhere") {
		t.Fatalf("after the attempt event: %+v", ev)
	}
	// The job ends: the stream ends.
	if r := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/cancel", d.token, "", nil); r.status != 200 {
		t.Fatalf("cancel: %d", r.status)
	}
	body := fmt.Sprintf(`{"lease_token":%q,"reason":"stopped"}`, cl.Lease.Token)
	if r := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+d.jobID+"/fail", agent, "application/json", []byte(body)); r.status != 200 {
		t.Fatalf("fail: %d %s", r.status, r.body)
	}
	testwait.Until(t, 30*time.Second, "the stream to end", func() bool {
		select {
		case _, ok := <-ch:
			return !ok
		default:
			return false
		}
	})
}

// Events live: what happened, then what happens, each with its sequence number as id; a
// reconnect from an id resumes after it; the stream ends with the job.
func TestEventsStream(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	ch, stop := d.stream(t, "/events", "")
	defer stop()
	if ev := next(t, ch); ev.id != "1" || ev.name != "job.queued" {
		t.Fatalf("first event %+v", ev)
	}
	if r := call(t, "POST", d.s.URL+"/v1/jobs/"+d.jobID+"/cancel", d.token, "", nil); r.status != 200 {
		t.Fatalf("cancel: %d", r.status)
	}
	ev := next(t, ch)
	var e job.Event
	if err := json.Unmarshal([]byte(ev.data), &e); err != nil || ev.id != "2" || e.Type != "job.stopped" || e.Seq != 2 {
		t.Fatalf("second event %+v (%v)", ev, err)
	}
	if _, ok := <-ch; ok {
		t.Error("the stream went on after the job ended")
	}
	ch2, stop2 := d.stream(t, "/events", "1")
	defer stop2()
	if ev := next(t, ch2); ev.id != "2" {
		t.Errorf("resumed at %+v, want event 2", ev)
	}
}

func TestCheckpointAndArtifactDownloads(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	weights := strings.Repeat("w", 5000)
	sum := sha256.Sum256([]byte(weights))
	d.put(t, "checkpoints/step_10/trainer/model.safetensors", weights)
	m, _ := json.Marshal(jobdata.Manifest{JobID: d.jobID, Step: 10, Bytes: 5000, Files: []jobdata.ManifestFile{
		{Path: "trainer/model.safetensors", Size: 5000, SHA256: hex.EncodeToString(sum[:])}}})
	d.put(t, "checkpoints/step_10/manifest.json", string(m))
	d.put(t, "checkpoints/step_20/trainer/model.safetensors", "partial")
	d.put(t, "artifacts/results.jsonl", "{\"reward\":1}\n")
	var cps struct {
		Items []struct {
			Step     int
			Status   string
			Download []struct {
				Path, URL, SHA256 string
				Bytes             int64
			}
		}
		ExpiresAt time.Time `json:"expires_at"`
	}
	d.get(t, "/checkpoints", &cps)
	if len(cps.Items) != 2 || cps.Items[0].Status != "committed" || len(cps.Items[0].Download) != 1 ||
		cps.Items[1].Status != "uploading" || cps.Items[1].Download != nil || time.Until(cps.ExpiresAt) < 10*time.Minute {
		t.Fatalf("checkpoints %+v", cps)
	}
	dl := cps.Items[0].Download[0]
	resp, err := http.Get(dl.URL) // no token: the link is the credential
	if err != nil {
		t.Fatal(err)
	}
	got, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || string(got) != weights || dl.SHA256 != hex.EncodeToString(sum[:]) {
		t.Errorf("download: %d, %d bytes", resp.StatusCode, len(got))
	}
	// A link changed in any way is refused.
	bad := dl.URL[:len(dl.URL)-3] + "AAA"
	if r := call(t, "GET", bad, "", "", nil); r.status != http.StatusForbidden {
		t.Errorf("a tampered link: %d", r.status)
	}
	var arts struct {
		Items []struct{ Name, URL string }
	}
	d.get(t, "/artifacts", &arts)
	if len(arts.Items) != 1 || arts.Items[0].Name != "results.jsonl" {
		t.Fatalf("artifacts %+v", arts)
	}
	if r := call(t, "GET", arts.Items[0].URL, "", "", nil); r.status != 200 || string(r.body) != "{\"reward\":1}\n" {
		t.Errorf("artifact download: %d %q", r.status, r.body)
	}
}

// A metrics line of 17 MiB in storage (the agent refuses lines over jobdata.MaxLineBytes, but
// storage may hold one from elsewhere) does not make metrics or progress fail: both answer
// 200 from the other rows.
func TestMetricsAndProgressPassOverAnOversizedLine(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	agent := d.s.AgentToken("agent-1")
	var cl job.Claim
	call(t, "POST", d.s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`)).decode(t, &cl)
	t0 := float64(time.Now().Unix())
	var body strings.Builder
	for step := 1; step <= 30; step++ {
		fmt.Fprintf(&body, `{"step":%d,"time":%g,"loss/mean":0.1}`+"\n", step, t0+float64(step)*2)
		if step == 15 || step == 28 {
			fmt.Fprintf(&body, `{"step":%d,"x":"%s"}`+"\n", step, strings.Repeat("y", 17<<20))
		}
	}
	d.put(t, "metrics/000001-00000001-00000030-0001.jsonl", body.String())
	hb := fmt.Sprintf(`{"lease_token":%q,"running":true,"progress":{"step":30,"max_steps":100,"checkpoints":0}}`, cl.Lease.Token)
	if r := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+d.jobID+"/heartbeat", agent, "application/json", []byte(hb)); r.status != 200 {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	var m struct{ Items []jobdata.Row }
	if r := d.get(t, "/metrics", &m); r.status != 200 || len(m.Items) != 30 {
		t.Fatalf("metrics: %d, %d rows; want 200 and 30", r.status, len(m.Items))
	}
	for _, row := range m.Items {
		if _, ok := row["x"]; ok {
			t.Errorf("step %d carries the oversized value", row.Step())
		}
	}
	var p struct {
		Step        int
		StepSeconds float64 `json:"step_seconds"`
	}
	if r := d.get(t, "/progress", &p); r.status != 200 || p.Step != 30 || p.StepSeconds != 2 {
		t.Errorf("progress: %d %+v; want 200, step 30, 2 s a step", r.status, p)
	}
}

func TestProgressAndUsage(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	agent := d.s.AgentToken("agent-1")
	var cl job.Claim
	call(t, "POST", d.s.URL+"/v1/agent/claim", agent, "application/json", []byte(`{"gpus":[{"model":"H100","count":8}]}`)).decode(t, &cl)
	w := jobdata.NewMetricsWriter(d.store, d.jobID, 1, 1)
	t0 := float64(time.Now().Unix())
	for step := 1; step <= 30; step++ {
		// The orchestrator's row and the trainer's: the pace is read from the step's time.
		for _, line := range []string{
			fmt.Sprintf(`{"step":%d,"time":%g,"train/agg/all/agent/reward/mean":0.5}`, step, t0+float64(step)*2-1),
			fmt.Sprintf(`{"step":%d,"time":%g,"loss/mean":0.1}`, step, t0+float64(step)*2),
		} {
			row, err := jobdata.ParseLine([]byte(line))
			if err != nil {
				t.Fatal(err)
			}
			if err := w.Add(row); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(d.ctx); err != nil {
		t.Fatal(err)
	}
	hb := fmt.Sprintf(`{"lease_token":%q,"running":true,"progress":{"step":30,"max_steps":100,"checkpoints":0,"metrics":{"train/agg/all/agent/reward/mean":0.5},"series":{"reward":"train/agg/all/agent/reward/mean"}}}`, cl.Lease.Token)
	if r := call(t, "POST", d.s.URL+"/v1/agent/jobs/"+d.jobID+"/heartbeat", agent, "application/json", []byte(hb)); r.status != 200 {
		t.Fatalf("heartbeat: %d %s", r.status, r.body)
	}
	var p struct {
		Status      string
		Step        int
		Percent     float64
		StepSeconds float64 `json:"step_seconds"`
		ETASeconds  float64 `json:"eta_seconds"`
	}
	d.get(t, "/progress", &p)
	if p.Status != "RUNNING" || p.Step != 30 || p.Percent != 30 || p.StepSeconds != 2 || p.ETASeconds != 140 {
		t.Errorf("progress %+v; want 30%%, 2 s a step, 140 s to go", p)
	}
	var u struct {
		Organization struct {
			Org         string
			GPUSeconds  float64 `json:"gpu_seconds"`
			RunningGPUs int     `json:"running_gpus"`
		}
		Jobs []struct {
			ID   string
			GPUs int
		}
	}
	call(t, "GET", d.s.URL+"/v1/usage", d.token, "", nil).decode(t, &u)
	if u.Organization.Org != "acme" || u.Organization.RunningGPUs != 2 || len(u.Jobs) != 1 || u.Jobs[0].ID != d.jobID || u.Jobs[0].GPUs != 2 {
		t.Errorf("usage %+v", u)
	}
	// List filters over HTTP.
	var l struct{ Items []job.Job }
	call(t, "GET", d.s.URL+"/v1/jobs?status=RUNNING,QUEUED&kind=rl", d.token, "", nil).decode(t, &l)
	if len(l.Items) != 1 {
		t.Errorf("running rl jobs: %d", len(l.Items))
	}
	call(t, "GET", d.s.URL+"/v1/jobs?status=COMPLETED", d.token, "", nil).decode(t, &l)
	if len(l.Items) != 0 {
		t.Errorf("completed jobs: %d", len(l.Items))
	}
	after := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	call(t, "GET", d.s.URL+"/v1/jobs?created_after="+after, d.token, "", nil).decode(t, &l)
	if len(l.Items) != 0 {
		t.Errorf("jobs created in the future: %d", len(l.Items))
	}
	if r := call(t, "GET", d.s.URL+"/v1/jobs?status=DONE", d.token, "", nil); r.status != http.StatusBadRequest {
		t.Errorf("a bad status filter: %d", r.status)
	}
}

// A pin marks a committed checkpoint to keep; the list shows it; a step that is not committed
// cannot be pinned; an unpin lets it go.
func TestPinAndUnpinACheckpoint(t *testing.T) {
	t.Parallel()
	d := setupData(t)
	d.put(t, "checkpoints/step_10/manifest.json", `{"files":[]}`)
	d.put(t, "checkpoints/step_20/trainer/.metadata", "an upload in progress")
	pin := func(method string, step int) reply {
		return call(t, method, fmt.Sprintf("%s/v1/jobs/%s/checkpoints/%d/pin", d.s.URL, d.jobID, step), d.token, "", nil)
	}
	if r := pin("PUT", 10); r.status != http.StatusNoContent {
		t.Fatalf("pin: %d %s", r.status, r.body)
	}
	if r := pin("PUT", 20); r.status != http.StatusNotFound || !strings.Contains(string(r.body), "no committed checkpoint of step 20; it has steps 10") {
		t.Fatalf("pin of an upload in progress: %d %s", r.status, r.body)
	}
	var list struct {
		Items []struct {
			Step   int
			Pinned bool
		}
	}
	d.get(t, "/checkpoints", &list)
	if len(list.Items) != 2 || !list.Items[0].Pinned || list.Items[1].Pinned {
		t.Fatalf("checkpoints after the pin: %+v", list.Items)
	}
	if r := pin("DELETE", 10); r.status != http.StatusNoContent {
		t.Fatalf("unpin: %d %s", r.status, r.body)
	}
	list.Items = nil // a fresh read: the decoder keeps what a field it does not see held
	d.get(t, "/checkpoints", &list)
	if list.Items[0].Pinned {
		t.Fatalf("still pinned after the unpin: %+v", list.Items)
	}
}

// One organization holds at most MaxStreams event and log streams open (red team, issue 29:
// 500 follow streams were taken, each holding a connection and polling Redis): the next is 429
// with Retry-After, another organization's are untouched, and a closed stream's place is free
// again.
func TestAnOrganizationsStreamsAreCapped(t *testing.T) {
	t.Parallel()
	d := setupData(t, func(o *apitest.Options) { o.MaxStreams = 2 })
	_, close1 := d.stream(t, "/events", "")
	_, close2 := d.stream(t, "/logs?follow=true", "")
	defer close2()
	for _, path := range []string{"/events", "/logs?follow=true"} {
		req, _ := http.NewRequest("GET", d.s.URL+"/v1/jobs/"+d.jobID+path, nil)
		req.Header.Set("Authorization", "Bearer "+d.token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusTooManyRequests || resp.Header.Get("Retry-After") == "" || !strings.Contains(string(body), "streams open") {
			t.Fatalf("a third stream (%s): %d Retry-After %q %s; want 429 with Retry-After", path, resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	// Another organization's streams are its own.
	other := d.s.Token("umbrella", auth.ScopeJobsRead, auth.ScopeJobsWrite)
	r := call(t, "POST", d.s.URL+"/v1/jobs", other, "application/toml", []byte("model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 10\n[[env]]\nid = \"acme/env\"\n"))
	var j job.Job
	r.decode(t, &j)
	o := &dataBundle{s: d.s, store: d.store, token: other, ctx: d.ctx, jobID: j.ID}
	_, closeOther := o.stream(t, "/events", "")
	closeOther()
	// A stream closed gives its place back.
	close1()
	testwait.Until(t, 30*time.Second, "a place is free again", func() bool {
		req, _ := http.NewRequest("GET", d.s.URL+"/v1/jobs/"+d.jobID+"/events", nil)
		req.Header.Set("Authorization", "Bearer "+d.token)
		req.Header.Set("Accept", "text/event-stream")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
}
