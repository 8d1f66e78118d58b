package gpuagent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// chunks keeps a growing stream (metrics lines, a log file) in object storage as a few
// objects rather than many: data goes into an open chunk that is rewritten whole at each
// flush, until it reaches maxBytes; then it is sealed and the next chunk starts. A reader
// sees each chunk as of its last flush, never a torn write (an object put is atomic). Data
// that could not be stored stays in the open chunk and goes with the next flush.
type chunks struct {
	store    blob.Store
	key      func(start int64) string // the object of the chunk that starts at start
	maxBytes int

	start int64 // where the open chunk starts (a step, a byte offset)
	buf   []byte
	dirty bool
	// sealed are full chunks not yet stored (a failed flush); they go first next time.
	sealed []sealedChunk
}

type sealedChunk struct {
	key  string
	data []byte
}

// add appends data; start is where data begins, which names the chunk when data opens one.
func (c *chunks) add(start int64, data []byte) {
	if len(data) == 0 {
		return
	}
	if len(c.buf) == 0 {
		c.start = start
	}
	c.buf = append(c.buf, data...)
	c.dirty = true
}

// full reports whether the open chunk should be sealed; the caller seals at a boundary it
// chooses (a whole line), passing where the next chunk starts.
func (c *chunks) full() bool { return len(c.buf) >= c.maxBytes }

// seal closes the open chunk; the next add opens another.
func (c *chunks) seal() {
	if len(c.buf) == 0 {
		return
	}
	c.sealed = append(c.sealed, sealedChunk{key: c.key(c.start), data: c.buf})
	c.buf, c.dirty = nil, false
}

// flush stores the sealed chunks and the open one if it changed.
func (c *chunks) flush(ctx context.Context) error {
	for len(c.sealed) > 0 {
		s := c.sealed[0]
		if err := c.store.Put(ctx, s.key, bytes.NewReader(s.data)); err != nil {
			return err
		}
		c.sealed = c.sealed[1:]
	}
	if !c.dirty {
		return nil
	}
	if err := c.store.Put(ctx, c.key(c.start), bytes.NewReader(c.buf)); err != nil {
		return err
	}
	c.dirty = false
	return nil
}

// pending is how many bytes have not reached storage.
func (c *chunks) pending() int {
	n := 0
	for _, s := range c.sealed {
		n += len(s.data)
	}
	if c.dirty {
		n += len(c.buf)
	}
	return n
}

// Chunk sizes: a metrics chunk holds about a thousand steps of prime-rl's metrics, so a
// 10,000-step run is ten objects; a log chunk is a megabyte of log.
const (
	metricsChunkBytes = 512 << 10
	logChunkBytes     = 1 << 20
)

// metricsStream stores metrics.jsonl as chunks named by the attempt's fence and the chunk's
// first step: jobs/{id}/metrics/{fence:06d}-{first step:08d}.jsonl. A later attempt resumes
// from a checkpoint and writes the steps after it again; readers take each step from the
// newest attempt that wrote it (see blob.ReadMetrics).
type metricsStream struct {
	chunks
}

func newMetricsStream(store blob.Store, jobID string, fence int64) *metricsStream {
	return &metricsStream{chunks{store: store, maxBytes: metricsChunkBytes, key: func(first int64) string {
		return blob.MetricsChunkKey(jobID, fence, int(first))
	}}}
}

// addLines takes whole metrics lines, sealing the open chunk at a line when it is full.
func (m *metricsStream) addLines(lines [][]byte) {
	for _, l := range lines {
		if m.full() {
			m.seal()
		}
		m.add(int64(stepOf(l)), append(bytes.Clone(l), '\n'))
	}
}

// logFile follows one log file from the offset already shipped.
type logFile struct {
	path   string
	offset int64
	chunks chunks
}

// logShipper ships a job's log files in chunks by component:
// jobs/{id}/logs/attempt_{fence}/{component}/{offset:012d}.log, where offset is where the
// chunk starts in the file. Components are prime-rl's (trainer, orchestrator, inference,
// envs/<env>) plus the pipeline's own output (pipeline), environment installs (install) and
// what the agent did for the job (agent).
type logShipper struct {
	store  blob.Store
	prefix string // jobs/{id}/logs/attempt_{fence}/
	files  map[string]*logFile
	// dirs are folders whose *.log files are components named by their path inside.
	dirs []string
	// fixed are files named outright: component → path.
	fixed map[string]string
}

func newLogShipper(store blob.Store, jobID string, fence int64) *logShipper {
	return &logShipper{
		store: store, prefix: blob.LogPrefix(jobID, fence),
		files: map[string]*logFile{}, fixed: map[string]string{},
	}
}

// discover finds log files that appeared since the last look.
func (l *logShipper) discover() {
	for comp, p := range l.fixed {
		l.follow(comp, p)
	}
	for _, dir := range l.dirs {
		// logs/latest is a link to logs/attempt_N: walk what it points at.
		root, err := filepath.EvalSymlinks(dir)
		if err != nil {
			continue
		}
		_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || !strings.HasSuffix(d.Name(), ".log") {
				return nil
			}
			rel, err := filepath.Rel(root, p)
			if err == nil {
				l.follow(strings.TrimSuffix(filepath.ToSlash(rel), ".log"), p)
			}
			return nil
		})
	}
}

func (l *logShipper) follow(component, path string) {
	if _, ok := l.files[component]; ok {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	prefix := l.prefix + component + "/"
	l.files[component] = &logFile{path: path, chunks: chunks{store: l.store, maxBytes: logChunkBytes, key: func(off int64) string {
		return fmt.Sprintf("%s%012d.log", prefix, off)
	}}}
}

// ship reads what each file gained and stores it. It returns the first error; the rest of the
// files are still tried, and whatever failed goes again next time.
func (l *logShipper) ship(ctx context.Context) error {
	l.discover()
	names := make([]string, 0, len(l.files))
	for n := range l.files {
		names = append(names, n)
	}
	sort.Strings(names)
	var first error
	for _, n := range names {
		f := l.files[n]
		if err := f.read(); err != nil && first == nil {
			first = err
		}
		if err := f.chunks.flush(ctx); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// read appends what the file gained since the last read, sealing full chunks at a line end.
//
// The file on disk is the buffer: while chunks wait for storage, it reads no further.
func (f *logFile) read() error {
	if len(f.chunks.sealed) > 1 {
		return nil
	}
	fh, err := os.Open(f.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer fh.Close()
	if _, err := fh.Seek(f.offset, io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
	r := io.LimitReader(fh, 4*logChunkBytes)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			f.take(buf[:n])
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
	}
}

// take appends data, sealing the open chunk when it fills, at its last line end if it has one.
func (f *logFile) take(data []byte) {
	for len(data) > 0 {
		room := f.chunks.maxBytes - len(f.chunks.buf)
		part := data[:min(room, len(data))]
		fills := len(part) == room
		if fills {
			if i := bytes.LastIndexByte(part, '\n'); i >= 0 {
				part = part[:i+1]
			}
		}
		f.chunks.add(f.offset, part)
		f.offset += int64(len(part))
		data = data[len(part):]
		if fills {
			f.chunks.seal()
		}
	}
}
