package blob

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// MetricsQuery selects steps and metric names of a job's metrics.
type MetricsQuery struct {
	MinStep, MaxStep int // inclusive; MaxStep 0 for no bound
	// Names keeps only these metrics (step and time always stay); empty keeps all.
	Names []string
	// Limit caps the steps returned, from MinStep up; 0 for no cap.
	Limit int
}

// MetricsRow is one step of metrics.jsonl as prime-rl wrote it.
type MetricsRow map[string]json.RawMessage

// Step is the row's step.
func (r MetricsRow) Step() int {
	var s int
	_ = json.Unmarshal(r["step"], &s)
	return s
}

type metricsChunk struct {
	key         string
	fence       int64
	first, next int // next: the first step of the attempt's next chunk (or of a later attempt), 0 for none
}

// ReadMetrics reads the steps q asks for, ascending, and says whether steps beyond Limit
// remain. A step written by several attempts (a run resumed from a checkpoint redoes the steps
// after it) is taken from the newest; steps an older attempt wrote past a newer attempt's
// resume point are dropped.
func ReadMetrics(ctx context.Context, store Store, jobID string, q MetricsQuery) ([]MetricsRow, bool, error) {
	objs, err := store.List(ctx, MetricsPrefix(jobID))
	if err != nil {
		return nil, false, err
	}
	var chunks []metricsChunk
	for _, o := range objs {
		if fence, first, ok := parseMetricsChunk(o.Key); ok {
			chunks = append(chunks, metricsChunk{key: o.Key, fence: fence, first: first})
		}
	}
	sort.Slice(chunks, func(i, j int) bool {
		if chunks[i].fence != chunks[j].fence {
			return chunks[i].fence < chunks[j].fence
		}
		return chunks[i].first < chunks[j].first
	})
	// Each chunk ends before the next chunk of its attempt; an attempt's steps end before the
	// resume point (first step) of any later attempt.
	cut := 0 // the lowest first step of the attempts after the one being looked at
	for i := len(chunks) - 1; i >= 0; i-- {
		c := &chunks[i]
		if i+1 < len(chunks) && chunks[i+1].fence == c.fence {
			c.next = chunks[i+1].first
		} else {
			c.next = cut
		}
		if cut > 0 {
			c.next = min(c.next, cut)
		}
		if i == 0 || chunks[i-1].fence != c.fence { // the attempt's first chunk
			if cut == 0 || c.first < cut {
				cut = c.first
			}
		}
	}
	var want []metricsChunk
	for _, c := range chunks {
		if c.next > 0 && c.next <= q.MinStep { // ends before the range
			continue
		}
		if q.MaxStep > 0 && c.first > q.MaxStep {
			continue
		}
		if c.next > 0 && c.next <= c.first { // superseded whole
			continue
		}
		want = append(want, c)
	}
	rows := make([][]stepRow, len(want))
	errs := make([]error, len(want))
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for i, c := range want {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			rows[i], errs[i] = readChunk(ctx, store, c, q)
		}()
	}
	wg.Wait()
	// Chunks are in attempt order and their lines in step order: a later row of a step
	// replaces an earlier one.
	byStep := map[int]int{}
	var all []stepRow
	for i := range want {
		if errs[i] != nil {
			return nil, false, errs[i]
		}
		for _, r := range rows[i] {
			if at, ok := byStep[r.step]; ok {
				all[at] = r
				continue
			}
			byStep[r.step] = len(all)
			all = append(all, r)
		}
	}
	sort.Slice(all, func(i, j int) bool { return all[i].step < all[j].step })
	out := make([]MetricsRow, len(all))
	for i, r := range all {
		out[i] = r.row
	}
	more := false
	if q.Limit > 0 && len(out) > q.Limit {
		out, more = out[:q.Limit], true
	}
	return out, more, nil
}

// stepRow is a row with its step read once.
type stepRow struct {
	step int
	row  MetricsRow
}

func readChunk(ctx context.Context, store Store, c metricsChunk, q MetricsQuery) ([]stepRow, error) {
	rc, err := store.Get(ctx, c.key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	keep := map[string]bool{}
	for _, n := range q.Names {
		keep[n] = true
	}
	var out []stepRow
	sc := bufio.NewScanner(rc)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		var row MetricsRow
		if json.Unmarshal(line, &row) != nil {
			continue
		}
		s := row.Step()
		if s < q.MinStep || (q.MaxStep > 0 && s > q.MaxStep) || (c.next > 0 && s >= c.next) {
			continue
		}
		if len(keep) > 0 {
			for k := range row {
				if k != "step" && k != "time" && !keep[k] {
					delete(row, k)
				}
			}
		}
		out = append(out, stepRow{step: s, row: row})
	}
	return out, sc.Err()
}

// Checkpoint is one step folder of a job in storage.
type Checkpoint struct {
	Step  int
	Bytes int64
	Files int
	// Committed is true once the manifest is written; an uncommitted folder is an upload in
	// progress (or one cut short) and is never resumed from.
	Committed bool
	Time      time.Time
}

// ListCheckpoints lists a job's checkpoints in storage, ascending by step.
func ListCheckpoints(ctx context.Context, store Store, jobID string) ([]Checkpoint, error) {
	objs, err := store.List(ctx, JobPrefix(jobID)+"checkpoints/")
	if err != nil {
		return nil, err
	}
	by := map[int]*Checkpoint{}
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, JobPrefix(jobID)+"checkpoints/step_")
		num, file, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		step, err := strconv.Atoi(num)
		if err != nil {
			continue
		}
		c := by[step]
		if c == nil {
			c = &Checkpoint{Step: step}
			by[step] = c
		}
		if file == ManifestName {
			c.Committed, c.Time = true, o.Modified
			continue
		}
		c.Bytes += o.Size
		c.Files++
		if !c.Committed && o.Modified.After(c.Time) {
			c.Time = o.Modified
		}
	}
	out := make([]Checkpoint, 0, len(by))
	for _, c := range by {
		out = append(out, *c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Step < out[j].Step })
	return out, nil
}
