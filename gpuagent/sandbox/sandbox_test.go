package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/mountns"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

func TestMain(m *testing.M) {
	// As an agent does: what the tests' boxes mount goes with the test process.
	mountns.Private()
	os.Exit(m.Run())
}

// These tests do what a hostile tenant's code did (issue 14) inside the real bubblewrap, and
// check that it fails now. They need root, as the agent does on a node and in CI.

// needSandbox opens a sandbox as an agent with 4 GPUs does, its configuration changed first by
// set.
func needSandbox(t *testing.T, set ...func(*Config)) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the sandbox tests need root, as the agent does on a node: run make test as root (CI does)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap is missing: make test installs Debian's bubblewrap")
	}
	c := Config{UIDBase: 62000 + os.Getpid()%1000*8, ProxyPort: 3128}
	for _, f := range set {
		f(&c)
	}
	if err := c.Check(); err != nil {
		t.Fatal(err)
	}
	sb, err := Open(c, t.TempDir(), 4, 2)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.Close)
	return sb
}

// jobDir makes a job folder under a work folder, as the agent does.
func jobDir(t *testing.T, work, id string) string {
	t.Helper()
	dir := filepath.Join(work, "jobs", id)
	for _, d := range append([]string{""}, WritableDirs...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func openTestBox(t *testing.T, sb *Sandbox, dir string, gpus []int) (*Box, *[]string) {
	t.Helper()
	var notes []string
	b, err := sb.OpenBox(dir, gpus, func(s string) { notes = append(notes, s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b, &notes
}

// process is a command started in a box as the agent starts one: its output to a log file,
// what is left of its process group killed when it ends.
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func startProcess(t *testing.T, b *Box, argv []string, env []string, logPath string) *process {
	t.Helper()
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd, err := b.Command(argv, env)
	if err != nil {
		logf.Close()
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	p := &process{cmd: cmd, done: make(chan struct{})}
	err = b.Start(cmd, func(error) {
		logf.Close()
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(p.done)
	})
	if err != nil {
		logf.Close()
		t.Fatal(err)
	}
	return p
}

// terminate stops the process as the agent stops a job's: SIGTERM to all but bubblewrap's
// monitor (Signal), SIGKILL to the group after grace.
func (p *process) terminate(grace time.Duration) {
	Signal(p.cmd, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// inBox runs a shell script in the box to its end and returns what it printed.
func inBox(t *testing.T, b *Box, script string, env ...string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "out.log")
	p := startProcess(t, b, []string{"/bin/sh", "-c", script}, env, log)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		p.terminate(time.Second)
		t.Fatal("the sandboxed script did not end in 30s")
	}
	out, _ := os.ReadFile(log)
	return string(out)
}

func TestSandboxEnvironmentAndProcesses(t *testing.T) {
	sb := needSandbox(t)
	work := t.TempDir()
	t.Setenv("HOSTEDTRAIN_AGENT_TOKEN", "agent-token-must-not-leak")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "node-storage-key-must-not-leak")

	// Another job, with a secret, running beside it.
	other, _ := openTestBox(t, sb, jobDir(t, work, "other"), nil)
	otherLog := filepath.Join(t.TempDir(), "other.log")
	op := startProcess(t, other, []string{"/bin/sh", "-c", "echo up; exec sleep 60"}, []string{"OTHER_SECRET=other-jobs-secret"}, otherLog)
	t.Cleanup(func() { op.terminate(time.Second) })
	testwait.Until(t, 10*time.Second, "the other job runs", func() bool {
		b, _ := os.ReadFile(otherLog)
		return strings.Contains(string(b), "up")
	})

	b, _ := openTestBox(t, sb, jobDir(t, work, "mine"), nil)
	out := inBox(t, b, `
		echo "== env"; env
		echo "== uid $(id -u)"
		echo "== pids"; ls /proc | grep -E '^[0-9]+$' | tr '\n' ' '; echo
		echo "== environs"; cat /proc/[0-9]*/environ 2>/dev/null | tr '\0' '\n'
		echo "== other job"; ls `+other.dir+` 2>&1; ls `+work+`/jobs 2>&1
		echo "== root"; ls /root 2>&1
		echo "== path $PATH"
		echo "== preload [$LD_PRELOAD]"
	`, "MY_SECRET=mine", "PATH=/evil", "LD_PRELOAD=/evil.so")

	for _, leak := range []string{"agent-token-must-not-leak", "node-storage-key-must-not-leak", "other-jobs-secret", "HOSTEDTRAIN_AGENT_TOKEN", "AWS_"} {
		if strings.Contains(out, leak) {
			t.Errorf("the job read %q:\n%s", leak, out)
		}
	}
	if strings.Contains(out, "/evil") {
		t.Errorf("a job's variable overrode the sandbox's PATH or LD_PRELOAD:\n%s", out)
	}
	if !strings.Contains(out, "MY_SECRET=mine") {
		t.Errorf("the job's own secret is missing:\n%s", out)
	}
	if want := "== uid " + strconv.Itoa(b.uid); !strings.Contains(out, want) || b.uid == other.uid || b.uid == 0 {
		t.Errorf("want %q (its slot's own user, not the other job's %d):\n%s", want, other.uid, out)
	}
	// PID 1 (bubblewrap's init), the shell and the pipeline it runs to list them.
	pids := section(out, "== pids")
	if f := strings.Fields(pids); len(f) > 5 || f[0] != "1" {
		t.Errorf("the job sees processes %v, want only its own tree", f)
	}
	if strings.Contains(section(out, "== other job"), "home") {
		t.Errorf("the job lists another job's folder:\n%s", out)
	}
}

// section is what follows a "== name" line up to the next one.
func section(out, head string) string {
	_, rest, _ := strings.Cut(out, head)
	body, _, _ := strings.Cut(rest, "\n==")
	return body
}

func TestSandboxFilesystem(t *testing.T) {
	// The agent's configuration, as infra/gpu-node keeps it under /etc.
	conf, err := os.MkdirTemp("/etc", "hostedtrain-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(conf) })
	if err := os.WriteFile(filepath.Join(conf, "agent.env"), []byte("HOSTEDTRAIN_AGENT_TOKEN=secret-from-config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb := needSandbox(t, func(c *Config) { c.Hide = []string{conf} })
	dir := jobDir(t, t.TempDir(), "job")
	if err := os.WriteFile(filepath.Join(dir, "rl.toml"), []byte("max_steps = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	b, _ := openTestBox(t, sb, dir, nil)
	out := inBox(t, b, `
		cat `+conf+`/agent.env 2>&1
		echo x > `+dir+`/outputs/ok && echo "outputs: written"
		echo x > `+dir+`/home/ok && echo "home: written"
		echo x > /tmp/ok && echo "tmp: written"
		echo x >> `+dir+`/rl.toml 2>/dev/null && echo "config: CHANGED"
		echo x > /usr/evil 2>/dev/null && echo "usr: CHANGED"
		echo x > /etc/evil 2>/dev/null && echo "etc: CHANGED"
	`)
	if strings.Contains(out, "secret-from-config") {
		t.Errorf("the job read the agent's configuration:\n%s", out)
	}
	for _, ok := range []string{"outputs: written", "home: written", "tmp: written"} {
		if !strings.Contains(out, ok) {
			t.Errorf("want %q:\n%s", ok, out)
		}
	}
	if strings.Contains(out, "CHANGED") {
		t.Errorf("the job wrote outside its writable folders:\n%s", out)
	}
	if _, err := os.Stat(filepath.Join(dir, "outputs", "ok")); err != nil {
		t.Errorf("what the job wrote to its outputs is not in its folder: %v", err)
	}
}

func TestSandboxGPUs(t *testing.T) {
	devDir := t.TempDir()
	sb := needSandbox(t, func(c *Config) { c.DevDir = devDir })
	for _, name := range []string{"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6", "nvidia7", "nvidiactl", "nvidia-uvm"} {
		if err := os.WriteFile(filepath.Join(devDir, name), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), []int{2, 5})
	// Even told otherwise by a variable, the job sees its own GPUs only.
	out := inBox(t, b, "ls /dev | grep nvidia | tr '\\n' ' '", "CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7")
	if got, want := strings.Fields(out), []string{"nvidia-uvm", "nvidia2", "nvidia5", "nvidiactl"}; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("device files: got %v, want %v", got, want)
	}
}

func TestSandboxNetwork(t *testing.T) {
	sb := needSandbox(t)
	python := "/usr/bin/python3"
	if _, err := os.Stat(python); err != nil {
		t.Fatal("the network probe needs Debian's python3 (make test installs it)")
	}
	// A port of the agent's (or of the node's Redis, or of the API in hostedtrain dev).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Write([]byte("agent secrets\n"))
			c.Close()
		}
	}()
	port := ln.Addr().(*net.TCPAddr).Port
	b, notes := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	probe := fmt.Sprintf(`
import os, socket
def direct(host, port):
    try:
        s = socket.create_connection((host, port), timeout=3)
        return "CONNECTED " + s.recv(100).decode()
    except OSError as e:
        return "refused: %%s" %% e
def via_proxy(target):
    s = socket.create_connection(("127.0.0.1", %d), timeout=5)
    s.sendall(("CONNECT %%s HTTP/1.1\r\nHost: %%s\r\n\r\n" %% (target, target)).encode())
    return s.recv(200).decode().splitlines()[0]
print("direct agent port:", direct("127.0.0.1", %d))
print("direct metadata:", direct("169.254.169.254", 80))
print("proxy agent port:", via_proxy("127.0.0.1:%d"))
print("proxy metadata:", via_proxy("169.254.169.254:80"))
print("proxy private:", via_proxy("10.0.0.1:443"))
print("proxy var:", os.environ.get("HTTPS_PROXY"))
`, sb.cfg.ProxyPort, port, port)
	out := inBox(t, b, python+" -c '"+probe+"'")
	if strings.Contains(out, "CONNECTED") || strings.Contains(out, "agent secrets") {
		t.Errorf("the job reached the node:\n%s", out)
	}
	for _, line := range []string{"proxy agent port: HTTP/1.1 403", "proxy metadata: HTTP/1.1 403", "proxy private: HTTP/1.1 403",
		"proxy var: http://127.0.0.1:" + strconv.Itoa(sb.cfg.ProxyPort)} {
		if !strings.Contains(out, line) {
			t.Errorf("want %q:\n%s", line, out)
		}
	}
	if !strings.Contains(strings.Join(*notes, "\n"), "egress to 169.254.169.254:80 refused") {
		t.Errorf("the refusal is not in the job's notes: %q", *notes)
	}
}

func TestSandboxGracefulStop(t *testing.T) {
	sb := needSandbox(t)
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	log := filepath.Join(t.TempDir(), "out.log")
	marker := filepath.Join(b.dir, "outputs", "checkpoint-finished")
	p := startProcess(t, b, []string{"/bin/sh", "-c", `trap 'echo done > ` + marker + `; exit 0' TERM; echo ready; while :; do sleep 0.1; done`}, nil, log)
	testwait.Until(t, 10*time.Second, "the pipeline runs", func() bool {
		out, _ := os.ReadFile(log)
		return strings.Contains(string(out), "ready")
	})
	p.terminate(20 * time.Second)
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the pipeline did not get its SIGTERM in the sandbox before the kill: %v", err)
	}
}

// One job cannot exhaust the node: its processes, its /tmp and /dev/shm (both in the node's
// memory) are bounded, and the node's cgroups are not shown (red team, issue 14).
func TestSandboxLimits(t *testing.T) {
	sb := needSandbox(t, func(c *Config) { c.MaxProcs, c.TmpSize, c.ShmSize = 40, 8<<20, 8<<20 })
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	out := inBox(t, b, `
		grep "Max processes" /proc/self/limits | tr -s ' ' 
		grep "Max open files" /proc/self/limits | tr -s ' ' 
		dd if=/dev/zero of=/tmp/big bs=1M count=16 2>/dev/null && echo "tmp: 16 MiB WRITTEN"
		dd if=/dev/zero of=/dev/shm/ok bs=1M count=1 2>/dev/null && echo "shm: 1 MiB written"
		dd if=/dev/zero of=/dev/shm/big bs=1M count=16 2>/dev/null && echo "shm: 16 MiB WRITTEN"
		echo "cgroups $(ls /sys/fs/cgroup | wc -l)"
		for i in $(seq 1 100); do sleep 5 & done
	`)
	files := fmt.Sprintf("Max open files %d %d", sb.cfg.MaxFiles, sb.cfg.MaxFiles)
	for _, want := range []string{"Max processes 40 40", files, "shm: 1 MiB written", "cgroups 0", "Cannot fork"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "WRITTEN") {
		t.Errorf("a tmpfs took more than its size:\n%s", out)
	}
}

// The seccomp filter: no user namespace of the job's own (where it would hold every
// capability), no kernel keyring (shared with the next job of its slot's user id), no io_uring
// (issue 29); threads and processes as usual (red team, issue 14).
func TestSandboxSeccomp(t *testing.T) {
	sb := needSandbox(t)
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	out := inBox(t, b, `
		unshare -Ur true 2>&1 && echo "userns: CREATED"
		/usr/bin/python3 -c '
import ctypes, os, threading
libc = ctypes.CDLL(None, use_errno=True)
nr = {"x86_64": 248, "aarch64": 217}[os.uname().machine]  # add_key
r = libc.syscall(nr, b"user", b"left-behind", b"tenant-data", 11, -4)
print("add_key", r, os.strerror(ctypes.get_errno()))
params = ctypes.create_string_buffer(120)
r = libc.syscall(425, 8, params)  # io_uring_setup, the same number on both
print("io_uring_setup", r, os.strerror(ctypes.get_errno()))
t = threading.Thread(target=lambda: None); t.start(); t.join()
pid = os.fork()
if pid == 0: os._exit(0)
os.waitpid(pid, 0)
print("threads and fork: ok")
'
	`)
	if strings.Contains(out, "CREATED") {
		t.Errorf("the job made a user namespace:\n%s", out)
	}
	if !strings.Contains(out, "add_key -1 Operation not permitted") {
		t.Errorf("the kernel keyring is open to the job:\n%s", out)
	}
	if !strings.Contains(out, "io_uring_setup -1 Function not implemented") {
		t.Errorf("io_uring is open to the job:\n%s", out)
	}
	if !strings.Contains(out, "threads and fork: ok") {
		t.Errorf("the filter stopped ordinary work:\n%s", out)
	}
}

// What the job reads of the node through /proc and /sys (red team, issue 29): PID 1 of its
// namespace (bubblewrap) shows no option of the sandbox's — no path of the node it binds — and
// /sys shows the job's network interfaces only, not the node's, while the node's devices stay
// there for CUDA and NVML to read.
func TestSandboxHidesTheNodesInterfacesAndPaths(t *testing.T) {
	sb := needSandbox(t)
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	out := inBox(t, b, `
		echo "cmdline: $(tr '\0' ' ' < /proc/1/cmdline)"
		echo "net: $(ls /sys/class/net | tr '\n' ' ')"
		echo "virtual: $(ls /sys/devices/virtual/net 2>/dev/null | tr '\n' ' ')"
		echo "devices: $(ls /sys/bus/pci/devices 2>/dev/null | wc -l)"
	`)
	host, _ := os.ReadDir("/sys/class/net")
	hostPCI, _ := os.ReadDir("/sys/bus/pci/devices")
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "cmdline: "):
			for _, leak := range []string{"--bind", "--ro-bind", "--seccomp", "--tmpfs", "--dev", b.sb.cfg.Hide[0], b.dir + " "} {
				if strings.Contains(line, leak) {
					t.Errorf("PID 1's command line shows %q: %s", leak, line)
				}
			}
		case strings.HasPrefix(line, "net: "), strings.HasPrefix(line, "virtual: "):
			_, names, _ := strings.Cut(line, ": ")
			if strings.TrimSpace(names) != "lo" {
				t.Errorf("the job sees these network interfaces: %q (the node has %d)", names, len(host))
			}
		case strings.HasPrefix(line, "devices: "):
			if n, _ := strconv.Atoi(strings.TrimPrefix(line, "devices: ")); n != len(hostPCI) {
				t.Errorf("the job sees %d PCI devices, the node has %d", n, len(hostPCI))
			}
		}
	}
	if !strings.Contains(out, "bwrap --args 3 -- ") {
		t.Fatalf("PID 1 is not bubblewrap, or shows its options:\n%s", out)
	}
}
