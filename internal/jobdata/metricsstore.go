package jobdata

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// MetricsChunkBytes is how large a metrics chunk grows before it is sealed: a few dozen steps
// of prime-rl's rows (an orchestrator row of one environment is about 25 KB).
const MetricsChunkBytes = 1 << 20

// MetricsWriter stores an attempt's metrics rows as a few growing objects: rows go into an
// open chunk that is rewritten whole at each flush until it reaches its size; then it is
// sealed under a name that says the steps it holds (min..max), and the next one opens. A
// chunk holds no step below its min, so a reader finds a window of steps by the names alone.
// Rows come nearly in step order (the orchestrator runs ahead of the trainer by a step or
// two, evaluations report late); a row below the open chunk's min seals it and opens another.
type MetricsWriter struct {
	store    blob.Store
	jobID    string
	fence    int64
	floor    int // the attempt's first step: rows below it are stale and not stored
	maxBytes int

	n      int // chunks opened so far
	open   *openChunk
	sealed []sealedChunk // full chunks not yet stored (a failed flush); they go first
}

type openChunk struct {
	min, max, n int
	buf         []byte
	dirty       bool
	stored      bool // an object exists under its open key
}

type sealedChunk struct {
	key, openKey string // openKey: the open object to delete once key is stored ("" for none)
	data         []byte
}

// NewMetricsWriter writes attempt fence of a job whose steps start at first (1 for a fresh
// run, the resumed checkpoint's step + 1).
func NewMetricsWriter(store blob.Store, jobID string, fence int64, first int) *MetricsWriter {
	return &MetricsWriter{store: store, jobID: jobID, fence: fence, floor: max(first, 1), maxBytes: MetricsChunkBytes}
}

// ErrStale is a row for a step before the attempt's first: a resumed run does not rewrite
// the steps before its checkpoint.
var ErrStale = errors.New("metrics row before the attempt's first step")

// Add takes one row.
func (w *MetricsWriter) Add(r Row) error {
	step := r.Step()
	if step < w.floor {
		return fmt.Errorf("%w (step %d, first %d)", ErrStale, step, w.floor)
	}
	line, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if o := w.open; o != nil && (len(o.buf) >= w.maxBytes || step < o.min) {
		w.seal()
	}
	if w.open == nil {
		w.n++
		lo := step
		if w.n == 1 {
			lo = w.floor // the first chunk names the attempt's first step, its resume point
		}
		w.open = &openChunk{min: lo, max: step, n: w.n}
	}
	o := w.open
	o.buf = append(append(o.buf, line...), '\n')
	o.max, o.dirty = max(o.max, step), true
	return nil
}

func (w *MetricsWriter) openKey(o *openChunk) string {
	return metricsChunkKey(w.jobID, w.fence, o.min, -1, o.n)
}

// seal closes the open chunk under its final name.
func (w *MetricsWriter) seal() {
	o := w.open
	if o == nil || len(o.buf) == 0 {
		return
	}
	sc := sealedChunk{key: metricsChunkKey(w.jobID, w.fence, o.min, o.max, o.n), data: o.buf}
	if o.stored {
		sc.openKey = w.openKey(o)
	}
	w.sealed = append(w.sealed, sc)
	w.open = nil
}

// Flush stores the sealed chunks (and removes their open objects) and the open chunk if it
// changed. What fails stays and goes with the next flush.
func (w *MetricsWriter) Flush(ctx context.Context) error {
	for len(w.sealed) > 0 {
		s := w.sealed[0]
		if err := w.store.Put(ctx, s.key, bytes.NewReader(s.data)); err != nil {
			return err
		}
		if s.openKey != "" {
			// A reader that sees both merges the same rows twice, which changes nothing.
			if err := w.store.Delete(ctx, s.openKey); err != nil && !errors.Is(err, blob.ErrNotFound) {
				return err
			}
		}
		w.sealed = w.sealed[1:]
	}
	o := w.open
	if o == nil || !o.dirty {
		return nil
	}
	if err := w.store.Put(ctx, w.openKey(o), bytes.NewReader(o.buf)); err != nil {
		return err
	}
	o.dirty, o.stored = false, true
	return nil
}

