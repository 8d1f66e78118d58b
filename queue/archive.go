package queue

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
)

// A job that ended (COMPLETED, FAILED, STOPPED) stays in Redis for the retention, then the
// archiver moves it to object storage: the job's record is written first, and only then is
// the job removed from Redis, by one function that removes nothing if the job changed since
// it was read. A crash in between leaves the job in Redis and its record written, to be
// written again on the next run; a job is never in neither place. Get and Events read an
// archived job from its record, so the API's reads of a job (its state, events, logs,
// metrics, checkpoints) answer as before; lists show what is in Redis only.

// recordVersion is the format of a record; a reader refuses another.
const recordVersion = 1

// record is what object storage keeps of a job moved out of Redis: its hash, config, progress
// and events as Redis held them (never its sealed secrets), so the one reader of Redis's form
// (jobFromMap, parseEvents) reads them too.
type record struct {
	Version    int               `json:"version"`
	ArchivedAt time.Time         `json:"archived_at"`
	Job        map[string]string `json:"job"`
	Config     string            `json:"config"`
	Progress   string            `json:"progress,omitempty"`
	Events     []string          `json:"events"`
}

// archiveKey is where the record of job id lives. It is outside jobs/{id}/, the prefix the
// job's agent holds credentials for, so no agent can write a job's record.
func archiveKey(id string) string { return "archive/jobs/" + id + ".json" }

// archiveBatch bounds the jobs one Archive call moves.
const archiveBatch = 100

// Archive moves up to batch jobs that ended to object storage and out of Redis — those that
// ended more than the retention ago, then the oldest of organizations that keep more than
// MaxEnded — and reports how many it moved and whether more are due. Without a Store it does
// nothing: jobs then stay in Redis.
func (c Maintenance) Archive(ctx context.Context, batch int) (moved int, more bool, err error) {
	if c.cfg.Store == nil {
		return 0, false, nil
	}
	if err := c.dropLeft(ctx, batch); err != nil {
		return 0, false, err
	}
	moved, more, err = c.archiveDue(ctx, batch)
	if err != nil || more {
		return moved, more, err
	}
	n, more, err := c.archiveCrowded(ctx, batch-moved)
	return moved + n, more, err
}

// archiveDue archives up to batch jobs that ended more than the retention ago.
func (c *store) archiveDue(ctx context.Context, batch int) (moved int, more bool, err error) {
	now := c.cfg.Now()
	ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: c.keys.ended(), Start: "-inf", Stop: ms(now.Add(-c.cfg.Retention)), ByScore: true, Count: int64(batch),
	}).Result()
	if err != nil {
		return 0, false, fmt.Errorf("queue: archive: %w", err)
	}
	for _, id := range ids {
		ok, err := c.archiveOne(ctx, id, now)
		if err != nil {
			return moved, false, err
		}
		if ok {
			moved++
		}
	}
	return moved, len(ids) == batch, nil
}

// archiveCrowded archives up to batch of the oldest ended jobs of the organizations that keep
// more than MaxEnded ended jobs in Redis. An organization's index orders its jobs by id, that
// is by creation, so the walk from its oldest skips only the live jobs among them.
func (c *store) archiveCrowded(ctx context.Context, batch int) (moved int, more bool, err error) {
	if batch <= 0 {
		return 0, true, nil
	}
	orgs, err := c.rdb.SMembers(ctx, c.keys.prefix+"orgs").Result()
	if err != nil {
		return 0, false, fmt.Errorf("queue: archive: %w", err)
	}
	counts := make([]*redis.StringCmd, len(orgs))
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, org := range orgs {
			counts[i] = p.HGet(ctx, c.keys.org(org), "ended")
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return 0, false, fmt.Errorf("queue: archive: %w", err)
	}
	now := c.cfg.Now()
	for i, org := range orgs {
		over, _ := counts[i].Int()
		over -= c.cfg.MaxEnded
		start := "-"
		for over > 0 {
			if moved == batch {
				return moved, true, nil
			}
			ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
				Key: c.keys.orgJobs(org), Start: start, Stop: "+", ByLex: true, Count: int64(min(over, batch-moved) + 20),
			}).Result()
			if err != nil {
				return moved, false, fmt.Errorf("queue: archive: %w", err)
			}
			if len(ids) == 0 {
				break
			}
			start = "(" + ids[len(ids)-1]
			// The ended ones are those in the index of ended jobs.
			ended, err := c.rdb.ZMScore(ctx, c.keys.ended(), ids...).Result()
			if err != nil {
				return moved, false, fmt.Errorf("queue: archive: %w", err)
			}
			for k, id := range ids {
				if over == 0 || moved == batch {
					break
				}
				if ended[k] == 0 {
					continue
				}
				ok, err := c.archiveOne(ctx, id, now)
				if err != nil {
					return moved, false, err
				}
				if ok {
					moved++
					over--
				}
			}
		}
	}
	return moved, false, nil
}

