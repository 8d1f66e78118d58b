// Package queue keeps jobs, the queue, leases and events in Redis. Every state change is one
// Lua script — one round trip, atomic — that also appends the change to the job's event stream
// and to the webhook outbox, so a job is never in two states or none and no change goes
// unrecorded.
package queue

import (
	"context"
	"crypto/rand"
	_ "embed"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

var (
	//go:embed lua/prelude.lua
	prelude string
	//go:embed lua/submit.lua
	submitLua string
	//go:embed lua/claim.lua
	claimLua string
	//go:embed lua/heartbeat.lua
	heartbeatLua string
	//go:embed lua/finish.lua
	finishLua string
	//go:embed lua/cancel.lua
	cancelLua string
	//go:embed lua/reap.lua
	reapLua string
)

func script(src string) *redis.Script { return redis.NewScript(prelude + "\n" + src) }

var (
	submitScript    = script(submitLua)
	claimScript     = script(claimLua)
	heartbeatScript = script(heartbeatLua)
	finishScript    = script(finishLua)
	cancelScript    = script(cancelLua)
	reapScript      = script(reapLua)
)

// Config configures a Client. Zero fields take the defaults of withDefaults.
type Config struct {
	// Prefix namespaces every key (and is their Redis Cluster hash tag). Default "ht".
	Prefix string
	// LeaseTTL is how long a claim or heartbeat keeps a lease alive. Default 60 s.
	LeaseTTL time.Duration
	// HeartbeatInterval is what agents are told to heartbeat at. Default LeaseTTL / 4.
	HeartbeatInterval time.Duration
	// MaxAttempts is how many leases a job may lose before it fails. Default 3.
	MaxAttempts int
	// MaxClaimWait caps how long a claim may wait for work. Default 20 s.
	MaxClaimWait time.Duration
	// Now is the clock; tests replace it. Default time.Now.
	Now func() time.Time
}

func (c Config) withDefaults() Config {
	if c.Prefix == "" {
		c.Prefix = "ht"
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = 60 * time.Second
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = c.LeaseTTL / 4
	}
	if c.MaxAttempts == 0 {
		c.MaxAttempts = 3
	}
	if c.MaxClaimWait == 0 {
		c.MaxClaimWait = 20 * time.Second
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Client is the queue over one Redis (a single server or a cluster).
type Client struct {
	rdb    redis.UniversalClient
	cfg    Config
	keys   keys
	wakeup *notifier
}

// New returns a Client. Close it to stop its pub/sub subscription.
func New(rdb redis.UniversalClient, cfg Config) *Client {
	cfg = cfg.withDefaults()
	k := newKeys(cfg.Prefix)
	return &Client{rdb: rdb, cfg: cfg, keys: k, wakeup: newNotifier(rdb, k.wake())}
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

// Submit stores a new job and queues it. An empty ID gets a new one.
func (c *Client) Submit(ctx context.Context, sub job.Submission) (*job.Job, error) {
	if sub.ID == "" {
		id, err := job.NewID()
		if err != nil {
			return nil, err
		}
		sub.ID = id
	}
	cfg, err := json.Marshal(sub.Spec)
	if err != nil {
		return nil, fmt.Errorf("queue: encode config: %w", err)
	}
	prog, _ := json.Marshal(job.Progress{MaxSteps: sub.Spec.MaxSteps})
	jid := sub.ID
	res, err := submitScript.Run(ctx, c.rdb,
		[]string{c.keys.job(jid), c.keys.events(jid), c.keys.outbox(), c.keys.orgJobs(sub.Org), c.keys.queued()},
		jid, sub.Org, sub.Spec.Kind, sub.Spec.Name, cfg, ms(c.cfg.Now()), c.cfg.MaxAttempts, prog, c.keys.wake(),
		sub.SealedSecrets,
	).Result()
	if err != nil {
		return nil, scriptErr("submit", err)
	}
	return parseJob(res)
}

// Get returns a job.
func (c *Client) Get(ctx context.Context, id string) (*job.Job, error) {
	m, err := c.rdb.HGetAll(ctx, c.keys.job(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("queue: get %s: %w", id, err)
	}
	if len(m) == 0 {
		return nil, job.ErrNotFound
	}
	return jobFromMap(m)
}

// List returns up to limit of org's jobs, newest first, starting after cursor (an id from a
// previous page; "" for the first). next is "" on the last page.
func (c *Client) List(ctx context.Context, org, cursor string, limit int) (jobs []*job.Job, next string, err error) {
	start := "+"
	if cursor != "" {
		start = "(" + cursor
	}
	ids, err := c.rdb.ZRangeArgs(ctx, redis.ZRangeArgs{
		Key: c.keys.orgJobs(org), Start: start, Stop: "-", ByLex: true, Rev: true, Count: int64(limit) + 1,
	}).Result()
	if err != nil {
		return nil, "", fmt.Errorf("queue: list: %w", err)
	}
	if len(ids) > limit {
		ids = ids[:limit]
		next = ids[limit-1]
	}
	cmds, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, id := range ids {
			p.HGetAll(ctx, c.keys.job(id))
		}
		return nil
	})
	if err != nil {
		return nil, "", fmt.Errorf("queue: list: %w", err)
	}
	for _, cmd := range cmds {
		m := cmd.(*redis.MapStringStringCmd).Val()
		if len(m) == 0 {
			continue
		}
		j, err := jobFromMap(m)
		if err != nil {
			return nil, "", err
		}
		jobs = append(jobs, j)
	}
	return jobs, next, nil
}

// Events returns the job's events with a sequence number above after, oldest first, at most
// limit of them.
func (c *Client) Events(ctx context.Context, id string, after int64, limit int) ([]job.Event, error) {
	msgs, err := c.rdb.XRange(ctx, c.keys.events(id), "-", "+").Result()
	if err != nil {
		return nil, fmt.Errorf("queue: events %s: %w", id, err)
	}
	out := make([]job.Event, 0, len(msgs))
	for _, m := range msgs {
		e := eventFromValues(id, m.Values)
		if e.Seq <= after {
			continue
		}
		out = append(out, e)
		if len(out) == limit {
			break
		}
	}
	return out, nil
}

func eventFromValues(id string, v map[string]any) job.Event {
	str := func(k string) string { s, _ := v[k].(string); return s }
	seq, _ := strconv.ParseInt(str("seq"), 10, 64)
	t, _ := strconv.ParseInt(str("time"), 10, 64)
	return job.Event{
		Seq: seq, Type: str("type"), JobID: id, Status: job.Status(str("status")),
		Time: time.UnixMilli(t).UTC(), Detail: str("detail"),
	}
}

// Cancel stops a job: at once if it is queued, through its agent if one holds it.
func (c *Client) Cancel(ctx context.Context, id string) (*job.Job, error) {
	res, err := cancelScript.Run(ctx, c.rdb,
		[]string{c.keys.job(id), c.keys.events(id), c.keys.outbox(), c.keys.queued()},
		ms(c.cfg.Now()),
	).Result()
	if err != nil {
		return nil, scriptErr("cancel", err)
	}
	return parseJob(res)
}

// Claim hands the next job to an agent. When nothing is queued it waits up to req.Wait (capped
// by MaxClaimWait) for a submit, and returns nil, nil if none came.
func (c *Client) Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error) {
	wait := min(req.Wait, c.cfg.MaxClaimWait)
	var deadline <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		deadline = t.C
	}
	for {
		// Take the wake-up channel before looking, so a submit between the look and the
		// wait still wakes us.
		woken := c.wakeup.wait(ctx)
		cl, err := c.claimOnce(ctx, req)
		if err != nil || cl != nil || wait <= 0 {
			return cl, err
		}
		recheck := time.NewTimer(recheckEvery)
		select {
		case <-woken:
		case <-recheck.C: // a wake-up lost while pub/sub reconnected
		case <-deadline:
			return nil, nil
		case <-ctx.Done():
			recheck.Stop()
			return nil, ctx.Err()
		}
		recheck.Stop()
	}
}

// recheckEvery bounds how long a waiting claim trusts pub/sub alone.
const recheckEvery = 5 * time.Second

func (c *Client) claimOnce(ctx context.Context, req job.ClaimRequest) (*job.Claim, error) {
	res, err := claimScript.Run(ctx, c.rdb,
		[]string{c.keys.queued(), c.keys.leases(), c.keys.outbox()},
		c.keys.prefix, ms(c.cfg.Now()), c.cfg.LeaseTTL.Milliseconds(), req.AgentID, randomHex(12),
	).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, scriptErr("claim", err)
	}
	arr, ok := res.([]any)
	if !ok || len(arr) != 2 {
		return nil, fmt.Errorf("queue: claim: unexpected reply %T", res)
	}
	m, err := flatMap(arr[1])
	if err != nil {
		return nil, err
	}
	j, err := jobFromMap(m)
	if err != nil {
		return nil, err
	}
	token, _ := arr[0].(string)
	fence, _ := strconv.ParseInt(strings.SplitN(token, ".", 2)[0], 10, 64)
	return &job.Claim{Job: j, SealedSecrets: m["secrets"], Lease: job.Lease{
		Token: token, Fence: fence, ExpiresAt: c.cfg.Now().Add(c.cfg.LeaseTTL).UTC().Truncate(time.Millisecond),
	}}, nil
}

