package queue

import (
	"context"
	"fmt"
	"strconv"
)

// AddJudgeUsage counts the tokens of a call the service's judge made for a job, against the
// job and its organization (what the organization is billed for).
func (c Orgs) AddJudgeUsage(ctx context.Context, org, id string, in, out int64) error {
	k := c.keys.of("orgjudge", org)
	pipe := c.rdb.TxPipeline()
	pipe.HIncrBy(ctx, k, "in", in)
	pipe.HIncrBy(ctx, k, "out", out)
	pipe.HIncrBy(ctx, k, "j:"+id+":in", in)
	pipe.HIncrBy(ctx, k, "j:"+id+":out", out)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("queue: judge usage: %w", err)
	}
	return nil
}

// JudgeUsage is what the service's judge used for a job: its input and output tokens.
func (c Orgs) JudgeUsage(ctx context.Context, org, id string) (in, out int64, err error) {
	v, err := c.rdb.HMGet(ctx, c.keys.of("orgjudge", org), "j:"+id+":in", "j:"+id+":out").Result()
	if err != nil {
		return 0, 0, fmt.Errorf("queue: judge usage: %w", err)
	}
	n := func(x any) int64 { s, _ := x.(string); i, _ := strconv.ParseInt(s, 10, 64); return i }
	return n(v[0]), n(v[1]), nil
}
