package main

// End-to-end tests of how `hostedtrain dev` holds up: its redis-server dies or hangs, a second
// dev starts on its data, a client sends its headers a byte at a time.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// redisPID reads the pid of the stack's redis-server from the file dev keeps.
func (d *devStack) redisPID(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(d.data, "redis.pid"))
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("redis.pid holds %q", b)
	}
	return pid
}

// submit queues a job file and returns the job.
func (d *devStack) submit(t *testing.T, file string, args ...string) job.Job {
	t.Helper()
	out, code := d.cli(t, append([]string{"train", "submit", file, "-o", "json"}, args...)...)
	if code != 0 {
		t.Fatalf("submit %s (%d): %s", file, code, out)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(lastLine(out)), &j); err != nil {
		t.Fatalf("last line is not the job: %v\n%s", err, out)
	}
	return j
}

func healthy(url string) bool {
	resp, err := http.Get(url + "/healthz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

func TestDevRestartsItsRedisAndStopsWithRedisHung(t *testing.T) {
	t.Parallel()
	const drain = 6 * time.Second
	d := startDev(t, "20ms", "--drain-timeout", drain.String())
	api := client.New(d.url, d.token)
	ctx := context.Background()
	before := d.submit(t, "../../examples/quickstart.toml", "--wait", "--poll", "100ms")
	if before.Status != job.Completed {
		t.Fatalf("job before the kill ended %s", before.Status)
	}

	first := d.redisPID(t)
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	var second int
	testwait.Until(t, 30*time.Second, "a new redis-server, and the API to answer again", func() bool {
		if second = d.redisPID(t); second == first {
			return false
		}
		_, err := api.GetJob(ctx, before.ID)
		return err == nil
	})
	if !alive(second) {
		t.Errorf("redis.pid says %d after the restart, which is not running", second)
	}
	// What Redis held came back from the AOF, and the agent works against the new server.
	if got, err := api.GetJob(ctx, before.ID); err != nil || got.Status != job.Completed {
		t.Errorf("the job from before the kill: %+v, %v", got, err)
	}
	after := d.submit(t, "../../examples/quickstart.toml", "--wait", "--poll", "100ms")
	if after.Status != job.Completed || after.Progress.Step != 20 {
		t.Errorf("job after the restart ended %s at step %d", after.Status, after.Progress.Step)
	}
	if log, _ := os.ReadFile(filepath.Join(d.data, "hostedtrain.log")); !strings.Contains(string(log), "redis-server restarted") {
		t.Errorf("the log does not tell of the restart:\n%s", log)
	}

	// Now Redis hangs (SIGSTOP: it takes no SIGTERM either) while a job runs: the agent's drain
	// and every API call wait on it, and still dev exits within the drain timeout.
	long := filepath.Join(t.TempDir(), "long.toml")
	writeFile(t, long, "model = \"Qwen/Qwen3-4B-Instruct-2507\"\nmax_steps = 1000\n[[env]]\nid = \"gsm8k\"\n")
	running := d.submit(t, long)
	testwait.Until(t, 30*time.Second, "the long job to run", func() bool {
		got, err := api.GetJob(ctx, running.ID)
		return err == nil && got.Status == job.Running
	})
	kids := descendants(d.cmd.Process.Pid)
	if err := syscall.Kill(second, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	termAt := time.Now()
	select {
	case <-d.done:
		t.Logf("dev exited %s after SIGTERM (%v); its log's last lines:\n%s", time.Since(termAt).Round(time.Millisecond), d.err, tail(filepath.Join(d.data, "hostedtrain.log"), 8))
	case <-time.After(drain + 10*time.Second):
		t.Fatalf("hostedtrain dev still runs %s after SIGTERM with Redis hung (drain timeout %s):\n%s", drain+10*time.Second, drain, d.out.String())
	}
	for pid, cl := range kids {
		if alive(pid) {
			t.Errorf("left running: %d %s", pid, cl)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	if _, err := os.Stat(filepath.Join(d.data, "redis.pid")); err == nil {
		t.Error("redis.pid outlived the stack")
	}
}

func TestDevRefusesASecondStackOnItsData(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	redisBefore := d.redisPID(t)
	urlBefore, err := os.ReadFile(filepath.Join(d.data, "api.url"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), "dev", "--addr", "127.0.0.1:0", "--data", d.data, "--agents", "1", "--port-range", "29600-29663")
	done := make(chan struct{})
	var out []byte
	go func() { out, err = cmd.CombinedOutput(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the second dev on the same --data did not exit")
	}
	want := fmt.Sprintf("another hostedtrain dev (pid %d) is using --data %s", d.cmd.Process.Pid, d.data)
	if cmd.ProcessState.ExitCode() != 1 || !strings.Contains(string(out), want) {
		t.Errorf("second dev exited %d with:\n%s\nwant exit 1 and %q", cmd.ProcessState.ExitCode(), out, want)
	}
	// It touched nothing of the first: the same Redis, the same url file, still serving.
	if got := d.redisPID(t); got != redisBefore || !alive(got) {
		t.Errorf("redis.pid went from %d to %d", redisBefore, got)
	}
	if got, err := os.ReadFile(filepath.Join(d.data, "api.url")); err != nil || string(got) != string(urlBefore) {
		t.Errorf("api.url is now %q, %v; was %q", got, err, urlBefore)
	}
	if !healthy(d.url) {
		t.Error("the first stack stopped answering")
	}
	j := d.submit(t, "../../examples/quickstart.toml")
	d.stop(t)

	// Once the first has stopped, the folder is free, with its data.
	again := startDevIn(t, d.data, "20ms")
	if _, err := client.New(again.url, again.token).GetJob(context.Background(), j.ID); err != nil {
		t.Errorf("the job from the first stack: %v", err)
	}
	again.stop(t)
}

func TestDevCutsOffASlowlorisClient(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	c, err := net.Dial("tcp", strings.TrimPrefix(d.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	closed := make(chan struct{})
	go func() { _, _ = io.Copy(io.Discard, c); close(closed) }()
	if _, err := fmt.Fprint(c, "GET /healthz HTTP/1.1\r\nHost: x\r\n"); err != nil {
		t.Fatal(err)
	}
	// A header line every half second for up to 40 s: the server must hang up well before
	// the last, and answer everyone else meanwhile.
	const lines = 80
	sent := 0
	for sent < lines {
		select {
		case <-closed:
		case <-time.After(500 * time.Millisecond):
			if _, err := fmt.Fprintf(c, "X-Slow-%d: 1\r\n", sent); err == nil {
				sent++
				if sent == 4 && !healthy(d.url) {
					t.Error("the API did not answer while a slow client held a connection")
				}
				continue
			}
		}
		break
	}
	if sent == lines {
		t.Fatalf("the server took %d header lines over %s without hanging up", lines, lines*500*time.Millisecond)
	}
	t.Logf("cut off after %d slow header lines", sent)
	d.stop(t)
}

// tail is the last n lines of a file, for a failure's message.
func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func TestDevStopsAtOnceOnASecondSignal(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms", "--drain-timeout", "5m")
	redis := d.redisPID(t)
	// Redis hangs, so the first SIGTERM's stop would take the whole drain timeout.
	if err := syscall.Kill(redis, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "dev to start stopping", func() bool {
		return strings.Contains(d.out.String(), "hostedtrain dev: stopping")
	})
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatalf("hostedtrain dev still runs 30 s after a second SIGTERM (drain timeout 5m):\n%s", d.out.String())
	}
	if !strings.Contains(d.out.String(), "second signal") || d.cmd.ProcessState.ExitCode() != 1 {
		t.Errorf("exit %d, output:\n%s", d.cmd.ProcessState.ExitCode(), d.out.String())
	}
	testwait.Until(t, 10*time.Second, "the hung redis-server to be killed", func() bool { return !alive(redis) })
}
