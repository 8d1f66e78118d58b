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

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// LogChunkBytes is how large a log chunk grows before it is sealed (cut at a line end).
const LogChunkBytes = 1 << 20

// LogShipper ships a job's log files in chunks by component:
// jobs/{id}/logs/attempt_{fence}/{component}/{offset:012d}.log, where offset is where the
// chunk starts in the file, so the chunks in key order are the file byte for byte. The open
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
}

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
		if err := f.flush(ctx, l.store); err != nil && first == nil {
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
	if _, err := fh.Seek(f.offset, io.SeekStart); err != nil {
		return err
	}
	buf := make([]byte, 256<<10)
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

// take appends data, sealing the open chunk when it fills, at its last line end if it has one.
func (f *logFile) take(data []byte) {
	for len(data) > 0 {
		room := LogChunkBytes - len(f.buf)
		part := data[:min(room, len(data))]
		fills := len(part) == room
		if fills {
			if i := bytes.LastIndexByte(part, '\n'); i >= 0 {
				part = part[:i+1]
			}
		}
		if len(f.buf) == 0 {
			f.start = f.offset
		}
		f.buf = append(f.buf, part...)
		f.dirty = true
		f.offset += int64(len(part))
		data = data[len(part):]
		if fills {
			f.sealed = append(f.sealed, sealedLog{key: f.key(f.start), data: f.buf})
			f.buf, f.dirty = nil, false
		}
	}
}

func (f *logFile) flush(ctx context.Context, store blob.Store) error {
	for len(f.sealed) > 0 {
		s := f.sealed[0]
		if err := store.Put(ctx, s.key, bytes.NewReader(s.data)); err != nil {
			return err
		}
		f.sealed = f.sealed[1:]
	}
	if !f.dirty {
		return nil
	}
	if err := store.Put(ctx, f.key(f.start), bytes.NewReader(f.buf)); err != nil {
		return err
	}
	f.dirty = false
	return nil
}
