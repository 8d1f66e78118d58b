package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Reaper does the queue's timed work: each piece a duty of its own — reaping lapsed leases and
// what else is due (Reap), archiving, expiring checkpoints, deleting the jobs stopped to be
// deleted, migrating an old store, metering storage, keeping deployments true to their servers —
// with its own interval and a bound on one run. A duty that fails is logged and counted and
// never keeps another from running. RunOnce runs each once, in that order (the scheduled
// Lambda, functions/reaper, calls it every minute); Run starts every duty on its own ticker and
// stops them together (`hostedtrain dev`).
type Reaper struct {
	q        Maintenance
	interval time.Duration
	logger   *slog.Logger
	duties   []*duty
}

// A duty is one piece of the reaper's work.
type duty struct {
	name string
	// every is how often Run runs it (0: the reaper's interval); timeout bounds one run.
	every, timeout time.Duration
	run            func(ctx context.Context) (int, error)
	failures       atomic.Int64
}

// reapBatch bounds the work of one script call, so a backlog never blocks Redis for long.
const reapBatch = 100

// dutyTimeout bounds one run of a duty (the storage meter bounds itself at meterFor).
const dutyTimeout = 30 * time.Second

// NewReaper returns a reaper whose duties run every interval once started.
func NewReaper(q *Client, interval time.Duration, logger *slog.Logger) *Reaper {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	r := &Reaper{q: q.Maintenance, interval: interval, logger: logger}
	r.duties = []*duty{
		{name: "reap", run: r.reap},
		{name: "archive", run: r.archive},
		{name: "expire", run: r.expire},
		{name: "delete", run: r.deleteEnded},
		{name: "migrate", run: r.migrate},
		{name: "meter", run: r.meter, timeout: meterFor + 5*time.Second},
		{name: "deployments", run: r.q.CheckDeployments},
		{name: "caches", run: r.cacheMetrics, every: CacheMetricsEvery},
	}
	return r
}

// CacheMetricsEvery is how often the reaper logs each node's cache hit rates.
var CacheMetricsEvery = 5 * time.Minute

// cacheMetrics logs, once every CacheMetricsEvery across the reaper's processes, each node's
// cache hit rate by kind (model, env, compile) as its agent last reported it: one line a node
// and kind in CloudWatch's embedded metric format, so the Lambda's log makes the metric
// hostedtrain/CacheHitRate by Kind, with the node, its lookups and its bytes as properties
// (a Logs Insights query draws them per node). The node is kept out of the metric's
// dimensions: a metric per node and kind would cost the operator per node.
func (r *Reaper) cacheMetrics(ctx context.Context) (int, error) {
	if ok, err := r.q.takeTurn(ctx, "caches", CacheMetricsEvery); !ok || err != nil {
		return 0, err
	}
	caches, err := r.q.NodeCaches(ctx)
	if err != nil {
		return 0, err
	}
	meta := map[string]any{
		"Timestamp": r.q.cfg.Now().UnixMilli(),
		"CloudWatchMetrics": []map[string]any{{
			"Namespace":  "hostedtrain",
			"Dimensions": [][]string{{"Kind"}},
			"Metrics":    []map[string]string{{"Name": "CacheHitRate", "Unit": "Percent"}},
		}},
	}
	n := 0
	for _, node := range slices.Sorted(maps.Keys(caches)) {
		for _, kind := range slices.Sorted(maps.Keys(caches[node])) {
			s := caches[node][kind]
			if s.Hits+s.Misses == 0 {
				continue // nothing looked up: no rate
			}
			r.logger.Info("node cache", "_aws", meta, "Node", node, "Kind", kind, "CacheHitRate", 100*s.HitRate(),
				"CacheHits", s.Hits, "CacheMisses", s.Misses, "CacheBytesFetched", s.BytesFetched, "CacheBytes", s.Bytes)
			n++
		}
	}
	return n, nil
}

// RunOnce runs every duty once, in order, and reports how many leases it reaped; the error
// joins those of the duties that failed (each also logged and counted), after every duty has
// run. Healthy leases never come due (see heartbeat.lua), so a pass costs what is due, not
// what is running.
func (r *Reaper) RunOnce(ctx context.Context) (int, error) {
	reaped := 0
	var errs []error
	for _, d := range r.duties {
		n, err := r.runDuty(ctx, d)
		if d.name == "reap" {
			reaped = n
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", d.name, err))
		}
	}
	return reaped, errors.Join(errs...)
}

