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
// reader finds a window of steps by the names alone, so each chunk's range must stay narrow
// whatever order the rows come in: rows go one of two ways.
//
// The main run takes rows at or after its floor: the attempt's first step, then, once a
// chunk is sealed, metricsSlack steps before the highest step sealed. Rows come nearly in
// step order (the orchestrator runs ahead of the trainer by a step or a few), so the main
// run's chunks follow one another with little overlap. A row behind the floor (an
// evaluation reported late, a result written with step 1 at the end, or a job writing steps
// in any order it likes) goes to the late chunks instead, which are few: at most
// MetricsLateBytes of late rows are stored, the rest refused (ErrLate). No step's rows take
// more than MetricsStepBytes (ErrStepFull). So how many chunks hold one step is bounded,
// and a read of a few steps fetches a few chunks however long the history is.
type MetricsWriter struct {
	store    blob.Store
	jobID    string
	fence    int64
	floor    int // the attempt's first step: rows below it are stale and not stored
	maxBytes int

	n      int           // chunks opened so far
	main   *openChunk    // the main run's open chunk
	late   *openChunk    // the open chunk of rows behind the main run
	sealed []sealedChunk // full chunks not yet stored (a failed flush); they go first
	// top is the highest step of the main run's sealed chunks (0 before the first seal).
	top int
	// stepBytes is what each step at or above the main run's floor has taken.
	stepBytes map[int]int
	lateBytes int // late rows taken, sealed or not
}

type openChunk struct {
	lo       int // the least step it may take: its name's min while it is open
	min, max int // the steps it holds
	n        int
	buf      []byte
	dirty    bool
	// stored is the key of its object in storage ("" for none): a late chunk's least step
	// can fall, and then its object moves.
	stored string
}

type sealedChunk struct {
	key, openKey string // openKey: the open object to delete once key is stored ("" for none)
	data         []byte
}

// metricsSlack is how many steps before the highest step already sealed the main run still
// takes: more than the orchestrator runs ahead of the trainer (two steps by default).
const metricsSlack = 16

// MetricsStepBytes caps the rows of one step an attempt stores (prime-rl writes some tens
// of kilobytes a step; this is two rows of the longest a line may be).
const MetricsStepBytes = 2 * MaxLineBytes

// MetricsLateBytes caps the late rows (behind the main run) an attempt stores.
const MetricsLateBytes = 8 * MetricsChunkBytes

// NewMetricsWriter writes attempt fence of a job whose steps start at first (1 for a fresh
// run, the resumed checkpoint's step + 1).
func NewMetricsWriter(store blob.Store, jobID string, fence int64, first int) *MetricsWriter {
	return &MetricsWriter{store: store, jobID: jobID, fence: fence, floor: max(first, 1), maxBytes: MetricsChunkBytes, stepBytes: map[int]int{}}
}

// ErrStale is a row for a step before the attempt's first: a resumed run does not rewrite
// the steps before its checkpoint.
var ErrStale = errors.New("metrics row before the attempt's first step")

// ErrLate is a row far behind the run once MetricsLateBytes of such rows are stored.
var ErrLate = errors.New("too many metrics rows far behind the run's step")

// ErrStepFull is a row of a step whose rows already take MetricsStepBytes.
var ErrStepFull = errors.New("too many metrics rows for one step")

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
	if len(line) > MaxLineBytes {
		return fmt.Errorf("%w: step %d is %d bytes, the limit is %d", ErrLineTooLong, step, len(line), MaxLineBytes)
	}
	if o := w.main; o != nil && len(o.buf) >= w.maxBytes {
		w.sealMain()
	}
	lo := w.mainFloor()
	if step < lo {
		return w.addLate(step, line)
	}
	if w.stepBytes[step]+len(line)+1 > MetricsStepBytes {
		return fmt.Errorf("%w (step %d has %d bytes, the limit is %d)", ErrStepFull, step, w.stepBytes[step], MetricsStepBytes)
	}
	w.stepBytes[step] += len(line) + 1
	if w.main == nil {
		w.main = w.openAt(lo)
	}
	w.main.add(step, line)
	return nil
}

// mainFloor is the least step the main run takes now.
func (w *MetricsWriter) mainFloor() int {
	switch {
	case w.main != nil:
		return w.main.lo
	case w.top == 0:
		return w.floor
	default:
		return max(w.floor, w.top-metricsSlack)
	}
}

