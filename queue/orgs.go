package queue

import (
	"cmp"
	"context"
	_ "embed"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// SetOrg changes an organization's weight and limits; zero values restore the defaults.
func (c Orgs) SetOrg(ctx context.Context, org string, s job.OrgSettings) error {
	if s.Weight < 0 || s.MaxRunning < 0 || s.MaxQueued < 0 || s.MonthlyGPUHours < 0 || s.CheckpointTTLDays < 0 {
		return fmt.Errorf("queue: org settings must not be negative: %+v", s)
	}
	err := c.call(ctx, "set_org", c.keys.org(org), args{
		"org": org, "weight": s.Weight, "org_max_running": s.MaxRunning, "org_max_queued": s.MaxQueued,
		"month_budget_ms": int64(math.Round(s.MonthlyGPUHours * 3600e3)),
		"ckpt_ttl_ms":     (time.Duration(s.CheckpointTTLDays) * 24 * time.Hour).Milliseconds(),
	}).Err()
	if err != nil {
		return scriptErr("set org", err)
	}
	return nil
}

// GetOrg reports an organization's settings in effect and its use of the queue now.
func (c Orgs) GetOrg(ctx context.Context, org string) (job.OrgStatus, error) {
	vals, err := c.rdb.HMGet(ctx, c.keys.org(org), "weight", "max_running", "max_queued", "queued", "running", "running_gpus", "usage",
		"gpu_ms", "hold_anchor", "month", "month_ms", "month_budget_ms", "held", "ckpt_ttl_ms", "stored", "rbytes").Result()
	if err != nil {
		return job.OrgStatus{}, fmt.Errorf("queue: org %s: %w", org, err)
	}
	tref, err := c.rdb.HGet(ctx, c.keys.meta(), "tref").Int64()
	if err != nil {
		tref = ms(c.cfg.Now())
	}
	f := func(i int) float64 {
		s, _ := vals[i].(string)
		v, _ := strconv.ParseFloat(s, 64)
		return v
	}
	st := job.OrgStatus{
		Org: org, Weight: f(0), MaxRunning: int(f(1)), MaxQueued: int(f(2)),
		Queued: int(f(3)), Running: int(f(4)), RunningGPUs: int(f(5)),
	}
	if st.Weight == 0 {
		st.Weight = 1
	}
	if st.MaxRunning == 0 {
		st.MaxRunning = c.cfg.MaxRunning
	}
	if st.MaxQueued == 0 {
		st.MaxQueued = c.cfg.MaxQueued
	}
	// usage is GPU-milliseconds scaled to the reference time; bring it to now.
	decay := math.Exp(-float64(ms(c.cfg.Now())-tref) / float64(c.tau))
	st.UsageGPUHours = f(6) * decay / 3600e3
	// Raw GPU time: what ended holds used, plus what the holds now running have used so far.
	now := float64(ms(c.cfg.Now()) - usageEpoch)
	st.GPUSeconds = (f(7) + float64(st.RunningGPUs)*now - f(8)) / 1000
	st.MonthlyGPUHours = f(11) / 3600e3
	if t := c.cfg.Now().UTC(); int(f(9)) == t.Year()*100+int(t.Month()) {
		st.MonthGPUHours = f(10) / 3600e3
	}
	st.BudgetHeld = vals[12] == "1"
	st.CheckpointTTLDays = int(f(13) / (24 * 3600e3))
	st.StorageBytes = int64(f(14))
	st.JobStoreBytes, st.JobStoreLimitBytes = int64(f(15)), max(0, c.cfg.MaxOrgBytes)
	return st, nil
}

// usageEpoch is the origin of hold_anchor (prelude.lua's USAGE_EPOCH, 2025-01-01).
const usageEpoch = 1735689600000

// UsageBy is an organization's GPU time by the user and by the token that submitted its jobs,
// each sorted by the most used first: what its ended holds used (kept in its usage hash as they
// end, with their cost at the price each job was submitted with), and what its live jobs' holds
// have used so far, at price (the operator's, $ per GPU-hour of a model; 0 for none). live are
// the organization's live jobs. Figures are rounded to thousandths.
func (c Orgs) UsageBy(ctx context.Context, org string, live []*job.Job, price func(model string) float64) (users, tokens []job.UsageShare, err error) {
	h, err := c.rdb.HGetAll(ctx, c.keys.orgUsage(org)).Result()
	if err != nil {
		return nil, nil, wrapErr("usage by user", err)
	}
	byUser, byToken := map[string]*job.UsageShare{}, map[string]*job.UsageShare{}
	share := func(m map[string]*job.UsageShare, who string) *job.UsageShare {
		if m[who] == nil {
			m[who] = &job.UsageShare{Who: who}
		}
		return m[who]
	}
	for k, v := range h {
		n, _ := strconv.ParseFloat(v, 64)
		kind, who, _ := strings.Cut(k, ":")
		switch kind {
		case "u":
			share(byUser, who).GPUSeconds += n / 1000
		case "t":
			share(byToken, who).GPUSeconds += n / 1000
		case "uc":
			share(byUser, who).CostUSD += n / 1e6
		case "tc":
			share(byToken, who).CostUSD += n / 1e6
		}
	}
	for _, j := range live {
		if j.HoldGPUSeconds <= 0 {
			continue
		}
		cost := j.HoldGPUSeconds / 3600 * price(j.Config.Model)
		add := func(m map[string]*job.UsageShare, who string) {
			if who != "" {
				s := share(m, who)
				s.GPUSeconds += j.HoldGPUSeconds
				s.CostUSD += cost
			}
		}
		add(byUser, j.CreatedBy)
		add(byToken, j.TokenID)
	}
	sorted := func(m map[string]*job.UsageShare) []job.UsageShare {
		out := make([]job.UsageShare, 0, len(m))
		for _, s := range m {
			s.GPUSeconds, s.CostUSD = math.Round(s.GPUSeconds*1000)/1000, math.Round(s.CostUSD*1000)/1000
			out = append(out, *s)
		}
		slices.SortFunc(out, func(a, b job.UsageShare) int {
			if c := cmp.Compare(b.GPUSeconds, a.GPUSeconds); c != 0 {
				return c
			}
			return strings.Compare(a.Who, b.Who)
		})
		return out
	}
	return sorted(byUser), sorted(byToken), nil
}
