package nodecache

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"hash"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Hub is a Hugging Face-compatible model hub: its API lists a revision's files with their sizes
// and hashes (GET /api/models/REPO/revision/REV?blobs=true: the commit, and each file's git blob
// id and, for a large file, its sha256), and serves them (GET /REPO/resolve/COMMIT/FILE).
type Hub struct {
	// URL is the hub's address (https://huggingface.co, or a mirror).
	URL string
	// Token is the operator's token for it ("" for none): only what it can read is cached.
	Token string
	// Client makes the requests (default: one with no overall timeout; each read is bounded
	// by StallTimeout).
	Client *http.Client
	// Concurrency is how many files are fetched at once (default 4).
	Concurrency int
}

// hubFile is a file of a revision as the hub lists it.
type hubFile struct {
	Name   string `json:"rfilename"`
	BlobID string `json:"blobId"`
	Size   int64  `json:"size"`
	LFS    *struct {
		SHA256 string `json:"sha256"`
		Size   int64  `json:"size"`
	} `json:"lfs"`
}

type hubRevision struct {
	SHA      string    `json:"sha"`
	Siblings []hubFile `json:"siblings"`
}

// modelExtra is a model entry's own record: the revision asked for and its files' blobs.
type modelExtra struct {
	Model    string            `json:"model"`
	Revision string            `json:"revision"`
	Commit   string            `json:"commit"`
	Snapshot map[string]string `json:"snapshot"` // file name → blob
}

// ModelFiles is a model's weights in the cache.
type ModelFiles struct {
	Model, Revision, Commit string
	// Snapshot is the folder with the model's files (links into the blobs), under HubDir.
	Snapshot string
	Size     int64
}

// repoDir is a model's folder in the hub cache, as huggingface_hub names it.
func repoDir(model string) string {
	return filepath.Join("hf", "hub", "models--"+strings.ReplaceAll(model, "/", "--"))
}

func (h *Hub) client() *http.Client {
	if h.Client != nil {
		return h.Client
	}
	return http.DefaultClient
}

func (h *Hub) get(ctx context.Context, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(h.URL, "/")+path, nil)
	if err != nil {
		return nil, err
	}
	if h.Token != "" {
		req.Header.Set("Authorization", "Bearer "+h.Token)
	}
	resp, err := h.client().Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		return nil, fmt.Errorf("%s: %s: %s", path, resp.Status, strings.TrimSpace(string(body)))
	}
	return resp, nil
}

func escapeRepo(model string) string {
	parts := strings.Split(model, "/")
	for i, p := range parts {
		parts[i] = url.PathEscape(p)
	}
	return strings.Join(parts, "/")
}

// revision asks the hub for a revision's commit and files.
func (h *Hub) revision(ctx context.Context, model, rev string) (*hubRevision, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	resp, err := h.get(ctx, "/api/models/"+escapeRepo(model)+"/revision/"+url.PathEscape(rev)+"?blobs=true")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var r hubRevision
	if err := json.NewDecoder(io.LimitReader(resp.Body, 16<<20)).Decode(&r); err != nil {
		return nil, fmt.Errorf("the hub's listing of %s@%s: %w", model, rev, err)
	}
	if r.SHA == "" || strings.ContainsAny(r.SHA, "/\\. ") {
		return nil, fmt.Errorf("the hub's listing of %s@%s names no commit", model, rev)
	}
	return &r, nil
}

