package gpuagent

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// A log grows past several chunk sizes while it is shipped now and then; the chunks in
// storage, in key order, are the file byte for byte, and each chunk but the last ends on a
// line.
func TestLogChunksReassembleTheFile(t *testing.T) {
	t.Parallel()
	store, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs", "attempt_1")
	if err := os.MkdirAll(filepath.Join(logs, "envs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("attempt_1", filepath.Join(dir, "logs", "latest")); err != nil {
		t.Fatal(err)
	}
	sh := newLogShipper(store, "j1", 1)
	sh.dirs = []string{filepath.Join(dir, "logs", "latest")}
	f, err := os.Create(filepath.Join(logs, "trainer.log"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	ctx := context.Background()
	for i := range 30000 {
		line := fmt.Sprintf("2026-11-22T10:00:00Z INFO step %d | loss %.4f | a longer line to fill chunks faster %s\n", i, float64(i)/1e4, strings.Repeat("x", i%50))
		want.WriteString(line)
		f.WriteString(line)
		if i%7000 == 0 {
			if err := sh.ship(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(logs, "envs", "gsm8k.log"), []byte("env line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := sh.ship(ctx); err != nil {
		t.Fatal(err)
	}
	objs, err := store.List(ctx, blob.LogPrefix("j1", 1)+"trainer/")
	if err != nil {
		t.Fatal(err)
	}
	if len(objs) < 3 {
		t.Fatalf("%d chunks for %d bytes; want several", len(objs), want.Len())
	}
	var got strings.Builder
	for i, o := range objs {
		rc, _ := store.Get(ctx, o.Key)
		data, _ := io.ReadAll(rc)
		rc.Close()
		if o.Size > logChunkBytes {
			t.Errorf("chunk %s is %d bytes, over %d", o.Key, o.Size, logChunkBytes)
		}
		if i < len(objs)-1 && !strings.HasSuffix(string(data), "\n") {
			t.Errorf("chunk %s does not end on a line", o.Key)
		}
		if off := fmt.Sprintf("%012d.log", got.Len()); !strings.HasSuffix(o.Key, off) {
			t.Errorf("chunk %s should be named by its offset %s", o.Key, off)
		}
		got.Write(data)
	}
	if got.String() != want.String() {
		t.Errorf("reassembled %d bytes, want %d", got.Len(), want.Len())
	}
	if _, err := store.Get(ctx, blob.LogPrefix("j1", 1)+"envs/gsm8k/000000000000.log"); err != nil {
		t.Errorf("the environment's log: %v", err)
	}
}

// failingStore refuses writes while down, like object storage during an outage. mu, when
// set, guards down and refused for a store shared with another goroutine.
type failingStore struct {
	blob.Store
	mu      *sync.Mutex
	down    bool
	refused int
}

func (f *failingStore) Put(ctx context.Context, key string, r io.Reader) error {
	if f.mu != nil {
		f.mu.Lock()
	}
	down := f.down
	if down {
		f.refused++
	}
	if f.mu != nil {
		f.mu.Unlock()
	}
	if down {
		return fmt.Errorf("storage unavailable")
	}
	return f.Store.Put(ctx, key, r)
}

// Metrics lines that could not be stored are kept and go with the next flush.
func TestMetricsSurviveAStorageOutage(t *testing.T) {
	t.Parallel()
	dir, err := blob.NewDir(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	store := &failingStore{Store: dir}
	m := newMetricsStream(store, "j1", 3)
	ctx := context.Background()
	line := func(step int) []byte { return []byte(fmt.Sprintf(`{"step":%d,"reward/all/mean":0.5}`, step)) }
	m.addLines([][]byte{line(1), line(2)})
	store.down = true
	if err := m.flush(ctx); err == nil {
		t.Fatal("flush succeeded with storage down")
	}
	m.addLines([][]byte{line(3)})
	store.down = false
	if err := m.flush(ctx); err != nil {
		t.Fatal(err)
	}
	rows, _, err := blob.ReadMetrics(ctx, dir, "j1", blob.MetricsQuery{})
	if err != nil || len(rows) != 3 {
		t.Fatalf("%d rows, %v", len(rows), err)
	}
	if m.pending() != 0 {
		t.Errorf("%d bytes still pending", m.pending())
	}
}
