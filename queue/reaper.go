package queue

import (
	"context"
	"log/slog"
	"time"
)

// Reaper does the queue's timed work on an interval: it returns jobs whose lease lapsed (and
// the rest of Reap), and archives jobs that ended more than the retention ago (Archive). The
// same RunOnce serves the scheduled Lambda (functions/reaper) and the loop of `hostedtrain dev`.
type Reaper struct {
	q        *Client
	interval time.Duration
	logger   *slog.Logger
}

// reapBatch bounds the work of one script call, so a backlog never blocks Redis for long.
const reapBatch = 100

// NewReaper returns a reaper that runs every interval once started.
func NewReaper(q *Client, interval time.Duration, logger *slog.Logger) *Reaper {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Reaper{q: q, interval: interval, logger: logger}
}

// RunOnce does every piece of timed work that is due, batch by batch until none is left, and
// reports how many jobs it changed; then it archives the jobs due for it, expires checkpoints
// past their organization's TTL, deletes the jobs that were stopped to be deleted and have
// ended (StopThenDelete), moves part of an old store's jobs to their own slots, and
// measures what jobs keep in object storage (the last, bounded in time). Healthy leases never
// come due (see heartbeat.lua), so a pass costs what is due, not what is running.
func (r *Reaper) RunOnce(ctx context.Context) (int, error) {
	total := 0
	for {
		n, more, err := r.q.Reap(ctx, reapBatch)
		total += n
		if err != nil || !more {
			if total > 0 {
				r.logger.Info("reaped lapsed leases", "jobs", total)
			}
			if err != nil {
				return total, err
			}
			break
		}
	}
	if err := r.archive(ctx); err != nil {
		return total, err
	}
	if err := r.expire(ctx); err != nil {
		return total, err
	}
	if n, err := r.q.DeleteEnded(ctx, reapBatch); err != nil {
		return total, err
	} else if n > 0 {
		r.logger.Info("deleted jobs stopped to be deleted", "jobs", n)
	}
	if err := r.migrate(ctx); err != nil {
		return total, err
	}
	return total, r.meter(ctx)
}

// migrateBatches bounds the migration's share of one pass, so the reaper's own work never
// waits on it.
const migrateBatches = 20

// migrate moves part of a store written before jobs had their own slots (migrate.go), after the
// pass's own work; the next passes go on from where it stopped.
func (r *Reaper) migrate(ctx context.Context) error {
	for range migrateBatches {
		more, err := r.q.MigrateOwn(ctx, reapBatch)
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// archive moves every job due for it out of Redis, batch by batch.
func (r *Reaper) archive(ctx context.Context) error {
	total := 0
	defer func() {
		if total > 0 {
			r.logger.Info("archived jobs that ended before the retention", "jobs", total)
		}
	}()
	for {
		n, more, err := r.q.Archive(ctx, archiveBatch)
		total += n
		// A batch that moved nothing (every job in it changed while being read) ends the run:
		// the next one tries again.
		if err != nil || !more || n == 0 {
			return err
		}
	}
}

// expireBatches bounds the checkpoint expiry's share of one pass (each job is a few storage
// calls); the next passes go on.
const expireBatches = 5

// expire deletes the checkpoints whose organization's TTL has passed (ExpireCheckpoints).
func (r *Reaper) expire(ctx context.Context) error {
	for range expireBatches {
		n, more, err := r.q.ExpireCheckpoints(ctx, reapBatch)
		if n > 0 {
			r.logger.Info("expired the checkpoints of jobs past their organization's TTL", "jobs", n)
		}
		if err != nil || !more {
			return err
		}
	}
	return nil
}

// meterFor bounds the storage meter's share of one pass (each job is a listing of its
// objects, a few at once): what is left is due on the next.
const meterFor = 10 * time.Second

// meter measures what jobs keep in object storage (MeterStorage), batch by batch, for at most
// meterFor. A job whose objects could not be listed is logged and tried again later.
func (r *Reaper) meter(ctx context.Context) error {
	start := time.Now()
	for {
		m, err := r.q.MeterStorage(ctx, reapBatch)
		if m.Failed > 0 {
			r.logger.Warn("storage meter: jobs whose objects could not be listed, tried again in a minute", "jobs", m.Failed, "err", m.Err)
		}
		if err != nil || !m.More || time.Since(start) >= meterFor {
			return err
		}
	}
}

// Run runs RunOnce every interval until ctx ends (a lifecycle.Service).
func (r *Reaper) Run(ctx context.Context) error {
	t := time.NewTicker(r.interval)
	defer t.Stop()
	for {
		if _, err := r.RunOnce(ctx); err != nil && ctx.Err() == nil {
			r.logger.Error("reaper", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