// Pending is how many bytes have not reached storage.
func (w *MetricsWriter) Pending() int {
	n := 0
	for _, s := range w.sealed {
		n += len(s.data)
	}
	if w.open != nil && w.open.dirty {
		n += len(w.open.buf)
	}
	return n
}

// MetricsQuery selects steps and metric names of a job's metrics.
type MetricsQuery struct {
	MinStep, MaxStep int // inclusive; MaxStep 0 for no bound
	// Names keeps only these metrics (step and time always stay); empty keeps all.
	Names []string
	// Limit caps the steps returned, from MinStep up; 0 for no cap.
	Limit int
}

type taggedRow struct {
	fence   int64
	n, line int
	row     Row
	writer  string
}

// ReadMetrics reads the steps q asks for, each step's rows merged into one, ascending, and
// says whether steps beyond Limit remain. A resumed attempt writes the steps after its
// checkpoint again: what an older attempt wrote at or past a newer attempt's first step is
// dropped, so each step comes from the newest attempt that wrote it. Only the chunks whose
// names overlap the window are read, and for a Limit only as far as it needs.
func ReadMetrics(ctx context.Context, store blob.Store, jobID string, q MetricsQuery) ([]Row, bool, error) {
	// A chunk sealed between the listing and its read is under another name now: list again.
	for tries := 1; ; tries++ {
		rows, more, err := readMetrics(ctx, store, jobID, q)
		if errors.Is(err, errChunkSealed) && tries < 3 {
			continue
		}
		return rows, more, err
	}
}

// errChunkSealed is an open chunk that was gone when read: its writer sealed it.
var errChunkSealed = errors.New("a metrics chunk was sealed while it was read")

// maxChunkRead bounds what is read of one metrics chunk.
const maxChunkRead = 8 * MetricsChunkBytes

