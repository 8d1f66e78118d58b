package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

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

// The tail takes whole rows as prime-rl appends them, however the writes are cut: a row
// written in pieces waits for its newline, NaN and an overflowing number become null with a
// note, a line longer than jobdata.MaxLineBytes is refused (skipped to its end) and the rows
// after it are read.
func TestMetricsTailTakesRowsAndRefusesOverlongLines(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	tail := metricsTail{path: path}
	write := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
	}
	write(`{"step": 1, "loss/mean": 0.5}` + "\n" + `{"step": 1, "loss`)
	rows, notes, err := tail.read()
	if err != nil || len(rows) != 1 || len(notes) != 0 {
		t.Fatalf("first read: %d rows, %v, %v", len(rows), notes, err)
	}
	write(`/mean": NaN, "x": 1e400}` + "\n")
	write(`{"step": 2, "big": "` + strings.Repeat("x", jobdata.MaxLineBytes+10) + `"}` + "\n")
	write(`{"step": 3, "loss/mean": 0.25}` + "\n")
	rows, notes, err = tail.read()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Step() != 1 || rows[1].Step() != 3 {
		t.Fatalf("rows %v", rows)
	}
	if v, ok := rows[0].Float("loss/mean"); ok || string(rows[0]["loss/mean"]) != "null" {
		t.Errorf("NaN read as %v (%s)", v, rows[0]["loss/mean"])
	}
	if got := string(rows[0][jobdata.NonFiniteKey]); !strings.Contains(got, `"loss/mean":"NaN"`) || !strings.Contains(got, `"x":"1e400"`) {
		t.Errorf("non-finite note %s", got)
	}
	if len(notes) != 1 || !errors.Is(notes[0].err, jobdata.ErrLineTooLong) {
		t.Errorf("notes %v, want one over-long line", notes)
	}
}

// A job that writes much at once is read maxTailRead at a time, every row in the end; a flood
// of bad lines gives a few notes and a count, not a note each.
func TestMetricsTailReadsABoundedPieceAtATime(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "metrics.jsonl")
	var b strings.Builder
	for range 10000 {
		b.WriteString("not a row\n")
	}
	const steps = 100000
	for s := 1; s <= steps; s++ {
		fmt.Fprintf(&b, `{"step": %d, "loss/mean": 0.5, "pad": "%s"}`+"\n", s, strings.Repeat("p", 40))
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	tail := metricsTail{path: path}
	rows, notes, err := tail.read()
	if err != nil || !tail.behind || len(rows) == 0 || len(rows) >= steps {
		t.Fatalf("first read: %d rows, behind %v, %v; want part of the file", len(rows), tail.behind, err)
	}
	if len(notes) != maxNotes+1 || !strings.Contains(notes[maxNotes].err.Error(), "9995 more lines") {
		t.Errorf("notes %v; want %d and a count of the rest", notes, maxNotes)
	}
	total, reads := len(rows), 1
	for tail.behind {
		rows, _, err := tail.read()
		if err != nil {
			t.Fatal(err)
		}
		total, reads = total+len(rows), reads+1
	}
	if total != steps || reads < 2 {
		t.Errorf("%d rows in %d reads, want %d", total, reads, steps)
	}
}
