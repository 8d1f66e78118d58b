package nodecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
)

// A layer is an entry made of a job's changes to a tree: an environment's install (what it
// added to or changed in prime-rl's Python, and the files of it that it removed) or a compile
// cache (what vLLM and torch.compile wrote). The agent copies the files in once the process that
// made them has ended, hashing them as it does; a job gets them read-only (LinkLayer, or an
// overlay's lower layer).

// Layer is a cached layer: its folder of files, and the paths of the base it removes.
type Layer struct {
	Dir     string
	Removed []string
}

type layerExtra struct {
	Removed []string `json:"removed,omitempty"`
}

// Capture is what a job changed in a tree against its base: the files (regular files and
// links, relative to Root) it added or changed, and the base's files it removed.
type Capture struct {
	Root    string
	Files   []string
	Removed []string
}

// InstallKey is the key of an install of envs (Hub ids, each with its version if pinned) for
// org with the node's upstream pinned as pin; versioned says whether every id names a version
// (an install of an environment's newest is used again only for a while).
func InstallKey(org string, envs []string, pin string) (key string, versioned bool) {
	ids := append([]string(nil), envs...)
	sort.Strings(ids)
	versioned = true
	for _, id := range ids {
		if !strings.Contains(id, "@") {
			versioned = false
		}
	}
	return org + ":" + strings.Join(ids, ",") + "|" + pin, versioned
}

// Layer answers the cached, verified layer of kind and key, held until release is called; ok
// false when there is none (a hit and a miss are counted).
func (c *Cache) Layer(kind, key string) (l *Layer, release func(), ok bool) {
	unlock := c.lock(kind, key)
	defer unlock()
	e, _ := c.lookup(kind, key)
	if e == nil {
		c.count(kind, func(s *Stats) { s.Misses++ })
		return nil, nil, false
	}
	c.count(kind, func(s *Stats) { s.Hits++ })
	var x layerExtra
	_ = json.Unmarshal(e.Extra, &x)
	return &Layer{Dir: filepath.Join(c.cfg.Dir, e.Dir), Removed: x.Removed}, c.hold(e), true
}

// PutLayer records what cp holds as the layer of kind and key, named held in what the node
// holds; it expires after the cache's EnvTTL unless lasting. The files are copied (or linked,
// where they are the cache's own already), made root's and read-only, and hashed. An entry of
// the key already there is replaced. It answers the bytes the layer holds.
func (c *Cache) PutLayer(kind, key string, held []string, lasting bool, cp Capture) (int64, error) {
	unlock := c.lock(kind, key)
	defer unlock()
	sub := "envs"
	if kind == KindCompile {
		sub = "compile"
	}
	sum := sha256.Sum256([]byte(id(kind, key)))
	dir := filepath.Join(sub, hex.EncodeToString(sum[:12])+"-"+randomHex())
	abs := filepath.Join(c.cfg.Dir, dir)
	e := &Entry{Kind: kind, Key: key, Held: held, Dir: dir}
	fail := func(err error) (int64, error) {
		_ = os.RemoveAll(abs)
		return 0, fmt.Errorf("nodecache: keep %s %s: %w", kind, key, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return fail(err)
	}
	for _, rel := range cp.Files {
		if !safeRel(rel) {
			return fail(fmt.Errorf("path %q", rel))
		}
		src, dst := filepath.Join(cp.Root, rel), filepath.Join(abs, rel)
		fi, err := os.Lstat(src)
		if err != nil {
			return fail(err)
		}
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return fail(err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(src)
			if err == nil {
				err = os.Symlink(target, dst)
			}
			if err != nil {
				return fail(err)
			}
			continue
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		f, err := keepFile(src, dst, fi)
		if err != nil {
			return fail(err)
		}
		f.Path = rel
		e.Files = append(e.Files, f)
		e.Size += f.Size
	}
	if lim := c.capOf(kind); lim >= 0 && e.Size > lim {
		return fail(fmt.Errorf("%d bytes, more than the cache's %d", e.Size, lim))
	}
	raw, _ := json.Marshal(layerExtra{Removed: cp.Removed})
	e.Extra = raw
	if !lasting {
		e.Expires = c.cfg.Now().Add(c.cfg.EnvTTL)
	}
	c.mu.Lock()
	old := c.idx[id(kind, key)]
	busy := c.inUse[id(kind, key)] > 0
	c.mu.Unlock()
	if old != nil && kind == KindEnv {
		// Two jobs installed the same at once: the first kept stays (a job may be using it).
		_ = os.RemoveAll(abs)
		return old.Size, nil
	}
	if err := c.add(e); err != nil {
		return fail(err)
	}
	if old != nil && !busy {
		_ = os.RemoveAll(filepath.Join(c.cfg.Dir, old.Dir)) // its record is e's now
	} // else a job still uses it: the next Open sweeps it (no record names it)
	c.count(kind, func(s *Stats) { s.BytesFetched += e.Size })
	return e.Size, nil
}

// keepFile puts src at dst as the cache's: linked where src is root's and read-only already
// (a file of this cache a job was given), else copied; hashed either way.
func keepFile(src, dst string, fi os.FileInfo) (File, error) {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid == 0 && fi.Mode().Perm()&0o222 == 0 {
		if os.Link(src, dst) == nil {
			in, err := os.Open(dst)
			if err != nil {
				return File{}, err
			}
			defer in.Close()
			sum, n, _, err := hashes(in, 0, false)
			if err != nil {
				return File{}, err
			}
			nfi, err := os.Lstat(dst)
			if err != nil {
				return File{}, err
			}
			return File{Size: n, SHA256: sum, Stamp: stamp(nfi)}, nil
		}
	}
	in, err := os.Open(src)
	if err != nil {
		return File{}, err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return File{}, err
	}
	sum, n, _, err := hashes(io.TeeReader(in, out), 0, false)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		// Read-only for everyone; executable where it was.
		err = os.Chmod(dst, 0o444|(fi.Mode().Perm()&0o111))
	}
	if err != nil {
		return File{}, err
	}
	nfi, err := os.Lstat(dst)
	if err != nil {
		return File{}, err
	}
	return File{Size: n, SHA256: sum, Stamp: stamp(nfi)}, nil
}

// CaptureLinked reads what a job changed in own, a copy of base made of hard links
// (sandbox.LinkTree) that the job then wrote: its files whose inode is not base's at the same
// path, and base's files own no longer has.
func CaptureLinked(base, own string) (Capture, error) {
	cp := Capture{Root: own}
	err := filepath.WalkDir(own, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(own, p)
		fi, err := d.Info()
		if err != nil {
			return err
		}
		bfi, berr := os.Lstat(filepath.Join(base, rel))
		switch {
		case berr != nil:
			cp.Files = append(cp.Files, rel)
		case fi.Mode()&fs.ModeSymlink != 0:
			a, _ := os.Readlink(p)
			b, _ := os.Readlink(filepath.Join(base, rel))
			if bfi.Mode()&fs.ModeSymlink == 0 || a != b {
				cp.Files = append(cp.Files, rel)
			}
		case !os.SameFile(fi, bfi):
			cp.Files = append(cp.Files, rel)
		}
		return nil
	})
	if err != nil {
		return cp, err
	}
	err = filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(base, p)
		if _, err := os.Lstat(filepath.Join(own, rel)); errors.Is(err, fs.ErrNotExist) {
			cp.Removed = append(cp.Removed, rel)
		}
		return nil
	})
	return cp, err
}

