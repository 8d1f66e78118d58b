package redisproc

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"
)

// SuperviseOptions configure a Supervisor.
type SuperviseOptions struct {
	Options
	// PIDFile, when set, holds the running server's process id, rewritten on every restart and
	// removed by Stop: the way to find the server from outside (and to kill it in a test).
	PIDFile string
	// MinBackoff is the wait before the first restart (default 100 ms); it doubles with each
	// restart that follows soon after the last, up to MaxBackoff (default 5 s).
	MinBackoff, MaxBackoff time.Duration
	// Logger hears of every exit and restart (default: discarded).
	Logger *slog.Logger
}

// Supervisor keeps one redis-server running: when the server exits without being asked to
// (killed, crashed, out of memory), the supervisor starts it again on the same port and data
// directory, so clients reconnect to the same address and find what the AOF kept.
type Supervisor struct {
	// Addr, Port and Dir are the server's, the same across restarts.
	Addr string
	Port int
	Dir  string

	o        SuperviseOptions
	ctx      context.Context // ends when Stop is called
	cancel   context.CancelFunc
	done     chan struct{} // closed when the supervising loop has stopped its server
	stopOnce sync.Once

	mu       sync.Mutex
	cur      *Server
	restarts int
}

// Supervise starts redis-server as Start does, and keeps it running until Stop. ctx bounds
// only the first start; the server outlives it, so that its owner can stop the other parts
// first and Redis last.
func Supervise(ctx context.Context, o SuperviseOptions) (*Supervisor, error) {
	if o.MinBackoff <= 0 {
		o.MinBackoff = 100 * time.Millisecond
	}
	if o.MaxBackoff < o.MinBackoff {
		o.MaxBackoff = max(5*time.Second, o.MinBackoff)
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	srv, err := Start(ctx, o.Options)
	if err != nil {
		return nil, err
	}
	// Restarts take the port the first start found.
	o.Port = srv.Port
	s := &Supervisor{Addr: srv.Addr, Port: srv.Port, Dir: srv.Dir, o: o, cur: srv, done: make(chan struct{})}
	s.ctx, s.cancel = context.WithCancel(context.Background())
	if err := s.writePID(srv); err != nil {
		srv.Stop()
		return nil, err
	}
	go s.run(srv)
	return s, nil
}

// PID is the running server's process id (of the last one started, if it is down).
func (s *Supervisor) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur.PID()
}

// Restarts counts the times the server was started again after it exited.
func (s *Supervisor) Restarts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.restarts
}

// Stop ends the supervision and stops the server as Server.Stop does (within StopTimeout,
// whatever state the server is in), even in the middle of a restart. Safe to call more than
// once.
func (s *Supervisor) Stop() {
	s.stopOnce.Do(s.cancel)
	<-s.done
}

// run waits for the server to exit and starts it again, until Stop.
func (s *Supervisor) run(srv *Server) {
	defer close(s.done)
	defer func() {
		s.mu.Lock()
		cur := s.cur
		s.mu.Unlock()
		cur.Stop()
		if s.o.PIDFile != "" {
			_ = os.Remove(s.o.PIDFile)
		}
	}()
	backoff := s.o.MinBackoff
	started := time.Now()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-srv.Done():
		}
		// A server that ran a while before it died starts the backoff over.
		if time.Since(started) > time.Minute {
			backoff = s.o.MinBackoff
		}
		s.o.Logger.Warn("redis-server exited; restarting it", "pid", srv.PID(), "exit", fmt.Sprint(srv.Err()),
			"in", backoff.String(), "log", filepath.Join(s.Dir, "redis.log"))
		for {
			t := time.NewTimer(backoff)
			select {
			case <-s.ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			backoff = min(backoff*2, s.o.MaxBackoff)
			next, err := Start(s.ctx, s.o.Options)
			if err != nil {
				if s.ctx.Err() != nil {
					return
				}
				s.o.Logger.Error("redis-server did not restart; trying again", "err", err, "in", backoff.String())
				continue
			}
			srv, started = next, time.Now()
			break
		}
		// The pid file first: whoever sees the restart counted finds the new pid in it.
		if err := s.writePID(srv); err != nil {
			s.o.Logger.Error("redis-server pid file", "err", err)
		}
		s.mu.Lock()
		s.cur = srv
		s.restarts++
		s.mu.Unlock()
		s.o.Logger.Info("redis-server restarted", "pid", srv.PID(), "addr", srv.Addr)
	}
}

// writePID replaces the pid file whole, so that a reader never sees half a number.
func (s *Supervisor) writePID(srv *Server) error {
	if s.o.PIDFile == "" {
		return nil
	}
	tmp := s.o.PIDFile + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(srv.PID())+"\n"), 0o644); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	if err := os.Rename(tmp, s.o.PIDFile); err != nil {
		return fmt.Errorf("redisproc: %w", err)
	}
	return nil
}
