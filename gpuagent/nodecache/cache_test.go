package nodecache

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
)

// hubWith serves models laid out under a folder, as a mirror does; it counts the files served.
func hubWith(t *testing.T, models map[string]map[string][]byte) (*Hub, string, *atomic.Int64) {
	t.Helper()
	dir := t.TempDir()
	for model, files := range models {
		for name, data := range files {
			p := filepath.Join(dir, model, name)
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, data, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	served := new(atomic.Int64)
	hs := &HubServer{Dir: dir}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/resolve/") {
			served.Add(1)
		}
		hs.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return &Hub{URL: srv.URL}, dir, served
}

var weights = bytes.Repeat([]byte("0123456789abcdef"), (lfsFrom/16)+3) // an LFS-sized file

func tinyModel() map[string][]byte {
	return map[string][]byte{
		"config.json":           []byte(`{"architectures":["Qwen3ForCausalLM"]}`),
		"model.safetensors":     weights,
		"pytorch_model.bin":     []byte("the same weights in another format"),
		"tokenizer/vocab.json":  []byte(`{"a":1}`),
		"original/consolidated": []byte("not fetched"),
	}
}

func openCache(t *testing.T, dir string, hub *Hub, adjust ...func(*Config)) *Cache {
	t.Helper()
	cfg := Config{Dir: dir, Hub: hub}
	for _, f := range adjust {
		f(&cfg)
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// A model is fetched once per node and revision, in the hub cache's layout, verified; the second
// time it is a hit with nothing fetched; a blob changed on disk is found at the next use, the
// entry discarded and fetched again, never handed out; the cache survives the agent (a new
// Cache on the folder finds it) and a half-written entry does not.
func TestModelsAreFetchedOnceVerifiedAndRefetchedWhenCorrupt(t *testing.T) {
	hub, _, served := hubWith(t, map[string]map[string][]byte{"acme/tiny-1b": tinyModel()})
	dir := t.TempDir()
	c := openCache(t, dir, hub)
	ctx := context.Background()

	m, release, fetched, err := c.Model(ctx, "acme/tiny-1b", "")
	if err != nil {
		t.Fatal(err)
	}
	release()
	if fetched < int64(len(weights)) || served.Load() != 3 {
		t.Fatalf("first use fetched %d bytes in %d files; want the weights, config and vocab (3 files), not the .bin or original/", fetched, served.Load())
	}
	if !strings.HasPrefix(m.Snapshot, filepath.Join(dir, "hf", "hub", "models--acme--tiny-1b", "snapshots")+"/") {
		t.Fatalf("snapshot at %s, not in the hub cache's layout", m.Snapshot)
	}
	got, err := os.ReadFile(filepath.Join(m.Snapshot, "model.safetensors"))
	if err != nil || !bytes.Equal(got, weights) {
		t.Fatalf("the snapshot's weights: %d bytes, %v", len(got), err)
	}
	if ref, _ := os.ReadFile(filepath.Join(dir, "hf", "hub", "models--acme--tiny-1b", "refs", "main")); string(ref) != m.Commit {
		t.Fatalf("refs/main is %q, want the commit %s", ref, m.Commit)
	}
	if fi, _ := os.Stat(filepath.Join(m.Snapshot, "model.safetensors")); fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("a blob is writable: %v", fi.Mode())
	}

	_, release, fetched, err = c.Model(ctx, "acme/tiny-1b", "main")
	if err != nil || fetched != 0 || served.Load() != 3 {
		t.Fatalf("second use: fetched %d, served %d, %v; want a hit", fetched, served.Load(), err)
	}
	release()
	if s := c.Stats()[KindModel]; s.Hits != 1 || s.Misses != 1 || s.Entries != 1 || s.Bytes < int64(len(weights)) {
		t.Fatalf("stats %+v", s)
	}
	if held := c.Held(10); !slices.Equal(held, []string{"m:acme/tiny-1b"}) {
		t.Fatalf("held %v", held)
	}

	// Corrupt the weights' blob in place (same size): the next use hashes it, finds it wrong,
	// and fetches the model again.
	blob, _ := filepath.EvalSymlinks(filepath.Join(m.Snapshot, "model.safetensors"))
	bad := bytes.Clone(weights)
	bad[len(bad)/2] ^= 0xff
	_ = os.Chmod(blob, 0o644)
	if err := os.WriteFile(blob, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	m, release, fetched, err = c.Model(ctx, "acme/tiny-1b", "")
	if err != nil {
		t.Fatal(err)
	}
	release()
	got, _ = os.ReadFile(filepath.Join(m.Snapshot, "model.safetensors"))
	if fetched < int64(len(weights)) || !bytes.Equal(got, weights) {
		t.Fatalf("after corruption: fetched %d; weights intact %v", fetched, bytes.Equal(got, weights))
	}
	if s := c.Stats()[KindModel]; s.Refetched != 1 {
		t.Fatalf("refetched %d, want 1", s.Refetched)
	}

	// A half-written entry (a snapshot and a blob with no record) is swept at the next Open; the
	// recorded one is found.
	half := filepath.Join(dir, "hf", "hub", "models--acme--other", "snapshots", "abc")
	_ = os.MkdirAll(half, 0o755)
	_ = os.MkdirAll(filepath.Join(dir, "hf", "hub", "models--acme--other", "blobs"), 0o755)
	_ = os.WriteFile(filepath.Join(dir, "hf", "hub", "models--acme--other", "blobs", "deadbeef"), []byte("half"), 0o644)
	if _, err := Open(Config{Dir: dir}); err == nil || !strings.Contains(err.Error(), "in use") {
		t.Fatalf("a second agent on the cache: %v; want it refused", err)
	}
	c.Close()
	c2 := openCache(t, dir, hub)
	if _, err := os.Stat(half); !os.IsNotExist(err) {
		t.Fatalf("a half-written snapshot survived Open: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "hf", "hub", "models--acme--other", "blobs", "deadbeef")); !os.IsNotExist(err) {
		t.Fatalf("a blob no record names survived Open: %v", err)
	}
	_, release, fetched, err = c2.Model(ctx, "acme/tiny-1b", "")
	if err != nil || fetched != 0 {
		t.Fatalf("a new agent on the cache: fetched %d, %v; want a hit", fetched, err)
	}
	release()
}

// A hub that serves other bytes than it lists is refused: nothing is recorded or left.
func TestAFetchThatDoesNotVerifyIsNotKept(t *testing.T) {
	dir := t.TempDir()
	for name, data := range tinyModel() {
		p := filepath.Join(dir, "acme/tiny-1b", name)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		_ = os.WriteFile(p, data, 0o644)
	}
	hs := &HubServer{Dir: dir}
	// A hub whose weights are altered on the way: one byte flipped, the size kept.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/model.safetensors") {
			bad := bytes.Clone(weights)
			bad[0] ^= 1
			_, _ = w.Write(bad)
			return
		}
		hs.ServeHTTP(w, r)
	}))
	defer srv.Close()
	c := openCache(t, t.TempDir(), &Hub{URL: srv.URL})
	_, _, _, err := c.Model(context.Background(), "acme/tiny-1b", "")
	if err == nil || !strings.Contains(err.Error(), "sha256") {
		t.Fatalf("fetch of altered weights: %v; want a sha256 mismatch", err)
	}
	if len(c.Entries()) != 0 {
		t.Fatalf("entries after a failed fetch: %+v", c.Entries())
	}
	leftovers, _ := os.ReadDir(filepath.Join(c.Dir(), "tmp"))
	blobs, _ := os.ReadDir(filepath.Join(c.Dir(), "hf/hub/models--acme--tiny-1b/blobs"))
	for _, b := range blobs {
		if fi, _ := b.Info(); fi.Size() == int64(len(weights)) {
			t.Fatalf("the altered weights took a blob's name: %s", b.Name())
		}
	}
	if len(leftovers) != 0 {
		t.Fatalf("temporary files left: %v", leftovers)
	}
}

