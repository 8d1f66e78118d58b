package redisproc_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

func supervise(t *testing.T, o redisproc.SuperviseOptions) *redisproc.Supervisor {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		t.Fatal(redisproc.ErrNoBinary) // make test installs it: a skipped test proves nothing
	}
	s, err := redisproc.Supervise(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

func readPID(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		t.Fatalf("pid file %q: %v", b, err)
	}
	return pid
}

func processGone(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return true
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) == 0 || fields[0] == "Z"
}

func TestSupervisorRestartsAKilledServerWithItsData(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "redis.pid")
	s := supervise(t, redisproc.SuperviseOptions{Options: redisproc.Options{Dir: filepath.Join(dir, "redis"), AppendOnly: true}, PIDFile: pidFile})
	rdb := redis.NewClient(&redis.Options{Addr: s.Addr})
	defer rdb.Close()
	ctx := context.Background()
	if err := rdb.Set(ctx, "kept", "yes", 0).Err(); err != nil {
		t.Fatal(err)
	}
	first := readPID(t, pidFile)
	if first != s.PID() {
		t.Fatalf("pid file says %d, the supervisor %d", first, s.PID())
	}
	if err := syscall.Kill(first, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 20*time.Second, "redis-server to be restarted and answer", func() bool {
		return s.Restarts() > 0 && rdb.Ping(ctx).Err() == nil
	})
	if got := s.Restarts(); got != 1 {
		t.Errorf("got %d restarts, want 1", got)
	}
	second := readPID(t, pidFile)
	if second == first || second != s.PID() || processGone(second) {
		t.Errorf("after the restart the pid file says %d (first %d, supervisor %d)", second, first, s.PID())
	}
	if got, err := rdb.Get(ctx, "kept").Result(); got != "yes" {
		t.Errorf("after the restart kept = %q, %v; want the AOF's \"yes\"", got, err)
	}
	if s.Addr != rdb.Options().Addr {
		t.Errorf("the address moved: %s", s.Addr)
	}
}

func TestSupervisorStopsAHungServerWithinItsStopTimeout(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	pidFile := filepath.Join(dir, "redis.pid")
	s := supervise(t, redisproc.SuperviseOptions{
		Options: redisproc.Options{Dir: filepath.Join(dir, "redis"), StopTimeout: 500 * time.Millisecond},
		PIDFile: pidFile,
	})
	pid := s.PID()
	// A stopped process takes no SIGTERM: only the kill after StopTimeout ends it.
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(20 * time.Second):
		t.Fatal("Stop did not return with the server hung")
	}
	if !processGone(pid) {
		t.Errorf("redis-server %d still runs after Stop", pid)
	}
	if _, err := os.Stat(pidFile); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("pid file after Stop: %v", err)
	}
	s.Stop() // twice is fine
}

func TestSupervisorStopsWhileRestarting(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := supervise(t, redisproc.SuperviseOptions{
		Options:    redisproc.Options{Dir: filepath.Join(dir, "redis")},
		MinBackoff: time.Hour, // the restart waits: Stop must not
	})
	pid := s.PID()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 10*time.Second, "redis-server to die", func() bool { return processGone(pid) })
	stopped := make(chan struct{})
	go func() { s.Stop(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(10 * time.Second):
		t.Fatal("Stop did not return while a restart waited")
	}
	if got := s.Restarts(); got != 0 {
		t.Errorf("got %d restarts, want 0", got)
	}
}
