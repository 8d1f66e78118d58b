package jobdata

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"sync"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

func newStore(t testing.TB) blob.Store {
	t.Helper()
	st, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// writeAttempt writes steps first..last as prime-rl orders its rows: the orchestrator's row of
// a step two steps before the trainer's five, with small chunks so that steps straddle them.
func writeAttempt(t *testing.T, st blob.Store, fence int64, first, last int, chunk int) *MetricsWriter {
	t.Helper()
	w := NewMetricsWriter(st, "j1", fence, first)
	w.maxBytes = chunk
	ctx := context.Background()
	add := func(r Row) {
		if err := w.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	for s := first; s <= min(first+1, last); s++ {
		add(orchestratorRow(s, float64(fence)+float64(s)/1000, 20))
	}
	for s := first; s <= last; s++ {
		for _, r := range trainerRows(s, float64(fence)) {
			add(r)
		}
		if s+2 <= last {
			add(orchestratorRow(s+2, float64(fence)+float64(s+2)/1000, 20))
		}
		if s%7 == 0 {
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	return w
}

// Attempt 1 wrote steps 1–50 and was lost; attempt 2 resumed from the checkpoint of step 40
// and wrote 41–45 before it too was lost; attempt 3 resumed from 44 and wrote on to 70. Each
// step is read once, whole (trainer and orchestrator rows merged), from the newest attempt
// that wrote it; nothing an older attempt wrote past a newer one's first step survives.
func TestReadMetricsAcrossResumedAttempts(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	writeAttempt(t, st, 1, 1, 50, 8<<10)
	writeAttempt(t, st, 2, 41, 45, 8<<10)
	writeAttempt(t, st, 3, 45, 70, 8<<10)
	ctx := context.Background()
	rows, more, err := ReadMetrics(ctx, st, "j1", MetricsQuery{})
	if err != nil || more {
		t.Fatal(err, more)
	}
	if len(rows) != 70 {
		t.Fatalf("%d rows, want 70", len(rows))
	}
	for i, r := range rows {
		s := r.Step()
		want := 1.0
		switch {
		case s >= 45:
			want = 3
		case s >= 41:
			want = 2
		}
		if s != i+1 {
			t.Fatalf("row %d is step %d", i, s)
		}
		if got, _ := r.Float("loss/mean"); got != want {
			t.Errorf("step %d from attempt %v, want %v", s, got, want)
		}
		if _, ok := r["train/agg/all/agent/reward/mean"]; !ok {
			t.Errorf("step %d lacks the orchestrator's row", s)
		}
	}
	// A window, some names, a limit: only what was asked, with a cursor.
	rows, more, err = ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 38, MaxStep: 62, Names: []string{"loss/mean"}, Limit: 10})
	if err != nil || !more || len(rows) != 10 || rows[0].Step() != 38 || rows[9].Step() != 47 {
		t.Fatalf("window: %d rows more=%v %v", len(rows), more, err)
	}
	if _, ok := rows[0]["entropy/all/mean"]; ok || rows[0]["time"] == nil || rows[0]["loss/mean"] == nil {
		t.Errorf("names filter: %v", rows[0])
	}
	rows, _, _ = ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 65})
	if len(rows) != 6 || rows[0].Step() != 65 {
		t.Errorf("from 65: %d rows", len(rows))
	}
	if rows, _, err := ReadMetrics(ctx, st, "none", MetricsQuery{}); err != nil || len(rows) != 0 {
		t.Errorf("a job with no metrics: %v %v", rows, err)
	}
}