func readMetrics(ctx context.Context, store blob.Store, jobID string, q MetricsQuery) ([]Row, bool, error) {
	objs, err := store.List(ctx, MetricsPrefix(jobID))
	if err != nil {
		return nil, false, err
	}
	var chunks []chunkName
	floor := map[int64]int{}
	for _, o := range objs {
		c, ok := parseChunkKey(o.Key)
		if !ok {
			continue
		}
		chunks = append(chunks, c)
		if f, seen := floor[c.fence]; !seen || c.min < f {
			floor[c.fence] = c.min
		}
	}
	// cut[f]: the first step of the attempts after f; f's rows from there on are superseded.
	fences := make([]int64, 0, len(floor))
	for f := range floor {
		fences = append(fences, f)
	}
	sort.Slice(fences, func(i, j int) bool { return fences[i] > fences[j] })
	cut := map[int64]int{}
	next := -1
	for _, f := range fences {
		cut[f] = next
		if next < 0 || floor[f] < next {
			next = floor[f]
		}
	}
	var want []chunkName
	for _, c := range chunks {
		if ct := cut[c.fence]; ct >= 0 && c.min >= ct { // superseded whole
			continue
		}
		if c.max >= 0 && c.max < q.MinStep {
			continue
		}
		if q.MaxStep > 0 && c.min > q.MaxStep {
			continue
		}
		want = append(want, c)
	}
	sort.Slice(want, func(i, j int) bool {
		if want[i].min != want[j].min {
			return want[i].min < want[j].min
		}
		return want[i].fence < want[j].fence
	})
	// With names, rows are read for those keys alone; a name "orchestrator/k" is k as the
	// orchestrator wrote it beside the trainer's k (Merge), so k is read too.
	var keep map[string]bool
	if len(q.Names) > 0 {
		keep = map[string]bool{}
		for _, n := range q.Names {
			keep[n] = true
			if k, ok := strings.CutPrefix(n, "orchestrator/"); ok {
				keep[k] = true
			}
		}
	}
	inWindow := func(s int) bool { return s >= q.MinStep && (q.MaxStep == 0 || s <= q.MaxStep) }
	bySteps := map[int][]taggedRow{}
	// Read in order of the chunks' first steps, in batches read in parallel (with a limit,
	// growing from one chunk). With a limit, stop once the limit+1 lowest steps found are all
	// below the next chunk's first step: no chunk left can add to them.
	batch := 8
	if q.Limit > 0 {
		batch = 1
	}
	for i := 0; i < len(want); {
		end := min(i+batch, len(want))
		batch = min(batch*2, 8)
		rows := make([][]taggedRow, end-i)
		errs := make([]error, end-i)
		var wg sync.WaitGroup
		for j := i; j < end; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				rows[j-i], errs[j-i] = readMetricsChunk(ctx, store, want[j], cut[want[j].fence], inWindow, keep)
			}()
		}
		wg.Wait()
		for k := range rows {
			if errs[k] != nil {
				return nil, false, errs[k]
			}
			for _, r := range rows[k] {
				s := r.row.Step()
				bySteps[s] = append(bySteps[s], r)
			}
		}
		i = end
		if q.Limit > 0 && i < len(want) && len(bySteps) > q.Limit {
			steps := sortedSteps(bySteps)
			if steps[q.Limit] < want[i].min {
				break
			}
		}
	}
	steps := sortedSteps(bySteps)
	more := false
	if q.Limit > 0 && len(steps) > q.Limit {
		steps, more = steps[:q.Limit], true
	}
	out := make([]Row, 0, len(steps))
	for _, s := range steps {
		tr := bySteps[s]
		sort.Slice(tr, func(i, j int) bool {
			a, b := tr[i], tr[j]
			if a.fence != b.fence {
				return a.fence < b.fence
			}
			if a.n != b.n {
				return a.n < b.n
			}
			return a.line < b.line
		})
		rows := make([]Row, len(tr))
		writers := make([]string, len(tr))
		for i, t := range tr {
			rows[i], writers[i] = t.row, t.writer
		}
		m := merge(rows, writers)
		if keep != nil {
			for k := range m {
				if k != "step" && k != "time" && !slices.Contains(q.Names, k) {
					delete(m, k)
				}
			}
		}
		out = append(out, m)
	}
	return out, more, nil
}

func sortedSteps(m map[int][]taggedRow) []int {
	steps := make([]int, 0, len(m))
	for s := range m {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	return steps
}

// readMetricsChunk reads a chunk's rows in the window and before the attempt's cut. A line
// that is not a row (or is longer than a row can be) is skipped, never an error: one bad line
// must not make a job's metrics unreadable.
func readMetricsChunk(ctx context.Context, store blob.Store, c chunkName, cut int, inWindow func(int) bool, keep map[string]bool) ([]taggedRow, error) {
	rc, err := store.Get(ctx, c.key)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, errChunkSealed // sealed (renamed) since it was listed
	}
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// An agent writes chunks of about MetricsChunkBytes; what is past a few times that is not
	// read (a chunk is the agent's writing, and an agent is not trusted with the API's memory).
	br := bufio.NewReaderSize(io.LimitReader(rc, maxChunkRead), 64<<10)
	var out []taggedRow
	for i := 0; ; i++ {
		line, err := readLine(br, MaxLineBytes)
		if len(line) > 0 {
			if row, writer, perr := scanLine(line, keep); perr == nil {
				s := row.Step()
				if inWindow(s) && (cut < 0 || s < cut) {
					out = append(out, taggedRow{fence: c.fence, n: c.n, line: i, row: row, writer: writer})
				}
			}
		}
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// readLine reads one line; a line longer than limit is read to its end and returned empty.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	tooLong := false
	for {
		part, err := br.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(part) > limit+1 {
				tooLong, line = true, nil
			} else {
				line = append(line, part...)
			}
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if tooLong {
			return nil, err
		}
		return bytes.TrimRight(line, "\r\n"), err
	}
}
