// Package queue keeps jobs, the fair queue, leases and events in Redis. Every state change is
// one Lua script — one round trip, atomic — that also appends the change to the job's event
// stream and to the webhook outbox, so a job is never in two states or none and no change goes
// unrecorded.
//
// Scheduling: each organization has one queue per GPU class (model and count); organizations
// are served in weighted fair order of their decayed GPU-seconds, each skipped while at its
// running limit; within one, the best job (priority, then age) among the class heads that fit
// the claiming agent's free GPUs runs next.
package queue

import (
	"cmp"
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	mrand "math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redisfn"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Config configures a Client. Zero fields take the defaults of withDefaults.
type Config struct {
	// Prefix namespaces every key (and is their Redis Cluster hash tag). Default "ht".
	Prefix string
	// LeaseTTL is how long a claim or heartbeat keeps a lease alive. Default 60 s.
	LeaseTTL time.Duration
	// HeartbeatInterval is what agents are told to heartbeat at. Default LeaseTTL / 4.
	HeartbeatInterval time.Duration
	// MaxAttempts is how many attempts a job may have: an attempt that ends in a lost lease or
	// a failure its agent read as the platform's fault (job.FailureAnalysis) is retried until
	// then. Default 3.
	MaxAttempts int
	// RetryBackoff is the wait before the second attempt; it doubles with each further one, up
	// to RetryBackoffMax, with ±20% jitter. Defaults 10 s and 10 min.
	RetryBackoff, RetryBackoffMax time.Duration
	// RetryElsewhereFor is how long, once its backoff ends, a retried job is kept from the agent
	// whose attempt failed, so that another node takes it if there is one. Default 5 min;
	// negative: never.
	RetryElsewhereFor time.Duration
	// QuarantineAfter failed health checks of one node within QuarantineWindow take it out of
	// rotation: it claims nothing until an operator uncordons it. A check is the agent's own
	// look at its node — the GPU driver, the kernel's log, its own probes — never what a job
	// printed: a job's output may make the agent check, nothing more. Failed checks of one
	// organization's jobs count once; lost leases are recorded (the node's recent faults) and
	// make the agent check, but never quarantine by themselves. Defaults 1 and 1 h; negative:
	// never.
	QuarantineAfter  int
	QuarantineWindow time.Duration
	// MaxClaimWait caps how long a claim may wait for work. Default job.DefaultClaimWait.
	MaxClaimWait time.Duration
	// UsageHalfLife is how fast past GPU use stops counting against an organization's share.
	// Default 24 h.
	UsageHalfLife time.Duration
	// ClaimQuantum is the GPU time charged to an organization when one of its jobs is claimed
	// (and refunded if the job ends sooner), so a burst of claims is shared fairly before any
	// heartbeat has charged the real use. Default 60 s.
	ClaimQuantum time.Duration
	// StopGrace is how long the agent of a stopped job has to confirm before the job is
	// STOPPED regardless. Default 5 min.
	StopGrace time.Duration
	// DefaultTimeLimit bounds a run whose job sets no time_limit; 0 for none.
	DefaultTimeLimit time.Duration
	// MaxRunning is the per-organization running limit unless an organization has its own; 0
	// for none.
	MaxRunning int
	// MaxQueued is the per-organization queued limit unless an organization has its own: how
	// many jobs may wait at once, restarted ones included. Default 1000.
	MaxQueued int
	// Retention is how long a job that ended stays in Redis; the archiver then moves it to
	// Store. Default 7 days.
	Retention time.Duration
	// MaxEnded is how many jobs that ended within the retention an organization may keep in
	// Redis; past it the archiver moves its oldest ones early, so no organization fills Redis
	// by submitting and cancelling. Default 10000.
	MaxEnded int
	// Store is the object storage that keeps the record of each job the archiver moved out of
	// Redis, and that Get and Events read such a job from, and a copy of each job's inputs
	// (inputs.go); nil keeps every job, and its inputs, in Redis.
	Store blob.Store
	// MaxOrgBytes bounds what one organization holds in Redis (inputs.go): past it a submit or
	// a restart is a *job.LimitError (Limit "bytes"). Default DefaultMaxOrgBytes; negative: no
	// bound.
	MaxOrgBytes int64
	// IdempotencyTTL is how long an Idempotency-Key is remembered. Default 24 h.
	IdempotencyTTL time.Duration
	// RevocationStaleness bounds how old this process's copy of the revoked tokens may be
	// when a request is checked against it: a revocation reaches every API process within it.
	// Default 1 s.
	RevocationStaleness time.Duration
	// StorageEvery is how often the storage meter measures each live job's objects (storage.go);
	// a job that ended is measured once, soon after. Default 5 min.
	StorageEvery time.Duration
	// Deployments (deployments.go): the adapters one model server holds (default
	// DefaultAdaptersPerServer), the adapters one organization may file (DefaultMaxAdapters), and
	// how long a deployed adapter no request reached stays loaded (DefaultDeploymentIdle;
	// negative: for ever).
	AdaptersPerServer int
	MaxAdapters       int
	DeploymentIdle    time.Duration
	// WaitForWeights turns on delay scheduling: a job whose model's weights another node holds
	// waits for such a node up to WaitForWeights times their download (the job's weights at
	// WeightsRate) before a node that lacks them takes it. 0 (the default): it never waits —
	// docs/performance.md shows what waiting costs users and saves in bytes.
	WaitForWeights float64
	// WeightsRate is the rate, in bytes a second, at which a claim reckons a node downloads a
	// model's weights. Default DefaultWeightsRate.
	WeightsRate float64
	// HeldTTL is how long what a node said it holds, with a claim, counts as held: a job waits
	// only for a node that claimed within it. Default DefaultHeldTTL.
	HeldTTL time.Duration
	// Now is the clock; tests replace it. Default time.Now.
	Now func() time.Time
}

// The queue's defaults, named once (Config's fields say what each is).
const (
	DefaultPrefix            = "ht"
	DefaultLeaseTTL          = 60 * time.Second
	DefaultMaxAttempts       = 3
	DefaultRetryBackoff      = 10 * time.Second
	DefaultRetryBackoffMax   = 10 * time.Minute
	DefaultRetryElsewhereFor = 5 * time.Minute
	DefaultQuarantineAfter   = 1
	DefaultQuarantineWindow  = time.Hour
	DefaultUsageHalfLife     = 24 * time.Hour
	DefaultClaimQuantum      = 60 * time.Second
	DefaultStopGrace         = 5 * time.Minute
	DefaultIdempotencyTTL    = 24 * time.Hour
	DefaultRevocationStale   = time.Second
	DefaultStorageEvery      = 5 * time.Minute
	// The limits that bound what one organization keeps in Redis.
	DefaultMaxQueued = 1000
	DefaultRetention = 7 * 24 * time.Hour
	DefaultMaxEnded  = 10000
	// Deployments.
	DefaultAdaptersPerServer = 8
	DefaultMaxAdapters       = 1000
	DefaultDeploymentIdle    = time.Hour
	// Cache-aware placement: weights download at 1 GB/s (a node's link to the Hugging Face
	// hub with parallel range requests), and a node's holdings count for an hour after its
	// last claim.
	DefaultWeightsRate = 1e9
	DefaultHeldTTL     = time.Hour
)

func (c Config) withDefaults() Config {
	c.Prefix = cmp.Or(c.Prefix, DefaultPrefix)
	c.LeaseTTL = cmp.Or(c.LeaseTTL, DefaultLeaseTTL)
	c.HeartbeatInterval = cmp.Or(c.HeartbeatInterval, c.LeaseTTL/4) // four heartbeats a lease
	c.MaxAttempts = cmp.Or(c.MaxAttempts, DefaultMaxAttempts)
	c.RetryBackoff = cmp.Or(c.RetryBackoff, DefaultRetryBackoff)
	c.RetryBackoffMax = cmp.Or(c.RetryBackoffMax, DefaultRetryBackoffMax)
	c.RetryElsewhereFor = cmp.Or(c.RetryElsewhereFor, DefaultRetryElsewhereFor)
	c.QuarantineAfter = cmp.Or(c.QuarantineAfter, DefaultQuarantineAfter)
	c.QuarantineWindow = cmp.Or(c.QuarantineWindow, DefaultQuarantineWindow)
	c.MaxClaimWait = cmp.Or(c.MaxClaimWait, job.DefaultClaimWait)
	c.UsageHalfLife = cmp.Or(c.UsageHalfLife, DefaultUsageHalfLife)
	c.ClaimQuantum = cmp.Or(c.ClaimQuantum, DefaultClaimQuantum)
	c.StopGrace = cmp.Or(c.StopGrace, DefaultStopGrace)
	c.IdempotencyTTL = cmp.Or(c.IdempotencyTTL, DefaultIdempotencyTTL)
	c.MaxOrgBytes = cmp.Or(c.MaxOrgBytes, DefaultMaxOrgBytes)
	c.RevocationStaleness = cmp.Or(c.RevocationStaleness, DefaultRevocationStale)
	c.StorageEvery = cmp.Or(c.StorageEvery, DefaultStorageEvery)
	c.MaxQueued = cmp.Or(c.MaxQueued, DefaultMaxQueued)
	c.Retention = cmp.Or(c.Retention, DefaultRetention)
	c.MaxEnded = cmp.Or(c.MaxEnded, DefaultMaxEnded)
	c.AdaptersPerServer = cmp.Or(c.AdaptersPerServer, DefaultAdaptersPerServer)
	c.MaxAdapters = cmp.Or(c.MaxAdapters, DefaultMaxAdapters)
	c.DeploymentIdle = cmp.Or(c.DeploymentIdle, DefaultDeploymentIdle)
	c.WeightsRate = cmp.Or(c.WeightsRate, DefaultWeightsRate)
	c.HeldTTL = cmp.Or(c.HeldTTL, DefaultHeldTTL)
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Client is the queue over one Redis (a single server or a cluster). It is its surfaces
// together, each a small type of its own that a caller needing only one can take:
//
//   - Jobs: submit, read and list jobs, their events, cancel, restart, delete, budgets and
//     places in the queue — what users do (queue.go, delete.go);
//   - Leases: claim, heartbeat, complete, fail, release — what agents do (queue.go);
//   - Fleet: node health and idle capacity (nodes.go);
//   - Orgs: an organization's settings, usage and stored bytes (orgs.go, judge.go, storage.go);
//   - Tokens: revoked API tokens (revoke.go);
//   - WebhookOutbox: the events webhooks deliver (outbox.go);
//   - Streams: the places of open event and log streams (streams.go);
//   - Deployments: adapters (committed checkpoints' weights), deploying them on model servers
//     (serve jobs) and unloading them, what serve agents hold (deployments.go);
//   - Maintenance: the reaper's duties — reap, settle, archive, expire, delete, migrate, meter
//     (reaper.go runs them).
//
// All share one store: the Redis client, the settings, the key names and the function library.
type Client struct {
	*store
	Jobs
	Leases
	Fleet
	Orgs
	Tokens
	WebhookOutbox
	Streams
	Deployments
	Maintenance
}

// The queue's surfaces (see Client).
type (
	Jobs          struct{ *store }
	Leases        struct{ *store }
	Fleet         struct{ *store }
	Orgs          struct{ *store }
	Tokens        struct{ *store }
	WebhookOutbox struct{ *store }
	Streams       struct{ *store }
	Deployments   struct{ *store }
	Maintenance   struct{ *store }
)

// store is what the surfaces share.
type store struct {
	rdb      redis.UniversalClient
	cfg      Config
	keys     keys
	tau      int64 // usage decay time constant, ms
	wakeup   *notifier
	funcs    *redisfn.Caller
	revoked  revocations
	split    bool // a cluster: a job's own keys are out of a queue function's reach (settle.go)
	migrated migrated
	// storedFiled: the jobs from before the storage meter were filed for it (storage.go).
	storedFiled atomic.Bool
}

// New returns a Client. Close it to stop its pub/sub subscription. It marks the errors of
// rdb's calls that say Redis cannot serve now with ErrUnavailable (a hook, installed once per
// client).
func New(rdb redis.UniversalClient, cfg Config) *Client {
	cfg = cfg.withDefaults()
	markUnavailable(rdb)
	k := newKeys(cfg.Prefix)
	s := &store{
		rdb: rdb, cfg: cfg, keys: k,
		tau:    int64(float64(cfg.UsageHalfLife.Milliseconds()) / math.Ln2),
		wakeup: newNotifier(rdb, k.wake(randomHex(8))),
		funcs:  redisfn.NewCaller(rdb, library),
		split:  isCluster(rdb),
	}
	return &Client{store: s, Jobs: Jobs{s}, Leases: Leases{s}, Fleet: Fleet{s}, Orgs: Orgs{s}, Tokens: Tokens{s},
		WebhookOutbox: WebhookOutbox{s}, Streams: Streams{s}, Deployments: Deployments{s}, Maintenance: Maintenance{s}}
}

func isCluster(rdb redis.UniversalClient) bool {
	_, ok := rdb.(*redis.ClusterClient)
	return ok
}

// Close stops the wake-up subscription; the Redis client is the caller's to close.
func (c *Client) Close() error {
	c.wakeup.close()
	return nil
}

// HeartbeatInterval is how often agents should heartbeat.
func (c *Client) HeartbeatInterval() time.Duration { return c.cfg.HeartbeatInterval }

// Ping checks that Redis answers.
func (c *Client) Ping(ctx context.Context) error { return c.rdb.Ping(ctx).Err() }

func ms(t time.Time) int64 { return t.UnixMilli() }

// Submit stores a new job and queues it. An empty ID gets a new one. With idempotencyKey set,
// a repeat of the same fingerprint returns the job first created under that key (replayed is
// true); another fingerprint is an *job.IdempotencyConflictError. Past the organization's
// queued limit it is a *job.LimitError.
func (c Jobs) Submit(ctx context.Context, sub job.Submission, idempotencyKey, fingerprint string) (j *job.Job, replayed bool, err error) {
	if sub.ID == "" {
		if sub.ID, err = job.NewID(); err != nil {
			return nil, false, err
		}
	}
	cfg, err := jobspec.Encode(sub.Spec)
	if err != nil {
		return nil, false, fmt.Errorf("queue: encode config: %w", err)
	}
	now := c.cfg.Now()
	prog := job.Progress{MaxSteps: sub.Spec.MaxSteps}
	limit := sub.Spec.TimeLimitDuration()
	if limit == 0 {
		limit = c.cfg.DefaultTimeLimit
	}
	// A class queue ranks by priority, then age: (100 - priority) * 2^42 + enqueue time (ms).
	rank := int64(100-sub.Spec.Priority)<<42 + ms(now)
	// The config and secrets go to the job's own slot: in the submit function on a single
	// server; on a cluster, before it, and deleted again if the submit does not create the job.
	config, secrets := string(cfg), sub.SealedSecrets
	// A copy of the inputs in object storage first: they leave Redis when the job ends.
	if c.cfg.Store != nil {
		if err := c.putInputs(ctx, sub.ID, config, secrets); err != nil {
			return nil, false, err
		}
	}
	cfgBytes, secBytes := len(config), len(secrets)
	if c.split {
		if err := c.putConfig(ctx, sub.ID, config, secrets); err != nil {
			return nil, false, err
		}
		config, secrets = "", ""
	}
	res, err := c.callAt(ctx, now, "submit", c.keys.job(sub.ID), args{
		"id": sub.ID, "org": sub.Org, "kind": sub.Spec.Kind, "name": sub.Spec.Name, "config": config,
		"max_attempts": c.cfg.MaxAttempts, "max_steps": sub.Spec.MaxSteps, "secrets": secrets,
		"priority": sub.Spec.Priority, "class": sub.Spec.Class(), "gpus": sub.Spec.Resources.GPUs,
		"time_limit": limit.Milliseconds(), "idem_key": idempotencyKey, "fingerprint": fingerprint,
		"idem_ttl": c.cfg.IdempotencyTTL.Milliseconds(), "rank": rank, "budget_ms": sub.BudgetGPUMs,
		"est_ms": sub.EstimateGPUMs, "by": sub.CreatedBy, "token": sub.TokenID,
		"price_micro": int64(math.Round(sub.PricePerGPUHour * 1e6)),
		"cfg_bytes":   cfgBytes, "sec_bytes": secBytes, "needs": strings.Join(jobspec.CacheNeeds(sub.Org, sub.Spec), " "),
		"weights": weightsBytes(sub.Spec.Model),
	}).StringSlice()
	var refused redis.Error
	if errors.As(err, &refused) || (err == nil && res[0] != "created") {
		// Only when the function answered that it made no job: with no answer (a lost reply,
		// a cancelled request) it may have made one, and the config must stay.
		if c.split {
			c.dropConfig(ctx, sub.ID)
		}
		_ = c.dropInputs(context.WithoutCancel(ctx), sub.ID)
	}
	if err != nil {
		return nil, false, c.submitErr(sub.Org, err)
	}
	if res[0] == "replayed" {
		j, err := c.Get(ctx, res[1])
		return j, true, err
	}
	t := now.UTC().Truncate(time.Millisecond)
	return &job.Job{
		ID: sub.ID, Org: sub.Org, Kind: sub.Spec.Kind, Name: sub.Spec.Name, Status: job.Queued,
		Config: sub.Spec, Attempt: 1, MaxAttempts: c.cfg.MaxAttempts, Progress: prog,
		BudgetGPUSeconds: float64(sub.BudgetGPUMs) / 1000,
		CreatedAt:        t, UpdatedAt: t, CreatedBy: sub.CreatedBy, TokenID: sub.TokenID,
	}, false, nil
}

// putConfig writes a job's config and secrets to its own slot (on a cluster, before its submit).
func (c *store) putConfig(ctx context.Context, id, config, secrets string) error {
	kv := []any{c.keys.own(id, "owncfg"), config}
	if secrets != "" {
		kv = append(kv, c.keys.own(id, "ownsec"), secrets)
	}
	if err := c.rdb.MSet(ctx, kv...).Err(); err != nil {
		return fmt.Errorf("queue: submit: store config: %w", err)
	}
	return nil
}

// dropConfig deletes what putConfig wrote for a submit that created no job. Should it fail (or
// the process die before it), the keys stay: a config nothing refers to.
func (c *store) dropConfig(ctx context.Context, id string) {
	_ = c.rdb.Del(context.WithoutCancel(ctx), c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Err()
}

func (c *store) submitErr(org string, err error) error {
	if lim := limitErr(org, err); lim != nil {
		return lim
	}
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	if id, ok := strings.CutPrefix(msg, "IDEMPOTENCY_CONFLICT "); ok {
		return &job.IdempotencyConflictError{JobID: id}
	}
	return scriptErr("submit", err)
}

// limitErr reads a LIMIT_QUEUED error reply; nil for any other error.
func limitErr(org string, err error) *job.LimitError {
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	if f := strings.Fields(msg); len(f) == 3 && (f[0] == "LIMIT_QUEUED" || f[0] == "LIMIT_BYTES") {
		cur, _ := strconv.Atoi(f[1])
		max, _ := strconv.Atoi(f[2])
		limit := "queued"
		if f[0] == "LIMIT_BYTES" {
			limit = "bytes"
		}
		return &job.LimitError{Org: org, Limit: limit, Current: cur, Max: max}
	}
	return nil
}

// Get returns a job.
func (c Jobs) Get(ctx context.Context, id string) (*job.Job, error) {
	jobs, err := c.getMany(ctx, []string{id})
	if err != nil {
		return nil, fmt.Errorf("queue: get %s: %w", id, err)
	}
	if len(jobs) == 0 {
		return c.archived(ctx, id)
	}
	return jobs[0], nil
}

// getMany reads jobs (the hash, the config and the progress of each) in one round trip,
// skipping ids with no job. A job's record is in the queue's slot while it is live and in its
// own slot once it has ended and moved (settle.go): both are read, and the queue's copy wins.
func (c *store) getMany(ctx context.Context, ids []string) ([]*job.Job, error) {
	return c.getManyOnce(ctx, ids, false)
}

func (c *store) getManyOnce(ctx context.Context, ids []string, reread bool) ([]*job.Job, error) {
	hashes := make([]*redis.MapStringStringCmd, len(ids))
	progs := make([]*redis.StringCmd, len(ids))
	owns := make([]*redis.MapStringStringCmd, len(ids))
	strs := make([]*redis.SliceCmd, len(ids))
	// Until the store is migrated (migrate.go), a job's config may still be at its old key.
	legacy := !c.migrated.done.Load()
	olds := make([]*redis.StringCmd, len(ids))
	var done *redis.StringCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			hashes[i] = p.HGetAll(ctx, c.keys.job(id))
			progs[i] = p.Get(ctx, c.keys.progress(id))
			owns[i] = p.HGetAll(ctx, c.keys.own(id, "ownjob"))
			strs[i] = p.MGet(ctx, c.keys.own(id, "owncfg"), c.keys.own(id, "ownprog"))
			if legacy {
				olds[i] = p.Get(ctx, c.keys.oldConfig(id))
			}
		}
		if legacy {
			done = p.HGet(ctx, c.keys.meta(), "own_done")
		}
		return nil
	})
	if legacy && done.Val() == "1" {
		c.migrated.done.Store(true)
	}
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	jobs := make([]*job.Job, 0, len(ids))
	var missing []string
	for i := range ids {
		v := strs[i].Val()
		cfg, _ := v[0].(string)
		if cfg == "" && legacy {
			cfg = olds[i].Val()
			if cfg == "" {
				// Moved by the reaper between the reads (on a cluster they are side by side).
				cfg = c.rdb.Get(ctx, c.keys.own(ids[i], "owncfg")).Val()
			}
		}
		m, prog := hashes[i].Val(), progs[i].Val()
		if len(m) == 0 || prog == "" {
			// Ended and moved (or moved between the reads: its progress went too).
			prog, _ = v[1].(string)
		}
		if len(m) == 0 {
			m = owns[i].Val()
		}
		if len(m) == 0 {
			missing = append(missing, ids[i])
			continue
		}
		if cfg == "" && m[jobField.Shed] == "1" {
			// A big config left Redis when the job ended: its copy in object storage has it.
			in, err := c.readInputs(ctx, ids[i])
			if err != nil {
				return nil, err
			}
			if in != nil {
				cfg = in.Config
			}
		}
		j, err := jobFromMap(m, cfg, prog, c.cfg.Now())
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	if c.split && len(missing) > 0 && !reread {
		// On a cluster the two slots are read side by side, not in order: a job that moved
		// between the reads is in its own slot now.
		again, err := c.getManyOnce(ctx, missing, true)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, again...)
		slices.SortFunc(jobs, func(a, b *job.Job) int { return slices.Index(ids, a.ID) - slices.Index(ids, b.ID) })
	}
	return jobs, nil
}

