package queue

import (
	"context"
	"sync"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// keysPerMaster counts the keys matching pattern on each master of a cluster.
func keysPerMaster(t *testing.T, cc *redis.ClusterClient, pattern string) map[string]int {
	t.Helper()
	var mu sync.Mutex
	out := map[string]int{}
	err := cc.ForEachMaster(context.Background(), func(ctx context.Context, c *redis.Client) error {
		n := 0
		it := c.Scan(ctx, 0, pattern, 1000).Iterator()
		for it.Next(ctx) {
			n++
		}
		mu.Lock()
		out[c.Options().Addr] = n
		mu.Unlock()
		return it.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// checkSpread fails t unless each of the three masters holds a third of want keys, within
// ±15 %.
func checkSpread(t *testing.T, what string, per map[string]int, want int) {
	t.Helper()
	if len(per) != 3 {
		t.Fatalf("%s: %d masters, want 3", what, len(per))
	}
	total := 0
	for _, n := range per {
		total += n
	}
	if total != want {
		t.Errorf("%s: %d keys in all, want %d", what, total, want)
	}
	mean := float64(want) / 3
	for addr, n := range per {
		if d := (float64(n) - mean) / mean; d > 0.15 || d < -0.15 {
			t.Errorf("%s: master %s holds %d keys, %+.0f%% off a third (%v)", what, addr, n, 100*d, per)
		}
	}
	t.Logf("%s: %v", what, per)
}

// On Redis Cluster jobs spread over the shards: each master holds a third of the jobs' own
// keys (config and secrets from the submit on; hash, events and progress once a job ended),
// within ±15 %, and the queue's slot keeps a live record only while a job is live.
func TestJobsSpreadOverTheClusterShards(t *testing.T) {
	t.Parallel()
	const n = 2000
	b := setup(t, backends[1], func(c *Config) { c.MaxQueued = n })
	cc := b.rdb.(*redis.ClusterClient)
	ids := make([]string, n)
	parallel(t, n, func(i int) error {
		j, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: jobSpec("spread", 8), SealedSecrets: sealedSample}, "", "")
		if err == nil {
			ids[i] = j.ID
		}
		return err
	})
	own := "{" + b.q.keys.tag + ":*"
	checkSpread(t, "queued: own keys", keysPerMaster(t, cc, own), 2*n)
	live := keysPerMaster(t, cc, b.q.keys.prefix+"job:*")
	if got := live[firstNonZero(live)]; got != n {
		t.Errorf("queued: %d live records in the queue's slot, want %d", got, n)
	}

	parallel(t, n, func(i int) error { _, err := b.q.Cancel(b.ctx, ids[i]); return err })
	// Each ended job's hash, events, config and secrets are its own now; none is left in the
	// queue's slot.
	checkSpread(t, "ended: own keys", keysPerMaster(t, cc, own), 4*n)
	for _, pattern := range []string{"job:*", "ev:*", "prog:*"} {
		for addr, k := range keysPerMaster(t, cc, b.q.keys.prefix+pattern) {
			if k != 0 {
				t.Errorf("ended: %d keys %s%s left on %s", k, b.q.keys.prefix, pattern, addr)
			}
		}
	}
	if left, err := b.rdb.ZCard(b.ctx, b.q.keys.settle()).Result(); err != nil || left != 0 {
		t.Errorf("ended: %d jobs still to settle (%v)", left, err)
	}
	if got := b.status(t, ids[n-1]); got.Status != job.Stopped {
		t.Errorf("an ended job reads %s", got.Status)
	}
}

// parallel runs f for 0..n-1 on 16 goroutines and fails t on the first error.
func parallel(t *testing.T, n int, f func(i int) error) {
	t.Helper()
	next := make(chan int)
	errs := make(chan error, 16)
	var wg sync.WaitGroup
	for range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				if err := f(i); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case err := <-errs:
			close(next)
			wg.Wait()
			t.Fatal(err)
			break feed
		}
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		t.Fatal(err)
	default:
	}
}

func firstNonZero(m map[string]int) string {
	for k, v := range m {
		if v != 0 {
			return k
		}
	}
	return ""
}
