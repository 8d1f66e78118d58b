package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// nodeReceiver is testdata/webhook-receiver: a receiver written with the standardwebhooks npm
// package, as a user would write one.
type nodeReceiver struct {
	url string
}

func startNodeReceiver(t *testing.T) *nodeReceiver {
	t.Helper()
	dir := filepath.Join("..", "..", "testdata", "webhook-receiver")
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "standardwebhooks")); err != nil {
		t.Fatalf("the receiver's npm packages are not installed: run `make test` (or make webhook-receiver): %v", err)
	}
	cmd := exec.Command("node", "receiver.mjs")
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatalf("node: %v", err)
	}
	t.Cleanup(func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() })
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatalf("the receiver did not start: %v %s", err, stderr.String())
	}
	var hello struct{ Port int }
	if err := json.Unmarshal([]byte(line), &hello); err != nil || hello.Port == 0 {
		t.Fatalf("receiver said %q", line)
	}
	return &nodeReceiver{url: fmt.Sprintf("http://127.0.0.1:%d", hello.Port)}
}

func (r *nodeReceiver) control(t *testing.T, v map[string]any) {
	t.Helper()
	b, _ := json.Marshal(v)
	resp, err := http.Post(r.url+"/_control", "application/json", bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

type receiverState struct {
	Received []struct {
		ID   string
		Type string
		Data struct {
			JobID    string `json:"job_id"`
			Sequence int64
			Job      *job.Job
		}
	}
	Failures, Refused int
}

func (r *nodeReceiver) state(t *testing.T) receiverState {
	t.Helper()
	resp, err := http.Get(r.url + "/_received")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var s receiverState
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		t.Fatal(err)
	}
	return s
}

// The local stack delivers every event of two jobs to a receiver that verifies each with the
// standardwebhooks package; the receiver is down while the jobs run and gets everything when
// it comes back, each job's events in sequence order, none twice.
func TestDevDeliversSignedWebhooksToAReceiverThatWasDown(t *testing.T) {
	t.Parallel()
	recv := startNodeReceiver(t)
	// Retries every second for four minutes: the receiver stays down until both jobs have
	// completed, which on a loaded machine takes far longer than a short schedule lasts (each
	// job's wait below allows a minute), and a delivery whose retries ran out would never come.
	schedule := "300ms,300ms,500ms" + strings.Repeat(",1s", 240)
	d := startDev(t, "20ms", "--webhook-schedule", schedule)
	if !strings.Contains(d.out.String(), "loopback allowed") {
		t.Errorf("dev does not say webhooks may reach this machine:\n%s", d.out.String())
	}
	api := client.New(d.url, d.token)
	ctx := context.Background()
	ep, err := api.CreateWebhook(ctx, recv.url+"/hooks", []string{"*"}, "e2e")
	if err != nil {
		t.Fatal(err)
	}
	recv.control(t, map[string]any{"secrets": []string{ep.Secret}, "down": true})

	var ids []string
	for range 2 {
		out, code := d.cli(t, "train", "submit", "../../examples/quickstart.toml", "-o", "json")
		if code != 0 {
			t.Fatalf("submit: %s", out)
		}
		var j job.Job
		if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		testwait.Until(t, time.Minute, "job "+id+" to complete", func() bool {
			j, err := api.GetJob(ctx, id)
			return err == nil && j.Status == job.Completed
		})
	}
	testwait.Until(t, 30*time.Second, "deliveries refused while down", func() bool { return recv.state(t).Refused >= 2 })
	recv.control(t, map[string]any{"down": false})

	// queued, started, four checkpoints, completed: seven events a job.
	want := []string{"job.queued", "job.started", "job.checkpoint", "job.checkpoint", "job.checkpoint", "job.checkpoint", "job.completed"}
	testwait.Until(t, time.Minute, "every event delivered", func() bool { return len(recv.state(t).Received) >= 2*len(want) })
	st := recv.state(t)
	if st.Failures != 0 {
		t.Errorf("%d deliveries did not verify with standardwebhooks", st.Failures)
	}
	if len(st.Received) != 2*len(want) {
		t.Errorf("%d deliveries, want %d", len(st.Received), 2*len(want))
	}
	perJob := map[string][]string{}
	lastSeq := map[string]int64{}
	seen := map[string]bool{}
	for _, e := range st.Received {
		if seen[e.ID] {
			t.Errorf("message %s delivered twice", e.ID)
		}
		seen[e.ID] = true
		if e.Data.Sequence <= lastSeq[e.Data.JobID] {
			t.Errorf("job %s: sequence %d after %d", e.Data.JobID, e.Data.Sequence, lastSeq[e.Data.JobID])
		}
		lastSeq[e.Data.JobID] = e.Data.Sequence
		perJob[e.Data.JobID] = append(perJob[e.Data.JobID], e.Type)
		if e.Data.Job == nil || e.Data.Job.ID != e.Data.JobID {
			t.Errorf("an event without its job: %+v", e)
		}
	}
	for _, id := range ids {
		if got := strings.Join(perJob[id], " "); got != strings.Join(want, " ") {
			t.Errorf("job %s: %s", id, got)
		}
	}
	d.stop(t)
}

// With --allow-loopback-webhooks=false the local stack refuses receivers on this machine, as
// production does.
func TestDevRefusesLoopbackWebhooksWhenAsked(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms", "--allow-loopback-webhooks=false")
	// The banner is written before api.url, but reaches the test through a pipe.
	testwait.Until(t, 10*time.Second, "dev to say how webhooks are guarded", func() bool {
		return strings.Contains(d.out.String(), "loopback refused")
	})
	_, err := client.New(d.url, d.token).CreateWebhook(context.Background(), "http://127.0.0.1:9/hooks", []string{"*"}, "")
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusUnprocessableEntity || !strings.Contains(apiErr.Error(), "loopback") {
		t.Errorf("registering a loopback receiver: %v", err)
	}
	d.stop(t)
}

// The CLI manages endpoints end to end: create (the secret printed once), list, test, the
// delivery log, rotation, delete.
func TestCLIManagesWebhooks(t *testing.T) {
	t.Parallel()
	hits := make(chan string, 10)
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits <- r.Header.Get("webhook-id")
	}))
	defer recv.Close()
	d := startDev(t, "20ms")
	out, code := d.cli(t, "webhook", "create", recv.URL+"/hooks", "--events", "job.completed,job.failed", "-o", "json")
	if code != 0 {
		t.Fatalf("create: %s", out)
	}
	var ep struct{ ID, Secret string }
	if err := json.Unmarshal([]byte(lastLine(out)), &ep); err != nil || !strings.HasPrefix(ep.Secret, "whsec_") {
		t.Fatalf("create printed %s", out)
	}
	if out, code := d.cli(t, "webhook", "list"); code != 0 || !strings.Contains(out, ep.ID) || !strings.Contains(out, "job.completed,job.failed") {
		t.Errorf("list (%d): %s", code, out)
	}
	if out, code := d.cli(t, "webhook", "test", ep.ID); code != 0 || !strings.Contains(out, "queued") {
		t.Errorf("test (%d): %s", code, out)
	}
	select {
	case id := <-hits:
		if !strings.HasPrefix(id, "msg_test_") {
			t.Errorf("webhook-id %q", id)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the test delivery never came")
	}
	testwait.Until(t, 30*time.Second, "the delivery log to say delivered", func() bool {
		out, _ := d.cli(t, "webhook", "deliveries", ep.ID)
		return strings.Contains(out, "webhook.test") && strings.Contains(out, "delivered")
	})
	if out, code := d.cli(t, "webhook", "update", ep.ID, "--rotate-secret"); code != 0 || !strings.Contains(out, "whsec_") || strings.Contains(out, ep.Secret) {
		t.Errorf("rotate (%d): %s", code, out)
	}
	if out, code := d.cli(t, "webhook", "update", ep.ID); code == 0 || !strings.Contains(out, "nothing to change") {
		t.Errorf("an update without changes (%d): %s", code, out)
	}
	if out, code := d.cli(t, "webhook", "delete", ep.ID); code != 0 {
		t.Errorf("delete (%d): %s", code, out)
	}
	if out, code := d.cli(t, "webhook", "get", ep.ID); code == 0 || !strings.Contains(out, "404") {
		t.Errorf("get after delete (%d): %s", code, out)
	}
	d.stop(t)
}
