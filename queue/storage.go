package queue

import (
	"context"
	"fmt"
	"strconv"
	"strings"
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
// What is due to be measured is in STORED_DUE, by when:
//   - a job is filed when it is claimed (claim.lua), measured at once, and while it is live
//     again every Config.StorageEvery;
//   - when it ends (mark_ended), storedAfterEnd after (its last uploads are in) and once more
//     storedLate after, as "~<id>" (what an agent cut off by a lapsed lease may still write, and a
//     clock behind another process's);
//   - a job whose objects could not be listed is tried again a minute later;
//   - again after the checkpoint TTL deleted some of it, archived or not (expire.go);
//   - never again once deleted: a delete takes out its entry and what was due (delete.go), and a
//     measurement that finishes after it writes nothing back (stored.lua).
//
// Jobs archived before the meter existed are not counted; the live and ended jobs still in
// Redis are filed once by the first pass (fileExisting).

// storedAfterEnd and storedLate are when after a job ended it is measured (mark_ended, in
// prelude.lua, reads them as STORED_AFTER_END and STORED_LATE).
const (
	storedAfterEnd = 5 * time.Second
	storedLate     = 10 * time.Minute
)

// luaStored is storedAfterEnd and storedLate for the Lua library, in ms.
func luaStored() string {
	return fmt.Sprintf("-- Generated from queue/storage.go: when after a job ended its storage is measured (ms).\n"+
		"local STORED_AFTER_END, STORED_LATE = %d, %d\n", storedAfterEnd.Milliseconds(), storedLate.Milliseconds())
}

// storageListers is how many jobs the meter lists at once.
const storageListers = 8

// Metered is what one MeterStorage call did.
type Metered struct {
	// Failed jobs could not be listed (the newest such error in Err); each is tried again in a
	// minute, and the rest of the batch is measured regardless.
	Failed int
	Err    error
	More   bool // more were due than the batch took
}

// MeterStorage measures up to batch of the jobs due for it (STORED_DUE). The error is the
// job store's; a job whose objects could not be listed is counted in Failed instead. Without a
// Store it does nothing.
func (c Maintenance) MeterStorage(ctx context.Context, batch int) (Metered, error) {
	if c.cfg.Store == nil {
		return Metered{}, nil
	}
	if err := c.fileExisting(ctx); err != nil {
		return Metered{}, err
	}
	zs, err := c.rdb.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
		Key: c.keys.storedDue(), Start: "-inf", Stop: ms(c.cfg.Now()), ByScore: true, Count: int64(batch),
	}).Result()
	if err != nil || len(zs) == 0 {
		return Metered{}, wrapErr("meter storage", err)
	}
	var mu sync.Mutex
	out := Metered{More: len(zs) == batch}
	var redisErr error
	work := make(chan redis.Z)
	var wg sync.WaitGroup
	for range min(storageListers, len(zs)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for z := range work {
				listErr, err := c.measureDue(ctx, z)
				mu.Lock()
				switch {
				case err != nil:
					redisErr = err
				case listErr != nil:
					out.Failed++
					out.Err = listErr
				}
				mu.Unlock()
			}
		}()
	}
	for _, z := range zs {
		work <- z
	}
	close(work)
	wg.Wait()
	return out, redisErr
}

// measureDue measures the job of one entry of STORED_DUE and files what it found, and the
// entry's next time. listErr is the object store's, err Redis's.
func (c *store) measureDue(ctx context.Context, z redis.Z) (listErr, err error) {
	member := z.Member.(string)
	id := strings.TrimPrefix(member, "~")
	due := func(org, how string, bytes int64) error {
		return c.callStored(ctx, org, id, how, bytes, member, strconv.FormatInt(int64(z.Score), 10))
	}
	org, err := c.orgOf(ctx, id)
	if err != nil {
		return nil, err
	}
	if org == "" {
		// Gone from Redis (archived, or deleted): nothing more to measure of it here.
		return nil, due("", "set", 0)
	}
	bytes, listErr := c.storedNow(ctx, id)
	if listErr != nil {
		return listErr, due(org, "retry", 0)
	}
	return nil, due(org, "set", bytes)
}

// fileExisting files the live and ended jobs of a store from before the storage meter, once
// (META stored_filed): what claim and mark_ended file from then on.
func (c *store) fileExisting(ctx context.Context) error {
	if c.storedFiled.Load() {
		return nil
	}
	done, err := c.rdb.HGet(ctx, c.keys.meta(), "stored_filed").Result()
	if err != nil && err != redis.Nil {
		return wrapErr("meter storage", err)
	}
	if done != "1" {
		now := float64(ms(c.cfg.Now()))
		for _, index := range []string{c.keys.leases(), c.keys.ended()} {
			for start := int64(0); ; start += 1000 {
				ids, err := c.rdb.ZRange(ctx, index, start, start+999).Result()
				if err != nil {
					return wrapErr("meter storage", err)
				}
				if len(ids) > 0 {
					zs := make([]redis.Z, len(ids))
					for i, id := range ids {
						zs[i] = redis.Z{Score: now, Member: id}
					}
					if err := c.rdb.ZAddNX(ctx, c.keys.storedDue(), zs...).Err(); err != nil {
						return wrapErr("meter storage", err)
					}
				}
				if len(ids) < 1000 {
					break
				}
			}
		}
		if err := c.rdb.HSet(ctx, c.keys.meta(), "stored_filed", "1").Err(); err != nil {
			return wrapErr("meter storage", err)
		}
	}
	c.storedFiled.Store(true)
	return nil
}

// remeasure measures a job of org again after some of its objects were deleted; archived or
// not, it changes only a job that has an entry.
func (c *store) remeasure(ctx context.Context, org, id string) error {
	bytes, err := c.storedNow(ctx, id)
	if err != nil {
		return err
	}
	return c.fileStored(ctx, org, id, "renew", bytes)
}

// storedNow sums the sizes of a job's objects.
func (c *store) storedNow(ctx context.Context, id string) (int64, error) {
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
func (c *store) orgOf(ctx context.Context, id string) (string, error) {
	for _, k := range []string{c.keys.job(id), c.keys.own(id, "ownjob")} {
		org, err := c.rdb.HGet(ctx, k, jobField.Org).Result()
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
func (c *store) fileStored(ctx context.Context, org, id, how string, bytes int64) error {
	return c.callStored(ctx, org, id, how, bytes, "", "")
}

// callStored is stored.lua, for a measurement of the STORED_DUE entry member taken at score
// taken ("" for none).
func (c *store) callStored(ctx context.Context, org, id, how string, bytes int64, member, taken string) error {
	err := c.call(ctx, "stored", c.keys.orgStored(org), args{"org": org, "id": id, "bytes": bytes, "how": how,
		"member": member, "taken": taken, "every_ms": c.cfg.StorageEvery.Milliseconds()}).Err()
	if err != nil {
		return scriptErr("meter storage", err)
	}
	return nil
}

// StoredBytes are the bytes each of ids keeps in object storage as last measured, by id (0
// for one not measured, or keeping nothing).
func (c Orgs) StoredBytes(ctx context.Context, org string, ids []string) (map[string]int64, error) {
	out := make(map[string]int64, len(ids))
	if len(ids) == 0 {
		return out, nil
	}
	vals, err := c.rdb.HMGet(ctx, c.keys.orgStored(org), ids...).Result()
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
