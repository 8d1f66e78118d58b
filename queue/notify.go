package queue

import (
	"context"
	"sync"

	"github.com/redis/go-redis/v9"
)

// notifier turns the wake channel's messages into a broadcast to the claims waiting in this
// process. It subscribes on first use, so a process that never waits never subscribes.
type notifier struct {
	rdb     redis.UniversalClient
	channel string

	mu     sync.Mutex
	ch     chan struct{} // closed and replaced on every wake-up
	sub    *redis.PubSub
	closed bool
}

func newNotifier(rdb redis.UniversalClient, channel string) *notifier {
	return &notifier{rdb: rdb, channel: channel, ch: make(chan struct{})}
}

// wait returns a channel that is closed at the next wake-up.
func (n *notifier) wait(ctx context.Context) <-chan struct{} {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub == nil && !n.closed {
		sub := n.rdb.Subscribe(context.WithoutCancel(ctx), n.channel)
		// Subscribe does not wait for Redis to confirm; until it has, a publish would be
		// missed. Wait for the confirmation once. On failure the caller's periodic re-check
		// still finds the work, and the next wait tries again.
		if _, err := sub.Receive(ctx); err != nil {
			_ = sub.Close()
			return n.ch
		}
		n.sub = sub
		go n.loop(sub.Channel())
	}
	return n.ch
}

func (n *notifier) loop(msgs <-chan *redis.Message) {
	for range msgs {
		n.broadcast()
	}
}

func (n *notifier) broadcast() {
	n.mu.Lock()
	close(n.ch)
	n.ch = make(chan struct{})
	n.mu.Unlock()
}

func (n *notifier) close() {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.closed = true
	if n.sub != nil {
		_ = n.sub.Close()
		n.sub = nil
	}
}
