package queue

import (
	"context"
	"errors"
	"fmt"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/redis/go-redis/v9"
)

// Where a job's data lives (docs/design.md, "A job's own slot").
//
// The queue's indices and each live job's record — its hash of small fields, its events and its
// progress — carry the queue's hash tag, so one function sees everything a scheduling decision
// needs. A job's config and secrets carry the job's own tag from its submit on, and once the job
// has ended its hash, events and progress move there too (rediskeys.JobOwn). On Redis Cluster
// the jobs that have ended, which are what fills Redis (they stay for the retention), spread
// over the shards; the queue's slot keeps a live record per queued or running job and an index
// entry per job.
//
// On a single server one call reaches every key, so the function that ends a job moves it in the
// same call (move_own, prelude.lua). On a cluster it cannot: the function files the job in
// SETTLE, and settleOne moves it in three steps that each may be repeated — read the queue's
// copy, write it to the job's own slot (put_own, which never replaces a newer end), and delete
// the queue's copy if it is still what was read (settle.lua). The caller of a call that may end
// a job settles right after it, and the reaper settles whatever a crash left. Readers look in
// both places and take the queue's copy while there is one: it is never older than the own one.
//
// A restart of a job that moved brings its record back to the queue's slot (restart.lua), so a
// live record is always whole.

// splitArg is the common argument that tells the functions a job's own keys are out of their
// reach.
func (c *store) splitArg() string { return boolArg(c.split) }

// settleBatch bounds the jobs one settle pass moves.
const settleBatch = 16

// settleSoon moves job id to its own slot if the last call ended it (on a cluster; on a single
// server the call moved it itself). It is best effort: what it leaves, the reaper moves
// (Settle).
func (c *store) settleSoon(ctx context.Context, id string) {
	if c.split {
		_, _ = c.settleOne(context.WithoutCancel(ctx), id, false)
	}
}

// settleAnySoon moves what the last call may have ended, when the caller cannot name the jobs
// (an abandoned claim's).
func (c *store) settleAnySoon(ctx context.Context) {
	if c.split {
		_, _, _ = Maintenance{c}.Settle(context.WithoutCancel(ctx), settleBatch)
	}
}

// Settle moves up to batch jobs that ended, and are still in the queue's slot, to their own
// slot, and reports how many it moved and whether more are waiting.
func (c Maintenance) Settle(ctx context.Context, batch int) (moved int, more bool, err error) {
	ids, err := c.rdb.ZRange(ctx, c.keys.settle(), 0, int64(batch)-1).Result()
	if err != nil {
		return 0, false, fmt.Errorf("queue: settle: %w", err)
	}
	var skipped []redis.Z
	for _, id := range ids {
		ok, err := c.settleOne(ctx, id, true)
		if err != nil {
			return moved, false, err
		}
		if ok {
			moved++
		} else {
			skipped = append(skipped, redis.Z{Score: float64(ms(c.cfg.Now())), Member: id})
		}
	}
	if len(skipped) > 0 {
		// To the back (if still filed), so that entries that cannot move now never keep the
		// ones behind them from being looked at.
		if err := c.rdb.ZAddXX(ctx, c.keys.settle(), skipped...).Err(); err != nil {
			return moved, false, fmt.Errorf("queue: settle: %w", err)
		}
	}
	return moved, len(ids) == batch, nil
}

// settleAll settles batch after batch until a batch is short or moves nothing.
func (c *store) settleAll(ctx context.Context) error {
	for {
		moved, more, err := Maintenance{c}.Settle(ctx, settleBatch*4)
		if err != nil || !more || moved == 0 {
			return err
		}
	}
}

// live is a job's record as one slot holds it.
type live struct {
	hash     map[string]string
	events   []string
	progress string
}

// readRecord reads a job's hash, events and progress from the queue's slot (own false) or the
// job's own slot.
func (c *store) readRecord(ctx context.Context, id string, own bool) (live, error) {
	hk, ek, pk := c.keys.job(id), c.keys.events(id), c.keys.progress(id)
	if own {
		hk, ek, pk = c.keys.own(id, "ownjob"), c.keys.own(id, "ownev"), c.keys.own(id, "ownprog")
	}
	var hash *redis.MapStringStringCmd
	var events *redis.StringSliceCmd
	var prog *redis.StringCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hash = p.HGetAll(ctx, hk)
		events = p.LRange(ctx, ek, 0, -1)
		prog = p.Get(ctx, pk)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return live{}, err
	}
	return live{hash: hash.Val(), events: events.Val(), progress: prog.Val()}, nil
}

// flat lays out a record for put_own and restart: the hash's fields and values, then the events.
func (r live) flat() []any {
	out := make([]any, 0, 2*len(r.hash)+len(r.events))
	for k, v := range r.hash {
		out = append(out, k, v)
	}
	for _, e := range r.events {
		out = append(out, e)
	}
	return out
}

// settleOne moves job id from the queue's slot to its own, if it ended and is still there.
// filed says the job was found in SETTLE: one that has nothing to move is then taken out of it.
func (c *store) settleOne(ctx context.Context, id string, filed bool) (bool, error) {
	rec, err := c.readRecord(ctx, id, false)
	if err != nil {
		return false, fmt.Errorf("queue: settle %s: %w", id, err)
	}
	if !filed && !job.Status(rec.hash[jobField.Status]).Terminal() {
		return false, nil // live (or moved already): nothing to do
	}
	fin := rec.hash[jobField.FinishedAt]
	if fin != "" {
		put, err := c.call(ctx, "put_own", c.keys.own(id, "ownjob"), args{
			"id": id, "finished_at": fin, "progress": rec.progress, "nfields": 2 * len(rec.hash),
		}, rec.flat()...).Int()
		if err != nil {
			return false, fmt.Errorf("queue: settle %s: %w", id, scriptErr("put_own", err))
		}
		if put == 0 {
			// What was read is stale (a later end is there) or the job is gone: settle
			// nothing of it; settle.lua below only drops the entry of a job not ended now.
			fin = ""
		}
	}
	// With no end to copy (gone, or live again) this only takes the job out of SETTLE.
	n, err := c.call(ctx, "settle", c.keys.job(id), args{"id": id, "finished_at": fin, "events": len(rec.events)}).Int()
	if err != nil {
		return false, scriptErr("settle", err)
	}
	return n == 1, nil
}
