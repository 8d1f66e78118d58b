package jobdata

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/s3test"
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
	page, err := ReadMetrics(ctx, st, "j1", MetricsQuery{})
	rows := page.Rows
	if err != nil || page.More {
		t.Fatal(err, page.More)
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
	page, err = ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 38, MaxStep: 62, Names: []string{"loss/mean"}, Limit: 10})
	rows, more := page.Rows, page.More
	if err != nil || !more || len(rows) != 10 || rows[0].Step() != 38 || rows[9].Step() != 47 {
		t.Fatalf("window: %d rows more=%v %v", len(rows), more, err)
	}
	if _, ok := rows[0]["entropy/all/mean"]; ok || rows[0]["time"] == nil || rows[0]["loss/mean"] == nil {
		t.Errorf("names filter: %v", rows[0])
	}
	page, _ = ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 65})
	rows = page.Rows
	if len(rows) != 6 || rows[0].Step() != 65 {
		t.Errorf("from 65: %d rows", len(rows))
	}
	if page, err := ReadMetrics(ctx, st, "none", MetricsQuery{}); err != nil || len(page.Rows) != 0 {
		t.Errorf("a job with no metrics: %v %v", page.Rows, err)
	}
}

// A limited read of the first steps opens only the chunks that can hold them.
func TestALimitedReadStopsEarly(t *testing.T) {
	t.Parallel()
	st := &countingStore{Store: newStore(t)}
	writeAttempt(t, st, 1, 1, 400, 16<<10)
	objs, _ := st.List(context.Background(), MetricsPrefix("j1"))
	st.reset()
	page, err := ReadMetrics(context.Background(), st, "j1", MetricsQuery{Limit: 1})
	rows, more := page.Rows, page.More
	if err != nil || !more || len(rows) != 1 || rows[0].Step() != 1 {
		t.Fatalf("%v %v %v", rows, more, err)
	}
	if _, ok := rows[0]["loss/mean"]; !ok {
		t.Errorf("step 1 is not whole: %v", rows[0])
	}
	if n := st.gets.Load(); n > 16 || n >= int64(len(objs)) {
		t.Errorf("read %d of %d chunks for one step", n, len(objs))
	}
}

// countingStore counts what is fetched from the store it wraps: objects, bytes, listings.
type countingStore struct {
	blob.Store
	gets, bytes, lists atomic.Int64
}

func (c *countingStore) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	c.gets.Add(1)
	rc, err := c.Store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	return countedReader{rc, &c.bytes}, nil
}

func (c *countingStore) List(ctx context.Context, prefix string) ([]blob.Object, error) {
	c.lists.Add(1)
	return c.Store.List(ctx, prefix)
}

func (c *countingStore) reset() { c.gets.Store(0); c.bytes.Store(0); c.lists.Store(0) }

type countedReader struct {
	io.ReadCloser
	n *atomic.Int64
}

