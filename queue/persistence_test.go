package queue

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
)

// TestEveryAcknowledgedJobSurvivesARestart restarts redis-server (AOF on, appendfsync
// everysec, as production runs it) while submitters and agents are busy, and then finds every
// submit and every completion that was acknowledged. Clients retry through the outage;
// submits retry under their Idempotency-Key, so a retried submit never makes a second job.
func TestEveryAcknowledgedJobSurvivesARestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	port, err := redisproc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	opts := redisproc.Options{Dir: dir, Port: port, AppendOnly: true}
	srv, err := redisproc.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { srv.Stop() }()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, MaxRetries: -1, PoolSize: 32})
	defer rdb.Close()
	q := New(rdb, Config{Prefix: "persist", LeaseTTL: time.Hour})
	defer q.Close()

	var (
		mu        sync.Mutex
		submitted = map[string]bool{} // acknowledged submits
		completed = map[string]bool{} // acknowledged completions
		stop      atomic.Bool
		attempts  atomic.Int64
		uncertain atomic.Int64 // submits given up mid-retry at the end: they may or may not exist
		wg        sync.WaitGroup
	)
	// retry runs op until it succeeds or the test is over; errors while Redis is down are
	// expected.
	retry := func(op func() error) error {
		for {
			err := op()
			if err == nil || errors.Is(err, job.ErrLeaseLost) || errors.Is(err, job.ErrNotFound) {
				return err
			}
			if stop.Load() {
				return err
			}
			attempts.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
	}
	for w := range 4 {
		wg.Add(1)
		go func() { // a submitter
			defer wg.Done()
			for i := 0; !stop.Load(); i++ {
				key := fmt.Sprintf("w%d-%d", w, i)
				var j *job.Job
				err := retry(func() error {
					var err error
					j, _, err = q.Submit(ctx, job.Submission{Org: fmt.Sprintf("org%d", w%2), Spec: jobSpec(key, 1)}, key, key)
					return err
				})
				if err == nil {
					mu.Lock()
					submitted[j.ID] = true
					mu.Unlock()
				} else {
					uncertain.Add(1)
				}
			}
		}()
	}
	for a := range 2 {
		wg.Add(1)
		go func() { // an agent that claims and completes
			defer wg.Done()
			for !stop.Load() {
				var cl *job.Claim
				if err := retry(func() error {
					var err error
					cl, err = q.Claim(ctx, job.ClaimRequest{AgentID: fmt.Sprint("agent", a), GPUs: h100x8})
					return err
				}); err != nil || cl == nil {
					continue
				}
				if err := retry(func() error {
					_, err := q.Complete(ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token})
					return err
				}); err == nil {
					mu.Lock()
					completed[cl.Job.ID] = true
					mu.Unlock()
				}
			}
		}()
	}

	count := func() (int, int) {
		mu.Lock()
		defer mu.Unlock()
		return len(submitted), len(completed)
	}
	testwait.Until(t, 30*time.Second, "load to build up", func() bool { s, c := count(); return s > 200 && c > 50 })
	srv.Stop() // SIGTERM: redis-server flushes the AOF and exits
	before, _ := count()
	if srv, err = redisproc.Start(ctx, opts); err != nil {
		t.Fatalf("restart: %v", err)
	}
	testwait.Until(t, 30*time.Second, "load to go on after the restart", func() bool { s, _ := count(); return s > before+200 })
	stop.Store(true)
	wg.Wait()
	if attempts.Load() == 0 {
		t.Error("no request failed during the restart: the test did not exercise an outage")
	}

	mu.Lock()
	defer mu.Unlock()
	for id := range submitted {
		j, err := q.Get(ctx, id)
		if err != nil {
			t.Fatalf("acknowledged job %s is gone after the restart: %v", id, err)
		}
		if completed[id] && j.Status != job.Completed {
			t.Errorf("job %s was acknowledged COMPLETED but is %s", id, j.Status)
		}
	}
	for id := range completed {
		if !submitted[id] {
			// Claimed before its submit's answer got back: still must exist.
			if _, err := q.Get(ctx, id); err != nil {
				t.Errorf("completed job %s is gone: %v", id, err)
			}
		}
	}
	total := 0
	for _, org := range []string{"org0", "org1"} {
		jobs, _, err := q.List(ctx, org, job.ListFilter{}, "", 100000)
		if err != nil {
			t.Fatal(err)
		}
		total += len(jobs)
	}
	if total < len(submitted) || total > len(submitted)+int(uncertain.Load()) {
		t.Errorf("%d jobs stored for %d acknowledged submits (%d unanswered): a retry made a second job, or a job went missing",
			total, len(submitted), uncertain.Load())
	}
	t.Logf("%d submits and %d completions acknowledged across the restart; %d requests retried", len(submitted), len(completed), attempts.Load())
}