// weightFiles are the files a server loads: all of them, but where the model has safetensors,
// not the other formats of the same weights nor the original/ checkpoint (vLLM loads
// safetensors first and fetches only those).
func weightFiles(files []hubFile) []hubFile {
	safe := false
	for _, f := range files {
		if strings.HasSuffix(f.Name, ".safetensors") {
			safe = true
		}
	}
	var out []hubFile
	for _, f := range files {
		if safe && (strings.HasPrefix(f.Name, "original/") || hasAnySuffix(f.Name, ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack", ".onnx")) {
			continue
		}
		out = append(out, f)
	}
	return out
}

func hasAnySuffix(s string, suffixes ...string) bool {
	for _, x := range suffixes {
		if strings.HasSuffix(s, x) {
			return true
		}
	}
	return false
}

// Model makes sure the weights of model at revision ("" for main) are in the cache and
// verified, fetching what is missing, and holds them for a job until release is called.
// fetched is the bytes fetched (0: a hit). With no hub it answers ErrNotCached.
func (c *Cache) Model(ctx context.Context, model, revision string) (m *ModelFiles, release func(), fetched int64, err error) {
	h := c.cfg.Hub
	if h == nil {
		return nil, nil, 0, ErrNotCached
	}
	if revision == "" {
		revision = "main"
	}
	if !safeRel(model) || strings.Count(model, "/") != 1 || strings.ContainsAny(model, " \\") {
		return nil, nil, 0, fmt.Errorf("nodecache: %q is not a hub model id", model)
	}
	rev, err := h.revision(ctx, model, revision)
	var commit string
	if err != nil {
		// The hub is out of reach: a cached copy of the revision does.
		if commit = c.cachedCommit(model, revision); commit == "" {
			return nil, nil, 0, err
		}
	} else {
		commit = rev.SHA
	}
	key := model + "@" + commit
	unlock := c.lock(KindModel, key)
	defer unlock()
	e, corrupt := c.lookup(KindModel, key)
	if e != nil {
		c.count(KindModel, func(s *Stats) { s.Hits++ })
		if err := c.linkSnapshot(e); err != nil {
			return nil, nil, 0, err
		}
		return c.modelFiles(e), c.hold(e), 0, nil
	}
	if rev == nil {
		return nil, nil, 0, err
	}
	_ = corrupt // counted by lookup as refetched
	c.count(KindModel, func(s *Stats) { s.Misses++ })
	e, fetched, err = c.fetchModel(ctx, model, revision, rev)
	c.count(KindModel, func(s *Stats) { s.BytesFetched += fetched })
	if err != nil {
		return nil, nil, fetched, err
	}
	if err := c.add(e); err != nil {
		return nil, nil, fetched, err
	}
	return c.modelFiles(e), c.hold(e), fetched, nil
}

// cachedCommit is the commit of the newest cached copy of model's revision, "" for none.
func (c *Cache) cachedCommit(model, revision string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var best *Entry
	var commit string
	for _, e := range c.idx {
		var x modelExtra
		if e.Kind != KindModel || json.Unmarshal(e.Extra, &x) != nil || x.Model != model || x.Revision != revision {
			continue
		}
		if best == nil || e.Made.After(best.Made) {
			best, commit = e, x.Commit
		}
	}
	return commit
}

func (c *Cache) modelFiles(e *Entry) *ModelFiles {
	var x modelExtra
	_ = json.Unmarshal(e.Extra, &x)
	return &ModelFiles{Model: x.Model, Revision: x.Revision, Commit: x.Commit, Snapshot: filepath.Join(c.cfg.Dir, e.Dir), Size: e.Size}
}

// linkSnapshot (re)makes a model entry's snapshot folder of links into its blobs, and the
// revision's ref, as huggingface_hub lays them out.
func (c *Cache) linkSnapshot(e *Entry) error {
	var x modelExtra
	if err := json.Unmarshal(e.Extra, &x); err != nil {
		return err
	}
	snap := filepath.Join(c.cfg.Dir, e.Dir)
	for name, blob := range x.Snapshot {
		p := filepath.Join(snap, name)
		target, _ := filepath.Rel(filepath.Dir(p), filepath.Join(c.cfg.Dir, filepath.Dir(filepath.Dir(e.Dir)), "blobs", blob))
		if cur, err := os.Readlink(p); err == nil && cur == target {
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		_ = os.RemoveAll(p)
		if err := os.Symlink(target, p); err != nil {
			return err
		}
	}
	refs := filepath.Join(c.cfg.Dir, filepath.Dir(filepath.Dir(e.Dir)), "refs")
	if err := os.MkdirAll(filepath.Dir(filepath.Join(refs, x.Revision)), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(refs, x.Revision), []byte(x.Commit), 0o644)
}

// fetchModel fetches a revision's files into its blobs, each verified against the hub's hashes
// before it takes its name, and links its snapshot.
func (c *Cache) fetchModel(ctx context.Context, model, revision string, rev *hubRevision) (*Entry, int64, error) {
	files := weightFiles(rev.Siblings)
	repo := repoDir(model)
	e := &Entry{Kind: KindModel, Key: model + "@" + rev.SHA, Held: []string{"m:" + model}, Dir: filepath.Join(repo, "snapshots", rev.SHA)}
	x := modelExtra{Model: model, Revision: revision, Commit: rev.SHA, Snapshot: map[string]string{}}
	var total int64
	for _, f := range files {
		if !safeRel(f.Name) {
			return nil, 0, fmt.Errorf("nodecache: the hub names a file %q of %s", f.Name, model)
		}
		total += f.Size
	}
	if lim := c.capOf(KindModel); lim >= 0 && total > lim {
		return nil, 0, fmt.Errorf("nodecache: %s is %d bytes, more than the cache's %d", model, total, lim)
	}
	if err := os.MkdirAll(filepath.Join(c.cfg.Dir, repo, "blobs"), 0o755); err != nil {
		return nil, 0, err
	}
	conc := c.cfg.Hub.Concurrency
	if conc <= 0 {
		conc = 4
	}
	var (
		mu      sync.Mutex
		fetched int64
		firstEr error
		wg      sync.WaitGroup
		sem     = make(chan struct{}, conc)
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type pending struct {
		i    int
		name string
		dst  string
	}
	var fetches []pending
	for _, f := range files {
		want := File{Size: f.Size, GitSHA1: f.BlobID}
		blob := f.BlobID
		if f.LFS != nil {
			want = File{Size: f.LFS.Size, SHA256: f.LFS.SHA256}
			blob = f.LFS.SHA256
		}
		if blob == "" || strings.ContainsAny(blob, "/\\. ") {
			return nil, 0, fmt.Errorf("nodecache: the hub gives %s of %s no hash", f.Name, model)
		}
		want.Path = blob
		x.Snapshot[f.Name] = blob
		e.Size += want.Size
		dst := filepath.Join(c.cfg.Dir, repo, "blobs", blob)
		if fi, err := os.Lstat(dst); err == nil && fi.Size() == want.Size && checkFile(dst, want) == nil {
			// Another revision's blob, already here and verified again.
			want.Stamp = stamp(fi)
			e.Files = append(e.Files, want)
			continue
		}
		e.Files = append(e.Files, want)
		fetches = append(fetches, pending{len(e.Files) - 1, f.Name, dst})
	}
	for _, t := range fetches {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			n, st, err := c.fetchFile(ctx, model, rev.SHA, t.name, e.Files[t.i], t.dst)
			mu.Lock()
			defer mu.Unlock()
			fetched += n
			if err != nil && firstEr == nil {
				firstEr = err
				cancel()
			}
			e.Files[t.i].Stamp = st
		}()
	}
	wg.Wait()
	if firstEr != nil {
		return nil, fetched, firstEr
	}
	raw, _ := json.Marshal(x)
	e.Extra = raw
	if err := c.linkSnapshot(e); err != nil {
		return nil, fetched, err
	}
	return e, fetched, nil
}

// fetchFile fetches one file into a temporary file, checks its size and hash, makes it root's
// and read-only, and renames it to dst. It answers the bytes read and the file's stamp.
func (c *Cache) fetchFile(ctx context.Context, model, commit, name string, want File, dst string) (int64, string, error) {
	resp, err := c.cfg.Hub.get(ctx, "/"+escapeRepo(model)+"/resolve/"+commit+"/"+escapePath(name))
	if err != nil {
		return 0, "", fmt.Errorf("fetch %s of %s: %w", name, model, err)
	}
	defer resp.Body.Close()
	tmp, err := os.CreateTemp(filepath.Join(c.cfg.Dir, "tmp"), "blob-"+randomHex()+"-*")
	if err != nil {
		return 0, "", err
	}
	defer os.Remove(tmp.Name())
	sum, n, gitSum, err := hashes(io.TeeReader(io.LimitReader(resp.Body, want.Size+1), tmp), want.Size, want.GitSHA1 != "")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	switch {
	case err != nil:
		return n, "", fmt.Errorf("fetch %s of %s: %w", name, model, err)
	case n != want.Size:
		return n, "", fmt.Errorf("fetch %s of %s: %d bytes, the hub says %d", name, model, n, want.Size)
	case want.SHA256 != "" && sum != want.SHA256:
		return n, "", fmt.Errorf("fetch %s of %s: sha256 %s, the hub says %s", name, model, sum, want.SHA256)
	case want.GitSHA1 != "" && gitSum != want.GitSHA1:
		return n, "", fmt.Errorf("fetch %s of %s: git blob %s, the hub says %s", name, model, gitSum, want.GitSHA1)
	}
	if err := os.Chmod(tmp.Name(), 0o444); err != nil {
		return n, "", err
	}
	if err := os.Rename(tmp.Name(), dst); err != nil {
		return n, "", err
	}
	fi, err := os.Lstat(dst)
	if err != nil {
		return n, "", err
	}
	return n, stamp(fi), nil
}

func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

func randomHex() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// gitHash is git's blob id: sha1 of "blob SIZE\0" and the content.
type gitHash struct{ h hash.Hash }

func newGitHash(size int64) gitHash {
	h := sha1.New()
	h.Write([]byte("blob " + strconv.FormatInt(size, 10) + "\x00"))
	return gitHash{h}
}

func (g gitHash) Write(p []byte) (int, error) { return g.h.Write(p) }
func (g gitHash) sum() string                 { return hex.EncodeToString(g.h.Sum(nil)) }
