package queue

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// An organization's jobs are indexed by kind, status and creation time (orgindex, a sorted
// set): score = (kind code * len(statusCodes) + status code) * rankBase + the creation time in
// the job's UUIDv7 id (ms). So the jobs of one kind and status, newest first, are one range of
// scores, and List with filters reads only the jobs that pass them. The Lua side's codes are
// generated from these tables (luaIndexCodes).

var kindCodes = []string{jobspec.KindRL, jobspec.KindGEPA, jobspec.KindEval, jobspec.KindFFT}

var statusCodes = []job.Status{job.Queued, job.Pending, job.Running, job.Completed, job.Failed, job.Stopped}

// kindOther is the code of a kind kindCodes does not name.
var kindOther = len(kindCodes)

// rankBase spaces the codes apart: 2^42 ms is 139 years (prelude.lua's RANK_BASE).
const rankBase = int64(1) << 42

func kindCode(kind string) int {
	for i, k := range kindCodes {
		if k == kind {
			return i
		}
	}
	return kindOther
}

func statusCode(s job.Status) int {
	for i, st := range statusCodes {
		if st == s {
			return i
		}
	}
	return -1
}

// indexCode is the code of jobs of a kind (kindCode) in a status.
func indexCode(kind int, s job.Status) int64 {
	return int64(kind*len(statusCodes) + statusCode(s))
}

func luaIndexCodes() string {
	var b strings.Builder
	b.WriteString("-- Generated from queue/index.go: the codes of List's index.\nlocal KIND_CODE = {")
	for i, k := range kindCodes {
		fmt.Fprintf(&b, "[%q] = %d, ", k, i)
	}
	fmt.Fprintf(&b, "}\nlocal KIND_OTHER, STATUSES = %d, %d\nlocal STATUS_CODE = {", kindOther, len(statusCodes))
	for i, s := range statusCodes {
		fmt.Fprintf(&b, "[%q] = %d, ", s, i)
	}
	b.WriteString("}\n")
	return b.String()
}

// idMs is the creation time (ms) in a UUIDv7 id, as prelude.lua's id_ms reads it (0 for an id
// that is not one).
func idMs(id string) int64 {
	if len(id) < 13 {
		return 0
	}
	n, err := strconv.ParseInt(id[:8]+id[9:13], 16, 64)
	if err != nil {
		return 0
	}
	return n
}

// listIndexed is List with a kind or status filter, read from the org's index: one range of
// scores per kind and status the filter allows, newest first, merged. It reads only jobs that
// pass the filter, however many do not.
func (c *store) listIndexed(ctx context.Context, org string, f job.ListFilter, cursor string, limit int) ([]*job.Job, string, error) {
	lo, hi := int64(0), rankBase-1 // creation times (ms), inclusive
	if !f.CreatedAfter.IsZero() {
		lo = f.CreatedAfter.UnixMilli()
	}
	if !f.CreatedBefore.IsZero() {
		hi = f.CreatedBefore.UnixMilli() - 1
	}
	if cursor != "" {
		hi = min(hi, idMs(cursor))
	}
	if lo > hi {
		return []*job.Job{}, "", nil
	}
	kinds := []int{kindCode(f.Kind)}
	if f.Kind == "" {
		kinds = kinds[:0]
		for k := range kindOther + 1 {
			kinds = append(kinds, k)
		}
	}
	statuses := f.Statuses
	if len(statuses) == 0 {
		statuses = statusCodes
	}
	type span struct{ code int64 }
	var spans []span
	for _, k := range kinds {
		for _, st := range statuses {
			if statusCode(st) >= 0 {
				spans = append(spans, span{indexCode(k, st)})
			}
		}
	}
	type cand struct {
		id string
		ms int64
	}
	key := c.keys.orgIndex(org)
	fetch := func(p redis.Cmdable, sp span, offset int64) *redis.ZSliceCmd {
		return p.ZRangeArgsWithScores(ctx, redis.ZRangeArgs{
			Key: key, ByScore: true, Rev: true, Offset: offset, Count: int64(limit + 1),
			Start: strconv.FormatInt(sp.code*rankBase+hi, 10), Stop: strconv.FormatInt(sp.code*rankBase+lo, 10),
		})
	}
	first := make([]*redis.ZSliceCmd, len(spans))
	if _, err := c.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, sp := range spans {
			first[i] = fetch(p, sp, 0)
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return nil, "", fmt.Errorf("queue: list: %w", err)
	}
	var cands []cand
	for i, sp := range spans {
		page, err := first[i].Result()
		took := 0
		for offset := int64(0); ; {
			if err != nil {
				return nil, "", fmt.Errorf("queue: list: %w", err)
			}
			for _, z := range page {
				id, _ := z.Member.(string)
				if cursor != "" && id >= cursor {
					continue // the same millisecond as the cursor, at or before it
				}
				cands = append(cands, cand{id: id, ms: int64(z.Score) - sp.code*rankBase})
				took++
			}
			// Enough from this span, or nothing more in it.
			if took > limit || len(page) < limit+1 {
				break
			}
			offset += int64(len(page))
			page, err = fetch(c.rdb, sp, offset).Result()
		}
	}
	slices.SortFunc(cands, func(a, b cand) int {
		if a.ms != b.ms {
			return cmp.Compare(b.ms, a.ms)
		}
		return strings.Compare(b.id, a.id)
	})
	more := len(cands) > limit
	if more {
		cands = cands[:limit]
	}
	ids := make([]string, len(cands))
	for i, cd := range cands {
		ids[i] = cd.id
	}
	got, err := c.getMany(ctx, ids)
	if err != nil {
		return nil, "", fmt.Errorf("queue: list: %w", err)
	}
	jobs := make([]*job.Job, 0, len(got))
	for _, j := range got {
		if matchesFilter(f, j) { // it changed since the index was read: left out
			jobs = append(jobs, j)
		}
	}
	next := ""
	if more && len(ids) > 0 {
		next = ids[len(ids)-1]
	}
	return jobs, next, nil
}