// Heartbeat renews the lease on job id and records its progress.
func (c *Client) Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error) {
	prog := ""
	if hb.Progress != nil {
		b, _ := json.Marshal(hb.Progress)
		prog = string(b)
	}
	pipeline, emulated := "", "0"
	if hb.Runtime != nil {
		pipeline = hb.Runtime.Pipeline
		if hb.Runtime.Emulated {
			emulated = "1"
		}
	}
	args := []any{hb.Token, ms(c.cfg.Now()), c.cfg.LeaseTTL.Milliseconds(), boolArg(hb.Running), prog, pipeline, emulated}
	for _, s := range hb.Checkpoints {
		args = append(args, s)
	}
	res, err := heartbeatScript.Run(ctx, c.rdb,
		[]string{c.keys.job(id), c.keys.events(id), c.keys.outbox(), c.keys.leases()}, args...,
	).Result()
	if err != nil {
		return job.HeartbeatReply{}, scriptErr("heartbeat", err)
	}
	arr, _ := res.([]any)
	if len(arr) != 2 {
		return job.HeartbeatReply{}, fmt.Errorf("queue: heartbeat: unexpected reply %v", res)
	}
	action, _ := arr[0].(string)
	exp, _ := arr[1].(int64)
	return job.HeartbeatReply{Action: job.Action(action), LeaseExpiresAt: time.UnixMilli(exp).UTC()}, nil
}