// List returns an organization's jobs that pass f, newest first, up to limit, and a cursor for
// the next page ("" when there is none). Job ids are UUIDv7, so the organization's index of
// ids (ordered by id) is ordered by creation time, and a time bound is a range of ids; status
// and kind are checked job by job. One call looks at no more than listScanMax jobs: a narrow
// filter over many jobs may return a short page with a cursor to go on from.
func (c Jobs) List(ctx context.Context, org string, f job.ListFilter, cursor string, limit int) (jobs []*job.Job, next string, err error) {
	if f.Kind != "" || len(f.Statuses) > 0 {
		return c.listIndexed(ctx, org, f, cursor, limit)
	}
	start, stop := "+", "-"
	if !f.CreatedBefore.IsZero() {
		start = "(" + idPrefix(f.CreatedBefore)
	}
	if cursor != "" && (start == "+" || "("+cursor < start) {
		start = "(" + cursor
	}
	if !f.CreatedAfter.IsZero() {
		stop = "[" + idPrefix(f.CreatedAfter)
	}
	scanned := 0
	for len(jobs) < limit && scanned < max(listScanMax, limit) {
		batch := max(limit-len(jobs), 20)
		ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
			Key: c.keys.orgJobs(org), Start: start, Stop: stop, ByLex: true, Rev: true, Count: int64(batch),
		}).Result()
		if err != nil {
			return nil, "", fmt.Errorf("queue: list: %w", err)
		}
		if len(ids) == 0 {
			return jobs, "", nil
		}
		page, err := c.getMany(ctx, ids)
		if err != nil {
			return nil, "", fmt.Errorf("queue: list: %w", err)
		}
		for _, j := range page {
			scanned++
			next = j.ID
			if matchesFilter(f, j) {
				jobs = append(jobs, j)
				if len(jobs) == limit {
					break
				}
			}
		}
		if len(page) > 0 {
			start = "(" + next
		}
		if len(ids) < batch && len(jobs) < limit {
			return jobs, "", nil
		}
	}
	// Whether anything is left past next: look one id ahead.
	more, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{Key: c.keys.orgJobs(org), Start: "(" + next, Stop: stop, ByLex: true, Rev: true, Count: 1}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("queue: list: %w", err)
	}
	if len(more) == 0 {
		next = ""
	}
	return jobs, next, nil
}

