package redistest

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/redisproc"
)

// Cluster is a real Redis Cluster of three masters (no replicas) on 127.0.0.1.
type Cluster struct {
	Addrs   []string
	servers []*redisproc.Server
}

// StartCluster starts three `redis-server --cluster-enabled yes` under dir, gives each a third
// of the hash slots, introduces them and waits until the cluster says it is ok.
func StartCluster(ctx context.Context, dir string) (*Cluster, error) {
	c := &Cluster{}
	ranges := [][2]int{{0, 5460}, {5461, 10922}, {10923, 16383}}
	for i := range ranges {
		s, err := redisproc.Start(ctx, redisproc.Options{
			Dir:  filepath.Join(dir, fmt.Sprintf("node%d", i)),
			Args: []string{"--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "5000"},
		})
		if err != nil {
			c.Stop()
			return nil, err
		}
		c.servers = append(c.servers, s)
		c.Addrs = append(c.Addrs, s.Addr)
	}
	for i, s := range c.servers {
		node := redis.NewClient(&redis.Options{Addr: s.Addr})
		err := node.Do(ctx, "CLUSTER", "ADDSLOTSRANGE", ranges[i][0], ranges[i][1]).Err()
		if err == nil && i > 0 {
			err = node.ClusterMeet(ctx, "127.0.0.1", fmt.Sprint(c.servers[0].Port)).Err()
		}
		node.Close()
		if err != nil {
			c.Stop()
			return nil, fmt.Errorf("redistest: cluster setup: %w", err)
		}
	}
	if err := c.waitOK(ctx); err != nil {
		c.Stop()
		return nil, err
	}
	return c, nil
}

// waitOK polls every node until each reports cluster_state:ok and knows all three masters.
func (c *Cluster) waitOK(ctx context.Context) error {
	deadline := time.Now().Add(30 * time.Second)
	for _, s := range c.servers {
		node := redis.NewClient(&redis.Options{Addr: s.Addr})
		for {
			info, err := node.ClusterInfo(ctx).Result()
			if err == nil && strings.Contains(info, "cluster_state:ok") && strings.Contains(info, "cluster_known_nodes:3") {
				break
			}
			if time.Now().After(deadline) {
				node.Close()
				return fmt.Errorf("redistest: cluster not ok after 30 s: %s", info)
			}
			time.Sleep(20 * time.Millisecond)
		}
		node.Close()
	}
	return nil
}

// Client returns a cluster client; close it when done.
func (c *Cluster) Client() *redis.ClusterClient {
	return redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Addrs})
}

// Stop stops every node.
func (c *Cluster) Stop() {
	for _, s := range c.servers {
		s.Stop()
	}
}

// ClusterClient starts a private three-master Redis Cluster for the rest of t and returns a
// client of it.
func ClusterClient(t testing.TB) *redis.ClusterClient {
	t.Helper()
	c, err := StartCluster(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Stop)
	cc := c.Client()
	t.Cleanup(func() { _ = cc.Close() })
	return cc
}

// AllKeys lists the keys matching a SCAN pattern on a server, or on every master of a cluster.
func AllKeys(ctx context.Context, rdb redis.UniversalClient, pattern string) ([]string, error) {
	var mu sync.Mutex
	var out []string
	scan := func(ctx context.Context, c *redis.Client) error {
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			mu.Lock()
			out = append(out, it.Val())
			mu.Unlock()
		}
		return it.Err()
	}
	var err error
	switch c := rdb.(type) {
	case *redis.ClusterClient:
		err = c.ForEachMaster(ctx, scan)
	case *redis.Client:
		err = scan(ctx, c)
	default:
		err = fmt.Errorf("redistest: cannot list the keys of a %T", rdb)
	}
	slices.Sort(out)
	return out, err
}
