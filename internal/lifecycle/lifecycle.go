// Package lifecycle runs the background parts of a process — the reaper, the webhook
// dispatcher, GPU agents — with one life cycle: each is a Service that works until its context
// ends and returns once it has stopped, and a Group starts them in order and stops them in the
// reverse order within one deadline.
package lifecycle

import (
	"context"
	"log/slog"
	"time"
)

// Service is a background loop: Run works until ctx ends, then stops (finishing or handing
// back what it holds) and returns.
type Service interface {
	Run(ctx context.Context) error
}

// Func makes a function a Service.
type Func func(ctx context.Context) error

// Run calls f.
func (f Func) Run(ctx context.Context) error { return f(ctx) }

// Group runs services and other stop steps (closing a client, shutting a server down). Stop
// undoes them in the reverse of the order they were added, each within what is left of one
// deadline: a part still stopping when the deadline comes is left behind and the next goes on,
// so that one part stuck (on a hung Redis, say) cannot hold up the exit.
type Group struct {
	Logger *slog.Logger
	steps  []step
}

type step struct {
	name string
	stop func(ctx context.Context)
}

// Go runs s in the background under ctx until the group stops it. An error it returns is
// logged.
func (g *Group) Go(ctx context.Context, name string, s Service) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := s.Run(ctx); err != nil && ctx.Err() == nil {
			g.logger().Error("stopped with an error", "part", name, "err", err)
		}
	}()
	g.OnStop(name, func(context.Context) { cancel(); <-done })
}

// OnStop adds a step that Stop runs, in reverse order of adding.
func (g *Group) OnStop(name string, stop func(ctx context.Context)) {
	g.steps = append(g.steps, step{name, stop})
}

// Stop stops every part, the last added first, all within deadline.
func (g *Group) Stop(deadline time.Time) {
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	for i := len(g.steps) - 1; i >= 0; i-- {
		st := g.steps[i]
		done := make(chan struct{})
		go func() { defer close(done); st.stop(ctx) }()
		select {
		case <-done:
		case <-ctx.Done():
			g.logger().Warn("did not stop within the drain timeout; leaving it", "part", st.name)
		}
	}
	g.steps = nil
}

func (g *Group) logger() *slog.Logger {
	if g.Logger == nil {
		return slog.New(slog.DiscardHandler)
	}
	return g.Logger
}