// listScanMax bounds the jobs one List call reads.
const listScanMax = 2000

// idPrefix is the start of the UUIDv7 ids of jobs created at t: its 48-bit millisecond time
// as hex, "xxxxxxxx-xxxx".
func idPrefix(t time.Time) string {
	m := uint64(t.UnixMilli())
	return fmt.Sprintf("%08x-%04x", m>>16, m&0xffff)
}

// Events returns the job's events with a sequence number above after, oldest first, at most
// limit of them. A job's events are a list (in the queue's slot while it is live, in its own
// once it has ended: settle.go); an event's position in it is its sequence number.
func (c Jobs) Events(ctx context.Context, id string, after int64, limit int) ([]job.Event, error) {
	return c.events(ctx, id, after, limit, false)
}

func (c *store) events(ctx context.Context, id string, after int64, limit int, reread bool) ([]job.Event, error) {
	var events, owned *redis.StringSliceCmd
	var exists, ownExists *redis.IntCmd
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		// The live list before the live hash: if the hash is still there after the list was
		// read, the list was the live one (a job moves to its own slot, never back but by a
		// restart, which copies its events).
		events = p.LRange(ctx, c.keys.events(id), after, after+int64(limit)-1)
		exists = p.Exists(ctx, c.keys.job(id))
		ownExists = p.Exists(ctx, c.keys.own(id, "ownjob"))
		owned = p.LRange(ctx, c.keys.own(id, "ownev"), after, after+int64(limit)-1)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("queue: events %s: %w", id, err)
	}
	if c.split && exists.Val() == 0 && ownExists.Val() == 0 && !reread {
		// Read side by side on a cluster: a job that moved between the reads is in its own
		// slot now.
		return c.events(ctx, id, after, limit, true)
	}
	raw := events.Val()
	switch {
	case exists.Val() == 1:
	case ownExists.Val() == 1:
		raw = owned.Val()
	case c.cfg.Store != nil:
		// An archived job's events are in its record.
		rec, err := c.record(ctx, id)
		if errors.Is(err, job.ErrNotFound) {
			return []job.Event{}, nil
		}
		if err != nil {
			return nil, err
		}
		raw = rec.Events[min(after, int64(len(rec.Events))):min(after+int64(limit), int64(len(rec.Events)))]
	}
	return parseEvents(id, after, raw)
}

