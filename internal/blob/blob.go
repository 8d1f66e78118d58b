// Package blob is the service's object storage: one key layout (jobs/{id}/...) over S3 or a
// local directory. Agents write a job's metrics, logs, checkpoints and artifacts; the API
// reads them.
package blob

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"
)

// ErrNotFound is returned for a key that holds nothing.
var ErrNotFound = errors.New("blob: not found")

// Object describes one stored object.
type Object struct {
	Key      string
	Size     int64
	Modified time.Time
}

// Store is object storage as the service uses it.
type Store interface {
	Put(ctx context.Context, key string, r io.Reader) error
	Get(ctx context.Context, key string) (io.ReadCloser, error)
	// List returns every object whose key starts with prefix, in key order.
	List(ctx context.Context, prefix string) ([]Object, error)
	Delete(ctx context.Context, key string) error
}

// Presigner is a store that can hand out short-lived download URLs (S3 can; a local
// directory cannot).
type Presigner interface {
	PresignGet(ctx context.Context, key string, ttl time.Duration) (string, error)
}

// JobPrefix is where everything of one job lives; package jobdata lays out what is inside.
func JobPrefix(jobID string) string { return "jobs/" + jobID + "/" }

// KindOf is what a job's object is — checkpoints, metrics, logs, artifacts, rollouts or pins — from its key
// (jobs/{id}/{kind}/...); "" for any other key. Stores tag objects with it, so lifecycle
// rules can treat each kind apart.
func KindOf(key string) string {
	rest, ok := strings.CutPrefix(key, "jobs/")
	if !ok {
		return ""
	}
	parts := strings.SplitN(rest, "/", 3)
	if len(parts) < 3 {
		return ""
	}
	switch parts[1] {
	case "checkpoints", "metrics", "logs", "artifacts", "rollouts", "pins":
		return parts[1]
	}
	return ""
}

// Dir stores objects as files under a root directory; for `hostedtrain dev` and tests.
type Dir struct {
	root string
}

// NewDir returns a store rooted at dir, creating it.
func NewDir(dir string) (*Dir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("blob: %w", err)
	}
	return &Dir{root: abs}, nil
}

// Root is the directory the store writes under.
func (d *Dir) Root() string { return d.root }

func (d *Dir) path(key string) (string, error) {
	clean := path.Clean("/" + key)[1:]
	if clean == "" || clean != key || strings.HasPrefix(key, "/") {
		return "", fmt.Errorf("blob: invalid key %q", key)
	}
	return filepath.Join(d.root, filepath.FromSlash(clean)), nil
}

// Put writes the object atomically: readers see the old content or the new, never a part.
func (d *Dir) Put(ctx context.Context, key string, r io.Reader) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	f, err := os.CreateTemp(filepath.Dir(p), ".put-*")
	if err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	defer os.Remove(f.Name())
	if _, err := io.Copy(f, ctxReader{ctx, r}); err != nil {
		f.Close()
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	if err := os.Rename(f.Name(), p); err != nil {
		return fmt.Errorf("blob: put %s: %w", key, err)
	}
	return nil
}

// Get opens the object for reading.
func (d *Dir) Get(_ context.Context, key string) (io.ReadCloser, error) {
	p, err := d.path(key)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(p)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotFound, key)
	}
	return f, err
}

// List walks the directory for keys under prefix.
func (d *Dir) List(_ context.Context, prefix string) ([]Object, error) {
	var out []Object
	// Walk only the deepest directory the prefix names, not the whole store.
	start := d.root
	if i := strings.LastIndex(prefix, "/"); i > 0 {
		start = filepath.Join(d.root, filepath.FromSlash(path.Clean("/" + prefix[:i])[1:]))
	}
	err := filepath.WalkDir(start, func(p string, e fs.DirEntry, err error) error {
		if errors.Is(err, fs.ErrNotExist) && p == start {
			return fs.SkipAll
		}
		if err != nil {
			return err
		}
		if e.IsDir() || strings.HasPrefix(e.Name(), ".put-") {
			return nil
		}
		rel, err := filepath.Rel(d.root, p)
		if err != nil {
			return err
		}
		key := filepath.ToSlash(rel)
		if !strings.HasPrefix(key, prefix) {
			return nil
		}
		info, err := e.Info()
		if err != nil {
			return err
		}
		out = append(out, Object{Key: key, Size: info.Size(), Modified: info.ModTime()})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("blob: list %s: %w", prefix, err)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out, nil
}

// Delete removes the object; deleting a missing key is not an error.
func (d *Dir) Delete(_ context.Context, key string) error {
	p, err := d.path(key)
	if err != nil {
		return err
	}
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("blob: delete %s: %w", key, err)
	}
	return nil
}

type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