// Past its cap a kind evicts its least recently used entries, but never one a job holds.
func TestEvictionIsLeastRecentlyUsedAndSparesHeldEntries(t *testing.T) {
	a, b := tinyModel(), tinyModel()
	b["config.json"] = []byte(`{"other":true}`)
	hub, _, _ := hubWith(t, map[string]map[string][]byte{"acme/a": a, "acme/b": b})
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	c := openCache(t, t.TempDir(), hub, func(cfg *Config) {
		cfg.ModelCap = int64(len(weights)) * 3 / 2 // room for one model
		cfg.Now = func() time.Time { now = now.Add(time.Second); return now }
	})
	ctx := context.Background()
	_, relA, _, err := c.Model(ctx, "acme/a", "")
	if err != nil {
		t.Fatal(err)
	}
	// a is held: b comes in beside it, over the cap, and a stays.
	_, relB, _, err := c.Model(ctx, "acme/b", "")
	if err != nil {
		t.Fatal(err)
	}
	if n := len(c.Entries()); n != 2 {
		t.Fatalf("%d entries while a is held, want 2", n)
	}
	relA()
	relB()
	// The next addition evicts the least recently used (a, used first).
	hub2, _, _ := hubWith(t, map[string]map[string][]byte{"acme/c": tinyModel()})
	c.cfg.Hub = hub2
	if _, rel, _, err := c.Model(ctx, "acme/c", ""); err != nil {
		t.Fatal(err)
	} else {
		rel()
	}
	var keys []string
	for _, e := range c.Entries() {
		keys = append(keys, strings.SplitN(e.Key, "@", 2)[0])
	}
	if !slices.Equal(keys, []string{"acme/c"}) {
		t.Fatalf("after eviction: %v; want only the newest", keys)
	}
}

