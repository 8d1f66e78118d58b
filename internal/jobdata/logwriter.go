package jobdata

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// LogChunkBytes is how large a log chunk grows before it is sealed, at a line end: a line that
// began in it may take it past by up to MaxLogLineBytes.
const LogChunkBytes = 1 << 20

// LogShipper ships a job's log files in chunks by component:
// jobs/{id}/logs/attempt_{fence}/{component}/{offset:012d}.log, where offset is where the
// chunk starts in the file, so the chunks in key order are the file byte for byte, but for
// lines longer than MaxLogLineBytes, which are cut (a job writes what it likes). The open
// chunk is rewritten whole at each Ship until it is full; a reader sees each chunk as of its
// last write, never a torn one. Components are named by the files: prime-rl's
// logs/latest/{trainer,orchestrator,inference}.log and envs/{train,eval}/<source>.log, and
// the files the agent names outright (its own notes, the pipeline's output, installs).
type LogShipper struct {
	store blob.Store
	jobID string
	fence int64
	files map[string]*logFile
	// dirs are folders whose *.log files are components named by their path inside.
	dirs []string
	// fixed are files named outright: component → path.
	fixed map[string]string
	// stored counts the bytes written to storage, for the heartbeat's log_bytes.
	stored atomic.Int64
}

// Stored is how many bytes of log the shipper has written to storage so far (a chunk written
// again as it grows counts again): it grows whenever there is more to read.
func (l *LogShipper) Stored() int64 { return l.stored.Load() }

// NewLogShipper ships attempt fence of a job.
func NewLogShipper(store blob.Store, jobID string, fence int64) *LogShipper {
	return &LogShipper{store: store, jobID: jobID, fence: fence, files: map[string]*logFile{}, fixed: map[string]string{}}
}

// File ships the file at path as component (once it exists).
func (l *LogShipper) File(component, path string) { l.fixed[component] = path }

// Dir ships every *.log file under dir (a link such as prime-rl's logs/latest is followed)
// as the component named by its path inside.
func (l *LogShipper) Dir(dir string) { l.dirs = append(l.dirs, dir) }

// logFile follows one log file from the offset already shipped.
type logFile struct {
	path   string
	offset int64 // the next byte to read
	start  int64 // where the open chunk starts
	buf    []byte
	dirty  bool
	key    func(off int64) string
	sealed []sealedLog
	// lineLen is how much of the line being read has been read (shipped or cut).
	lineLen int
}

type sealedLog struct {
	key  string
	data []byte
}

// discover finds log files that appeared since the last look.
func (l *LogShipper) discover() {
	for comp, p := range l.fixed {
		l.follow(comp, p)
	}
	for _, dir := range l.dirs {
		// prime-rl's logs/latest is a link to a run's folder beside it: followed only there,
		// never out of the logs folder (a job's code could point it anywhere).
		root, err := filepath.EvalSymlinks(dir)
		if err != nil || !strings.HasPrefix(root, filepath.Dir(dir)+"/") {
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

func (l *LogShipper) follow(component, path string) {
	if _, ok := l.files[component]; ok {
		return
	}
	if _, err := os.Stat(path); err != nil {
		return
	}
	l.files[component] = &logFile{path: path, key: func(off int64) string {
		return logChunkKey(l.jobID, l.fence, component, off)
	}}
}

// Ship reads what each file gained and stores it. It returns the first error; the rest of the
// files are still tried, and whatever failed goes again next time.
func (l *LogShipper) Ship(ctx context.Context) error {
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
		if err := f.flush(ctx, l.store, &l.stored); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// read appends what the file gained since the last read, sealing full chunks at a line end.
// The file on disk is the buffer: while chunks wait for storage, it reads no further.
func (f *logFile) read() error {
	if len(f.sealed) > 1 {
		return nil
	}
	fh, err := nolink.Open(f.path)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil
		}
		return err
	}
	defer fh.Close()
	// Read every flush, and most flushes find nothing new: no read, and no buffer, then; the
	// buffer is what is new, up to 256 KiB.
	fi, err := fh.Stat()
	if err != nil {
		return err
	}
	if fi.Size() <= f.offset {
		return nil
	}
	if _, err := fh.Seek(f.offset, io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, min(256<<10, max(4<<10, fi.Size()-f.offset)))
	r := io.LimitReader(fh, 4*LogChunkBytes)
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

// MaxLogLineBytes is the longest log line shipped: the rest of a longer one (a progress bar
// that never ends its line, a tensor printed whole) is cut, and logLineCut marks where.
const MaxLogLineBytes = 64 << 10

// logLineCut ends the part of a line shipped when the rest was cut.
const logLineCut = " [hostedtrain: line cut at 65536 bytes]"

// take appends data, cutting lines at MaxLogLineBytes, and seals the open chunk at a line end
// once the next line would not fit.
func (f *logFile) take(data []byte) {
	for len(data) > 0 {
		piece := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			piece = data[:i+1]
		}
		data = data[len(piece):]
		f.put(f.cut(piece), len(piece))
	}
}

// cut is what is shipped of piece, a part of one line (with its newline if it ends it).
func (f *logFile) cut(piece []byte) []byte {
	ends := piece[len(piece)-1] == '\n'
	room := MaxLogLineBytes - f.lineLen
	f.lineLen += len(piece)
	if ends {
		f.lineLen = 0
	}
	switch {
	case room < 0: // already cut: only its end is shipped
		if ends {
			return []byte{'\n'}
		}
		return nil
	case len(piece) <= room || (ends && len(piece) == room+1):
		return piece
	}
	kept := append(piece[:room:room], logLineCut...)
	if ends {
		kept = append(kept, '\n')
	}
	return kept
}

// put appends kept, what is shipped of the next raw bytes of the file.
func (f *logFile) put(kept []byte, raw int) {
	if len(f.buf) > 0 && len(f.buf)+len(kept) > LogChunkBytes && f.buf[len(f.buf)-1] == '\n' {
		f.sealed = append(f.sealed, sealedLog{key: f.key(f.start), data: f.buf})
		f.buf = nil
	}
	if len(f.buf) == 0 {
		f.start = f.offset
	}
	f.buf = append(f.buf, kept...)
	f.offset += int64(raw)
	f.dirty = f.dirty || len(kept) > 0
}

func (f *logFile) flush(ctx context.Context, store blob.Store, stored *atomic.Int64) error {
	for len(f.sealed) > 0 {
		s := f.sealed[0]
		if err := store.Put(ctx, s.key, bytes.NewReader(s.data)); err != nil {
			return err
		}
		stored.Add(int64(len(s.data)))
		f.sealed = f.sealed[1:]
	}
	if !f.dirty {
		return nil
	}
	if err := store.Put(ctx, f.key(f.start), bytes.NewReader(f.buf)); err != nil {
		return err
	}
	stored.Add(int64(len(f.buf)))
	f.dirty = false
	return nil
}