func (w *MetricsWriter) addLate(step int, line []byte) error {
	if w.lateBytes+len(line)+1 > MetricsLateBytes {
		return fmt.Errorf("%w (step %d, %d steps behind; %d bytes of such rows are stored)", ErrLate, step, w.mainFloor()-step, w.lateBytes)
	}
	if o := w.late; o != nil && len(o.buf) >= w.maxBytes {
		w.seal(o)
		w.late = nil
	}
	if w.late == nil {
		w.late = w.openAt(step)
	}
	w.late.lo = min(w.late.lo, step)
	w.late.add(step, line)
	w.lateBytes += len(line) + 1
	return nil
}

func (w *MetricsWriter) openAt(lo int) *openChunk {
	w.n++
	return &openChunk{lo: lo, min: -1, n: w.n}
}

func (o *openChunk) add(step int, line []byte) {
	o.buf = append(append(o.buf, line...), '\n')
	if o.min < 0 || step < o.min {
		o.min = step
	}
	o.max, o.dirty = max(o.max, step), true
}

func (w *MetricsWriter) openKey(o *openChunk) string {
	return metricsChunkKey(w.jobID, w.fence, o.lo, -1, o.n)
}

// sealMain closes the main run's open chunk and raises its floor.
func (w *MetricsWriter) sealMain() {
	o := w.main
	w.seal(o)
	w.main = nil
	w.top = max(w.top, o.max)
	lo := w.mainFloor()
	for s := range w.stepBytes {
		if s < lo {
			delete(w.stepBytes, s)
		}
	}
}

// seal queues a full chunk under its final name. The attempt's first chunk is named from the
// attempt's first step, its resume point, which readers take from the least name.
func (w *MetricsWriter) seal(o *openChunk) {
	lo := o.min
	if o.n == 1 {
		lo = w.floor
	}
	w.sealed = append(w.sealed, sealedChunk{key: metricsChunkKey(w.jobID, w.fence, lo, o.max, o.n), openKey: o.stored, data: o.buf})
}

// Flush stores the sealed chunks (and removes their open objects) and the open chunks that
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
	for _, o := range []*openChunk{w.main, w.late} {
		if o == nil || !o.dirty {
			continue
		}
		key := w.openKey(o)
		if err := w.store.Put(ctx, key, bytes.NewReader(o.buf)); err != nil {
			return err
		}
		if o.stored != "" && o.stored != key {
			if err := w.store.Delete(ctx, o.stored); err != nil && !errors.Is(err, blob.ErrNotFound) {
				return err
			}
		}
		o.dirty, o.stored = false, key
	}
	return nil
}