// runDuty runs one duty within its timeout; a failure is logged and counted.
func (r *Reaper) runDuty(ctx context.Context, d *duty) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, cmp.Or(d.timeout, dutyTimeout))
	defer cancel()
	n, err := d.run(ctx)
	if err != nil && ctx.Err() == nil || errors.Is(err, context.DeadlineExceeded) {
		d.failures.Add(1)
		r.logger.Error("reaper duty failed", "duty", d.name, "err", err)
	}
	return n, err
}

// Failures counts each duty's failed runs since the reaper was made.
func (r *Reaper) Failures() map[string]int64 {
	out := make(map[string]int64, len(r.duties))
	for _, d := range r.duties {
		out[d.name] = d.failures.Load()
	}
	return out
}

// reap returns lapsed leases and handles what else is due (Reap), batch by batch until none is
// left.
func (r *Reaper) reap(ctx context.Context) (int, error) {
	total := 0
	for {
		n, more, err := r.q.Reap(ctx, reapBatch)
		total += n
		if err != nil || !more {
			if total > 0 {
				r.logger.Info("reaped lapsed leases", "jobs", total)
			}
			return total, err
		}
	}
}

// deleteEnded deletes the jobs stopped to be deleted that have ended (DeleteEnded).
func (r *Reaper) deleteEnded(ctx context.Context) (int, error) {
	n, err := r.q.DeleteEnded(ctx, reapBatch)
	if n > 0 {
		r.logger.Info("deleted jobs stopped to be deleted", "jobs", n)
	}
	return n, err
}

// migrateBatches bounds the migration's share of one pass, so the reaper's own work never
// waits on it.
const migrateBatches = 20

// migrate moves part of a store written before jobs had their own slots (migrate.go), after the
// pass's own work; the next passes go on from where it stopped.
func (r *Reaper) migrate(ctx context.Context) (int, error) {
	for i := range migrateBatches {
		more, err := r.q.MigrateOwn(ctx, reapBatch)
		if err != nil || !more {
			return i, err
		}
	}
	return migrateBatches, nil
}

// archive moves every job due for it out of Redis, batch by batch.
func (r *Reaper) archive(ctx context.Context) (int, error) {
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
			return total, err
		}
	}
}

// expireBatches bounds the checkpoint expiry's share of one pass (each job is a few storage
// calls); the next passes go on.
const expireBatches = 5

// expire deletes the checkpoints whose organization's TTL has passed (ExpireCheckpoints).
func (r *Reaper) expire(ctx context.Context) (int, error) {
	total := 0
	for range expireBatches {
		n, more, err := r.q.ExpireCheckpoints(ctx, reapBatch)
		total += n
		if n > 0 {
			r.logger.Info("expired the checkpoints of jobs past their organization's TTL", "jobs", n)
		}
		if err != nil || !more {
			return total, err
		}
	}
	return total, nil
}

// meterFor bounds the storage meter's share of one pass (each job is a listing of its
// objects, a few at once): what is left is due on the next.
const meterFor = 10 * time.Second

// meter measures what jobs keep in object storage (MeterStorage), batch by batch, for at most
// meterFor. A job whose objects could not be listed is logged and tried again later.
func (r *Reaper) meter(ctx context.Context) (int, error) {
	start := time.Now()
	for batches := 1; ; batches++ {
		m, err := r.q.MeterStorage(ctx, reapBatch)
		if m.Failed > 0 {
			r.logger.Warn("storage meter: jobs whose objects could not be listed, tried again in a minute", "jobs", m.Failed, "err", m.Err)
		}
		if err != nil || !m.More || time.Since(start) >= meterFor {
			return batches, err
		}
	}
}

// Run runs each duty on its own ticker (its interval, else the reaper's) until ctx ends, and
// returns once every duty has stopped (a lifecycle.Service).
func (r *Reaper) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, d := range r.duties {
		wg.Go(func() {
			t := time.NewTicker(cmp.Or(d.every, r.interval))
			defer t.Stop()
			for {
				_, _ = r.runDuty(ctx, d) // logged and counted there
				select {
				case <-ctx.Done():
					return
				case <-t.C:
				}
			}
		})
	}
	wg.Wait()
	return nil
}