// parseEvents reads events as a job's list holds them; the first is number after + 1.
func parseEvents(id string, after int64, raw []string) ([]job.Event, error) {
	out := make([]job.Event, 0, len(raw))
	for i, r := range raw {
		// "time|type|status|detail"; the detail is last because it may hold a "|".
		f := strings.SplitN(r, "|", 4)
		if len(f) != 4 {
			return nil, fmt.Errorf("queue: event %d of %s is malformed: %q", after+int64(i)+1, id, r)
		}
		at, _ := strconv.ParseInt(f[0], 10, 64)
		out = append(out, job.Event{
			Seq: after + int64(i) + 1, Type: f[1], JobID: id, Status: job.Status(f[2]),
			Time: time.UnixMilli(at).UTC(), Detail: f[3],
		})
	}
	return out, nil
}

// Cancel stops a job: at once if it is queued, through its agent if one holds it.
func (c Jobs) Cancel(ctx context.Context, id string) (*job.Job, error) {
	err := c.call(ctx, "cancel", c.keys.job(id), args{"id": id, "grace": c.cfg.StopGrace.Milliseconds()}).Err()
	c.settleSoon(ctx, id)
	if err != nil {
		err = scriptErr("cancel", err)
		if errors.Is(err, job.ErrNotFound) {
			// Not in the queue's slot: a job that ended and moved to its own.
			if j, gerr := c.Get(ctx, id); gerr == nil {
				if j.Status == job.Stopped {
					return j, nil
				}
				return nil, fmt.Errorf("queue: cancel: job is %s: %w", j.Status, job.ErrConflict)
			} else if !errors.Is(gerr, job.ErrNotFound) {
				return nil, gerr
			}
		}
		if errors.Is(err, job.ErrNotFound) {
			// An archived job ended long ago: stopping a stopped one is a no-op, as in Redis.
			j, aerr := c.archived(ctx, id)
			if aerr != nil {
				return nil, aerr
			}
			if j.Status == job.Stopped {
				return j, nil
			}
			return nil, fmt.Errorf("queue: cancel: job is %s: %w", j.Status, ErrArchived)
		}
		return nil, err
	}
	return c.Get(ctx, id)
}

