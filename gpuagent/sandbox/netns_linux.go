package sandbox

import (
	"fmt"
	"os"
	"runtime"

	"golang.org/x/sys/unix"
)

// netns is a network namespace the agent made for one job: a loopback interface and nothing
// else. The job's processes start inside it; the agent reaches into it only to listen for the
// job's egress proxy and to look at its inference server.
type netns struct {
	f *os.File // /proc/thread-self/ns/net of the thread that made it; keeps it alive
}

// newNetns makes a network namespace with its loopback up. It needs CAP_SYS_ADMIN.
func newNetns() (*netns, error) {
	var ns *netns
	err := onLockedThread(func() error {
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("new network namespace: %w", err)
		}
		f, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			return err
		}
		if err := loopbackUp(); err != nil {
			f.Close()
			return err
		}
		ns = &netns{f: f}
		return nil
	})
	return ns, err
}

// loopbackUp brings up lo in the calling thread's network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("read lo's flags: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("bring lo up: %w", err)
	}
	return nil
}

// do runs f on a thread inside the namespace: sockets f makes belong to it, and processes f
// starts begin in it.
func (n *netns) do(f func() error) error {
	return onLockedThread(func() error {
		if err := unix.Setns(int(n.f.Fd()), unix.CLONE_NEWNET); err != nil {
			return fmt.Errorf("enter the job's network namespace: %w", err)
		}
		return f()
	})
}

func (n *netns) close() { n.f.Close() }

// onLockedThread runs f on an OS thread of its own, then puts the thread back in the network
// namespace it had and lets it go. The thread must not die: a child started with Pdeathsig
// (redis-server in hostedtrain dev, every pipeline) is signalled when the *thread* that
// forked it exits, and any goroutine may have forked from this one (golang/go#27505). Only
// if the thread cannot be put back is it left to end with the goroutine.
func onLockedThread(f func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		orig, err := os.Open("/proc/thread-self/ns/net")
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer orig.Close()
		err = f()
		if unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
