package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// A store written before jobs had their own slots (issue 15) keeps every job's config and
// secrets at {ht}:cfg:<id> and {ht}:sec:<id>, and its ended jobs' records in the queue's slot.
// The reaper migrates it a batch at a time (MigrateOwn): it moves each job's config and
// secrets to its own slot and files each ended job in SETTLE, which then moves it. Until it is
// done, readers and claims fall back to the old config keys; META's `own_done` says it is.

// migrated is whether this process has seen the migration done (then readers stop looking
// at the old keys).
type migrated struct{ done atomic.Bool }

// MigrateOwn migrates up to batch jobs of a store written before jobs had their own slots and
// reports whether more are left.
func (c *Client) MigrateOwn(ctx context.Context, batch int) (more bool, err error) {
	if c.migrated.done.Load() {
		return false, nil
	}
	meta, err := c.rdb.HMGet(ctx, c.keys.meta(), "own_done", "own_cursor").Result()
	if err != nil {
		return false, fmt.Errorf("queue: migrate: %w", err)
	}
	if meta[0] == "1" {
		c.migrated.done.Store(true)
		return false, nil
	}
	// The cursor is "<org> <last id>": organizations in name order, each one's jobs by id.
	cursor, _ := meta[1].(string)
	org, after, _ := strings.Cut(cursor, " ")
	orgs, err := c.rdb.SMembers(ctx, c.keys.fixed("ORGS")).Result()
	if err != nil {
		return false, fmt.Errorf("queue: migrate: %w", err)
	}
	slices.Sort(orgs)
	i, _ := slices.BinarySearch(orgs, org)
	for ; i < len(orgs); i, after = i+1, "" {
		start := "-"
		if orgs[i] == org && after != "" {
			start = "(" + after
		}
		ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: c.keys.orgJobs(orgs[i]), Start: start, Stop: "+", ByLex: true, Count: int64(batch)}).Result()
		if err != nil {
			return false, fmt.Errorf("queue: migrate: %w", err)
		}
		if len(ids) == 0 {
			continue
		}
		if err := c.migrateJobs(ctx, ids); err != nil {
			return false, err
		}
		next := orgs[i] + " " + ids[len(ids)-1]
		if err := c.rdb.HSet(ctx, c.keys.meta(), "own_cursor", next).Err(); err != nil {
			return false, fmt.Errorf("queue: migrate: %w", err)
		}
		return true, nil
	}
	if err := c.rdb.HSet(ctx, c.keys.meta(), "own_done", "1").Err(); err != nil {
		return false, fmt.Errorf("queue: migrate: %w", err)
	}
	c.migrated.done.Store(true)
	return false, nil
}

// migrateJobs moves the config and secrets of jobs ids from the old keys to their own slots and
// files those that ended, and are still in the queue's slot, to be settled.
func (c *Client) migrateJobs(ctx context.Context, ids []string) error {
	cfgs := make([]*redis.StringCmd, len(ids))
	secs := make([]*redis.StringCmd, len(ids))
	statuses := make([]*redis.StringCmd, len(ids))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cfgs[i] = p.Get(ctx, c.keys.oldConfig(id))
			secs[i] = p.Get(ctx, c.keys.oldSecrets(id))
			statuses[i] = p.HGet(ctx, c.keys.job(id), "status")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	var ended []redis.Z
	for i, id := range ids {
		if cfg := cfgs[i].Val(); cfg != "" {
			// The new key is written first (never over a newer one), then the old one goes:
			// a crash between leaves both, and the next pass finishes.
			_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				p.SetNX(ctx, c.keys.own(id, "owncfg"), cfg, 0)
				if sec := secs[i].Val(); sec != "" {
					p.SetNX(ctx, c.keys.own(id, "ownsec"), sec, 0)
				}
				return nil
			})
			if err == nil {
				err = c.rdb.Del(ctx, c.keys.oldConfig(id), c.keys.oldSecrets(id)).Err()
			}
			if err != nil {
				return fmt.Errorf("queue: migrate %s: %w", id, err)
			}
		}
		if job.Status(statuses[i].Val()).Terminal() {
			ended = append(ended, redis.Z{Score: 0, Member: id})
		}
	}
	if len(ended) > 0 {
		if err := c.rdb.ZAdd(ctx, c.keys.settle(), ended...).Err(); err != nil {
			return fmt.Errorf("queue: migrate: %w", err)
		}
	}
	return nil
}
