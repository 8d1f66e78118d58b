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
func (c *Client) Archive(ctx context.Context, batch int) (moved int, more bool, err error) {
	if c.cfg.Store == nil {
		return 0, false, nil
	}
	moved, more, err = c.archiveDue(ctx, batch)
	if err != nil || more {
		return moved, more, err
	}
	n, more, err := c.archiveCrowded(ctx, batch-moved)
	return moved + n, more, err
}

// archiveDue archives up to batch jobs that ended more than the retention ago.
func (c *Client) archiveDue(ctx context.Context, batch int) (moved int, more bool, err error) {
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
func (c *Client) archiveCrowded(ctx context.Context, batch int) (moved int, more bool, err error) {
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
			statuses := make([]*redis.StringCmd, len(ids))
			_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
				for k, id := range ids {
					statuses[k] = p.HGet(ctx, c.keys.job(id), "status")
				}
				return nil
			})
			if err != nil && !errors.Is(err, redis.Nil) {
				return moved, false, fmt.Errorf("queue: archive: %w", err)
			}
			for k, id := range ids {
				if over == 0 || moved == batch {
					break
				}
				switch job.Status(statuses[k].Val()) {
				case job.Completed, job.Failed, job.Stopped:
				default:
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

// archiveOne writes job id's record and then removes the job from Redis if it is unchanged.
func (c *Client) archiveOne(ctx context.Context, id string, now time.Time) (bool, error) {
	var hash *redis.MapStringStringCmd
	var strs *redis.SliceCmd
	var events *redis.StringSliceCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		hash = p.HGetAll(ctx, c.keys.job(id))
		strs = p.MGet(ctx, c.keys.config(id), c.keys.progress(id))
		events = p.LRange(ctx, c.keys.events(id), 0, -1)
		return nil
	})
	if err != nil {
		return false, fmt.Errorf("queue: archive %s: read: %w", id, err)
	}
	rec := record{Version: recordVersion, ArchivedAt: now.UTC(), Job: hash.Val(), Events: events.Val()}
	if len(rec.Job) > 0 {
		v := strs.Val()
		rec.Config, _ = v[0].(string)
		rec.Progress, _ = v[1].(string)
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
	n, err := c.call(ctx, "archive", c.keys.job(id), args{"id": id, "finished_at": rec.Job["finished_at"], "events": len(rec.Events)}).Int()
	if err != nil {
		return false, scriptErr("archive", err)
	}
	return n == 1 && len(rec.Job) > 0, nil
}

// record reads an archived job's record; job.ErrNotFound if there is none.
func (c *Client) record(ctx context.Context, id string) (*record, error) {
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
func (c *Client) archived(ctx context.Context, id string) (*job.Job, error) {
	rec, err := c.record(ctx, id)
	if err != nil {
		return nil, err
	}
	return jobFromMap(rec.Job, rec.Config, rec.Progress, c.cfg.Now())
}