// archiveOne writes job id's record and then removes the job from Redis if it is unchanged:
// the queue forgets it (archive.lua), and then its own keys are deleted (dropOwn).
func (c *store) archiveOne(ctx context.Context, id string, now time.Time) (bool, error) {
	// One that ended and has not moved to its own slot yet (on a cluster, or in a store being
	// migrated: migrate.go) moves first.
	if !c.migrated.done.Load() {
		if err := c.migrateJobs(ctx, []string{id}); err != nil {
			return false, err
		}
	}
	if _, err := c.settleOne(ctx, id, false); err != nil {
		return false, err
	}
	var cfg *redis.StringCmd
	rec0, err := c.readRecord(ctx, id, true)
	if err == nil {
		cfg = c.rdb.Get(ctx, c.keys.own(id, "owncfg"))
		if err = cfg.Err(); errors.Is(err, redis.Nil) {
			err = nil
		}
	}
	if err != nil {
		return false, fmt.Errorf("queue: archive %s: read: %w", id, err)
	}
	rec := record{Version: recordVersion, ArchivedAt: now.UTC(), Job: rec0.hash, Events: rec0.events}
	if len(rec.Job) > 0 {
		rec.Config, rec.Progress = cfg.Val(), rec0.progress
		if rec.Config == "" { // a big config left Redis when the job ended: its copy has it
			in, err := c.readInputs(ctx, id)
			if err != nil {
				return false, fmt.Errorf("queue: archive %s: %w", id, err)
			}
			if in != nil {
				rec.Config = in.Config
			}
		}
		b, err := json.Marshal(rec)
		if err != nil {
			return false, fmt.Errorf("queue: archive %s: %w", id, err)
		}
		if err := c.cfg.Store.Put(ctx, archiveKey(id), bytes.NewReader(b)); err != nil {
			return false, fmt.Errorf("queue: archive %s: write record: %w", id, err)
		}
	}
	// Only now that the record is stored may the job leave Redis. (A job with no hash left is
	// only dropped from the index.)
	n, err := c.call(ctx, "archive", c.keys.job(id), args{"id": id, "finished_at": rec.Job[jobField.FinishedAt], "org": rec.Job[jobField.Org],
		"bytes": heldBytes(rec.Job, rec.Events)}).Int()
	if err != nil {
		return false, scriptErr("archive", err)
	}
	if n == 1 {
		if err := c.dropOwn(ctx, id); err != nil {
			return false, err
		}
		// Its inputs' copy (its sealed secrets among them) goes with it: an archived job is
		// only read.
		if err := c.dropInputs(ctx, id); err != nil {
			return false, err
		}
	}
	return n == 1 && len(rec.Job) > 0, nil
}

// dropOwn deletes the own keys of a job the queue has forgotten, and then its entry in
// DROPPING, which keeps it until this is done.
func (c *store) dropOwn(ctx context.Context, id string) error {
	var own []string
	for _, k := range rediskeys.JobOwn {
		own = append(own, c.keys.own(id, k.Lua))
	}
	if err := c.rdb.Del(ctx, own...).Err(); err != nil {
		return fmt.Errorf("queue: archive %s: delete: %w", id, err)
	}
	if err := c.rdb.ZRem(ctx, c.keys.dropping(), id).Err(); err != nil {
		return fmt.Errorf("queue: archive %s: %w", id, err)
	}
	return nil
}

// dropLeft finishes the deletes a crash left (jobs in DROPPING for more than a minute).
func (c *store) dropLeft(ctx context.Context, batch int) error {
	ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: c.keys.dropping(), Start: "-inf", Stop: ms(c.cfg.Now().Add(-time.Minute)), ByScore: true, Count: int64(batch),
	}).Result()
	if err != nil {
		return fmt.Errorf("queue: archive: %w", err)
	}
	for _, id := range ids {
		if err := c.dropOwn(ctx, id); err != nil {
			return err
		}
	}
	return nil
}

// record reads an archived job's record; job.ErrNotFound if there is none.
func (c *store) record(ctx context.Context, id string) (*record, error) {
	if c.cfg.Store == nil {
		return nil, job.ErrNotFound
	}
	rc, err := c.cfg.Store.Get(ctx, archiveKey(id))
	if errors.Is(err, blob.ErrNotFound) {
		return nil, job.ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("queue: record of %s: %w", id, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("queue: record of %s: %w", id, err)
	}
	var rec record
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, fmt.Errorf("queue: record of %s: %w", id, err)
	}
	if rec.Version != recordVersion {
		return nil, fmt.Errorf("queue: record of %s: version %d, want %d", id, rec.Version, recordVersion)
	}
	return &rec, nil
}

// archived reads a job from its record; job.ErrNotFound if it has none.
func (c *store) archived(ctx context.Context, id string) (*job.Job, error) {
	rec, err := c.record(ctx, id)
	if err != nil {
		return nil, err
	}
	return jobFromMap(rec.Job, rec.Config, rec.Progress, c.cfg.Now())
}
