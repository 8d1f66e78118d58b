package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// Deployments: an adapter is one committed checkpoint's weights, filed once per (job, step).
// Deploying it puts it on a model server — a serve job of the queue, claimed, fenced, charged
// and placed like any job — of its organization: adapters of one base model share a server up
// to Config.AdaptersPerServer, a full fine-tune gets one of its own. The server's agent says
// under its lease what its server holds and hears what it is to hold (Serving); the reaper's
// deployments duty keeps each adapter's state true to its server's (a lost node's server is
// queued again and placed elsewhere, its adapters DEPLOYING until the next agent loads them),
// unloads adapters idle for Config.DeploymentIdle, and stops servers that hold nothing.
// State changes are functions of the library (adapter_put, deploy, unload, serving,
// adapter_check, server_check).

// AdapterSpec is what files an adapter.
type AdapterSpec struct {
	Org, Job   string
	Step       int
	Base, Kind string
	Name       string
}

// PutAdapter files the adapter of a job's committed step, or returns the one filed before
// (created false). Past the organization's MaxAdapters it is a *job.LimitError (Limit
// "adapters").
func (c Deployments) PutAdapter(ctx context.Context, s AdapterSpec) (*job.Adapter, bool, error) {
	id, err := job.NewID()
	if err != nil {
		return nil, false, err
	}
	res, err := c.call(ctx, "adapter_put", c.keys.leases(), args{"id": id, "org": s.Org, "job": s.Job,
		"step": s.Step, "base": s.Base, "kind": s.Kind, "name": s.Name, "max": c.cfg.MaxAdapters}).Slice()
	if err != nil {
		if f := strings.Fields(strings.TrimPrefix(err.Error(), "ERR ")); len(f) == 2 && f[0] == "LIMIT_ADAPTERS" {
			n, _ := strconv.Atoi(f[1])
			return nil, false, &job.LimitError{Org: s.Org, Limit: "adapters", Current: n, Max: c.cfg.MaxAdapters}
		}
		return nil, false, scriptErr("put adapter", err)
	}
	got, _ := res[0].(string)
	created, _ := res[1].(int64)
	a, err := c.GetAdapter(ctx, s.Org, got)
	return a, created == 1, err
}

// maxLatencies is how many of an adapter's newest request latencies are kept.
const maxLatencies = 1000

// GetAdapter reads an adapter of org; another organization's, or none, is job.ErrNotFound.
func (c Deployments) GetAdapter(ctx context.Context, org, id string) (*job.Adapter, error) {
	m, err := c.rdb.HGetAll(ctx, c.keys.of("adapterkey", id)).Result()
	if err != nil {
		return nil, wrapErr("get adapter", err)
	}
	if len(m) == 0 || m[adapterField.Org] != org {
		return nil, fmt.Errorf("queue: adapter %s: %w", id, job.ErrNotFound)
	}
	return adapterFromMap(m), nil
}

// WithLatencies fills in the adapters' latency percentiles (a read of each one's newest).
func (c Deployments) WithLatencies(ctx context.Context, as []job.Adapter) error {
	cmds := make([]*redis.StringSliceCmd, len(as))
	_, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range as {
			cmds[i] = p.LRange(ctx, c.keys.of("adapterlat", as[i].ID), 0, -1)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return wrapErr("read latencies", err)
	}
	for i, cmd := range cmds {
		vals := cmd.Val()
		if len(vals) == 0 {
			continue
		}
		ms := make([]float64, 0, len(vals))
		for _, v := range vals {
			f, _ := strconv.ParseFloat(v, 64)
			ms = append(ms, f)
		}
		slices.Sort(ms)
		as[i].LatencyP50Ms, as[i].LatencyP99Ms = ms[(len(ms)-1)/2], ms[(len(ms)-1)*99/100]
	}
	return nil
}

// AdapterOf returns the adapter filed for a job's step, or job.ErrNotFound.
func (c Deployments) AdapterOf(ctx context.Context, org, jobID string, step int) (*job.Adapter, error) {
	id, err := c.rdb.Get(ctx, c.keys.of("adapterof", jobID, strconv.Itoa(step))).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("queue: adapter of %s step %d: %w", jobID, step, job.ErrNotFound)
	}
	if err != nil {
		return nil, wrapErr("get adapter", err)
	}
	return c.GetAdapter(ctx, org, id)
}

// ListAdapters returns org's adapters, newest first, from offset, at most limit, and how many
// it has.
func (c Deployments) ListAdapters(ctx context.Context, org string, offset, limit int) ([]job.Adapter, int, error) {
	key := c.keys.of("orgadapters", org)
	total, err := c.rdb.ZCard(ctx, key).Result()
	if err != nil {
		return nil, 0, wrapErr("list adapters", err)
	}
	ids, err := c.rdb.ZRevRange(ctx, key, int64(offset), int64(offset+limit-1)).Result()
	if err != nil || len(ids) == 0 {
		return nil, int(total), wrapErr("list adapters", err)
	}
	cmds := make([]*redis.MapStringStringCmd, len(ids))
	_, err = c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.HGetAll(ctx, c.keys.of("adapterkey", id))
		}
		return nil
	})
	if err != nil {
		return nil, 0, wrapErr("list adapters", err)
	}
	out := make([]job.Adapter, 0, len(ids))
	for _, cmd := range cmds {
		if m := cmd.Val(); len(m) > 0 {
			out = append(out, *adapterFromMap(m))
		}
	}
	return out, int(total), nil
}