// An install is kept as a layer: what it added, changed and removed in a copy of prime-rl's
// Python; laid over a fresh copy of the base it gives the installed tree back, its files the
// cache's (read-only); a layer file changed on disk makes the layer a miss.
func TestAnInstallLayerRoundTrips(t *testing.T) {
	base := t.TempDir()
	write := func(root, rel, data string) {
		p := filepath.Join(root, rel)
		_ = os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(base, "lib/site-packages/torch/__init__.py", "torch")
	write(base, "lib/site-packages/old/__init__.py", "old")
	write(base, "lib/site-packages/keep.py", "keep")
	own := filepath.Join(t.TempDir(), "venv")
	if err := sandbox.LinkTree(base, own); err != nil {
		t.Fatal(err)
	}
	// The install: a new package, a changed file (replaced, as pip does), a removed one.
	write(own, "lib/site-packages/alphabet_sort/__init__.py", "env")
	_ = os.Remove(filepath.Join(own, "lib/site-packages/keep.py"))
	write(own, "lib/site-packages/keep.py", "changed")
	_ = os.RemoveAll(filepath.Join(own, "lib/site-packages/old"))

	cp, err := CaptureLinked(base, own)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(cp.Files)
	if !slices.Equal(cp.Files, []string{"lib/site-packages/alphabet_sort/__init__.py", "lib/site-packages/keep.py"}) ||
		!slices.Equal(cp.Removed, []string{"lib/site-packages/old/__init__.py"}) {
		t.Fatalf("capture %+v", cp)
	}
	c := openCache(t, t.TempDir(), nil)
	key, versioned := InstallKey("acme", []string{"o/alphabet-sort@0.1.2"}, "prime-rl 0.5")
	if !versioned {
		t.Fatal("a pinned install is not lasting")
	}
	if _, err := c.PutLayer(KindEnv, key, []string{"e:acme:o/alphabet-sort@0.1.2"}, versioned, cp); err != nil {
		t.Fatal(err)
	}
	l, release, ok := c.Layer(KindEnv, key)
	if !ok {
		t.Fatal("the install is not cached")
	}
	defer release()
	fresh := filepath.Join(t.TempDir(), "venv")
	if err := sandbox.LinkTree(base, fresh); err != nil {
		t.Fatal(err)
	}
	if err := LinkLayer(l, fresh); err != nil {
		t.Fatal(err)
	}
	for rel, want := range map[string]string{"lib/site-packages/alphabet_sort/__init__.py": "env", "lib/site-packages/keep.py": "changed", "lib/site-packages/torch/__init__.py": "torch"} {
		if got, _ := os.ReadFile(filepath.Join(fresh, rel)); string(got) != want {
			t.Fatalf("%s: %q, want %q", rel, got, want)
		}
	}
	if _, err := os.Stat(filepath.Join(fresh, "lib/site-packages/old/__init__.py")); !os.IsNotExist(err) {
		t.Fatalf("a removed file is back: %v", err)
	}
	if fi, _ := os.Stat(filepath.Join(fresh, "lib/site-packages/keep.py")); fi.Mode().Perm()&0o222 != 0 {
		t.Fatalf("a cached file is writable in the job's copy: %v", fi.Mode())
	}
	release()

	// Changed on disk: the next lookup hashes it, and it is a miss.
	p := filepath.Join(l.Dir, "lib/site-packages/alphabet_sort/__init__.py")
	_ = os.Chmod(p, 0o644)
	_ = os.WriteFile(p, []byte("evil"), 0o644)
	if _, _, ok := c.Layer(KindEnv, key); ok {
		t.Fatal("a changed install was handed out")
	}
	if s := c.Stats()[KindEnv]; s.Refetched != 1 || s.Entries != 0 {
		t.Fatalf("stats %+v", s)
	}
}

// An install of an environment's newest (no version) is used again only for EnvTTL.
func TestAnUnpinnedInstallExpires(t *testing.T) {
	now := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	c := openCache(t, t.TempDir(), nil, func(cfg *Config) { cfg.Now = func() time.Time { return now } })
	own := t.TempDir()
	_ = os.WriteFile(filepath.Join(own, "x.py"), []byte("x"), 0o644)
	key, versioned := InstallKey("acme", []string{"o/env"}, "pin")
	if versioned {
		t.Fatal("an unpinned install is lasting")
	}
	if _, err := c.PutLayer(KindEnv, key, []string{"e:acme:o/env"}, versioned, Capture{Root: own, Files: []string{"x.py"}}); err != nil {
		t.Fatal(err)
	}
	if _, rel, ok := c.Layer(KindEnv, key); !ok {
		t.Fatal("miss within the TTL")
	} else {
		rel()
	}
	now = now.Add(DefaultEnvTTL)
	if _, _, ok := c.Layer(KindEnv, key); ok {
		t.Fatal("hit past the TTL")
	}
	if held := c.Held(10); len(held) != 0 {
		t.Fatalf("held past the TTL: %v", held)
	}
}
