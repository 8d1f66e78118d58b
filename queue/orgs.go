package queue

import (
	"context"
	_ "embed"
	"fmt"
	"math"
	"strconv"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// SetOrg changes an organization's weight and limits; zero values restore the defaults.
func (c *Client) SetOrg(ctx context.Context, org string, s job.OrgSettings) error {
	if s.Weight < 0 || s.MaxRunning < 0 || s.MaxQueued < 0 || s.MonthlyGPUHours < 0 {
		return fmt.Errorf("queue: org settings must not be negative: %+v", s)
	}
	err := c.call(ctx, "set_org", c.keys.org(org), args{
		"org": org, "weight": s.Weight, "org_max_running": s.MaxRunning, "org_max_queued": s.MaxQueued,
		"month_budget_ms": int64(math.Round(s.MonthlyGPUHours * 3600e3)),
	}).Err()
	if err != nil {
		return scriptErr("set org", err)
	}
	return nil
}

// GetOrg reports an organization's settings in effect and its use of the queue now.
func (c *Client) GetOrg(ctx context.Context, org string) (job.OrgStatus, error) {
	vals, err := c.rdb.HMGet(ctx, c.keys.org(org), "weight", "max_running", "max_queued", "queued", "running", "running_gpus", "usage",
		"gpu_ms", "hold_anchor", "month", "month_ms", "month_budget_ms", "held").Result()
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
	return st, nil
}

// usageEpoch is the origin of hold_anchor (prelude.lua's USAGE_EPOCH, 2025-01-01).
const usageEpoch = 1735689600000
