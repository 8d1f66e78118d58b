package queue

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// ExpireCheckpoints deletes the checkpoints of jobs whose organization's checkpoint TTL has
// passed since they ended (OrgSettings.CheckpointTTLDays), up to batch jobs: every checkpoint
// of such a job but its pinned ones. A job that ended while its organization had a TTL is filed
// in the organization's expiring index (mark_ended), and taken out once done; a job restarted
// meanwhile is taken out by the restart, so a live job's checkpoints are never touched. It
// reports how many jobs it expired and whether more are due. Without a Store it does nothing.
func (c Maintenance) ExpireCheckpoints(ctx context.Context, batch int) (expired int, more bool, err error) {
	if c.cfg.Store == nil {
		return 0, false, nil
	}
	orgs, err := c.rdb.SMembers(ctx, c.keys.fixed("TTL_ORGS")).Result()
	if err != nil {
		return 0, false, wrapErr("expire checkpoints", err)
	}
	now := ms(c.cfg.Now())
	for _, org := range orgs {
		ttl, err := c.rdb.HGet(ctx, c.keys.org(org), "ckpt_ttl_ms").Int64()
		if err == redis.Nil || ttl <= 0 {
			continue
		}
		if err != nil {
			return expired, false, wrapErr("expire checkpoints", err)
		}
		ids, err := c.rdb.ZRangeByScore(ctx, c.keys.orgExpiring(org), &redis.ZRangeBy{
			Min: "-inf", Max: strconv.FormatInt(now-ttl, 10), Count: int64(batch - expired)}).Result()
		if err != nil {
			return expired, false, wrapErr("expire checkpoints", err)
		}
		for _, id := range ids {
			if err := c.expireJob(ctx, org, id); err != nil {
				return expired, false, err
			}
			expired++
		}
		if expired >= batch {
			return expired, true, nil
		}
	}
	return expired, false, nil
}

// expireJob deletes a job's unpinned checkpoints and takes it out of its organization's
// expiring index (only if it is still there as it was: a restart meanwhile took it out).
func (c *store) expireJob(ctx context.Context, org, id string) error {
	all, err := jobdata.ListCheckpoints(ctx, c.cfg.Store, id)
	if err != nil {
		return fmt.Errorf("queue: expire checkpoints of %s: %w", id, err)
	}
	pinned, err := jobdata.PinnedSteps(ctx, c.cfg.Store, id)
	if err != nil {
		return fmt.Errorf("queue: expire checkpoints of %s: %w", id, err)
	}
	// A restart between the read above and the deletes takes the job out of the index first
	// (restart.lua, unmark_ended): it is looked at again here, just before.
	if _, err := c.rdb.ZScore(ctx, c.keys.orgExpiring(org), id).Result(); err == redis.Nil {
		return nil
	}
	// What is left is measured again, even if not all of it could be deleted.
	defer func() { _ = c.remeasure(context.WithoutCancel(ctx), org, id) }()
	for _, cp := range all {
		if pinned[cp.Step] {
			continue
		}
		if err := jobdata.DeleteCheckpoint(ctx, c.cfg.Store, id, cp.Step); err != nil {
			return fmt.Errorf("queue: expire checkpoint %d of %s: %w", cp.Step, id, err)
		}
	}
	return wrapErr("expire checkpoints", c.rdb.ZRem(ctx, c.keys.orgExpiring(org), id).Err())
}