func (r countedReader) Read(p []byte) (int, error) {
	n, err := r.ReadCloser.Read(p)
	r.n.Add(int64(n))
	return n, err
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
	page, err := ReadMetrics(ctx, st, "j1", MetricsQuery{MinStep: 5, MaxStep: 5})
	rows := page.Rows
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
	page, err := ReadMetrics(ctx, dir, "j1", MetricsQuery{})
	rows := page.Rows
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
	page, err := ReadMetrics(context.Background(), st, "j1", MetricsQuery{})
	rows := page.Rows
	if err != nil || len(rows) != 2 || rows[0].Step() != 1 || rows[1].Step() != 4 {
		t.Fatalf("%v %v", rows, err)
	}
	if page.Skipped != 5 {
		t.Errorf("%d lines passed over, want 5", page.Skipped)
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
	page, err := ReadMetrics(context.Background(), &seals{Store: st}, "j1", MetricsQuery{})
	rows := page.Rows
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
	fullPage, err := ReadMetrics(ctx, st, "j1", MetricsQuery{})
	full := fullPage.Rows
	if err != nil {
		t.Fatal(err)
	}
	names := []string{"train/agg/all/agent/reward/mean", "time/step", "orchestrator/time/step", "loss/mean", "no/such/key"}
	partPage, err := ReadMetrics(ctx, st, "j1", MetricsQuery{Names: names})
	part := partPage.Rows
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

// readCost is what one read fetched and allocated.
type readCost struct {
	page        MetricsPage
	gets, bytes int64
	lists       int64
	allocated   uint64
}

// measure reads q once through a counting wrapper around st. The allocation figure is the
// whole process's, so it is only meaningful in a test that does not run in parallel.
func measure(t *testing.T, st blob.Store, q MetricsQuery) readCost {
	t.Helper()
	cs := &countingStore{Store: st}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	page, err := ReadMetrics(context.Background(), cs, "j1", q)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	return readCost{page: page, gets: cs.gets.Load(), bytes: cs.bytes.Load(), lists: cs.lists.Load(), allocated: after.TotalAlloc - before.TotalAlloc}
}

// A run of 100,000 steps, stored through MetricsWriter as the agent stores them, in order and
// with rows out of order (an evaluation 500 steps late and a result under step 1, every 1,000
// steps, which used to make every chunk start at step 1): the first step, a step in the
// middle, and the newest 20 steps (what the progress endpoint reads) each fetch a few chunks
// and allocate a few megabytes, as much as from a run of 10,000 steps, though the history is
// some 100 MB. Not parallel: it measures the process's allocations.
func TestALongHistoryReadsAFewChunks(t *testing.T) {
	type shape struct {
		name        string
		steps, late int
	}
	stores := map[string]func(t *testing.T) blob.Store{
		"dir": func(t *testing.T) blob.Store { return newStore(t) },
		"s3": func(t *testing.T) blob.Store {
			st, _ := s3test.Store(t)
			return st
		},
	}
	for _, c := range []struct {
		store string
		shape
	}{
		// One history of 100,000 steps; the others shorter, as writing a history is most of
		// what this test costs under the race detector and the reads do not depend on its
		// length (the figures the test logs show it).
		{"dir", shape{"in-order", 20000, 0}},
		{"dir", shape{"late-rows", 10000, 1000}},
		{"dir", shape{"late-rows", 100000, 1000}},
		{"s3", shape{"late-rows", 20000, 1000}},
	} {
		t.Run(fmt.Sprintf("%s/%s/%d", c.store, c.name, c.steps), func(t *testing.T) {
			st := stores[c.store](t)
			putRun(t, st, c.steps, 20, c.late)
			objs, err := st.List(context.Background(), MetricsPrefix("j1"))
			if err != nil {
				t.Fatal(err)
			}
			var history int64
			for _, o := range objs {
				history += o.Size
			}
			for _, q := range []struct {
				name  string
				q     MetricsQuery
				first int
				n     int
			}{
				{"limit=1", MetricsQuery{Limit: 1}, 1, 1},
				{"middle", MetricsQuery{MinStep: c.steps / 2, Limit: 1}, c.steps / 2, 1},
				{"newest 20", MetricsQuery{MinStep: c.steps - 19, Names: []string{"time"}}, c.steps - 19, 20},
			} {
				got := measure(t, st, q.q)
				rows := got.page.Rows
				if len(rows) != q.n || rows[0].Step() != q.first {
					t.Fatalf("%s: %d rows from step %v, want %d from %d", q.name, len(rows), rows, q.n, q.first)
				}
				if q.q.Names == nil {
					if _, ok := rows[0]["loss/mean"]; !ok {
						t.Errorf("%s: the trainer's rows are missing: %v", q.name, rows[0])
					}
					if _, ok := rows[0]["train/agg/all/agent/reward/mean"]; !ok {
						t.Errorf("%s: the orchestrator's row is missing: %v", q.name, rows[0])
					}
				}
				if c.late > 0 && q.first == 1 {
					if _, ok := rows[0]["result/score"]; !ok {
						t.Errorf("%s: the late rows of step 1 are missing: %v", q.name, rows[0])
					}
				}
				t.Logf("%s: %d of %d chunks, %d of %d bytes, %d listing, %d bytes allocated",
					q.name, got.gets, len(objs), got.bytes, history, got.lists, got.allocated)
				// A main chunk or two around the steps, and the late rows' chunk.
				if got.gets > 3 || got.bytes > 3*MetricsChunkBytes || got.lists != 1 {
					t.Errorf("%s: fetched %d objects, %d bytes, %d listings; want at most 3 chunks, 3 MiB, 1 listing",
						q.name, got.gets, got.bytes, got.lists)
				}
				if got.allocated > 32<<20 {
					t.Errorf("%s: allocated %d bytes reading %d; want under 32 MiB", q.name, got.allocated, got.bytes)
				}
			}
		})
	}
}

// However a job orders its rows — backwards, shuffled — each step lies in a few chunks (a
// main chunk or two and the late ones), the chunks are about as many as the bytes need, and
// what is refused is refused as late, after MetricsLateBytes of such rows; what was taken
// reads back.
func TestAnyOrderOfRowsKeepsEachStepInAFewChunks(t *testing.T) {
	t.Parallel()
	const steps = 20000
	for _, order := range []string{"backwards", "shuffled"} {
		t.Run(order, func(t *testing.T) {
			t.Parallel()
			st := newStore(t)
			w := NewMetricsWriter(st, "j1", 1, 1)
			seq := make([]int, steps)
			for i := range seq {
				seq[i] = steps - i
			}
			if order == "shuffled" {
				rand.New(rand.NewPCG(1, 2)).Shuffle(len(seq), func(i, j int) { seq[i], seq[j] = seq[j], seq[i] })
			}
			taken := map[int]bool{}
			late := 0
			for i, s := range seq {
				err := w.Add(orchestratorRow(s, float64(s), 20))
				switch {
				case err == nil:
					taken[s] = true
				case errors.Is(err, ErrLate):
					late++
				default:
					t.Fatalf("step %d: %v", s, err)
				}
				if i%500 == 0 {
					if err := w.Flush(context.Background()); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := w.Flush(context.Background()); err != nil {
				t.Fatal(err)
			}
			objs, err := st.List(context.Background(), MetricsPrefix("j1"))
			if err != nil {
				t.Fatal(err)
			}
			var stored int64
			depth := make([]int, steps+2)
			for _, o := range objs {
				stored += o.Size
				c, ok := parseChunkKey(o.Key)
				if !ok {
					t.Fatalf("unparsable chunk %s", o.Key)
				}
				hi := c.max
				if hi < 0 {
					hi = steps
				}
				for s := c.min; s <= min(hi, steps); s++ {
					depth[s]++
				}
			}
			if late == 0 || stored > MetricsChunkBytes+MetricsLateBytes+2*MetricsChunkBytes {
				t.Errorf("%d rows refused as late, %d bytes stored; want the late rows capped near %d", late, stored, MetricsLateBytes)
			}
			if n := int64(len(objs)); n > stored/MetricsChunkBytes+4 {
				t.Errorf("%d chunks for %d bytes", n, stored)
			}
			deepest := slices.Max(depth)
			t.Logf("%d rows taken, %d refused as late; %d chunks, %d bytes; a step in %d chunks at most", len(taken), late, len(objs), stored, deepest)
			if deepest > 12 {
				t.Errorf("a step lies in %d chunks; want a few", deepest)
			}
			for s := range taken {
				if s%997 != 0 {
					continue
				}
				page, err := ReadMetrics(context.Background(), st, "j1", MetricsQuery{MinStep: s, MaxStep: s})
				if err != nil || len(page.Rows) != 1 {
					t.Fatalf("step %d: %v %v", s, page.Rows, err)
				}
				if v, _ := page.Rows[0].Float("train/agg/all/agent/reward/mean"); v != float64(s) {
					t.Errorf("step %d reads %v", s, v)
				}
			}
		})
	}
}

// One step takes no more than MetricsStepBytes of rows; the rest is refused, and other steps
// go on being taken.
func TestAStepsRowsAreCapped(t *testing.T) {
	t.Parallel()
	st := newStore(t)
	w := NewMetricsWriter(st, "j1", 1, 1)
	row := Row{"step": raw(5), "x": raw(strings.Repeat("y", 100<<10))}
	took := 0
	var err error
	for range 100 {
		if err = w.Add(row); err != nil {
			break
		}
		took++
	}
	if !errors.Is(err, ErrStepFull) || took == 0 || took*(100<<10) > MetricsStepBytes {
		t.Fatalf("took %d rows of 100 KiB, then %v; want ErrStepFull by %d bytes", took, err, MetricsStepBytes)
	}
	if err := w.Add(trainerRows(6, 0.5)[0]); err != nil {
		t.Errorf("the next step: %v", err)
	}
}

// A line of 17 MiB already in storage (written by something other than this agent, which
// refuses lines over MaxLineBytes) is passed over and counted, in a sealed chunk and in an
// open one, on a folder and on S3; the rows after it are read.
func TestAnOversizedStoredLineIsPassedOver(t *testing.T) {
	t.Parallel()
	s3, _ := s3test.Store(t)
	for name, st := range map[string]blob.Store{"dir": newStore(t), "s3": s3} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			var body strings.Builder
			body.WriteString(`{"step":1,"loss/mean":0.5}` + "\n")
			body.WriteString(`{"step":2,"x":"` + strings.Repeat("y", 17<<20) + "\"}\n")
			for s := 3; s <= 9; s++ {
				fmt.Fprintf(&body, `{"step":%d,"loss/mean":0.25}`+"\n", s)
			}
			if err := st.Put(ctx, metricsChunkKey("j1", 1, 1, 9, 1), strings.NewReader(body.String())); err != nil {
				t.Fatal(err)
			}
			if err := st.Put(ctx, metricsChunkKey("j1", 1, 10, -1, 2), strings.NewReader(strings.Replace(body.String(), `{"step":1,`, `{"step":10,`, 1))); err != nil {
				t.Fatal(err)
			}
			page, err := ReadMetrics(ctx, st, "j1", MetricsQuery{})
			if err != nil {
				t.Fatal(err)
			}
			var steps []int
			for _, r := range page.Rows {
				steps = append(steps, r.Step())
			}
			if want := []int{1, 3, 4, 5, 6, 7, 8, 9, 10}; !slices.Equal(steps, want) || page.Skipped != 2 {
				t.Errorf("steps %v, %d lines passed over; want %v and 2", steps, page.Skipped, want)
			}
		})
	}
}
