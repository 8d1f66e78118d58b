package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// Node health: a node whose attempts keep failing for the platform's reasons (a failure its
// agent read as the platform's, a lost lease) is quarantined — it claims nothing — after
// QuarantineAfter of them within QuarantineWindow (node_fault in prelude.lua). An operator
// cordons a node (no new work), drains it (no new work, and its jobs are handed back on their
// next heartbeat to resume elsewhere) or puts it back (uncordon, which also forgets its
// faults). NODES holds only the nodes out of rotation: a claim checks it with one HEXISTS.

// Nodes lists the nodes the queue knows: those seen waiting for work lately and those out of
// rotation, by id.
func (c Fleet) Nodes(ctx context.Context) ([]job.Node, error) {
	seen, err := c.rdb.ZRangeWithScores(ctx, c.keys.fixed("AGENTS_SEEN"), 0, -1).Result()
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	out, err := c.rdb.HGetAll(ctx, c.keys.fixed("NODES")).Result()
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	free, err := c.rdb.HGetAll(ctx, c.keys.fixed("AGENTS")).Result()
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	// Nodes with a platform fault within the window, busy or not (a node that always claims
	// at once is never seen waiting).
	since := strconv.FormatInt(c.cfg.Now().Add(-c.cfg.QuarantineWindow).UnixMilli(), 10)
	faulted, err := c.rdb.ZRangeByScore(ctx, c.keys.fixed("NODES_FAULTED"), &redis.ZRangeBy{Min: since, Max: "+inf"}).Result()
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	_ = c.rdb.ZRemRangeByScore(ctx, c.keys.fixed("NODES_FAULTED"), "-inf", "("+since).Err()
	byID := map[string]*job.Node{}
	get := func(id string) *job.Node {
		if n := byID[id]; n != nil {
			return n
		}
		n := &job.Node{ID: id, State: job.NodeOK, Free: decodeGPUs(free[id])}
		byID[id] = n
		return n
	}
	for _, z := range seen {
		t := time.UnixMilli(int64(z.Score)).UTC()
		get(z.Member.(string)).LastSeen = &t
	}
	for _, id := range faulted {
		get(id)
	}
	// Nodes whose agent reported its cache within the hour: a busy node is seen waiting rarely,
	// but its agent reports every 15 s.
	cached, err := c.rdb.ZRangeByScore(ctx, c.keys.fixed("NODES_CACHED"), &redis.ZRangeBy{
		Min: strconv.FormatInt(c.cfg.Now().Add(-cacheReportTTL).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	for _, id := range cached {
		get(id)
	}
	for id, v := range out {
		n := get(id)
		state, rest, _ := strings.Cut(v, "|")
		since, reason, _ := strings.Cut(rest, "|")
		n.State, n.Reason = state, reason
		if ms, err := strconv.ParseInt(since, 10, 64); err == nil {
			t := time.UnixMilli(ms).UTC()
			n.Since = &t
		}
	}
	ids := make([]string, 0, len(byID))
	for id := range byID {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	cutoff := strconv.FormatInt(c.cfg.Now().Add(-c.cfg.QuarantineWindow).UnixMilli(), 10)
	counts := make([]*redis.IntCmd, len(ids))
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			counts[i] = p.ZCount(ctx, c.keys.of("nodefaults", id), cutoff, "+inf")
		}
		return nil
	})
	if err != nil {
		return nil, wrapErr("nodes", err)
	}
	nodes := make([]job.Node, len(ids))
	for i, id := range ids {
		byID[id].RecentFaults = int(counts[i].Val())
		if raw, err := c.rdb.Get(ctx, c.keys.of("nodecache", id)).Bytes(); err == nil {
			_ = json.Unmarshal(raw, &byID[id].Cache)
		}
		nodes[i] = *byID[id]
	}
	return nodes, nil
}

// maxWarm bounds the models waiting to be warmed on one node.
const maxWarm = 64

// WarmNode asks node's agent to fetch models into its cache ahead of demand (it takes them at
// its next report, TakeWarm). The request lasts a day.
func (c Fleet) WarmNode(ctx context.Context, node string, models []string) error {
	if len(models) == 0 {
		return nil
	}
	key := c.keys.of("nodewarm", node)
	vals := make([]any, len(models))
	for i, m := range models {
		vals[i] = m
	}
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.RPush(ctx, key, vals...)
		p.LTrim(ctx, key, -maxWarm, -1)
		p.Expire(ctx, key, 24*time.Hour)
		return nil
	})
	return wrapErr("warm node", err)
}

// cacheReportTTL is how long a node's cache report is kept.
const cacheReportTTL = time.Hour

// ReportCache records what node's agent reports of its cache (kept an hour) and hands it the
// models waiting to be warmed there, taking them.
func (c Fleet) ReportCache(ctx context.Context, node string, stats map[string]job.CacheStats) ([]string, error) {
	raw, err := json.Marshal(stats)
	if err != nil {
		return nil, err
	}
	key := c.keys.of("nodewarm", node)
	var warm *redis.StringSliceCmd
	_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, c.keys.of("nodecache", node), raw, cacheReportTTL)
		now := c.cfg.Now()
		p.ZAdd(ctx, c.keys.fixed("NODES_CACHED"), redis.Z{Score: float64(now.UnixMilli()), Member: node})
		p.ZRemRangeByScore(ctx, c.keys.fixed("NODES_CACHED"), "-inf", "("+strconv.FormatInt(now.Add(-cacheReportTTL).UnixMilli(), 10))
		warm = p.LRange(ctx, key, 0, -1)
		p.Del(ctx, key)
		return nil
	})
	if err != nil {
		return nil, wrapErr("report cache", err)
	}
	return warm.Val(), nil
}