// CaptureUpper reads what a job changed in an overlay of base from its upper folder: the files
// in it, and base's files it hides (a whiteout, or a folder made opaque).
func CaptureUpper(base, upper string) (Capture, error) {
	cp := Capture{Root: upper}
	hidden := func(rel string) {
		_ = filepath.WalkDir(filepath.Join(base, rel), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return nil
			}
			r, _ := filepath.Rel(base, p)
			if _, err := os.Lstat(filepath.Join(upper, r)); err != nil {
				cp.Removed = append(cp.Removed, r)
			}
			return nil
		})
	}
	err := filepath.WalkDir(upper, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(upper, p)
		if d.IsDir() {
			if rel != "." && isOpaque(p) {
				hidden(rel)
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeCharDevice != 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Rdev == 0 {
				hidden(rel) // a whiteout: rel is gone
			}
			return nil
		}
		cp.Files = append(cp.Files, rel)
		return nil
	})
	return cp, err
}

// isOpaque says whether an overlay's upper folder hides the lower ones' folder of its name.
func isOpaque(dir string) bool {
	buf := make([]byte, 4)
	n, err := syscall.Getxattr(dir, "trusted.overlay.opaque", buf)
	return err == nil && n > 0 && buf[0] == 'y'
}

// LinkLayer lays l over own, a copy of the layer's base made of hard links: each of its files
// linked in (copied where the file systems differ) in place of own's, and the files it removes
// removed. The linked files stay the cache's: root's and read-only.
func LinkLayer(l *Layer, own string) error {
	if err := RemovePaths(own, l.Removed); err != nil {
		return err
	}
	return filepath.WalkDir(l.Dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(l.Dir, p)
		to := filepath.Join(own, rel)
		if d.IsDir() {
			return os.MkdirAll(to, 0o755)
		}
		if fi, err := os.Lstat(to); err == nil && fi.IsDir() {
			if err := os.RemoveAll(to); err != nil {
				return err
			}
		} else if err := os.Remove(to); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return err
		}
		if d.Type()&fs.ModeSymlink != 0 {
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		}
		return sandbox.LinkOrCopy(p, to)
	})
}

// RemovePaths removes each of removed (relative) under root; a path already gone is fine.
func RemovePaths(root string, removed []string) error {
	for _, rel := range removed {
		if !safeRel(rel) {
			return fmt.Errorf("nodecache: path %q", rel)
		}
		if err := os.RemoveAll(filepath.Join(root, rel)); err != nil {
			return err
		}
	}
	return nil
}

// OwnFiles lists the regular files and links under dir, relative to it: a compile cache's
// capture (the files the job was given from the cache are linked back, not copied: keepFile).
func OwnFiles(dir string) (Capture, error) {
	cp := Capture{Root: dir}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) && p == dir {
				return fs.SkipDir
			}
			return err
		}
		if d.IsDir() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		cp.Files = append(cp.Files, rel)
		return nil
	})
	return cp, err
}

// CompileKey is the key of a compile cache: org's, of model on gpu with tp-way tensor
// parallelism.
func CompileKey(org, model, gpu string, tp int) string {
	return fmt.Sprintf("%s:%s|%s|tp%d", org, model, gpu, tp)
}