// A limited read of the first steps opens only the chunks that can hold them.
func TestALimitedReadStopsEarly(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: newStore(t)}
	writeAttempt(t, st, 1, 1, 400, 16<<10)
	objs, _ := st.List(context.Background(), MetricsPrefix("j1"))
	st.gets = 0
	rows, more, err := ReadMetrics(context.Background(), st, "j1", MetricsQuery{Limit: 1})
	if err != nil || !more || len(rows) != 1 || rows[0].Step() != 1 {
		t.Fatalf("%v %v %v", rows, more, err)
	}
	if _, ok := rows[0]["loss/mean"]; !ok {
		t.Errorf("step 1 is not whole: %v", rows[0])
	}
	if st.gets > 16 || st.gets >= len(objs) {
		t.Errorf("read %d of %d chunks for one step", st.gets, len(objs))
	}
}

type countingStore struct {
	blob.Store
	mu   sync.Mutex
	gets int
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.mu.Lock()
	c.gets++
	c.mu.Unlock()
	return c.Store.Get(ctx, key)
}

// An evaluation reports late, after later steps: its row lands in a chunk of its own, and a
// read of its step finds it merged with the step's training rows.
func TestALateRowIsReadWithItsStep(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	w := NewMetricsWriter(st, "j1", 1, 1)
	ctx := context.Background()
	for s := 1; s <= 20; s++ {
		for _, r := range trainerRows(s, 0.1) {
			_ = w.Add(r)
		}
	}
	if err := w.Add(Row{"step": raw(5), "eval/gsm8k/avg_reward": raw(0.7)}); err != nil {
		t.Fatal(err)
	}
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _, err := ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 5, MaxStep: 5})
	if err != nil || len(rows) != 1 {
		t.Fatal(rows, err)
	}
	if _, ok := rows[0]["eval/gsm8k/avg_reward"]; !ok {
		t.Errorf("the evaluation is missing: %v", rows[0])
	}
	if _, ok := rows[0]["loss/mean"]; !ok {
		t.Errorf("the training rows are missing: %v", rows[0])
	}
}

