package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The CLI as a user meets it (issue 19): Ctrl-C on a follow says the job goes on and how to
// follow it again, exiting 130; login takes HOSTEDTRAIN_TOKEN without asking and works without
// a terminal; an address without a scheme is fixed up; a restart says what happened.
func TestTheCLIDoesNotSurprise(t *testing.T) {
	t.Parallel()
	d := startDev(t, "20ms")
	quick, err := os.ReadFile("../../examples/quickstart.toml")
	if err != nil {
		t.Fatal(err)
	}
	long := filepath.Join(t.TempDir(), "long.toml")
	if err := os.WriteFile(long, bytes.Replace(quick, []byte("max_steps = 20"), []byte("max_steps = 100000"), 1), 0o644); err != nil {
		t.Fatal(err)
	}

	// Ctrl-C on submit --wait once the run steps.
	cmd := exec.Command(filepath.Join(binDir, "hostedtrain"), "train", "submit", long, "--wait", "--poll", "100ms")
	cmd.Env = append(os.Environ(), "HOSTEDTRAIN_URL="+d.url, "HOSTEDTRAIN_TOKEN="+d.token)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	id := ""
	sc := bufio.NewScanner(stdout)
	deadline := time.AfterFunc(60*time.Second, func() { _ = cmd.Process.Kill() })
	defer deadline.Stop()
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); id == "" && len(f) >= 4 && f[0] == "submitted" {
			id = f[3]
		}
		if strings.Contains(line, "step ") && id != "" {
			break
		}
	}
	if id == "" {
		t.Fatalf("no job id in the output; stderr: %s", stderr.String())
	}
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	go func() { _, _ = bufio.NewReader(stdout).WriteTo(&bytes.Buffer{}) }()
	err = cmd.Wait()
	ee, _ := err.(*exec.ExitError)
	if ee == nil || ee.ExitCode() != 130 || !strings.Contains(stderr.String(), "interrupted: job "+id+" goes on") ||
		!strings.Contains(stderr.String(), "follow it again: hostedtrain train events "+id+" -f") {
		t.Errorf("Ctrl-C on submit --wait: %v\n%s", err, stderr.String())
	}
	var j job.Job
	out, _ := d.cli(t, "train", "get", id, "-o", "json")
	if json.Unmarshal([]byte(lastLine(out)), &j) != nil || j.Status.Terminal() {
		t.Errorf("the job after Ctrl-C: %s", out)
	}

	// login with HOSTEDTRAIN_TOKEN set, no terminal and nothing on stdin: it takes the token.
	home := t.TempDir()
	login := exec.Command(filepath.Join(binDir, "hostedtrain"), "login")
	login.Env = append(os.Environ(), "HOME="+home, "XDG_CONFIG_HOME="+filepath.Join(home, ".config"),
		"HOSTEDTRAIN_URL="+strings.TrimPrefix(d.url, "http://"), "HOSTEDTRAIN_TOKEN="+d.token)
	login.Stdin = strings.NewReader("")
	res, err := login.CombinedOutput()
	if err != nil || !strings.Contains(string(res), "using the token in HOSTEDTRAIN_TOKEN") || !strings.Contains(string(res), "logged in to "+d.url) {
		t.Errorf("login with HOSTEDTRAIN_TOKEN and an address without a scheme: %v\n%s", err, res)
	}

	// restart of a running job says it is stopping first; then stop it for good.
	if out, code := d.cli(t, "train", "restart", "--force", id); code != 0 || !strings.Contains(out, "is stopping; it will be queued again") {
		t.Errorf("restart of a running job (%d): %s", code, out)
	}
	if out, code := d.cli(t, "train", "submit"); code != 1 || !strings.Contains(out, "hostedtrain train submit needs a job file") {
		t.Errorf("submit without a file (%d): %s", code, out)
	}
	d.stop(t)
}
