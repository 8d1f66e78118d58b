// Package nodecache is a GPU node's caches that outlive its jobs: model weights, in the Hugging
// Face cache layout, fetched once per node and revision (hub.go); the installs of Hub
// environments, per organization (layer.go); and vLLM's and torch.compile's caches, per
// organization, model, GPU kind and tensor-parallel size.
//
// Only the agent writes here. Every entry is written beside its final place, verified against
// its source (sha256 and size from the hub; for an install or a compile cache, the sha256 the
// agent took when it copied the files in), and then recorded in the index; a folder with no
// record is a half-written entry and is removed when the cache opens. Before an entry is handed
// to a job its files are checked again: a file whose size, inode or change time differs from
// when it was verified is hashed again, and an entry with a file that does not match is
// discarded and fetched again, never used. Files are root's and read-only: a job sees them
// through read-only binds or hard links it cannot write through. Models are shared by every
// organization (they are public, fetched with the operator's token); an install or a compile
// cache is its organization's alone, as each may hold what the organization's own code and
// settings produced.
//
// Each kind has a size cap; past it the least recently used entries that no job holds are
// evicted. The package imports nothing of the agent but gpuagent/sandbox (its file helpers):
// the agent calls it.
package nodecache

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The kinds of entry.
const (
	KindModel   = "model"
	KindEnv     = "env"
	KindCompile = "compile"
)

