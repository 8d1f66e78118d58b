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
func (c Maintenance) MigrateOwn(ctx context.Context, batch int) (more bool, err error) {
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
		// The batch's ended jobs move to their own slots now (the archiver settles the one it
		// migrates itself).
		err = c.migrateJobs(ctx, ids)
		if err == nil {
			err = c.settleAll(ctx)
		}
		if err != nil {
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
// files those that ended, and are still in the queue's slot, to be settled; the caller settles
// them.
func (c *store) migrateJobs(ctx context.Context, ids []string) error {
	cfgs := make([]*redis.StringCmd, len(ids))
	secs := make([]*redis.StringCmd, len(ids))
	statuses := make([]*redis.StringCmd, len(ids))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cfgs[i] = p.Get(ctx, c.keys.oldConfig(id))
			secs[i] = p.Get(ctx, c.keys.oldSecrets(id))
			statuses[i] = p.HGet(ctx, c.keys.job(id), jobField.Status)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	var ended []redis.Z
	var moved []string
	// The new keys are written first (never over newer ones), then the old ones go: a crash
	// between leaves both, and the next pass finishes; a reader that finds neither the old key
	// nor (read after it) the new one cannot exist.
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			if cfg := cfgs[i].Val(); cfg != "" {
				moved = append(moved, id)
				p.SetNX(ctx, c.keys.own(id, "owncfg"), cfg, 0)
				if sec := secs[i].Val(); sec != "" {
					p.SetNX(ctx, c.keys.own(id, "ownsec"), sec, 0)
				}
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("queue: migrate: %w", err)
	}
	if len(moved) > 0 {
		live := make([]*redis.IntCmd, len(moved))
		own := make([]*redis.IntCmd, len(moved))
		_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, id := range moved {
				p.Del(ctx, c.keys.oldConfig(id), c.keys.oldSecrets(id))
				live[i] = p.Exists(ctx, c.keys.job(id))
				own[i] = p.Exists(ctx, c.keys.own(id, "ownjob"))
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("queue: migrate: %w", err)
		}
		// A job another reaper archived while this one read it has no hash left anywhere: the
		// keys just written would be nobody's, so they go again.
		for i, id := range moved {
			if live[i].Val() == 0 && own[i].Val() == 0 {
				if err := c.rdb.Del(ctx, c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Err(); err != nil {
					return fmt.Errorf("queue: migrate: %w", err)
				}
			}
		}
	}
	for i, id := range ids {
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
