// Package redisproc starts and stops a private redis-server child process: the one that
// `hostedtrain dev` runs and the ones the tests run. The child binds to 127.0.0.1 only, lives
// in its own process group (so a Ctrl-C at the terminal reaches us first and we stop it in
// order), and dies with its parent.
package redisproc

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a server.
type Options struct {
	// Dir holds the data files (AOF, RDB) and redis.log. Required.
	Dir string
	// Port to bind on 127.0.0.1; 0 picks a free one.
	Port int
	// AppendOnly turns on the AOF with appendfsync everysec, as production runs it.
	AppendOnly bool
	// Args are extra redis-server arguments ("--cluster-enabled", "yes", ...).
	Args []string
	// Binary is the redis-server to run; empty looks it up on PATH.
	Binary string
	// StartTimeout bounds the wait for "Ready to accept connections" (default 15 s).
	StartTimeout time.Duration
	// StopTimeout bounds Stop's wait for the server to exit after SIGTERM before it kills the
	// server's process group (default 10 s).
	StopTimeout time.Duration
}

// Server is a running redis-server.
type Server struct {
	Addr string
	Port int
	Dir  string

	cmd         *exec.Cmd
	stopTimeout time.Duration
	done        chan struct{}
	stopOnce    sync.Once
	waitErr     error
}

// ErrNoBinary is returned when redis-server is not installed.
var ErrNoBinary = errors.New("redis-server not found on PATH: run `make test` or `make demo`, which install it with apt-get")

// Start runs redis-server and returns once it accepts connections.
func Start(ctx context.Context, o Options) (*Server, error) {
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = exec.LookPath("redis-server"); err != nil {
			return nil, ErrNoBinary
		}
	}
	if o.Dir == "" {
		return nil, errors.New("redisproc: Options.Dir is required")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	// A free port can be taken by someone else between our probe and redis binding it;
	// try again with another.
	tries := 1
	if o.Port == 0 {
		tries = 5
	}
	var lastErr error
	for range tries {
		port := o.Port
		if port == 0 {
			p, err := FreePort()
			if err != nil {
				return nil, err
			}
			port = p
		}
		s, err := start(ctx, bin, port, o)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, lastErr
}

func start(ctx context.Context, bin string, port int, o Options) (*Server, error) {
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	args := []string{
		"--bind", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"--dir", dir,
		"--logfile", "",
		"--daemonize", "no",
		"--save", "",
		"--protected-mode", "yes",
		// Keep the command line as started (it names the data dir), so a leftover server can
		// be traced to the stack that started it.
		"--set-proc-title", "no",
	}
	if o.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	args = append(args, o.Args...)
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGTERM}
	logf, err := os.OpenFile(filepath.Join(dir, "redis.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, fmt.Errorf("redisproc: %w", err)
	}
	pr, pw := io.Pipe()
	cmd.Stdout = pw
	cmd.Stderr = pw
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("redisproc: start %s: %w", bin, err)
	}
	s := &Server{Addr: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Port: port, Dir: dir, cmd: cmd, done: make(chan struct{}),
		stopTimeout: o.StopTimeout}
	if s.stopTimeout <= 0 {
		s.stopTimeout = 10 * time.Second
	}

	ready := make(chan struct{})
	var tail []string
	var tailMu sync.Mutex
	go func() {
		sc := bufio.NewScanner(pr)
		signalled := false
		for sc.Scan() {
			line := sc.Text()
			fmt.Fprintln(logf, line)
			tailMu.Lock()
			tail = append(tail, line)
			if len(tail) > 20 {
				tail = tail[1:]
			}
			tailMu.Unlock()
			if !signalled && strings.Contains(line, "Ready to accept connections") {
				signalled = true
				close(ready)
			}
		}
		io.Copy(io.Discard, pr)
		logf.Close()
	}()
	go func() {
		s.waitErr = cmd.Wait()
		pw.Close()
		close(s.done)
	}()

	timeout := o.StartTimeout
	if timeout == 0 {
		timeout = 15 * time.Second
	}
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-ready:
		return s, nil
	case <-s.done:
	case <-t.C:
		s.Stop()
	case <-ctx.Done():
		s.Stop()
		return nil, ctx.Err()
	}
	tailMu.Lock()
	defer tailMu.Unlock()
	return nil, fmt.Errorf("redisproc: redis-server on port %d did not start: %s", port, strings.Join(tail, " | "))
}

// PID is the server's process id.
func (s *Server) PID() int { return s.cmd.Process.Pid }

// Done is closed when the process has exited.
func (s *Server) Done() <-chan struct{} { return s.done }

// Err is how the process ended (its exit status); call it only after Done is closed.
func (s *Server) Err() error { return s.waitErr }

// Stop asks the server to shut down (SIGTERM: it finishes writing the AOF) and waits for it,
// killing its process group after Options.StopTimeout (a server that hangs, or was stopped
// with SIGSTOP, ignores SIGTERM). Safe to call more than once.
func (s *Server) Stop() {
	s.stopOnce.Do(func() {
		_ = s.cmd.Process.Signal(syscall.SIGTERM)
		t := time.NewTimer(s.stopTimeout)
		defer t.Stop()
		select {
		case <-s.done:
		case <-t.C:
			_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
			<-s.done
		}
	})
}

// Kill stops the server at once, as a crash would, without letting it flush.
func (s *Server) Kill() {
	s.stopOnce.Do(func() {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
		<-s.done
	})
}

// FreePort asks the kernel for a free TCP port on 127.0.0.1.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("redisproc: free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