// Pending is how many bytes have not reached storage.
func (w *MetricsWriter) Pending() int {
	n := 0
	for _, s := range w.sealed {
		n += len(s.data)
	}
	for _, o := range []*openChunk{w.main, w.late} {
		if o != nil && o.dirty {
			n += len(o.buf)
		}
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

// MetricsPage is what ReadMetrics found.
type MetricsPage struct {
	Rows []Row // a step a row, ascending
	More bool  // steps beyond the query's Limit remain
	// Skipped counts the stored lines passed over because they are not rows: cut short, not
	// JSON, longer than MaxLineBytes.
	Skipped int
}

// ReadMetrics reads the steps q asks for, each step's rows merged into one, ascending, and
// says whether steps beyond Limit remain. A resumed attempt writes the steps after its
// checkpoint again: what an older attempt wrote at or past a newer attempt's first step is
// dropped, so each step comes from the newest attempt that wrote it. Only the chunks whose
// names overlap the window are read, and for a Limit only as far as it needs: with
// MetricsWriter's bounds on how many chunks hold a step, a few steps cost a few chunks
// however long the history. A line that is not a row is passed over and counted, never an
// error.
func ReadMetrics(ctx context.Context, store blob.Store, jobID string, q MetricsQuery) (MetricsPage, error) {
	// A chunk sealed between the listing and its read is under another name now: list again.
	for tries := 1; ; tries++ {
		page, err := readMetrics(ctx, store, jobID, q)
		if errors.Is(err, errChunkSealed) && tries < 3 {
			continue
		}
		return page, err
	}
}

// errChunkSealed is an open chunk that was gone when read: its writer sealed it.
var errChunkSealed = errors.New("a metrics chunk was sealed while it was read")

// maxChunkRead bounds what is read of one metrics chunk, and maxChunkKeep what is kept of
// it. The agent writes chunks of about MetricsChunkBytes; a chunk is the agent's writing, and
// an agent is not trusted with the API's memory.
const (
	maxChunkRead = 64 * MetricsChunkBytes
	maxChunkKeep = 8 * MetricsChunkBytes
)

func readMetrics(ctx context.Context, store blob.Store, jobID string, q MetricsQuery) (MetricsPage, error) {
	objs, err := store.List(ctx, MetricsPrefix(jobID))
	if err != nil {
		return MetricsPage{}, err
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
		// The steps the chunk can add: min..max, an open chunk's without an end, and an
		// older attempt's only below the cut.
		hi := c.max
		if ct := cut[c.fence]; ct >= 0 && (hi < 0 || hi >= ct) {
			hi = ct - 1
			if hi < c.min { // superseded whole
				continue
			}
		}
		if hi >= 0 && hi < q.MinStep {
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
	skipped := 0
	// Read in order of the chunks' first steps, in batches read in parallel (with a limit,
	// growing from one chunk). With a limit, stop once the limit+1 lowest steps found are all
	// below the next chunk's first step: no chunk left can add to them; and keep no more than
	// those steps meanwhile.
	batch := 8
	if q.Limit > 0 {
		batch = 1
	}
	for i := 0; i < len(want); {
		end := min(i+batch, len(want))
		batch = min(batch*2, 8)
		reads := make([]chunkRead, end-i)
		var wg sync.WaitGroup
		for j := i; j < end; j++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				reads[j-i] = readMetricsChunk(ctx, store, want[j], cut[want[j].fence], inWindow, keep)
			}()
		}
		wg.Wait()
		for _, rd := range reads {
			if rd.err != nil {
				return MetricsPage{}, rd.err
			}
			skipped += rd.skipped
			for _, r := range rd.rows {
				s := r.row.Step()
				bySteps[s] = append(bySteps[s], r)
			}
		}
		i = end
		if q.Limit > 0 && len(bySteps) > q.Limit {
			steps := sortedSteps(bySteps)
			for _, s := range steps[q.Limit+1:] {
				delete(bySteps, s)
			}
			if i < len(want) && steps[q.Limit] < want[i].min {
				break
			}
		}
	}
	steps := sortedSteps(bySteps)
	page := MetricsPage{Skipped: skipped}
	if q.Limit > 0 && len(steps) > q.Limit {
		steps, page.More = steps[:q.Limit], true
	}
	page.Rows = make([]Row, 0, len(steps))
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
		page.Rows = append(page.Rows, m)
	}
	return page, nil
}

func sortedSteps(m map[int][]taggedRow) []int {
	steps := make([]int, 0, len(m))
	for s := range m {
		steps = append(steps, s)
	}
	sort.Ints(steps)
	return steps
}

// chunkRead is what was read of one chunk.
type chunkRead struct {
	rows    []taggedRow
	skipped int
	err     error
}

// readMetricsChunk reads a chunk's rows in the window and before the attempt's cut. A line
// that is not a row (or is longer than a row can be) is skipped and counted, never an error:
// one bad line must not make a job's metrics unreadable. So is what is past maxChunkRead, or
// past maxChunkKeep of kept rows.
func readMetricsChunk(ctx context.Context, store blob.Store, c chunkName, cut int, inWindow func(int) bool, keep map[string]bool) chunkRead {
	rc, err := store.Get(ctx, c.key)
	if errors.Is(err, blob.ErrNotFound) {
		return chunkRead{err: errChunkSealed} // sealed (renamed) since it was listed
	}
	if err != nil {
		return chunkRead{err: err}
	}
	defer rc.Close()
	lr := &io.LimitedReader{R: rc, N: maxChunkRead + 1}
	br := bufio.NewReaderSize(lr, 64<<10)
	var out chunkRead
	kept := 0
	for i := 0; ; i++ {
		line, tooLong, err := readLine(br, MaxLineBytes)
		switch {
		case tooLong:
			out.skipped++
		case len(line) > 0:
			row, writer, perr := scanLine(line, keep)
			if perr != nil || kept+len(line) > maxChunkKeep {
				out.skipped++
				break
			}
			s := row.Step()
			if inWindow(s) && (cut < 0 || s < cut) {
				kept += len(line)
				out.rows = append(out.rows, taggedRow{fence: c.fence, n: c.n, line: i, row: row, writer: writer})
			}
		}
		if err == io.EOF {
			if lr.N == 0 {
				out.skipped++ // the rest of an object too large to be a chunk
			}
			return out
		}
		if err != nil {
			return chunkRead{err: err}
		}
	}
}

// readLine reads one line; a line longer than limit is read to its end and said too long,
// with no line.
func readLine(br *bufio.Reader, limit int) (line []byte, tooLong bool, err error) {
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
			return nil, true, err
		}
		return bytes.TrimRight(line, "\r\n"), false, err
	}
}
