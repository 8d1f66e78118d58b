package queue

import (
	"context"
	"fmt"
	"time"
)

// Streams are the organization's open event and log streams (stream.lua): each API process
// takes a place for a stream before it opens one and renews it while the stream lasts, so the
// cap holds across every process. A place not renewed within its lease (the process died) is
// freed by the next call.

// OpenStream takes a place for stream (a name unique to this stream) in org's streams until
// lease from now, unless max are open; it reports whether it got one.
func (c Streams) OpenStream(ctx context.Context, org, stream string, max int, lease time.Duration) (bool, error) {
	return c.callStream(ctx, org, stream, "open", max, lease)
}

// RenewStream keeps stream's place for lease from now; false if it had lost it (its lease ran
// out first).
func (c Streams) RenewStream(ctx context.Context, org, stream string, lease time.Duration) (bool, error) {
	return c.callStream(ctx, org, stream, "renew", 0, lease)
}

// CloseStream gives stream's place back.
func (c Streams) CloseStream(ctx context.Context, org, stream string) error {
	_, err := c.callStream(ctx, org, stream, "close", 0, 0)
	return err
}

func (c *store) callStream(ctx context.Context, org, stream, how string, max int, lease time.Duration) (bool, error) {
	now := c.cfg.Now()
	n, err := c.callAt(ctx, now, "stream", c.keys.of("orgstreams", org), args{"org": org, "stream": stream,
		"until": ms(now.Add(lease)), "max": max, "how": how}).Int()
	if err != nil {
		return false, fmt.Errorf("queue: %s stream: %w", how, err)
	}
	return n == 1, nil
}
