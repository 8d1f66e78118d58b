package queue

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
)

// archiveFailingStore is a real store that refuses every write of an archived record: an
// object store whose archive prefix is out of reach.
type archiveFailingStore struct{ blob.Store }

func (s archiveFailingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if strings.HasPrefix(key, "archive/jobs/") {
		return errors.New("AccessDenied")
	}
	return s.Store.Put(ctx, key, r)
}

// One duty's failure never skips another: with the archive out of reach, a pass still expires
// checkpoints past the organization's TTL and meters storage; the failure is returned, logged
// and counted against the archive duty alone.
func TestAFailingDutySkipsNoOther(t *testing.T) {
	t.Parallel()
	s3, _ := s3test.Store(t)
	store := archiveFailingStore{s3}
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		if err := b.q.SetOrg(ctx, "acme", job.OrgSettings{CheckpointTTLDays: 1}); err != nil {
			t.Fatal(err)
		}
		id := completedWithData(t, b, store, "acme", "ended")
		// Past the retention (the archive is due), the TTL (expiry is due) and the meter's wait.
		b.clock.Advance(b.cfg.Retention + 2*24*time.Hour)
		r := NewReaper(b.q, time.Second, nil)
		_, err := r.RunOnce(ctx)
		if err == nil || !strings.Contains(err.Error(), "archive: ") || !strings.Contains(err.Error(), "AccessDenied") {
			t.Fatalf("the pass: %v; want the archive's failure", err)
		}
		if steps, err := jobdata.CommittedSteps(ctx, store, id); err != nil || len(steps) != 0 {
			t.Errorf("checkpoints after the pass: %v %v; want them expired", steps, err)
		}
		if got, err := b.q.StoredBytes(ctx, "acme", []string{id}); err != nil || got[id] != 300 {
			t.Errorf("stored bytes after the pass: %v %v; want the metrics file's 300 measured", got, err)
		}
		if f := r.Failures(); f["archive"] != 1 || f["expire"]+f["meter"]+f["reap"]+f["delete"]+f["migrate"] != 0 {
			t.Errorf("failures %v; want the archive's one", f)
		}
		if _, err := store.Get(ctx, archiveKey(id)); !errors.Is(err, blob.ErrNotFound) {
			t.Errorf("an archived record was written: %v", err)
		}
	}, func(c *Config) { c.Store = store; c.StorageEvery = time.Minute })
}

// The reaper logs each node's cache hit rates, by kind, as CloudWatch embedded metrics: one
// line a node and kind whose "_aws" names CacheHitRate by Kind, with the node a property, once a
// period across passes. A node busy with its jobs (never seen waiting) is listed too.
func TestTheReaperLogsEachNodesCacheHitRates(t *testing.T) {
	t.Parallel()
	each(t, func(t *testing.T, b bundle) {
		ctx := context.Background()
		reports := map[string]map[string]job.CacheStats{
			"node-a": {"model": {Hits: 3, Misses: 1, BytesFetched: 16e9, Bytes: 16e9, Entries: 1}, "env": {Hits: 0, Misses: 2}},
			"node-b": {"model": {Hits: 1, Misses: 1}, "compile": {}},
		}
		for node, stats := range reports {
			if _, err := b.q.ReportCache(ctx, node, stats); err != nil {
				t.Fatal(err)
			}
		}
		nodes, err := b.q.Nodes(ctx)
		if err != nil || len(nodes) != 2 || nodes[0].ID != "node-a" || nodes[0].Cache["model"].Hits != 3 {
			t.Fatalf("nodes %+v %v; want node-a and node-b, busy, with their caches", nodes, err)
		}
		var log strings.Builder
		r := NewReaper(b.q, time.Second, slog.New(slog.NewJSONHandler(&log, nil)))
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"node-a model": 75, "node-a env": 0, "node-b model": 50} // compile: no lookups, no line
		got := map[string]float64{}
		for line := range strings.Lines(log.String()) {
			var rec map[string]any
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatalf("a log line that is not JSON: %q", line)
			}
			if rec["msg"] != "node cache" {
				continue
			}
			// What CloudWatch reads: the metric and its dimension named in _aws, each a key
			// of the line's root.
			aws, _ := rec["_aws"].(map[string]any)
			cw, _ := aws["CloudWatchMetrics"].([]any)
			if len(cw) != 1 || aws["Timestamp"] == nil {
				t.Fatalf("_aws %v; want one metric directive and a timestamp", aws)
			}
			d := cw[0].(map[string]any)
			metrics, dims := d["Metrics"].([]any), d["Dimensions"].([]any)
			if d["Namespace"] != "hostedtrain" || len(metrics) != 1 || metrics[0].(map[string]any)["Name"] != "CacheHitRate" ||
				len(dims) != 1 || len(dims[0].([]any)) != 1 || dims[0].([]any)[0] != "Kind" {
				t.Fatalf("metric directive %v; want hostedtrain/CacheHitRate by Kind", d)
			}
			rate, ok := rec["CacheHitRate"].(float64)
			kind, _ := rec["Kind"].(string)
			node, _ := rec["Node"].(string)
			if !ok || kind == "" || node == "" {
				t.Fatalf("line %v; want CacheHitRate, Kind and Node at its root", rec)
			}
			got[node+" "+kind] = rate
		}
		if !maps.Equal(got, want) {
			t.Fatalf("hit rates logged %v, want %v", got, want)
		}
		// Once a period: the next pass logs none.
		log.Reset()
		if _, err := r.RunOnce(ctx); err != nil {
			t.Fatal(err)
		}
		if strings.Contains(log.String(), "node cache") {
			t.Fatalf("a second pass within the period logged the caches again:\n%s", log.String())
		}
	})
}
