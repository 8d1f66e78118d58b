// Package mountns runs the process in a mount namespace of its own, so that what it mounts (a
// sandboxed job's file system, its Python overlay: gpuagent) is seen by it and its children
// only, and goes when they all have ended, however they end: a killed agent leaves no mount
// behind on the node. Go cannot move a running process to a new mount namespace (its threads
// share one), so the process runs itself again in one.
package mountns

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"syscall"
)

// envMark says the process already runs in its own mount namespace: it holds the pid of the
// process that made it, its parent. A process it starts in turn (which inherits the variable)
// has another parent, and makes a namespace of its own.
const envMark = "HOSTEDTRAIN_MOUNT_NS"

// Inside reports whether the process runs in a mount namespace Private made for it.
func Inside() bool { return os.Getenv(envMark) == strconv.Itoa(os.Getppid()) }

// Private makes the rest of the program run in a mount namespace of its own, with every mount
// private (nothing it mounts propagates to the node's namespace). Called first thing in main:
// as root, the first call starts this program again, with the same arguments, in a new mount
// namespace, relays signals to it, and exits with its status (it never returns); in the
// program started again, and for a user who cannot make one (not root), it returns at once.
func Private() {
	if Inside() || os.Geteuid() != 0 {
		return
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountns:", err)
		os.Exit(1)
	}
	cmd := exec.Command(exe, os.Args[1:]...)
	cmd.Args[0] = os.Args[0]
	cmd.Env = append(os.Environ(), envMark+"="+strconv.Itoa(os.Getpid()))
	cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
	// Go makes every mount of the new namespace private (MS_REC|MS_PRIVATE on /) when it
	// unshares CLONE_NEWNS; the program dies with this process.
	cmd.SysProcAttr = &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Pdeathsig: syscall.SIGKILL}
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2)
	if err := cmd.Start(); err != nil {
		fmt.Fprintln(os.Stderr, "mountns: run in a mount namespace of its own:", err)
		os.Exit(1)
	}
	go func() {
		for s := range sigs {
			_ = cmd.Process.Signal(s)
		}
	}()
	err = cmd.Wait()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
			signal.Reset()
			_ = syscall.Kill(os.Getpid(), ws.Signal()) // die as it did
		}
		os.Exit(ee.ExitCode())
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "mountns:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// PID is the process id of the program as it was started: the one that relays signals, where
// Private started it again (what a user or a supervisor knows it by and signals).
func PID() int {
	if Inside() {
		return os.Getppid()
	}
	return os.Getpid()
}
