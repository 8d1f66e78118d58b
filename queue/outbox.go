package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// OutboxEvent is one event of an organization with a webhook endpoint, as the function that
// made the change wrote it to the outbox (prelude.lua's emit).
type OutboxEvent struct {
	// Entry is the outbox entry's id: what Ack takes, and the base of a webhook message id.
	Entry  string
	JobID  string
	Org    string
	Type   string
	Seq    int64
	Status job.Status
	Time   time.Time
	Detail string
}

// Outbox is the read side of the queue's outbox: a consumer group of it, whose consumers each
// read the events no one has handled and acknowledge them once handled. An event read and not
// acknowledged (its consumer died) goes to another consumer after reclaimAfter.
type Outbox struct {
	c      *store
	group  string
	exists atomic.Bool // the consumer group is known to exist
}

// reclaimAfter is how long an event read and not acknowledged stays with its consumer.
const reclaimAfter = 2 * time.Minute

// Outbox returns the consumer group group of the outbox.
func (c WebhookOutbox) Outbox(group string) *Outbox { return &Outbox{c: c.store, group: group} }

// Read returns up to count events for consumer: ones another consumer read and did not
// acknowledge within reclaimAfter, then new ones.
func (o *Outbox) Read(ctx context.Context, consumer string, count int) ([]OutboxEvent, error) {
	if err := o.ensureGroup(ctx); err != nil {
		return nil, err
	}
	key := o.c.keys.outbox()
	claimed, _, err := o.c.rdb.XAutoClaim(ctx, &redis.XAutoClaimArgs{
		Stream: key, Group: o.group, Consumer: consumer, MinIdle: reclaimAfter, Start: "0", Count: int64(max(1, count/2)),
	}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		if strings.Contains(err.Error(), "NOGROUP") {
			o.exists.Store(false) // the stream was removed: make the group again next time
		}
		return nil, fmt.Errorf("queue: reclaim outbox events: %w", err)
	}
	msgs := claimed
	streams, err := o.c.rdb.XReadGroup(ctx, &redis.XReadGroupArgs{
		Group: o.group, Consumer: consumer, Streams: []string{key, ">"}, Count: int64(count), Block: -1,
	}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("queue: read the outbox: %w", err)
	}
	for _, st := range streams {
		msgs = append(msgs, st.Messages...)
	}
	out := make([]OutboxEvent, 0, len(msgs))
	for _, m := range msgs {
		field := func(k string) string { v, _ := m.Values[k].(string); return v }
		seq, _ := strconv.ParseInt(field("seq"), 10, 64)
		at, _ := strconv.ParseInt(field("time"), 10, 64)
		out = append(out, OutboxEvent{
			Entry: m.ID, JobID: field("job_id"), Org: field("org"), Type: field("type"), Seq: seq,
			Status: job.Status(field("status")), Time: time.UnixMilli(at).UTC(), Detail: field("detail"),
		})
	}
	return out, nil
}

// Ack acknowledges events handled, by their entries.
func (o *Outbox) Ack(ctx context.Context, entries ...string) error {
	if len(entries) == 0 {
		return nil
	}
	if err := o.c.rdb.XAck(ctx, o.c.keys.outbox(), o.group, entries...).Err(); err != nil {
		return fmt.Errorf("queue: acknowledge outbox events: %w", err)
	}
	return nil
}

func (o *Outbox) ensureGroup(ctx context.Context) error {
	if o.exists.Load() {
		return nil
	}
	// From the start of the stream: events written before the first consumer ran count too.
	err := o.c.rdb.XGroupCreateMkStream(ctx, o.c.keys.outbox(), o.group, "0").Err()
	if err != nil && !strings.Contains(err.Error(), "BUSYGROUP") {
		return fmt.Errorf("queue: create the outbox's consumer group: %w", err)
	}
	o.exists.Store(true)
	return nil
}
