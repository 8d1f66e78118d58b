// Package redistest starts real redis-server processes for tests: each on a free port on
// 127.0.0.1, with its data in the test's temporary directory, stopped when the test ends.
// There is no Redis mock in this project.
package redistest

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redisproc"
)

// Start runs a private redis-server for t. A missing redis-server fails the test (never skips
// it): `make test` installs one.
func Start(t testing.TB, opts ...func(*redisproc.Options)) *redisproc.Server {
	t.Helper()
	o := redisproc.Options{Dir: t.TempDir()}
	for _, f := range opts {
		f(&o)
	}
	s, err := redisproc.Start(context.Background(), o)
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(s.Stop)
	return s
}

// AppendOnly turns on the AOF (appendfsync everysec), as production runs.
func AppendOnly(o *redisproc.Options) { o.AppendOnly = true }

// Client starts a private redis-server and returns a client of it, closed at the end of t.
func Client(t testing.TB) *redis.Client {
	t.Helper()
	s := Start(t)
	c := redis.NewClient(&redis.Options{Addr: s.Addr})
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// Restartable is a private redis-server (AOF on) that a test stops and starts again on the same
// port and data, with a client that fails fast while it is down.
type Restartable struct {
	Client  *redis.Client
	opts    redisproc.Options
	srv     *redisproc.Server
	stopped bool
}

// StartRestartable starts one for the rest of t.
func StartRestartable(t testing.TB) *Restartable {
	t.Helper()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	r := &Restartable{opts: redisproc.Options{Dir: t.TempDir(), Port: port, AppendOnly: true}}
	r.Start(t)
	r.Client = redis.NewClient(&redis.Options{Addr: r.srv.Addr, MaxRetries: 1, DialTimeout: 500 * time.Millisecond})
	t.Cleanup(func() {
		_ = r.Client.Close()
		r.srv.Stop()
	})
	return r
}

// Stop stops redis-server as a clean shutdown does (SIGTERM: the AOF is flushed).
func (r *Restartable) Stop() { r.srv.Stop(); r.stopped = true }

// Restore starts it again if it is stopped: for a cleanup that must find Redis up (an agent's
// final report) whatever point the test failed at.
func (r *Restartable) Restore(t testing.TB) {
	if r.stopped {
		r.Start(t)
	}
}

// Start starts it (again) from its data.
func (r *Restartable) Start(t testing.TB) {
	t.Helper()
	srv, err := redisproc.Start(context.Background(), r.opts)
	if err != nil {
		t.Fatal(err)
	}
	r.srv, r.stopped = srv, false
}
