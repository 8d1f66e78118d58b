package queue

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
)

// Every queue test runs twice: on one redis-server and on a three-node Redis Cluster. Both are
// real servers, started once for the package; each test gets its own key prefix (which is also
// its hash tag, so on the cluster different tests land on different nodes).

type backend struct {
	name   string
	client redis.UniversalClient
}

var backends []backend

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	dir, err := os.MkdirTemp("", "queue-test")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	ctx := context.Background()
	single, err := redisproc.Start(ctx, redisproc.Options{Dir: filepath.Join(dir, "single")})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer single.Stop()
	cluster, err := redistest.StartCluster(ctx, filepath.Join(dir, "cluster"))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer cluster.Stop()
	sc := redis.NewClient(&redis.Options{Addr: single.Addr, PoolSize: 64})
	cc := cluster.Client()
	defer sc.Close()
	defer cc.Close()
	backends = []backend{{"single", sc}, {"cluster", cc}}
	return m.Run()
}

// fakeClock is a clock the test moves by hand.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

type bundle struct {
	q     *Client
	rdb   redis.UniversalClient
	clock *fakeClock
	ctx   context.Context
	cfg   Config
}

var prefixes atomic.Int64

func setup(t *testing.T, be backend, adjust ...func(*Config)) bundle {
	t.Helper()
	clock := &fakeClock{now: time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)}
	cfg := Config{
		Prefix: fmt.Sprintf("t%d", prefixes.Add(1)), LeaseTTL: 30 * time.Second, MaxAttempts: 2,
		StopGrace: time.Minute, Now: clock.Now,
	}
	for _, f := range adjust {
		f(&cfg)
	}
	q := New(be.client, cfg)
	t.Cleanup(func() { _ = q.Close() })
	return bundle{q: q, rdb: be.client, clock: clock, ctx: context.Background(), cfg: q.cfg}
}

// each runs f on every backend, in parallel.
func each(t *testing.T, f func(t *testing.T, b bundle), adjust ...func(*Config)) {
	t.Helper()
	for _, be := range backends {
		t.Run(be.name, func(t *testing.T) {
			t.Parallel()
			f(t, setup(t, be, adjust...))
		})
	}
}

// jobSpec is a small rl job needing gpus H100s (0: none).
func jobSpec(name string, gpus int) jobspec.Spec {
	return jobspec.Spec{Kind: "rl", Name: name, Model: "m", MaxSteps: 10, BatchSize: 8, RolloutsPerExample: 4,
		Env:       []jobspec.Env{{ID: "primeintellect/alphabet-sort", Weight: 1}},
		Resources: jobspec.Resources{GPUs: gpus, GPUType: "H100"}}
}

func (b bundle) submitSpec(t *testing.T, org string, spec jobspec.Spec) *job.Job {
	t.Helper()
	j, _, err := b.q.Submit(b.ctx, job.Submission{Org: org, Spec: spec}, "", "")
	if err != nil {
		t.Fatalf("submit: %v", err)
	}
	return j
}

func (b bundle) submit(t *testing.T, org, name string) *job.Job {
	t.Helper()
	return b.submitSpec(t, org, jobSpec(name, 0))
}

var h100x8 = []job.GPU{{Model: "H100", Count: 8}}

func (b bundle) claimFor(t *testing.T, agent string, gpus []job.GPU) *job.Claim {
	t.Helper()
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: agent, GPUs: gpus})
	if err != nil {
		t.Fatalf("claim: %v", err)
	}
	return cl
}

func (b bundle) claim(t *testing.T) *job.Claim {
	t.Helper()
	cl := b.claimFor(t, "agent-1", h100x8)
	if cl == nil {
		t.Fatal("claim: got nothing, want a job")
	}
	return cl
}

func (b bundle) status(t *testing.T, id string) *job.Job {
	t.Helper()
	j, err := b.q.Get(b.ctx, id)
	if err != nil {
		t.Fatalf("get %s: %v", id, err)
	}
	return j
}

func (b bundle) eventTypes(t *testing.T, id string) []string {
	t.Helper()
	evs, err := b.q.Events(b.ctx, id, 0, 100)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for i, e := range evs {
		if e.Seq != int64(i+1) {
			t.Errorf("event %d has seq %d, want %d", i, e.Seq, i+1)
		}
		out = append(out, e.Type)
	}
	return out
}

func (b bundle) running(t *testing.T, id string, cl *job.Claim) {
	t.Helper()
	if _, err := b.q.Heartbeat(b.ctx, id, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
		t.Fatal(err)
	}
}

// beat sends a running job's heartbeat and answers what the queue told the agent to do.
func (b bundle) beat(t *testing.T, id string, cl *job.Claim) job.Action {
	t.Helper()
	rep, err := b.q.Heartbeat(b.ctx, id, job.Heartbeat{Token: cl.Lease.Token, Running: true})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Action
}

func (b bundle) reap(t *testing.T) int {
	t.Helper()
	n, _, err := b.q.Reap(b.ctx, 100)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func equal(a, b []string) bool { return fmt.Sprint(a) == fmt.Sprint(b) }
