package queue

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// notifier delivers wake-ups to the claims waiting in this process. Each process has its own
// channel (wake:<process id>); a waiting claim is filed in Redis as a waiter that names the
// channel and its own id (see claim.lua's wait_for_work), and a job that it could take
// publishes that id on that channel. So a submit wakes one claim that fits it, not every claim
// in every process. It subscribes on first use, so a process that never waits never subscribes.
type notifier struct {
	rdb     redis.UniversalClient
	channel string

	mu      sync.Mutex
	next    uint64
	waiters map[string]*waiter
	sub     *redis.PubSub
	closed  bool
}

// waiter is one waiting claim's end of the notifier: ch is closed when a job it could take
// wakes it, and replaced for the next wait.
type waiter struct {
	id string
	ch chan struct{}
}

func newNotifier(rdb redis.UniversalClient, channel string) *notifier {
	return &notifier{rdb: rdb, channel: channel, waiters: map[string]*waiter{}}
}

// add makes a waiter; remove it when the claim ends.
func (n *notifier) add() *waiter {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.next++
	w := &waiter{id: strconv.FormatUint(n.next, 36), ch: make(chan struct{})}
	n.waiters[w.id] = w
	return w
}

func (n *notifier) remove(w *waiter) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.waiters, w.id)
}

// wait returns the channel that is closed when w is next woken, subscribing first if this
// process has not yet. ok is false if the subscription failed: the caller's periodic re-check
// still finds the work, and the next wait tries again.
func (n *notifier) wait(ctx context.Context, w *waiter) (ch <-chan struct{}, ok bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.sub == nil && !n.closed {
		sub := n.rdb.Subscribe(context.WithoutCancel(ctx), n.channel)
		// Subscribe does not wait for Redis to confirm; until it has, a publish would be
		// missed. Wait for the confirmation once.
		if _, err := sub.Receive(ctx); err != nil {
			_ = sub.Close()
			return w.ch, false
		}
		n.sub = sub
		go n.loop(sub.Channel())
	}
	return w.ch, n.sub != nil
}

func (n *notifier) loop(msgs <-chan *redis.Message) {
	for m := range msgs {
		n.wake(m.Payload)
	}
}

// wake wakes the waiter id. One this process no longer has (its claim ended as the wake-up
// was sent) passes the wake-up on to every claim waiting here, so the job it was for is not
// left waiting for a re-check.
func (n *notifier) wake(id string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if w, ok := n.waiters[id]; ok {
		close(w.ch)
		w.ch = make(chan struct{})
		return
	}
	for _, w := range n.waiters {
		close(w.ch)
		w.ch = make(chan struct{})
	}
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

// IdleCapacity says, for each GPU count in counts, how many claims are waiting right now with
// at least that many GPUs of model free: how many nodes could start such a job at once. (A
// claim that has not waited again since its last job is not counted.)
func (c Fleet) IdleCapacity(ctx context.Context, model string, counts []int) ([]int, error) {
	cmds := make([]*redis.IntCmd, len(counts))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, n := range counts {
			cmds[i] = p.ZCount(ctx, c.keys.of("waitkey", model), strconv.Itoa(n), "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: idle capacity: %w", err)
	}
	out := make([]int, len(counts))
	for i, cmd := range cmds {
		out[i] = int(cmd.Val())
	}
	return out, nil
}