// Deploy puts an adapter of org on a model server: the organization's live server of its base
// model with room, else a new one, which newServer submits (a serve job for the adapter) and
// returns the id of. It returns the adapter as the deploy left it (DEPLOYING; unchanged if it
// was deploying or deployed already).
func (c Deployments) Deploy(ctx context.Context, org, id string, newServer func(context.Context, *job.Adapter) (string, error)) (*job.Adapter, error) {
	a, err := c.GetAdapter(ctx, org, id)
	if err != nil {
		return nil, err
	}
	key := a.Base
	if a.Kind == job.AdapterFull {
		key = "full:" + a.ID
	}
	server := ""
	for range 3 {
		res, err := c.call(ctx, "deploy", c.keys.leases(), args{"id": id, "org": org, "key": key, "server": server,
			"max": c.cfg.AdaptersPerServer}).StringSlice()
		if err != nil {
			return nil, scriptErr("deploy", err)
		}
		switch res[0] {
		case "NOT_FOUND":
			return nil, fmt.Errorf("queue: adapter %s: %w", id, job.ErrNotFound)
		case "NEED_SERVER":
			if server, err = newServer(ctx, a); err != nil {
				return nil, err
			}
			continue
		}
		if spare := res[3]; spare != "" && spare != res[2] {
			// Another deploy made a server first: the one made for this call is not needed.
			if _, err := Jobs(c).Cancel(context.WithoutCancel(ctx), spare); err != nil && !errors.Is(err, job.ErrConflict) {
				return nil, fmt.Errorf("queue: deploy: stop the spare server %s: %w", spare, err)
			}
		}
		return c.GetAdapter(ctx, org, id)
	}
	return nil, fmt.Errorf("queue: deploy %s: no server took it", id)
}

// Unload takes an adapter of org off its server (idle: for being idle). It returns the
// adapter as the unload left it: UNLOADING until its server's agent has dropped it, or
// NOT_DEPLOYED.
func (c Deployments) Unload(ctx context.Context, org, id string, idle bool) (*job.Adapter, error) {
	res, err := c.call(ctx, "unload", c.keys.leases(), args{"id": id, "org": org, "idle": boolArg(idle)}).StringSlice()
	if err != nil {
		return nil, scriptErr("unload", err)
	}
	if res[0] == "NOT_FOUND" {
		return nil, fmt.Errorf("queue: adapter %s: %w", id, job.ErrNotFound)
	}
	return c.GetAdapter(ctx, org, id)
}

// Serving is a serve job's agent, under its lease token, saying which adapters its server
// holds and which it could not load (id → why), and hearing which it is to hold.
func (c Deployments) Serving(ctx context.Context, jobID, token string, loaded []string, failed map[string]string) ([]job.Served, error) {
	rest := make([]any, 0, 2*len(failed))
	for id, why := range failed {
		rest = append(rest, id, why)
	}
	res, err := c.call(ctx, "serving", c.keys.leases(), args{"id": jobID, "token": token, "loaded": strings.Join(loaded, " ")}, rest...).StringSlice()
	if err != nil {
		return nil, scriptErr("serving", err)
	}
	out := make([]job.Served, 0, len(res))
	for _, r := range res {
		f := strings.Fields(r)
		if len(f) != 5 {
			continue
		}
		step, _ := strconv.Atoi(f[2])
		out = append(out, job.Served{ID: f[0], Job: f[1], Step: step, Kind: f[3], Base: f[4]})
	}
	return out, nil
}

// Used counts requests to an adapter (the gateway adds up its own first): how many, how many
// failed, their tokens, and now as its last use (what keeps it from being unloaded as idle).
func (c Deployments) Used(ctx context.Context, org, id string, requests, failures, prompt, completion int64, latenciesMs []float64) error {
	key := c.keys.of("adapterkey", id)
	now := c.cfg.Now()
	_, err := c.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		// The organization's, for its usage: requests and tokens of all its deployments.
		usage := c.keys.of("orgusage", org)
		p.HIncrBy(ctx, usage, "inf:requests", requests)
		p.HIncrBy(ctx, usage, "inf:prompt", prompt)
		p.HIncrBy(ctx, usage, "inf:completion", completion)
		if len(latenciesMs) > 0 {
			lat := c.keys.of("adapterlat", id)
			vals := make([]any, len(latenciesMs))
			for i, v := range latenciesMs {
				vals[i] = v
			}
			p.LPush(ctx, lat, vals...)
			p.LTrim(ctx, lat, 0, maxLatencies-1)
		}
		p.HIncrBy(ctx, key, adapterField.Requests, requests)
		if failures > 0 {
			p.HIncrBy(ctx, key, adapterField.Failures, failures)
		}
		if prompt > 0 {
			p.HIncrBy(ctx, key, adapterField.PromptTokens, prompt)
		}
		if completion > 0 {
			p.HIncrBy(ctx, key, adapterField.CompletionTokens, completion)
		}
		p.HSet(ctx, key, adapterField.UsedAt, ms(now))
		p.ZAddXX(ctx, c.keys.fixed("ADAPTERS_LIVE"), redis.Z{Score: float64(ms(now)), Member: id})
		return nil
	})
	return wrapErr("count an adapter's use", err)
}