// NodeCaches is what each node's agent last reported of its cache, by node and kind, for the
// nodes that reported within the hour.
func (c Maintenance) NodeCaches(ctx context.Context) (map[string]map[string]job.CacheStats, error) {
	ids, err := c.rdb.ZRangeByScore(ctx, c.keys.fixed("NODES_CACHED"), &redis.ZRangeBy{
		Min: strconv.FormatInt(c.cfg.Now().Add(-cacheReportTTL).UnixMilli(), 10), Max: "+inf"}).Result()
	if err != nil || len(ids) == 0 {
		return nil, wrapErr("node caches", err)
	}
	keys := make([]string, len(ids))
	for i, id := range ids {
		keys[i] = c.keys.of("nodecache", id)
	}
	raws, err := c.rdb.MGet(ctx, keys...).Result()
	if err != nil {
		return nil, wrapErr("node caches", err)
	}
	out := make(map[string]map[string]job.CacheStats, len(ids))
	for i, raw := range raws {
		s, ok := raw.(string)
		if !ok {
			continue // its report lapsed since
		}
		var stats map[string]job.CacheStats
		if json.Unmarshal([]byte(s), &stats) == nil {
			out[ids[i]] = stats
		}
	}
	return out, nil
}

// takeTurn reports whether this run of the duty name is the one of its period: the first to
// ask within every, across processes (the scheduled reaper runs every minute; a duty with a
// longer period runs in one pass of it).
func (c Maintenance) takeTurn(ctx context.Context, name string, every time.Duration) (bool, error) {
	ok, err := c.rdb.SetNX(ctx, c.keys.of("turn", name), c.cfg.Now().UnixMilli(), every).Result()
	return ok, wrapErr("turn", err)
}

// SetNode takes a node out of rotation (job.NodeCordoned or job.NodeDraining) with the
// operator's reason, or puts it back (job.NodeOK: its fault record goes too). A node the queue
// has never seen may be cordoned ahead of its first claim.
func (c Fleet) SetNode(ctx context.Context, id, state, reason string) error {
	switch state {
	case job.NodeOK:
		_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HDel(ctx, c.keys.fixed("NODES"), id)
			p.Del(ctx, c.keys.of("nodefaults", id))
			return nil
		})
		return wrapErr("set node", err)
	case job.NodeCordoned, job.NodeDraining:
		// Out of rotation, it is no node for a job to wait for (claim.lua's delay
		// scheduling): it leaves the holders of what it holds (a claim of its would, too).
		held, err := c.rdb.HGet(ctx, c.keys.fixed("AGENT_HELD"), id).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			return wrapErr("set node", err)
		}
		_, models, _ := strings.Cut(held, " ")
		v := state + "|" + strconv.FormatInt(c.cfg.Now().UnixMilli(), 10) + "|" + reason
		_, err = c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
			p.HSet(ctx, c.keys.fixed("NODES"), id, v)
			for _, need := range strings.Fields(models) {
				p.ZRem(ctx, c.keys.of("holders", need), id)
			}
			p.HDel(ctx, c.keys.fixed("AGENT_HELD"), id)
			return nil
		})
		return wrapErr("set node", err)
	}
	return errors.New("queue: a node is set ok, cordoned or draining")
}

// SetBudget sets the GPU time (GPU-milliseconds, 0: none) a job may use over all its runs. Its
// job.budget events start again from the mark its use has reached under the new budget.
func (c Jobs) SetBudget(ctx context.Context, id string, gpuMs int64) error {
	j, err := c.Get(ctx, id)
	if err != nil {
		return err
	}
	key := c.keys.job(id)
	if j.Status.Terminal() {
		if c.split {
			// On a cluster an ended job may still be on its way to its own slot: move it first,
			// so the write cannot land on a copy the move then deletes.
			if _, err := c.settleOne(ctx, id, false); err != nil {
				return err
			}
		}
		if n, _ := c.rdb.Exists(ctx, key).Result(); n == 0 {
			key = c.keys.own(id, "ownjob") // an ended job's record lives in its own slot
		}
	}
	seen := 0
	for _, mark := range []int{50, 80, 100} {
		if gpuMs > 0 && j.GPUSeconds*1000*100 >= float64(gpuMs)*float64(mark) {
			seen = mark
		}
	}
	// Written only where the record still is: a job archived or moved meanwhile is not
	// brought back as a stray hash.
	n, err := c.call(ctx, "set_budget", key, args{"budget_ms": gpuMs, "seen": seen}).Int()
	if err != nil {
		return wrapErr("set budget", err)
	}
	if n == 0 {
		return fmt.Errorf("queue: set budget: %w", job.ErrNotFound)
	}
	return nil
}

// wrapErr names the operation of a failed Redis call (nil stays nil).
func wrapErr(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("queue: %s: %w", op, err)
}

// decodeGPUs reads encodeGPUs' form back.
func decodeGPUs(s string) []job.GPU {
	var out []job.GPU
	for part := range strings.SplitSeq(s, ",") {
		model, count, ok := strings.Cut(part, ":")
		if n, err := strconv.Atoi(count); ok && err == nil {
			out = append(out, job.GPU{Model: model, Count: n})
		}
	}
	return out
}
