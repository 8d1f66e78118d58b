package lifecycle

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"
)

// Parts stop in the reverse of the order they started, each after the ones started after it
// have returned; one that does not stop by the deadline is left, and the rest still stop.
func TestAGroupStopsInReverseWithinItsDeadline(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var order []string
	note := func(s string) { mu.Lock(); order = append(order, s); mu.Unlock() }
	var g Group
	ctx := context.Background()
	stuck := make(chan struct{})
	defer close(stuck)
	g.Go(ctx, "stuck", Func(func(ctx context.Context) error { <-stuck; return nil }))
	g.OnStop("client", func(context.Context) { note("client") })
	for _, name := range []string{"reaper", "dispatcher"} {
		g.Go(ctx, name, Func(func(ctx context.Context) error {
			<-ctx.Done()
			note(name)
			return nil
		}))
	}
	start := time.Now()
	g.Stop(time.Now().Add(200 * time.Millisecond))
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Stop took %v past its deadline", took)
	}
	mu.Lock()
	defer mu.Unlock()
	// The rest stopped in reverse; the stuck part, first started, was left at the deadline.
	if want := []string{"dispatcher", "reaper", "client"}; !slices.Equal(order, want) {
		t.Errorf("stopped %v, want %v", order, want)
	}
}
