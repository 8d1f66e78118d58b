package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// process is a pipeline command running in its own process group, so that a stop reaches
// every process it started (vLLM, trainer, orchestrator, environment workers).
type process struct {
	cmd  *exec.Cmd
	done chan struct{}
	err  error // set before done closes

	termOnce sync.Once
}

// startProcess runs argv in dir with env added to the agent's environment; stdout and stderr
// go to logPath.
func startProcess(argv []string, dir string, env []string, logPath string) (*process, error) {
	if len(argv) == 0 {
		return nil, errors.New("empty command")
	}
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own group, so SIGTERM reaches its children; SIGKILL if the agent itself dies.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", argv[0], err)
	}
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		logf.Close()
		// Whatever the leader left behind in its group goes with it.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		close(p.done)
	}()
	return p, nil
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
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGTERM)
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
func runCommand(ctx context.Context, argv []string, dir string, env []string, logPath string) error {
	p, err := startProcess(argv, dir, env, logPath)
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
