package queue

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// What an organization keeps in object storage is measured, not counted as it is written: the
// storage meter (MeterStorage, a part of each reaper pass) lists a job's objects (jobs/{id}/:
// checkpoints, metrics, logs, artifacts, rollouts) and files the sum in its organization's
// stored-bytes hash (orgstored), whose total the organization's hash keeps (`stored`). The
// uploads, the agent's own pruning and the writers that may come later need no part in it.
//
// A job is measured
//   - once it has ended, storageLag after (ENDED, walked by a cursor in META), so the last of
//     its uploads and a clock a little behind another process's are in;
//   - while it is live, about every Config.StorageEvery (LEASES, walked by rank in cycles);
//   - again after the checkpoint TTL deleted some of it, archived or not (expire.go);
//   - never again once deleted: a delete takes the job's entry out (delete.go), and a
//     measurement that finishes after it writes nothing back (stored.lua).
//
// The total lags the bytes by at most StorageEvery for a live job and storageLag plus a reaper
// interval for one that ended. Jobs archived before the meter existed are not counted.

// storageLag is how long after a job ended it is measured.
const storageLag = 5 * time.Second

// storageListers is how many jobs the meter lists at once.
const storageListers = 8

// MeterStorage measures up to batch jobs that ended since its last call, and up to batch live
// ones when a cycle over them is due, and reports how many it measured and whether ended jobs
// are left for the next call. Without a Store it does nothing.
func (c *Client) MeterStorage(ctx context.Context, batch int) (measured int, more bool, err error) {
	if c.cfg.Store == nil {
		return 0, false, nil
	}
	n, more, err := c.meterEnded(ctx, batch)
	if err != nil {
		return n, false, err
	}
	m, err := c.meterLive(ctx, batch)
	return n + m, more, err
}

// meterEnded measures the jobs that ended after the cursor (META stored_upto, ms) and at least
// storageLag ago, up to batch, and moves the cursor to the last one measured. A batch cut in
// the middle of one millisecond leaves that millisecond's jobs to the next call (unless every
// job of the batch ended in it: then the rest of them are passed over).
func (c *Client) meterEnded(ctx context.Context, batch int) (int, bool, error) {
	from, err := c.rdb.HGet(ctx, c.keys.meta(), "stored_upto").Result()
	if err == redis.Nil {
		from = "-inf"
	} else if err != nil {
		return 0, false, wrapErr("meter storage", err)
	} else {
		from = "(" + from
	}
	zs, err := c.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: c.keys.ended(), Start: from, Stop: ms(c.cfg.Now().Add(-storageLag)), ByScore: true, Count: int64(batch),
	}).Result()
	if err != nil || len(zs) == 0 {
		return 0, false, wrapErr("meter storage", err)
	}
	full := len(zs) == batch
	if last := zs[len(zs)-1].Score; full && zs[0].Score != last {
		for zs[len(zs)-1].Score == last {
			zs = zs[:len(zs)-1]
		}
	}
	ids := make([]string, len(zs))
	for i, z := range zs {
		ids[i] = z.Member.(string)
	}
	if err := c.measure(ctx, ids); err != nil {
		return 0, false, err
	}
	if err := c.rdb.HSet(ctx, c.keys.meta(), "stored_upto", int64(zs[len(zs)-1].Score)).Err(); err != nil {
		return len(ids), false, wrapErr("meter storage", err)
	}
	return len(ids), full, nil
}