// ForgetJob forgets the adapters of a job of org that was deleted: each off its server, its
// record gone (its weights went with the job's data). It reports how many it forgot.
func (c Deployments) ForgetJob(ctx context.Context, org, jobID string) (int, error) {
	n := 0
	for offset := 0; ; offset += 500 {
		page, total, err := c.ListAdapters(ctx, org, offset, 500)
		if err != nil {
			return n, err
		}
		for _, a := range page {
			if a.Job != jobID {
				continue
			}
			if err := c.call(ctx, "adapter_forget", c.keys.leases(), args{"id": a.ID, "org": org}).Err(); err != nil {
				return n, scriptErr("forget adapter", err)
			}
			n++
		}
		if offset+500 >= total {
			return n, nil
		}
	}
}

// InferenceUsage is what org's deployments served: requests, prompt and completion tokens.
func (c Deployments) InferenceUsage(ctx context.Context, org string) (requests, prompt, completion int64, err error) {
	vals, err := c.rdb.HMGet(ctx, c.keys.of("orgusage", org), "inf:requests", "inf:prompt", "inf:completion").Result()
	if err != nil {
		return 0, 0, 0, wrapErr("inference usage", err)
	}
	n := func(v any) int64 { s, _ := v.(string); x, _ := strconv.ParseInt(s, 10, 64); return x }
	return n(vals[0]), n(vals[1]), n(vals[2]), nil
}

// CheckDeployments is the reaper's deployments duty: every adapter deploying, deployed or
// unloading is checked against its server (adapter_check), idle ones unloaded, and every model
// server against what it holds (server_check): one that is to hold nothing is stopped. It
// reports how many adapters and servers it changed.
func (c Maintenance) CheckDeployments(ctx context.Context) (int, error) {
	idle := c.cfg.DeploymentIdle
	if idle < 0 {
		idle = 0
	}
	changed := 0
	ids, err := c.rdb.ZRange(ctx, c.keys.fixed("ADAPTERS_LIVE"), 0, -1).Result()
	if err != nil {
		return 0, wrapErr("check deployments", err)
	}
	for _, id := range ids {
		r, err := c.call(ctx, "adapter_check", c.keys.leases(), args{"id": id, "idle_ms": idle.Milliseconds()}).Text()
		if err != nil {
			return changed, scriptErr("check deployments", err)
		}
		if r != "" {
			changed++
		}
	}
	servers, err := c.rdb.ZRange(ctx, c.keys.fixed("SERVERS"), 0, -1).Result()
	if err != nil {
		return changed, wrapErr("check deployments", err)
	}
	for _, member := range servers {
		r, err := c.call(ctx, "server_check", c.keys.leases(), args{"member": member}).Text()
		if err != nil {
			return changed, scriptErr("check deployments", err)
		}
		if r == "empty" {
			id, _, _ := strings.Cut(member, "|")
			if _, err := Jobs(c).Cancel(ctx, id); err != nil && !errors.Is(err, job.ErrConflict) && !errors.Is(err, job.ErrNotFound) {
				return changed, fmt.Errorf("queue: stop the empty server %s: %w", id, err)
			}
			changed++
		}
		if r != "" {
			changed++
		}
	}
	return changed, nil
}

func adapterFromMap(m map[string]string) *job.Adapter {
	f := adapterField
	num := func(k string) int64 { n, _ := strconv.ParseInt(m[k], 10, 64); return n }
	when := func(k string) *time.Time {
		if m[k] == "" {
			return nil
		}
		t := time.UnixMilli(num(k)).UTC()
		return &t
	}
	a := &job.Adapter{ID: m[f.ID], Org: m[f.Org], Job: m[f.Job], Step: int(num(f.Step)), Base: m[f.Base], Kind: m[f.Kind],
		Name: m[f.Name], Status: m[f.Status], Deployment: m[f.Deployment], Server: m[f.Server], Node: m[f.Node],
		Error: m[f.Error], Idle: m[f.Idle] == "1",
		CreatedAt: time.UnixMilli(num(f.CreatedAt)).UTC(), UpdatedAt: time.UnixMilli(num(f.UpdatedAt)).UTC(),
		DeployedAt: when(f.DeployedAt), UsedAt: when(f.UsedAt),
		Requests: num(f.Requests), Failures: num(f.Failures), PromptTokens: num(f.PromptTokens), CompletionTokens: num(f.CompletionTokens)}
	if a.Deployment != job.Deployed {
		a.Node = ""
	}
	return a
}