// ErrDeleting is a change asked of a job whose delete has begun (BeginDelete): its data may be
// gone already. It is a job.ErrConflict.
var ErrDeleting = fmt.Errorf("a delete of the job has begun (its data may be gone): send the delete again to finish it: %w", job.ErrConflict)

// ErrArchived is a change asked of a job that was moved out of Redis to its record in object
// storage: it ended more than the retention ago and can only be read. It is a job.ErrConflict.
var ErrArchived = fmt.Errorf("the job ended more than the retention ago and is archived: %w", job.ErrConflict)

// Restart runs a FAILED or STOPPED job again from its newest checkpoint; a RUNNING or PENDING
// one is stopped first and then queued again. A restart counts against the organization's
// queued limit as a submit does: past it the answer is a *job.LimitError. An archived job is
// ErrArchived.
func (c Jobs) Restart(ctx context.Context, id string) (*job.Job, error) {
	// A restart takes back a stop-then-delete: the job is wanted again. (Once the reaper has
	// begun its delete, the restart is refused: ErrDeleting.)
	if err := c.rdb.SRem(ctx, c.keys.fixed("DELETE_ON_END"), id).Err(); err != nil {
		return nil, fmt.Errorf("queue: restart %s: %w", id, err)
	}
	// An ended job's inputs left Redis: they come back from their copy first.
	if rec, err := c.jobHash(ctx, id); err != nil {
		return nil, fmt.Errorf("queue: restart %s: %w", id, err)
	} else if err := c.restoreInputs(ctx, id, rec); err != nil {
		return nil, err
	}
	restart := func(revive args, rest ...any) error {
		a := args{"id": id, "grace": c.cfg.StopGrace.Milliseconds(), "revive": "", "progress": "", "nfields": 0}
		maps.Copy(a, revive)
		err := c.call(ctx, "restart", c.keys.job(id), a, rest...).Err()
		c.settleSoon(ctx, id)
		return err
	}
	err := restart(nil)
	if err != nil && errors.Is(scriptErr("restart", err), job.ErrNotFound) {
		// A job that ended and moved to its own slot: it comes back with its record.
		rec, rerr := c.readRecord(ctx, id, true)
		if rerr != nil {
			return nil, fmt.Errorf("queue: restart %s: %w", id, rerr)
		}
		if len(rec.hash) > 0 {
			err = restart(args{"revive": "1", "progress": rec.progress, "nfields": 2 * len(rec.hash)}, rec.flat()...)
		}
	}
	if err != nil {
		if lim := limitErr("", err); lim != nil {
			if j, gerr := c.Get(ctx, id); gerr == nil {
				lim.Org = j.Org
			}
			return nil, lim
		}
		err = scriptErr("restart", err)
		if errors.Is(err, job.ErrNotFound) {
			if _, aerr := c.archived(ctx, id); aerr != nil {
				return nil, aerr
			}
			return nil, fmt.Errorf("queue: restart: %w", ErrArchived)
		}
		return nil, err
	}
	return c.Get(ctx, id)
}

// Claim hands the next job that fits req.GPUs to an agent. When nothing fits it waits up to
// req.Wait (capped by MaxClaimWait) for a job it could take to be queued, and returns nil, nil
// if none came. While it waits it is filed in Redis as a waiter (see notify.go), so only a job
// that fits it wakes it.
func (c Leases) Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error) {
	wait := min(req.Wait, c.cfg.MaxClaimWait)
	free, gpuOnly := encodeGPUs(req.GPUs), boolArg(req.GPUJobsOnly)
	if wait <= 0 {
		cl, _, err := c.TryClaim(ctx, req)
		return cl, err
	}
	deadline := time.NewTimer(wait)
	defer deadline.Stop()
	until := c.cfg.Now().Add(wait)
	w := c.wakeup.add()
	defer c.wakeup.remove(w)
	member := c.wakeup.channel + " " + w.id + " " + free + " " + map[bool]string{true: "0", false: "1"}[req.GPUJobsOnly]
	filed := false // whether Redis may hold member as a waiter
	defer func() {
		if filed {
			// The wait ended without a wake-up: take the waiter back, bounded, whatever ctx is.
			uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
			defer cancel()
			_ = c.call(uctx, "unwait", c.keys.leases(), args{"waiter": member}).Err()
		}
	}()
	for {
		// Take the wake-up channel before looking, so a wake-up between the look and the
		// wait still wakes us.
		woken, subscribed := c.wakeup.wait(ctx, w)
		waiter := member
		if !subscribed && !filed {
			waiter = "" // nobody would hear a wake-up: the re-check finds the work
		}
		cl, nextReady, err := c.claimOnce(ctx, req, free, gpuOnly, waiter, until, filed)
		if err != nil || cl != nil {
			if cl != nil {
				filed = false // the claim took the waiter back
			}
			return cl, err
		}
		filed = filed || waiter != ""
		// Look again when a retry backoff ends, or after recheckEvery at the latest.
		again := recheckEvery
		if !nextReady.IsZero() {
			again = min(again, max(nextReady.Sub(c.cfg.Now()), time.Millisecond))
		}
		recheck := time.NewTimer(again)
		select {
		case <-woken:
			// A wake-up for this waiter took it out of Redis, but one passed on to every
			// waiter here did not, and the look may file it again: it is taken back on the way
			// out in any case (unwait is harmless twice).
		case <-recheck.C: // a wake-up lost while pub/sub reconnected, or a backoff that ended
		case <-deadline.C:
			recheck.Stop()
			return nil, nil
		case <-ctx.Done():
			recheck.Stop()
			return nil, ctx.Err()
		}
		recheck.Stop()
	}
}

// TryClaim claims as Claim does without waiting. When nothing is taken it says when a claim
// should look again, if a wait ends before a job is queued — a retry backoff, or a job's wait
// for a node that holds its weights — and the zero time if not.
func (c Leases) TryClaim(ctx context.Context, req job.ClaimRequest) (*job.Claim, time.Time, error) {
	return c.claimOnce(ctx, req, encodeGPUs(req.GPUs), boolArg(req.GPUJobsOnly), "", time.Time{}, false)
}

// heldArg writes what an agent's node holds as claim.lua reads it: space-separated cache needs
// (jobspec.CacheNeeds), the ones with spaces left out, at most maxHeld.
func heldArg(held []string) string {
	var b strings.Builder
	n := 0
	for _, h := range held {
		if h == "" || strings.ContainsAny(h, " \t\n") || n == maxHeld {
			continue
		}
		if n > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(h)
		n++
	}
	return b.String()
}

// weightsBytes is the size of a model's weights as a node downloads them, estimated from its
// architecture or the size in its name (internal/fit); 0 when neither says.
func weightsBytes(model string) int64 {
	if model == "" {
		return 0
	}
	b, _ := fit.Weights(model)
	return int64(b)
}

// weightsRateArg is the rate claim.lua divides a job's weights by for its longest wait for a
// node that holds them: bytes a millisecond, rate / factor; 0 for never waiting.
func weightsRateArg(rate, factor float64) string {
	if rate <= 0 || factor <= 0 {
		return "0"
	}
	return strconv.FormatFloat(rate/factor/1000, 'g', -1, 64)
}

// maxHeld bounds what one claim may say its node holds (the API refuses more).
const maxHeld = 256

// recheckEvery bounds how long a waiting claim trusts pub/sub alone.
const recheckEvery = 5 * time.Second