// meterLive measures the next batch of live jobs in LEASES by rank (META stored_live_rank),
// starting a cycle over them no sooner than StorageEvery after the last one began
// (stored_live_at). Leases move in LEASES as they are renewed, so a cycle may measure a job
// twice or miss one, which the next cycle makes up.
func (c *Client) meterLive(ctx context.Context, batch int) (int, error) {
	v, err := c.rdb.HMGet(ctx, c.keys.meta(), "stored_live_rank", "stored_live_at").Result()
	if err != nil {
		return 0, wrapErr("meter storage", err)
	}
	num := func(x any) int64 {
		s, _ := x.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		return n
	}
	rank, began, now := num(v[0]), num(v[1]), ms(c.cfg.Now())
	if rank == 0 {
		if now-began < c.cfg.StorageEvery.Milliseconds() {
			return 0, nil
		}
		began = now
	}
	ids, err := c.rdb.ZRange(ctx, c.keys.leases(), rank, rank+int64(batch)-1).Result()
	if err != nil {
		return 0, wrapErr("meter storage", err)
	}
	if err := c.measure(ctx, ids); err != nil {
		return 0, err
	}
	next := rank + int64(len(ids))
	if len(ids) < batch {
		next = 0
	}
	if err := c.rdb.HSet(ctx, c.keys.meta(), "stored_live_rank", next, "stored_live_at", began).Err(); err != nil {
		return len(ids), wrapErr("meter storage", err)
	}
	return len(ids), nil
}

// measure lists each job's objects, storageListers at a time, and files the sums.
func (c *Client) measure(ctx context.Context, ids []string) error {
	work := make(chan string)
	errs := make(chan error, storageListers)
	var wg sync.WaitGroup
	for range min(storageListers, len(ids)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range work {
				if err := c.measureJob(ctx, id); err != nil {
					select {
					case errs <- err:
					default:
					}
				}
			}
		}()
	}
	for _, id := range ids {
		work <- id
	}
	close(work)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}

// measureJob lists one job's objects and files their sum for its organization.
func (c *Client) measureJob(ctx context.Context, id string) error {
	org, err := c.orgOf(ctx, id)
	if err != nil || org == "" {
		return err // a job gone meanwhile: nothing to file
	}
	bytes, err := c.storedNow(ctx, id)
	if err != nil {
		return err
	}
	return c.fileStored(ctx, org, id, "set", bytes)
}

// remeasure measures a job of org again after some of its objects were deleted; archived or
// not, it changes only a job that has an entry.
func (c *Client) remeasure(ctx context.Context, org, id string) error {
	bytes, err := c.storedNow(ctx, id)
	if err != nil {
		return err
	}
	return c.fileStored(ctx, org, id, "renew", bytes)
}

// storedNow sums the sizes of a job's objects.
func (c *Client) storedNow(ctx context.Context, id string) (int64, error) {
	objs, err := c.cfg.Store.List(ctx, jobdata.JobPrefix(id))
	if err != nil {
		return 0, fmt.Errorf("queue: meter storage of %s: %w", id, err)
	}
	var bytes int64
	for _, o := range objs {
		bytes += o.Size
	}
	return bytes, nil
}

// orgOf is the organization of a job in Redis, live or ended; "" for one not there.
func (c *Client) orgOf(ctx context.Context, id string) (string, error) {
	for _, k := range []string{c.keys.job(id), c.keys.own(id, "ownjob")} {
		org, err := c.rdb.HGet(ctx, k, "org").Result()
		if err == nil {
			return org, nil
		}
		if err != redis.Nil {
			return "", wrapErr("meter storage", err)
		}
	}
	return "", nil
}

// fileStored changes job id's entry in org's stored bytes (stored.lua says how).
func (c *Client) fileStored(ctx context.Context, org, id, how string, bytes int64) error {
	err := c.call(ctx, "stored", c.keys.of("orgstored", org), args{"org": org, "id": id, "bytes": bytes, "how": how}).Err()
	if err != nil {
		return scriptErr("meter storage", err)
	}
	return nil
}

// StoredBytes are the bytes each of ids keeps in object storage as last measured, by id (0
// for one not measured, or keeping nothing).
func (c *Client) StoredBytes(ctx context.Context, org string, ids []string) (map[string]int64, error) {
	out := make(map[string]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := c.rdb.HMGet(ctx, c.keys.of("orgstored", org), ids...).Result()
	if err != nil {
		return nil, wrapErr("stored bytes", err)
	}
	for i, v := range vals {
		s, _ := v.(string)
		n, _ := strconv.ParseInt(s, 10, 64)
		out[ids[i]] = n
	}
	return out, nil
}