// A sealed chunk takes its final name and its open object goes; rows that could not be
// stored stay and go with the next flush; a stale row (before the attempt's first step) is
// refused.
func TestMetricsWriterSealsAndSurvivesAnOutage(t *testing.T) {
	t.Parallel()
	dir := newStore(t)
	st := &downStore{Store: dir}
	w := NewMetricsWriter(st, "j1", 3, 10)
	w.maxBytes = 1 << 10
	ctx := context.Background()
	if err := w.Add(trainerRows(9, 1)[0]); err == nil {
		t.Error("a row before the attempt's first step was taken")
	}
	for s := 10; s <= 20; s++ {
		for _, r := range trainerRows(s, 1) {
			_ = w.Add(r)
		}
		if s == 12 {
			if err := w.Flush(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	st.down = true
	if err := w.Flush(ctx); err == nil {
		t.Fatal("flush succeeded with storage down")
	}
	st.down = false
	if err := w.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if w.Pending() != 0 {
		t.Errorf("%d bytes still pending", w.Pending())
	}
	objs, _ := dir.List(ctx, MetricsPrefix("j1"))
	open := 0
	for _, o := range objs {
		c, ok := parseChunkKey(o.Key)
		if !ok {
			t.Errorf("unparsable chunk %s", o.Key)
		}
		if c.max < 0 {
			open++
		}
	}
	if open > 1 || len(objs) < 3 {
		t.Errorf("%d chunks, %d open: %v", len(objs), open, objs)
	}
	rows, _, err := ReadMetrics(ctx, dir, "j1", MetricsQuery{})
	if err != nil || len(rows) != 11 || rows[0].Step() != 10 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
}

type downStore struct {
	blob.Store
	down bool
}

func (d *downStore) Put(ctx context.Context, key string, r io.Reader) error {
	if d.down {
		return fmt.Errorf("storage unavailable")
	}
	return d.Store.Put(ctx, key, r)
}

// A line in storage that is not a row — cut short, or too long to be one — is passed over;
// the rows around it are read.
func TestReadMetricsSkipsBadLines(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	// Too long; cut off; a value that is not JSON inside a well-shaped line (an agent may
	// write anything); a step that is not a whole number.
	body := `{"step":1,"loss/mean":0.5}` + "\n" + `{"step":2,"x":"` + strings.Repeat("y", MaxLineBytes+5) + "\"}\n" +
		`{"step":3,` + "\n" + `{"step":5,"a":"\u12"}` + "\n" + `{"step":6,"a":[1,,2]}` + "\n" + `{"step":"7","a":1}` + "\n" +
		`{"step":4,"loss/mean":0.25}` + "\n"
	if err := st.Put(context.Background(), metricsChunkKey("j1", 1, 1, 4, 1), strings.NewReader(body)); err != nil {
		t.Fatal(err)
	}
	rows, _, err := ReadMetrics(context.Background(), st, "j1", MetricsQuery{})
	if err != nil || len(rows) != 2 || rows[0].Step() != 1 || rows[1].Step() != 4 {
		t.Fatalf("%v %v", rows, err)
	}
	if _, err := json.Marshal(rows); err != nil {
		t.Errorf("the rows read do not encode: %v", err)
	}
}

// seals wraps a store: the first read of an open metrics chunk finds it sealed just then,
// as a writer's flush does between a reader's listing and its read.
type seals struct {
	blob.Store
	once sync.Once
}

func (s *seals) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	if strings.Contains(key, "-open-") {
		sealed := false
		s.once.Do(func() {
			rc, err := s.Store.Get(ctx, key)
			if err != nil {
				return
			}
			data, _ := io.ReadAll(rc)
			rc.Close()
			_ = s.Store.Put(ctx, strings.Replace(key, "-open-", "-00000005-", 1), bytes.NewReader(data))
			_ = s.Store.Delete(ctx, key)
			sealed = true
		})
		if sealed {
			return nil, blob.ErrNotFound
		}
	}
	return s.Store.Get(ctx, key)
}

// A chunk sealed between the listing and its read is read under its new name.
func TestReadMetricsFollowsAChunkSealedWhileReading(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	w := NewMetricsWriter(st, "j1", 1, 1)
	for s := 1; s <= 5; s++ {
		if err := w.Add(Row{"step": raw(s), "loss/mean": raw(0.5)}); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	rows, _, err := ReadMetrics(context.Background(), &seals{Store: st}, "j1", MetricsQuery{})
	if err != nil || len(rows) != 5 {
		t.Fatalf("%d rows (%v), want the 5 of the sealed chunk", len(rows), err)
	}
}

// A read of some names reads only those keys of each row, yet answers what the full read
// answers for them: a key both processes write (time/step) keeps the trainer's value under its
// name and the orchestrator's under orchestrator/, though the rows were read in part.
func TestANamedReadAgreesWithTheFullRead(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	writeAttempt(t, st, 1, 1, 30, 4<<10)
	ctx := context.Background()
	full, _, err := ReadMetrics(ctx, st, "j1", MetricsQuery{})
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"train/agg/all/agent/reward/mean", "time/step", "orchestrator/time/step", "loss/mean", "no/such/key"}
	part, _, err := ReadMetrics(ctx, st, "j1", MetricsQuery{Names: names})
	if err != nil {
		t.Fatal(err)
	}
	if len(part) != len(full) || len(full) != 30 {
		t.Fatalf("%d rows named, %d in full, want 30", len(part), len(full))
	}
	for i := range full {
		if len(part[i]) != 6 { // step, time and the four that exist
			t.Errorf("step %d: keys %v", i+1, part[i])
		}
		for _, k := range append(names, "step", "time") {
			if string(part[i][k]) != string(full[i][k]) {
				t.Errorf("step %d %s: %s named, %s in full", i+1, k, part[i][k], full[i][k])
			}
		}
	}
	if v, _ := part[4].Float("orchestrator/time/step"); v == 0 {
		t.Errorf("orchestrator/time/step is missing from a named read: %v", part[4])
	}
}