// encodeGPUs writes free GPUs as the scripts read them: "H100:8,A100:2", model names upper
// case, without spaces or the separators.
func encodeGPUs(gpus []job.GPU) string {
	parts := make([]string, 0, len(gpus))
	for _, g := range gpus {
		if g.Count > 0 {
			model := strings.Map(func(r rune) rune {
				if r == ' ' || r == ',' || r == ':' || r == '|' || r < 0x21 {
					return -1
				}
				return r
			}, strings.ToUpper(g.Model))
			parts = append(parts, model+":"+strconv.Itoa(g.Count))
		}
	}
	return strings.Join(parts, ",")
}

// claimOnce claims if something fits; if not, it reports when the next retry backoff ends.
//
// The script runs even if ctx ends while it is in flight: a claim made and then lost on the way
// back would hold the job until its lease lapsed. An agent that gives up on a claim abandons
// it by its claim id (AbandonClaim).
//
// waiter is "" or the waiter to file if nothing fits, until waitUntil; filed says whether an
// earlier look filed it (a claim made takes it back).
func (c *store) claimOnce(ctx context.Context, req job.ClaimRequest, free, gpuOnly, waiter string, waitUntil time.Time, filed bool) (*job.Claim, time.Time, error) {
	if err := ctx.Err(); err != nil {
		return nil, time.Time{}, err
	}
	now := c.cfg.Now()
	res, err := c.callAt(context.WithoutCancel(ctx), now, "claim", c.keys.leases(), args{
		"lease_ttl": c.cfg.LeaseTTL.Milliseconds(), "agent": req.AgentID, "token_rand": randomHex(12), "free": free,
		"quantum": c.cfg.ClaimQuantum.Milliseconds(), "lease_expires": ms(now.Add(c.cfg.LeaseTTL)),
		"paid_until": ms(now.Add(c.cfg.ClaimQuantum)), "gpu_only": gpuOnly, "claim_id": req.ClaimID,
		"waiter": waiter, "wait_until": ms(waitUntil), "filed": boolArg(filed), "health": healthArg(req.Health),
		"quarantine_after": c.cfg.QuarantineAfter, "quarantine_window": c.cfg.QuarantineWindow.Milliseconds(),
		"held": heldArg(req.Held), "weights_rate": weightsRateArg(c.cfg.WeightsRate, c.cfg.WaitForWeights),
		"held_ttl": c.cfg.HeldTTL.Milliseconds(),
	}).Result()
	if err != nil {
		return nil, time.Time{}, scriptErr("claim", err)
	}
	arr, ok := res.([]any)
	if !ok || len(arr) < 2 {
		return nil, time.Time{}, fmt.Errorf("queue: claim: unexpected reply %T", res)
	}
	token, _ := arr[0].(string)
	if token == "" {
		next, _ := arr[1].(int64)
		if next == 0 {
			return nil, time.Time{}, nil
		}
		return nil, time.UnixMilli(next), nil
	}
	if c.split && len(arr) == 2 {
		// The config and secrets are in the job's own slot, out of the function's reach.
		vals, _ := arr[1].([]any)
		if claimed := jobField.claimed(); len(vals) == len(claimed) {
			id, _ := vals[slices.Index(claimed, jobField.ID)].(string)
			big, err := c.rdb.MGet(context.WithoutCancel(ctx), c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Result()
			if err != nil {
				// Once more: the claim is made, and without its config the agent cannot run it.
				big, err = c.rdb.MGet(context.WithoutCancel(ctx), c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Result()
			}
			if err == nil && big[0] == nil && !c.migrated.done.Load() {
				// A store the reaper has not migrated yet (migrate.go): the old keys, then the
				// new ones once more, as the reaper may have moved them between the reads.
				big, err = c.rdb.MGet(context.WithoutCancel(ctx), c.keys.oldConfig(id), c.keys.oldSecrets(id)).Result()
				if err == nil && big[0] == nil {
					big, err = c.rdb.MGet(context.WithoutCancel(ctx), c.keys.own(id, "owncfg"), c.keys.own(id, "ownsec")).Result()
				}
			}
			if err != nil {
				return nil, time.Time{}, fmt.Errorf("queue: claim: read config of %s: %w", id, err)
			}
			arr = append(arr, big...)
		}
	}
	if len(arr) != 4 {
		return nil, time.Time{}, fmt.Errorf("queue: claim: unexpected reply of %d values", len(arr))
	}
	names := jobField.claimed()
	vals, _ := arr[1].([]any)
	if len(vals) != len(names) {
		return nil, time.Time{}, fmt.Errorf("queue: claim: %d job fields, want %d", len(vals), len(names))
	}
	m := make(map[string]string, len(names))
	for i, n := range names {
		m[n], _ = vals[i].(string)
	}
	cfg, _ := arr[2].(string)
	sealed, _ := arr[3].(string)
	j, err := jobFromMap(m, cfg, "", c.cfg.Now())
	if err != nil {
		return nil, time.Time{}, err
	}
	fence, _ := strconv.ParseInt(strings.SplitN(token, ".", 2)[0], 10, 64)
	return &job.Claim{Job: j, SealedSecrets: sealed, Lease: job.Lease{
		Token: token, Fence: fence, ExpiresAt: c.cfg.Now().Add(c.cfg.LeaseTTL).UTC().Truncate(time.Millisecond),
	}}, time.Time{}, nil
}

func progressArg(p *job.Progress) string {
	if p == nil {
		return ""
	}
	b, _ := json.Marshal(p)
	return string(b)
}

// Heartbeat renews the lease on job id and records its progress.
func (c Leases) Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error) {
	pipeline, emulated, versions := "", "0", ""
	if hb.Runtime != nil {
		pipeline = hb.Runtime.Pipeline
		if hb.Runtime.Emulated {
			emulated = "1"
		}
		if v := hb.Runtime.Upstream; v != nil {
			b, _ := json.Marshal(v)
			versions = string(b)
		}
	}
	steps, err := reportedSteps(hb.Checkpoints)
	if err != nil {
		return job.HeartbeatReply{}, err
	}
	alerts, err := alertsArg(hb.Alerts)
	if err != nil {
		return job.HeartbeatReply{}, err
	}
	now := c.cfg.Now()
	res, err := c.callAt(ctx, now, "heartbeat", c.keys.job(id), args{
		"id": id, "token": hb.Token, "lease_expires": ms(now.Add(c.cfg.LeaseTTL)), "lease_ttl": c.cfg.LeaseTTL.Milliseconds(),
		"running": boolArg(hb.Running), "progress": progressArg(hb.Progress), "pipeline": pipeline, "emulated": emulated,
		"upstream": versions, "log_bytes": hb.LogBytes, "alerts": alerts, "grace": c.cfg.StopGrace.Milliseconds(),
	}, steps...).Result()
	if err != nil {
		return job.HeartbeatReply{}, stepsErr("heartbeat", hb.Checkpoints, err)
	}
	arr, _ := res.([]any)
	if len(arr) != 2 {
		return job.HeartbeatReply{}, fmt.Errorf("queue: heartbeat: unexpected reply %v", res)
	}
	action, _ := arr[0].(string)
	exp := now.Add(c.cfg.LeaseTTL).UTC().Truncate(time.Millisecond)
	return job.HeartbeatReply{Action: job.Action(action), LeaseExpiresAt: exp}, nil
}

// alertsArg is a heartbeat's alerts as heartbeat.lua reads them: JSON, or "" for none. Only
// the two alert types, a few at a time, become events.
func alertsArg(alerts []job.Alert) (string, error) {
	if len(alerts) == 0 {
		return "", nil
	}
	if len(alerts) > job.MaxAlerts {
		return "", fmt.Errorf("queue: heartbeat: %d alerts, at most %d", len(alerts), job.MaxAlerts)
	}
	for _, a := range alerts {
		if a.Type != job.EventStalled && a.Type != job.EventAlert {
			return "", fmt.Errorf("queue: heartbeat: alert type %q", a.Type)
		}
	}
	b, err := json.Marshal(alerts)
	return string(b), err
}

// Complete ends a job its agent holds as COMPLETED.
func (c Leases) Complete(ctx context.Context, id string, o job.Outcome) (job.Status, error) {
	return c.finish(ctx, id, "completed", o)
}

// Fail ends a job its agent holds as FAILED with o.Reason — or, when a stop had been
// requested, as the stop requires: STOPPED, FAILED at a time limit, or queued again for a
// restart. It returns the status the job ended in.
func (c Leases) Fail(ctx context.Context, id string, o job.Outcome) (job.Status, error) {
	return c.finish(ctx, id, "failed", o)
}

func (c *store) finish(ctx context.Context, id, how string, o job.Outcome) (job.Status, error) {
	steps, err := reportedSteps(o.Checkpoints)
	if err != nil {
		return "", err
	}
	failure, retried, err := failureArgs(how, o.Failure)
	if err != nil {
		return "", err
	}
	st, err := c.call(ctx, "finish", c.keys.job(id), args{
		"id": id, "token": o.Token, "how": how, "reason": o.Reason, "progress": progressArg(o.Progress),
		"freed_at": freedArg(o.GPUsFreedAt), "failure": failure, "failure_retried": retried,
		"backoff_base": c.cfg.RetryBackoff.Milliseconds(), "backoff_cap": c.cfg.RetryBackoffMax.Milliseconds(),
		"jitter": mrand.Float64(), "avoid_ms": c.cfg.RetryElsewhereFor.Milliseconds(),
		"node_check": nodeCheckArg(o.Failure), "quarantine_after": c.cfg.QuarantineAfter,
		"quarantine_window": c.cfg.QuarantineWindow.Milliseconds(),
	}, steps...).Text()
	c.settleSoon(ctx, id)
	if err != nil {
		return "", stepsErr(how, o.Checkpoints, err)
	}
	return job.Status(st), nil
}

// nodeCheckArg is what finish.lua takes of a failure whose node check failed: what the check
// found (the quarantine's reason), or "" for a failure that does not count against the node.
func nodeCheckArg(a *job.FailureAnalysis) string {
	if !a.NodeFault() {
		return ""
	}
	return healthArg(a.NodeCheck)
}

// healthArg is a claim's failed check of its node as claim.lua takes it: what it found, or "".
func healthArg(h *job.NodeCheck) string {
	if h == nil || !h.Failed {
		return ""
	}
	if len(h.Evidence) == 0 {
		return "no detail"
	}
	return strings.Join(h.Evidence, "; ")
}

// failureArgs are a failure's analysis as the job keeps it when it ends and when it is retried
// ("" for a failure that is not worth retrying, or a completion).
func failureArgs(how string, a *job.FailureAnalysis) (failure, retried string, err error) {
	if how != "failed" || a == nil {
		return "", "", nil
	}
	kept := *a
	kept.Retried = false
	b, err := json.Marshal(kept)
	if err != nil {
		return "", "", err
	}
	if !a.Retryable() {
		return string(b), "", nil
	}
	kept.Retried = true
	r, err := json.Marshal(kept)
	return string(b), string(r), err
}

// freedArg is when the job's GPUs were given back, in ms ("" when the agent does not say).
func freedArg(t *time.Time) string {
	if t == nil {
		return ""
	}
	return strconv.FormatInt(t.UnixMilli(), 10)
}

// Release hands a job back from an agent that is going away: it is queued again at once, in
// its place, to resume elsewhere from its newest checkpoint, without spending an attempt.
func (c Leases) Release(ctx context.Context, id string, o job.Outcome) (job.Status, error) {
	steps, err := reportedSteps(o.Checkpoints)
	if err != nil {
		return "", err
	}
	st, err := c.call(ctx, "release", c.keys.job(id), args{
		"id": id, "token": o.Token, "reason": o.Reason, "progress": progressArg(o.Progress),
		"freed_at": freedArg(o.GPUsFreedAt),
	}, steps...).Text()
	c.settleSoon(ctx, id)
	if err != nil {
		return "", stepsErr("release", o.Checkpoints, err)
	}
	return job.Status(st), nil
}

// AbandonClaim takes back the claim agent made under claimID and never heard the answer to:
// its job, if the claim was made and the agent never started it, goes back to the queue at
// once without spending an attempt; a claim not made yet never will be. It returns the id of
// the job handed back, or "".
func (c Leases) AbandonClaim(ctx context.Context, agent, claimID string) (string, error) {
	// The mark outlives any claim that could still be waiting under the id.
	mark := c.cfg.LeaseTTL + c.cfg.MaxClaimWait + time.Minute
	id, err := c.call(ctx, "abandon", c.keys.leases(), args{"claim_id": claimID, "agent": agent, "mark_ttl": mark.Milliseconds()}).Text()
	c.settleAnySoon(ctx)
	if err != nil {
		return "", scriptErr("abandon", err)
	}
	return id, nil
}

// Reap does the queue's timed work, batch at a time: lapsed leases, stops whose grace ended,
// time limits, retry backoffs that are over, waits that ended and agents gone quiet. It
// reports how many jobs it changed, and more if some index had more due than one batch: call
// it again.
func (c Maintenance) Reap(ctx context.Context, batch int) (changed int, more bool, err error) {
	res, err := c.call(ctx, "reap", c.keys.leases(), args{
		"batch": batch, "backoff_base": c.cfg.RetryBackoff.Milliseconds(), "backoff_cap": c.cfg.RetryBackoffMax.Milliseconds(),
		"jitter": mrand.Float64(), "grace": c.cfg.StopGrace.Milliseconds(), "agent_ttl": c.agentTTL().Milliseconds(),
		"avoid_ms": c.cfg.RetryElsewhereFor.Milliseconds(), "quarantine_window": c.cfg.QuarantineWindow.Milliseconds(),
	}).Int64Slice()
	if err != nil {
		return 0, false, scriptErr("reap", err)
	}
	// What this pass ended (on a cluster), what a crash left unmoved, and the ended jobs of a
	// store being migrated (migrate.go).
	if err := c.settleAll(ctx); err != nil {
		return int(res[0]), false, err
	}
	if len(res) != 2 {
		return 0, false, fmt.Errorf("queue: reap: unexpected reply %v", res)
	}
	return int(res[0]), res[1] == 1, nil
}

// agentTTL is how recently an agent must have waited for work to count as about (queue_reason):
// a waiting agent claims again at least every MaxClaimWait.
func (c *store) agentTTL() time.Duration { return 2*c.cfg.MaxClaimWait + 10*time.Second }

// SetHooked records whether org has a webhook endpoint: only such organizations' events go to
// the outbox that webhook delivery drains.
func (c Orgs) SetHooked(ctx context.Context, org string, hooked bool) error {
	var err error
	if hooked {
		err = c.rdb.HSet(ctx, c.keys.org(org), "hooked", "1").Err()
	} else {
		err = c.rdb.HDel(ctx, c.keys.org(org), "hooked").Err()
	}
	if err != nil {
		return fmt.Errorf("queue: hooked %s: %w", org, err)
	}
	return nil
}

// Position says where a QUEUED job stands and why it waits; ok is false for a job in another
// state.
func (c Jobs) Position(ctx context.Context, id string) (job.Position, bool, error) {
	return c.position(ctx, c.keys.job(id), id, "", "", 0)
}

// RunsAhead is where a job of org with spec would stand if it were submitted now.
func (c Jobs) RunsAhead(ctx context.Context, org string, spec jobspec.Spec) (job.Position, error) {
	p, _, err := c.position(ctx, c.keys.leases(), "", org, spec.Class(), spec.Priority)
	return p, err
}

func (c *store) position(ctx context.Context, route, id, org, class string, priority int) (job.Position, bool, error) {
	res, err := c.call(ctx, "position", route, args{
		"id": id, "org": org, "class": class, "priority": priority, "fresh_ms": c.agentTTL().Milliseconds(),
	}).Slice()
	if err != nil {
		return job.Position{}, false, scriptErr("position", err)
	}
	ahead, _ := res[0].(int64)
	reason, _ := res[1].(string)
	if ahead < 0 {
		return job.Position{}, false, nil
	}
	p := job.Position{RunsAhead: int(ahead)}
	arg := func(i int) string {
		if i >= len(res) {
			return ""
		}
		switch v := res[i].(type) {
		case int64:
			return strconv.FormatInt(v, 10)
		case string:
			return v
		}
		return ""
	}
	switch reason {
	case "backoff":
		at, _ := strconv.ParseInt(arg(2), 10, 64)
		p.Reason = "retrying after a lost lease: claimable again at " + time.UnixMilli(at).UTC().Format(time.RFC3339)
	case "org_budget":
		spent, _ := strconv.ParseFloat(arg(2), 64)
		budget, _ := strconv.ParseFloat(arg(3), 64)
		p.Reason = fmt.Sprintf("held: its organization's monthly budget is spent (%.2f of %.2f GPU-hours); it runs once the budget is raised or the month ends",
			spent/3.6e6, budget/3.6e6)
	case "over_budget":
		est, _ := strconv.ParseFloat(arg(2), 64)
		left, _ := strconv.ParseFloat(arg(3), 64)
		p.Reason = fmt.Sprintf("held: its estimate (%.2f GPU-hours) is more than what is left of its organization's monthly budget (%.2f GPU-hours); it runs once the budget is raised or the month ends",
			est/3.6e6, left/3.6e6)
	case "org_limit":
		p.Reason = fmt.Sprintf("organization at its running limit (%s of %s jobs running)", arg(2), arg(3))
	case "gpus":
		p.Reason = fmt.Sprintf("waiting for %s×%s: no agent has that many free now", arg(2), arg(3))
	case "turn":
		if p.RunsAhead == 0 {
			p.Reason = "next in line: waiting for an agent to claim it"
		} else {
			p.Reason = fmt.Sprintf("waiting for its turn: %d job(s) ahead", p.RunsAhead)
		}
	}
	return p, true, nil
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// scriptErr maps the error replies of the scripts onto the job package's sentinels.
func scriptErr(op string, err error) error {
	// Redis prefixes "ERR " to a reply whose first word it does not take for an error code.
	msg := strings.TrimPrefix(err.Error(), "ERR ")
	switch {
	case strings.HasPrefix(msg, "LEASE_LOST"):
		return fmt.Errorf("queue: %s: %w", op, job.ErrLeaseLost)
	case strings.HasPrefix(msg, "NOT_FOUND"):
		return fmt.Errorf("queue: %s: %w", op, job.ErrNotFound)
	case strings.HasPrefix(msg, "EXISTS"):
		return fmt.Errorf("queue: %s: %w", op, job.ErrExists)
	case strings.HasPrefix(msg, "CONFLICT"):
		state := strings.TrimSpace(strings.TrimPrefix(msg, "CONFLICT"))
		return fmt.Errorf("queue: %s: job is %s: %w", op, state, job.ErrConflict)
	case strings.HasPrefix(msg, "DELETING"):
		return fmt.Errorf("queue: %s: %w", op, ErrDeleting)
	}
	return fmt.Errorf("queue: %s: %w", op, err)
}

// jobFromMap reads a job from its hash and its config and progress strings.
func jobFromMap(m map[string]string, config, progress string, now time.Time) (*job.Job, error) {
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	when := func(k string) *time.Time {
		if m[k] == "" {
			return nil
		}
		t := time.UnixMilli(num(k)).UTC()
		return &t
	}
	j := &job.Job{
		ID: m[jobField.ID],
		// A new job's hash leaves out what it does not need yet: attempt, updated_at, progress.
		Org:           m[jobField.Org],
		Kind:          m[jobField.Kind],
		Name:          m[jobField.Name],
		Status:        job.Status(m[jobField.Status]),
		Attempt:       int(num(jobField.Attempt)),
		Run:           int(num(jobField.Fence)),
		MaxAttempts:   int(num(jobField.MaxAttempts)),
		Error:         m[jobField.Error],
		StopRequested: m[jobField.StopRequested] == "1",
		ResumeStep:    int(num(jobField.ResumeStep)),
		CreatedAt:     time.UnixMilli(num(jobField.CreatedAt)).UTC(),
		UpdatedAt:     time.UnixMilli(num(jobField.CreatedAt)).UTC(),
		StartedAt:     when(jobField.StartedAt),
		FinishedAt:    when(jobField.FinishedAt),
	}
	if j.Attempt == 0 {
		j.Attempt = 1
	}
	used := num(jobField.GPUMs)
	if held := num(jobField.HeldSince); held > 0 {
		hold := num(jobField.GPUs) * max(0, now.UnixMilli()-held)
		used += hold
		j.HoldGPUSeconds = float64(hold) / 1000
	}
	j.GPUSeconds = float64(used) / 1000
	j.CreatedBy, j.TokenID = m[jobField.By], m[jobField.Token]
	j.BudgetGPUSeconds = float64(num(jobField.BudgetMs)) / 1000
	j.LogBytes = num(jobField.LogBytes)
	if m[jobField.UpdatedAt] != "" {
		j.UpdatedAt = time.UnixMilli(num(jobField.UpdatedAt)).UTC()
	}
	if j.Status == job.Queued {
		j.RetryAt = when(jobField.ReadyAt)
	}
	if v := m[jobField.Failure]; v != "" {
		var a job.FailureAnalysis
		if json.Unmarshal([]byte(v), &a) == nil {
			j.FailureAnalysis = &a
		}
	}
	if err := json.Unmarshal([]byte(config), &j.Config); err != nil {
		return nil, fmt.Errorf("queue: job %s: config: %w", j.ID, err)
	}
	j.Progress.MaxSteps = j.Config.MaxSteps
	if progress != "" {
		if err := json.Unmarshal([]byte(progress), &j.Progress); err != nil {
			return nil, fmt.Errorf("queue: job %s: progress: %w", j.ID, err)
		}
	}
	if m[jobField.AgentID] != "" || m[jobField.Pipeline] != "" {
		j.Runtime = &job.Runtime{AgentID: m[jobField.AgentID], Pipeline: m[jobField.Pipeline], Emulated: m[jobField.Emulated] == "1"}
		if v := m[jobField.Upstream]; v != "" {
			var u upstream.Versions
			if json.Unmarshal([]byte(v), &u) == nil {
				j.Runtime.Upstream = &u
			}
		}
	}
	return j, nil
}

func matchesFilter(f job.ListFilter, j *job.Job) bool {
	if f.Kind != "" && j.Kind != f.Kind {
		return false
	}
	if len(f.Statuses) > 0 && !slices.Contains(f.Statuses, j.Status) {
		return false
	}
	return true
}