// Complete ends a job its agent holds as COMPLETED.
func (c *Client) Complete(ctx context.Context, id string, o job.Outcome) (*job.Job, error) {
	return c.finish(ctx, id, "completed", o)
}

// Fail ends a job its agent holds as FAILED with o.Reason — or STOPPED, if a stop had been
// requested, since the pipeline then ended because it was told to.
func (c *Client) Fail(ctx context.Context, id string, o job.Outcome) (*job.Job, error) {
	return c.finish(ctx, id, "failed", o)
}

func (c *Client) finish(ctx context.Context, id, how string, o job.Outcome) (*job.Job, error) {
	prog := ""
	if o.Progress != nil {
		b, _ := json.Marshal(o.Progress)
		prog = string(b)
	}
	args := []any{o.Token, ms(c.cfg.Now()), how, o.Reason, prog}
	for _, s := range o.Checkpoints {
		args = append(args, s)
	}
	res, err := finishScript.Run(ctx, c.rdb,
		[]string{c.keys.job(id), c.keys.events(id), c.keys.outbox(), c.keys.leases()}, args...,
	).Result()
	if err != nil {
		return nil, scriptErr(how, err)
	}
	return parseJob(res)
}

// Reap returns every job whose lease has lapsed to the queue (or fails or stops it), at most
// batch at a time, and reports how many it handled.
func (c *Client) Reap(ctx context.Context, batch int) (int, error) {
	n, err := reapScript.Run(ctx, c.rdb,
		[]string{c.keys.leases(), c.keys.queued(), c.keys.outbox()},
		c.keys.prefix, ms(c.cfg.Now()), batch, c.keys.wake(),
	).Int()
	if err != nil {
		return 0, scriptErr("reap", err)
	}
	return n, nil
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
	}
	return fmt.Errorf("queue: %s: %w", op, err)
}

// parseJob reads a job from the flat field/value array HGETALL returns inside a script.
func parseJob(res any) (*job.Job, error) {
	m, err := flatMap(res)
	if err != nil {
		return nil, err
	}
	return jobFromMap(m)
}

func flatMap(res any) (map[string]string, error) {
	arr, ok := res.([]any)
	if !ok || len(arr)%2 != 0 {
		return nil, fmt.Errorf("queue: unexpected job reply %T", res)
	}
	m := make(map[string]string, len(arr)/2)
	for i := 0; i < len(arr); i += 2 {
		k, _ := arr[i].(string)
		v, _ := arr[i+1].(string)
		m[k] = v
	}
	return m, nil
}

// RunsAhead is how many queued jobs would run before a job submitted now.
func (c *Client) RunsAhead(ctx context.Context, _ jobspec.Spec) (int, error) {
	n, err := c.rdb.ZCard(ctx, c.keys.queued()).Result()
	if err != nil {
		return 0, fmt.Errorf("queue: runs ahead: %w", err)
	}
	return int(n), nil
}

func jobFromMap(m map[string]string) (*job.Job, error) {
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	when := func(k string) *time.Time {
		if m[k] == "" {
			return nil
		}
		t := time.UnixMilli(num(k)).UTC()
		return &t
	}
	j := &job.Job{
		ID:            m["id"],
		Org:           m["org"],
		Kind:          m["kind"],
		Name:          m["name"],
		Status:        job.Status(m["status"]),
		Attempt:       int(num("attempt")),
		MaxAttempts:   int(num("max_attempts")),
		Error:         m["error"],
		StopRequested: m["stop_requested"] == "1",
		CreatedAt:     time.UnixMilli(num("created_at")).UTC(),
		UpdatedAt:     time.UnixMilli(num("updated_at")).UTC(),
		StartedAt:     when("started_at"),
		FinishedAt:    when("finished_at"),
	}
	if err := json.Unmarshal([]byte(m["config"]), &j.Config); err != nil {
		return nil, fmt.Errorf("queue: job %s: config: %w", j.ID, err)
	}
	if p := m["progress"]; p != "" {
		if err := json.Unmarshal([]byte(p), &j.Progress); err != nil {
			return nil, fmt.Errorf("queue: job %s: progress: %w", j.ID, err)
		}
	}
	if m["agent_id"] != "" || m["pipeline"] != "" {
		j.Runtime = &job.Runtime{AgentID: m["agent_id"], Pipeline: m["pipeline"], Emulated: m["emulated"] == "1"}
	}
	return j, nil
}
