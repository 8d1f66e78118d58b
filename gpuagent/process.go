package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
)

// process is a pipeline command running in its own process group, so that a stop reaches
// every process it started (vLLM, trainer, orchestrator, environment workers).
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes
	// sandboxed: the group's leader is bubblewrap, which a SIGTERM would end at once (and
	// with it the whole sandbox); the others in the group get the SIGTERM.
	sandboxed bool

	termOnce sync.Once
}

// startProcess runs argv in dir with env, in the job's sandbox when box is not nil; stdout
// and stderr go to logPath. env is the job's part of the environment: the process gets it and
// a few fixed variables, never the agent's own (its token, storage keys).
func startProcess(box *sandbox.Box, argv []string, dir string, env []string, logPath string) (*process, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	var cmd *exec.Cmd
	if box != nil {
		if cmd, err = box.Command(argv, env); err != nil {
			logf.Close()
			return nil, err
		}
	} else {
		cmd = exec.Command(argv[0], argv[1:]...)
		cmd.Dir = dir
		cmd.Env = append(slices.Clone(env), unsandboxedEnv(dir)...) // the agent's last: they win
		// Its own group, so SIGTERM reaches its children; SIGKILL if the agent itself dies.
		cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	p := &process{cmd: cmd, done: make(chan struct{}), sandboxed: box != nil}
	ended := func(err error) {
		p.err = err
		logf.Close()
		// Whatever the leader left behind in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(p.done)
	}
	if box != nil {
		// Started from a thread inside the job's network namespace, into its control group;
		// the thread stays until the process ends (Pdeathsig follows the thread).
		err = box.Start(cmd, ended)
	} else {
		started := make(chan error, 1)
		go func() {
			err := cmd.Start()
			started <- err
			if err == nil {
				ended(cmd.Wait())
			}
		}()
		err = <-started
	}
	if err != nil {
		logf.Close()
		return nil, &startError{fmt.Errorf("start %s: %w", argv[0], err)}
	}
	return p, nil
}

// startError is a process of a job's the agent could not start: the node's failure (out of
// descriptors, a broken sandbox), not the job's, which never ran.
type startError struct{ error }

func (e *startError) Unwrap() error { return e.error }

// nodeFailed reports whether err is the agent's own failure to start a job's process.
func nodeFailed(err error) bool {
	var se *startError
	return errors.As(err, &se)
}

// unsandboxedEnv is what a process gets of the agent's environment when the sandbox is off:
// where programs are and the locale, nothing else.
func unsandboxedEnv(dir string) []string {
	env := []string{"HOME=" + filepath.Join(dir, "home"), "TMPDIR=" + os.TempDir()}
	for _, k := range []string{"PATH", "LANG", "LC_ALL"} {
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// exitCode is the process's exit status once done; -1 if it was killed by a signal.
// describeExit says how the process ended: "status N", or the signal that killed it.
func (p *process) describeExit() string {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			return "signal " + ws.Signal().String()
		}
	}
	return fmt.Sprintf("status %d", p.exitCode())
}

func (p *process) exitCode() int {
	var ee *exec.ExitError
	if errors.As(p.err, &ee) {
		return ee.ExitCode()
	}
	if p.err != nil {
		return -1
	}
	return 0
}

// terminate sends SIGTERM to the group, waits up to grace for it to exit (a checkpoint in
// flight can finish), then SIGKILLs it. It returns once the process is gone.
func (p *process) terminate(grace time.Duration) {
	p.termOnce.Do(func() {
		if p.sandboxed {
			sandbox.Signal(p.cmd, syscall.SIGTERM)
		} else {
			_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
		}
	})
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

// runCommand runs a short preparation command (an environment install) to completion.
func runCommand(ctx context.Context, box *sandbox.Box, argv []string, dir string, env []string, logPath string) error {
	p, err := startProcess(box, argv, dir, env, logPath)
	if err != nil {
		return err
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.terminate(5 * time.Second)
		return ctx.Err()
	}
	if code := p.exitCode(); code != 0 {
		return fmt.Errorf("%s exited with status %d", strings.Join(argv, " "), code)
	}
	return nil
}

// retry runs f until it succeeds, ctx ends, or five tries have failed, backing off between.
func retry(ctx context.Context, f func() error) error {
	backoff := 250 * time.Millisecond
	var err error
	for range 5 {
		if err = f(); err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(backoff):
		}
		backoff *= 2
	}
	return err
}

// until is a context that ends with parent or when any of chans closes.
func until(parent context.Context, chans ...<-chan struct{}) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(parent)
	for _, ch := range chans {
		go func() {
			select {
			case <-ch:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	return ctx, cancel
}