// Config is a cache's place and caps.
type Config struct {
	// Dir is the cache's folder (the agent's --cache-dir); it is created if missing.
	Dir string
	// Caps bound each kind's bytes (0: DefaultCaps' figure; negative: no cap).
	ModelCap, EnvCap, CompileCap int64
	// Hub is where model weights come from (a Hugging Face-compatible hub); nil: models are not
	// cached, and the pipeline fetches its own as before.
	Hub *Hub
	// EnvTTL is how long the install of an environment named without a version (its newest,
	// which the Hub may change) is used again (default 1 h); a pinned one is kept until evicted.
	EnvTTL time.Duration
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Default caps.
const (
	DefaultModelCap   = 1 << 40   // 1 TiB of weights
	DefaultEnvCap     = 50 << 30  // 50 GiB of installs
	DefaultCompileCap = 20 << 30  // 20 GiB of compile caches
	DefaultEnvTTL     = time.Hour //
)

// File is one file of an entry as it was verified.
type File struct {
	Path   string `json:"path"` // relative to the entry's folder (a model's: its blob)
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256,omitempty"`
	// GitSHA1 is a small model file's git blob id, which is what the hub gives for it.
	GitSHA1 string `json:"git_sha1,omitempty"`
	// Stamp is the file's inode, modification and change times when it was last verified.
	Stamp string `json:"stamp"`
}

// Entry is one cached thing.
type Entry struct {
	Kind string `json:"kind"`
	// Key is what it is the cache of: "MODEL@COMMIT"; an install's "ORG:ENV@VERSION|PIN"; a
	// compile cache's "ORG:MODEL|GPU|tpN".
	Key string `json:"key"`
	// Held are its names in what the node tells the queue it holds ("m:MODEL",
	// "e:ORG:ENV@VERSION[,…]", "c:ORG:MODEL|GPU|N": jobspec.CacheNeeds).
	Held []string `json:"held,omitempty"`
	// Dir is its folder, relative to the cache's.
	Dir   string    `json:"dir"`
	Size  int64     `json:"size"`
	Files []File    `json:"files"`
	Made  time.Time `json:"made"`
	Used  time.Time `json:"used"`
	// Expires is when an install of an environment's newest version stops being used (zero:
	// never).
	Expires time.Time `json:"expires,omitzero"`
	// Extra is the kind's own record: a model's snapshot (its files' names and blobs), an
	// install's removed paths.
	Extra json.RawMessage `json:"extra,omitempty"`
}

// Stats counts a kind's lookups since the agent started.
type Stats struct {
	Hits, Misses, Refetched int64
	// BytesFetched is what misses fetched (models) or made (installs, compile caches).
	BytesFetched int64
	Bytes        int64 // held now
	Entries      int
}

// Cache is a node's caches (see the package doc).
type Cache struct {
	cfg        Config
	folderLock *os.File // held (flock) while the cache is open: one agent a cache
	mu         sync.Mutex
	idx        map[string]*Entry // by kind + "\x00" + key
	inUse      map[string]int
	locks      map[string]*keyLock
	stats      map[string]*Stats
}

type keyLock struct {
	mu   sync.Mutex
	refs int
}

// ErrNotCached is what Get answers for an entry the cache does not have.
var ErrNotCached = errors.New("nodecache: not cached")

// Open opens the cache at cfg.Dir: its index read, and whatever has no record (half-written
// entries, temporary files) removed.
func Open(cfg Config) (*Cache, error) {
	if cfg.Dir == "" {
		return nil, errors.New("nodecache: no folder")
	}
	if cfg.ModelCap == 0 {
		cfg.ModelCap = DefaultModelCap
	}
	if cfg.EnvCap == 0 {
		cfg.EnvCap = DefaultEnvCap
	}
	if cfg.CompileCap == 0 {
		cfg.CompileCap = DefaultCompileCap
	}
	if cfg.EnvTTL == 0 {
		cfg.EnvTTL = DefaultEnvTTL
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Cache{cfg: cfg, idx: map[string]*Entry{}, inUse: map[string]int{}, locks: map[string]*keyLock{},
		stats: map[string]*Stats{KindModel: {}, KindEnv: {}, KindCompile: {}}}
	for _, d := range []string{"index", "tmp", "hf/hub", "envs", "compile"} {
		if err := os.MkdirAll(filepath.Join(cfg.Dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("nodecache: %w", err)
		}
	}
	// The folder is root's and no one else's to write; its files are world-readable, so a
	// job's user reads them through read-only binds.
	if err := os.Chmod(cfg.Dir, 0o755); err != nil {
		return nil, fmt.Errorf("nodecache: %w", err)
	}
	// One agent a cache: a second one on the same folder would sweep the first one's work.
	lf, err := os.OpenFile(filepath.Join(cfg.Dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("nodecache: %w", err)
	}
	if err := syscall.Flock(int(lf.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lf.Close()
		return nil, fmt.Errorf("nodecache: %s is in use by another agent (%v): give each agent a cache of its own", cfg.Dir, err)
	}
	c.folderLock = lf
	_ = os.RemoveAll(filepath.Join(cfg.Dir, "tmp"))
	_ = os.MkdirAll(filepath.Join(cfg.Dir, "tmp"), 0o700)
	recs, _ := filepath.Glob(filepath.Join(cfg.Dir, "index", "*.json"))
	for _, p := range recs {
		data, err := os.ReadFile(p)
		var e Entry
		if err != nil || json.Unmarshal(data, &e) != nil || e.Kind == "" || e.Key == "" || indexName(e.Kind, e.Key) != filepath.Base(p) {
			_ = os.Remove(p)
			continue
		}
		c.idx[id(e.Kind, e.Key)] = &e
	}
	c.sweep()
	return c, nil
}

// Close lets go of the cache's folder.
func (c *Cache) Close() {
	if c.folderLock != nil {
		c.folderLock.Close()
		c.folderLock = nil
	}
}

func id(kind, key string) string { return kind + "\x00" + key }

func indexName(kind, key string) string {
	sum := sha256.Sum256([]byte(id(kind, key)))
	return hex.EncodeToString(sum[:16]) + ".json"
}

// Dir is the cache's folder.
func (c *Cache) Dir() string { return c.cfg.Dir }

// HubDir is the Hugging Face hub cache (HF_HUB_CACHE) the node's models are in.
func (c *Cache) HubDir() string { return filepath.Join(c.cfg.Dir, "hf", "hub") }

// sweep removes what no record names: installs and compile caches without a record, model
// snapshots and blobs no record names.
func (c *Cache) sweep() {
	named := map[string]bool{}
	for _, e := range c.idx {
		named[e.Dir] = true
		if e.Kind == KindModel {
			for _, f := range e.Files {
				named[filepath.Join(filepath.Dir(filepath.Dir(e.Dir)), "blobs", f.Path)] = true
			}
		}
	}
	for _, kind := range []string{"envs", "compile"} {
		dirs, _ := os.ReadDir(filepath.Join(c.cfg.Dir, kind))
		for _, d := range dirs {
			if rel := filepath.Join(kind, d.Name()); !named[rel] {
				_ = os.RemoveAll(filepath.Join(c.cfg.Dir, rel))
			}
		}
	}
	repos, _ := os.ReadDir(c.HubDir())
	for _, r := range repos {
		base := filepath.Join("hf", "hub", r.Name())
		snaps, _ := os.ReadDir(filepath.Join(c.cfg.Dir, base, "snapshots"))
		for _, s := range snaps {
			if rel := filepath.Join(base, "snapshots", s.Name()); !named[rel] {
				_ = os.RemoveAll(filepath.Join(c.cfg.Dir, rel))
			}
		}
		blobs, _ := os.ReadDir(filepath.Join(c.cfg.Dir, base, "blobs"))
		for _, b := range blobs {
			if rel := filepath.Join(base, "blobs", b.Name()); !named[rel] {
				_ = os.Remove(filepath.Join(c.cfg.Dir, rel))
			}
		}
	}
}

// lock serializes the work on one entry (two jobs that want the same model fetch it once).
func (c *Cache) lock(kind, key string) func() {
	k := id(kind, key)
	c.mu.Lock()
	l := c.locks[k]
	if l == nil {
		l = &keyLock{}
		c.locks[k] = l
	}
	l.refs++
	c.mu.Unlock()
	l.mu.Lock()
	return func() {
		l.mu.Unlock()
		c.mu.Lock()
		if l.refs--; l.refs == 0 {
			delete(c.locks, k)
		}
		c.mu.Unlock()
	}
}

// lookup is the entry of kind and key, checked: nil if there is none, it has expired, or a file
// of it does not verify (then it is discarded). The caller holds the key's lock.
func (c *Cache) lookup(kind, key string) (*Entry, bool) {
	c.mu.Lock()
	e := c.idx[id(kind, key)]
	c.mu.Unlock()
	if e == nil {
		return nil, false
	}
	if !e.Expires.IsZero() && !c.cfg.Now().Before(e.Expires) {
		c.discard(e)
		return nil, false
	}
	if err := c.verify(e); err != nil {
		c.discard(e)
		c.count(kind, func(s *Stats) { s.Refetched++ })
		return nil, true
	}
	return e, false
}

// verify checks each file of e: one whose stamp is as it was verified is trusted; another is
// hashed again and must match. Stamps that changed but match are written back.
func (c *Cache) verify(e *Entry) error {
	changed := false
	for i := range e.Files {
		f := &e.Files[i]
		p := c.filePath(e, f)
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if !fi.Mode().IsRegular() || fi.Size() != f.Size {
			return fmt.Errorf("%s: %d bytes, want %d", f.Path, fi.Size(), f.Size)
		}
		if stamp(fi) == f.Stamp {
			continue
		}
		if err := checkFile(p, *f); err != nil {
			return err
		}
		f.Stamp, changed = stamp(fi), true
	}
	if changed {
		return c.record(e)
	}
	return nil
}

// filePath is where a file of e lies.
func (c *Cache) filePath(e *Entry, f *File) string {
	if e.Kind == KindModel {
		return filepath.Join(c.cfg.Dir, filepath.Dir(filepath.Dir(e.Dir)), "blobs", f.Path)
	}
	return filepath.Join(c.cfg.Dir, e.Dir, f.Path)
}

// checkFile hashes the file at p and compares it with f.
func checkFile(p string, f File) error {
	in, err := os.Open(p)
	if err != nil {
		return err
	}
	defer in.Close()
	sum, size, gitSum, err := hashes(in, f.Size, f.GitSHA1 != "")
	if err != nil {
		return fmt.Errorf("%s: %w", f.Path, err)
	}
	switch {
	case size != f.Size:
		return fmt.Errorf("%s: %d bytes, want %d", f.Path, size, f.Size)
	case f.SHA256 != "" && sum != f.SHA256:
		return fmt.Errorf("%s: sha256 %s, want %s", f.Path, sum, f.SHA256)
	case f.GitSHA1 != "" && gitSum != f.GitSHA1:
		return fmt.Errorf("%s: git blob %s, want %s", f.Path, gitSum, f.GitSHA1)
	}
	return nil
}

// stamp is what says a file is as it was: its inode, size, and modification and change times.
func stamp(fi os.FileInfo) string {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return ""
	}
	return fmt.Sprintf("%d:%d:%d.%d:%d.%d", st.Ino, st.Size, st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

// add records a new entry (its files in place and verified), then evicts past the kind's cap.
func (c *Cache) add(e *Entry) error {
	now := c.cfg.Now()
	e.Made, e.Used = now, now
	if err := c.record(e); err != nil {
		return err
	}
	c.mu.Lock()
	c.idx[id(e.Kind, e.Key)] = e
	c.mu.Unlock()
	c.evict(e.Kind, e)
	return nil
}

// record writes e's index record, atomically.
func (c *Cache) record(e *Entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Join(c.cfg.Dir, "tmp"), "index-*")
	if err != nil {
		return err
	}
	_, err = tmp.Write(data)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), filepath.Join(c.cfg.Dir, "index", indexName(e.Kind, e.Key)))
	}
	if err != nil {
		_ = os.Remove(tmp.Name())
	}
	return err
}

// discard removes e: its record first (so a crash leaves a folder the next Open sweeps), then
// its files.
//
// Files a running job still uses (an overlay's lower folder) stay until the cache next opens,
// which sweeps them: removed under the job, they would break it.
func (c *Cache) discard(e *Entry) {
	c.mu.Lock()
	delete(c.idx, id(e.Kind, e.Key))
	busy := c.inUse[id(e.Kind, e.Key)] > 0
	c.mu.Unlock()
	_ = os.Remove(filepath.Join(c.cfg.Dir, "index", indexName(e.Kind, e.Key)))
	if busy {
		return
	}
	_ = os.RemoveAll(filepath.Join(c.cfg.Dir, e.Dir))
	if e.Kind == KindModel {
		c.dropBlobs(e)
	}
}

// dropBlobs removes the blobs of a model entry that no other entry names.
func (c *Cache) dropBlobs(e *Entry) {
	repo := filepath.Dir(filepath.Dir(e.Dir))
	c.mu.Lock()
	keep := map[string]bool{}
	for _, o := range c.idx {
		if o.Kind == KindModel && filepath.Dir(filepath.Dir(o.Dir)) == repo {
			for _, f := range o.Files {
				keep[f.Path] = true
			}
		}
	}
	c.mu.Unlock()
	for _, f := range e.Files {
		if !keep[f.Path] {
			_ = os.Remove(filepath.Join(c.cfg.Dir, repo, "blobs", f.Path))
		}
	}
}

// capOf is a kind's cap (negative: none).
func (c *Cache) capOf(kind string) int64 {
	switch kind {
	case KindModel:
		return c.cfg.ModelCap
	case KindEnv:
		return c.cfg.EnvCap
	}
	return c.cfg.CompileCap
}

// evict removes a kind's least recently used entries that no job holds, but spare (the one just
// added), until it is within its cap.
func (c *Cache) evict(kind string, spare *Entry) {
	limit := c.capOf(kind)
	if limit < 0 {
		return
	}
	c.mu.Lock()
	var all []*Entry
	var total int64
	for k, e := range c.idx {
		if e.Kind == kind {
			total += e.Size
			if c.inUse[k] == 0 && e != spare {
				all = append(all, e)
			}
		}
	}
	c.mu.Unlock()
	sort.Slice(all, func(i, j int) bool { return all[i].Used.Before(all[j].Used) })
	for _, e := range all {
		if total <= limit {
			break
		}
		c.discard(e)
		total -= e.Size
	}
}

// hold marks e in use by a job until the returned func is called: it is not evicted meanwhile.
func (c *Cache) hold(e *Entry) func() {
	k := id(e.Kind, e.Key)
	c.mu.Lock()
	c.inUse[k]++
	e.Used = c.cfg.Now()
	c.mu.Unlock()
	_ = c.record(e)
	var once sync.Once
	return func() {
		once.Do(func() {
			c.mu.Lock()
			if c.inUse[k]--; c.inUse[k] <= 0 {
				delete(c.inUse, k)
			}
			c.mu.Unlock()
		})
	}
}

func (c *Cache) count(kind string, f func(*Stats)) {
	c.mu.Lock()
	f(c.stats[kind])
	c.mu.Unlock()
}

// Held is what the node holds, as the queue compares it with jobs' needs (jobspec.CacheNeeds):
// each model and each organization's install once, the most recently used first, at most n.
func (c *Cache) Held(n int) []string {
	c.mu.Lock()
	var es []*Entry
	for _, e := range c.idx {
		if len(e.Held) > 0 && (e.Expires.IsZero() || c.cfg.Now().Before(e.Expires)) {
			es = append(es, e)
		}
	}
	c.mu.Unlock()
	sort.Slice(es, func(i, j int) bool { return es[i].Used.After(es[j].Used) })
	var out []string
	seen := map[string]bool{}
	for _, e := range es {
		for _, h := range e.Held {
			if !seen[h] && len(out) < n {
				seen[h] = true
				out = append(out, h)
			}
		}
	}
	return out
}

// Stats are each kind's counts and what it holds now.
func (c *Cache) Stats() map[string]Stats {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]Stats{}
	for kind, s := range c.stats {
		v := *s
		for _, e := range c.idx {
			if e.Kind == kind {
				v.Bytes += e.Size
				v.Entries++
			}
		}
		out[kind] = v
	}
	return out
}

// Entries lists what the cache holds (for the agent's status and tests).
func (c *Cache) Entries() []Entry {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []Entry
	for _, e := range c.idx {
		out = append(out, *e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Kind+out[i].Key < out[j].Kind+out[j].Key })
	return out
}

// hashes reads r to its end: its sha256, its size, and (withGit) its git blob id given its
// expected size (git hashes "blob SIZE\0" first).
func hashes(r io.Reader, size int64, withGit bool) (sum string, n int64, gitSum string, err error) {
	h := sha256.New()
	w := io.Writer(h)
	var g gitHash
	if withGit {
		g = newGitHash(size)
		w = io.MultiWriter(h, g)
	}
	n, err = io.Copy(w, r)
	if err != nil {
		return "", n, "", err
	}
	if withGit {
		gitSum = g.sum()
	}
	return hex.EncodeToString(h.Sum(nil)), n, gitSum, nil
}

// safeRel says whether a relative path from a source stays inside its folder.
func safeRel(p string) bool {
	if p == "" || filepath.IsAbs(p) || strings.Contains(p, "\x00") {
		return false
	}
	clean := filepath.Clean(p)
	return clean != "." && clean != ".." && !strings.HasPrefix(clean, "../") && clean == p
}
