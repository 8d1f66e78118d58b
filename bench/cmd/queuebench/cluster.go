package main

import (
	"context"
	"fmt"
	"log"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/queue"
)

// shard is what one master of the cluster holds.
type shard struct {
	keys int64
	mem  int64 // used_memory, bytes
}

func shards(ctx context.Context, cc *redis.ClusterClient) map[string]shard {
	var mu sync.Mutex
	out := map[string]shard{}
	err := cc.ForEachMaster(ctx, func(ctx context.Context, c *redis.Client) error {
		n, err := c.DBSize(ctx).Result()
		if err != nil {
			return err
		}
		info, err := c.Info(ctx, "memory").Result()
		if err != nil {
			return err
		}
		var mem int64
		for _, l := range splitLines(info) {
			if v, ok := strings.CutPrefix(trimCR(l), "used_memory:"); ok {
				mem, _ = strconv.ParseInt(v, 10, 64)
			}
		}
		mu.Lock()
		out[c.Options().Addr] = shard{keys: n, mem: mem}
		mu.Unlock()
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	return out
}

// spread is the largest distance of a shard's share from a third, and the shares.
func spread(before, after map[string]shard, of func(shard) int64) (worst float64, shares string) {
	var total int64
	for a := range after {
		total += of(after[a]) - of(before[a])
	}
	var parts []string
	for a := range after {
		d := of(after[a]) - of(before[a])
		dev := (float64(d) - float64(total)/3) / (float64(total) / 3)
		worst = max(worst, math.Abs(dev))
		parts = append(parts, fmt.Sprintf("%+.1f%%", 100*dev))
	}
	return worst, strings.Join(parts, " ")
}

// clusterCase fills a three-master Redis Cluster with n jobs (a quickstart config, a few
// hundred bytes of sealed secrets) and reports how their keys and memory spread over the
// shards and what each costs, queued and then ended (cancelled, as a tenant's loop would).
func (b *bench) clusterCase(dir string, n, c int) {
	cl, err := redistest.StartCluster(b.ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		log.Fatal(err)
	}
	defer cl.Stop()
	cc := redis.NewClusterClient(&redis.ClusterOptions{Addrs: cl.Addrs, PoolSize: 4 * c, Protocol: b.protocol})
	defer cc.Close()
	q := queue.New(cc, queue.Config{MaxQueued: n + 1})
	defer q.Close()
	sealed := "v1.bench." + strings.Repeat("x", 300)

	base := shards(b.ctx, cc)
	ids := make([]string, n)
	start := time.Now()
	parallel(n, c, func(w, i int) {
		j, _, err := q.Submit(b.ctx, job.Submission{Org: fmt.Sprintf("org%d", w%4), Spec: spec("spread"), SealedSecrets: sealed}, "", "")
		if err != nil {
			log.Fatal(err)
		}
		ids[i] = j.ID
	})
	submitted := time.Since(start)
	queued := shards(b.ctx, cc)
	start = time.Now()
	parallel(n, c, func(_, i int) {
		if _, err := q.Cancel(b.ctx, ids[i]); err != nil {
			log.Fatal(err)
		}
	})
	cancelled := time.Since(start)
	ended := shards(b.ctx, cc)

	keys := func(s shard) int64 { return s.keys }
	mem := func(s shard) int64 { return s.mem }
	perJob := func(before, after map[string]shard) int64 {
		var d int64
		for a := range after {
			d += after[a].mem - before[a].mem
		}
		return d / int64(n)
	}
	for _, st := range []struct {
		name  string
		state map[string]shard
	}{{"queued", queued}, {"ended", ended}} {
		kw, ks := spread(base, st.state, keys)
		mw, ms := spread(base, st.state, mem)
		b.row(fmt.Sprintf("cluster, %d jobs %s: keys per shard", n, st.name), fmt.Sprintf("±%.1f%%", 100*kw), "off a third: "+ks)
		b.row(fmt.Sprintf("cluster, %d jobs %s: memory per shard", n, st.name), fmt.Sprintf("±%.1f%%", 100*mw), "off a third: "+ms)
		b.row(fmt.Sprintf("cluster, %d jobs %s: Redis memory per job", n, st.name), fmt.Sprintf("%d B", perJob(base, st.state)), "used_memory over every master")
	}
	b.row("cluster: submits, then cancels", fmt.Sprintf("%.0f/s, %.0f/s", float64(n)/submitted.Seconds(), float64(n)/cancelled.Seconds()),
		fmt.Sprintf("%d workers", c))
}
