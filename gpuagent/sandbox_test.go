package gpuagent

import (
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// These tests do what a hostile tenant's code did (issue 14) inside the real bubblewrap, and
// check that it fails now. They need root, as the agent does on a node and in CI.

func needSandbox(t *testing.T) *Sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("the sandbox tests need root, as the agent does on a node: run make test as root (CI does)")
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		t.Fatal("bwrap is missing: make test installs Debian's bubblewrap")
	}
	sb := &Sandbox{UIDBase: 62000 + os.Getpid()%1000*8, ProxyPort: 3128}
	if err := sb.check(); err != nil {
		t.Fatal(err)
	}
	if err := sb.start(t.TempDir(), 4, 2); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sb.stop)
	return sb
}

// jobDir makes a job folder under a work folder, as the agent does.
func jobDir(t *testing.T, work, id string) string {
	t.Helper()
	dir := filepath.Join(work, "jobs", id)
	for _, d := range append([]string{""}, writableDirs...) {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func openTestBox(t *testing.T, sb *Sandbox, dir string, devs []Device) (*box, *[]string) {
	t.Helper()
	var notes []string
	b, err := sb.openBox(dir, devs, func(s string) { notes = append(notes, s) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	return b, &notes
}

// inBox runs a shell script in the box to its end and returns what it printed.
func inBox(t *testing.T, b *box, script string, env ...string) string {
	t.Helper()
	log := filepath.Join(t.TempDir(), "out.log")
	p, err := startProcess(b, []string{"/bin/sh", "-c", script}, b.dir, env, log)
	if err != nil {
		t.Fatal(err)
	}
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
	op, err := startProcess(other, []string{"/bin/sh", "-c", "echo up; exec sleep 60"}, other.dir, []string{"OTHER_SECRET=other-jobs-secret"}, otherLog)
	if err != nil {
		t.Fatal(err)
	}
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
	sb := needSandbox(t)
	// The agent's configuration, as infra/gpu-node keeps it under /etc.
	conf, err := os.MkdirTemp("/etc", "hostedtrain-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(conf) })
	if err := os.WriteFile(filepath.Join(conf, "agent.env"), []byte("HOSTEDTRAIN_AGENT_TOKEN=secret-from-config\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	sb.Hide = []string{conf}
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
	sb := needSandbox(t)
	sb.DevDir = t.TempDir()
	for _, name := range []string{"nvidia0", "nvidia1", "nvidia2", "nvidia3", "nvidia4", "nvidia5", "nvidia6", "nvidia7", "nvidiactl", "nvidia-uvm"} {
		if err := os.WriteFile(filepath.Join(sb.DevDir, name), nil, 0o666); err != nil {
			t.Fatal(err)
		}
	}
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), []Device{{Index: 2}, {Index: 5}})
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
`, sb.ProxyPort, port, port)
	out := inBox(t, b, python+" -c '"+probe+"'")
	if strings.Contains(out, "CONNECTED") || strings.Contains(out, "agent secrets") {
		t.Errorf("the job reached the node:\n%s", out)
	}
	for _, line := range []string{"proxy agent port: HTTP/1.1 403", "proxy metadata: HTTP/1.1 403", "proxy private: HTTP/1.1 403",
		"proxy var: http://127.0.0.1:" + strconv.Itoa(sb.ProxyPort)} {
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
	p, err := startProcess(b, []string{"/bin/sh", "-c", `trap 'echo done > ` + marker + `; exit 0' TERM; echo ready; while :; do sleep 0.1; done`}, b.dir, nil, log)
	if err != nil {
		t.Fatal(err)
	}
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
	sb := needSandbox(t)
	sb.MaxProcs, sb.TmpSize, sb.ShmSize = 40, 8<<20, 8<<20
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
	files := fmt.Sprintf("Max open files %d %d", sb.MaxFiles, sb.MaxFiles)
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

// The agent's calls to a job's servers stay in the job's network (red team, issue 29): a job's
// inference server that answers /health with a redirect to the node's loopback, and names that
// resolve there, reach nothing on the node — the redirect is not followed, and only a literal
// loopback address is dialled, from inside the job's network namespace.
func TestTheAgentsCallsToAJobStayInItsNetwork(t *testing.T) {
	sb := needSandbox(t)
	// A canary on the node's loopback, IPv4 and IPv6, at one port.
	var canary atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	canaryPort := ln.Addr().(*net.TCPAddr).Port
	listeners := []net.Listener{ln}
	if ln6, err := net.Listen("tcp", fmt.Sprintf("[::1]:%d", canaryPort)); err == nil {
		defer ln6.Close()
		listeners = append(listeners, ln6)
	}
	for _, l := range listeners {
		go func() {
			for {
				c, err := l.Accept()
				if err != nil {
					return
				}
				canary.Add(1)
				c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
				c.Close()
			}
		}()
	}
	b, _ := openTestBox(t, sb, jobDir(t, t.TempDir(), "job"), nil)
	// The job's "inference server": every answer is a redirect to the node's canary.
	jobPort := freePort(t)
	server := fmt.Sprintf(`
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(302)
        self.send_header("Location", "http://localhost:%[1]d/pwned" if self.path == "/health" else "http://[::1]:%[1]d/pwned")
        self.end_headers()
    def log_message(self, *a): pass
http.server.HTTPServer(("127.0.0.1", %[2]d), H).serve_forever()
`, canaryPort, jobPort)
	log := filepath.Join(t.TempDir(), "server.log")
	p, err := startProcess(b, []string{"/usr/bin/python3", "-c", server}, b.dir, nil, log)
	if err != nil {
		t.Fatal(err)
	}
	defer p.terminate(time.Second)
	hc := jobClient(b, 2*time.Second)
	url := fmt.Sprintf("http://127.0.0.1:%d/", jobPort)
	testwait.Until(t, 20*time.Second, "the job's server listens", func() bool {
		return b.ns.do(func() error {
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", jobPort))
			if err == nil {
				c.Close()
			}
			return err
		}) == nil
	})
	for _, u := range []string{url + "health", url + "other", fmt.Sprintf("http://localhost:%d/health", canaryPort),
		fmt.Sprintf("http://[::1]:%d/health", canaryPort)} {
		resp, err := hc.Get(u)
		switch {
		case err == nil:
			resp.Body.Close()
			if resp.StatusCode != http.StatusFound {
				t.Errorf("%s: %d, want the redirect itself, not followed", u, resp.StatusCode)
			}
		case strings.HasPrefix(u, url):
			t.Errorf("%s: %v, want the job's own answer", u, err)
		}
	}
	if n := canary.Load(); n != 0 {
		t.Fatalf("the node's loopback was reached %d times through the agent", n)
	}
}

// freePort is a port free on the node's loopback now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
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
			for _, leak := range []string{"--bind", "--ro-bind", "--seccomp", "--tmpfs", "--dev", b.sb.Hide[0], b.dir + " "} {
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
