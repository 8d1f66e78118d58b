package jobdata

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Lines as the pipeline's programs write them: prime-rl's loguru (time of day, a level
// right-aligned to 7, colour codes always on), vLLM's, the agent's RFC 3339 lines, and a
// traceback that continues the line before it.
func TestParseLogLinesReadsWhatUpstreamWrites(t *testing.T) {
	t.Parallel()
	data := "(APIServer pid=12) INFO 11-22 23:59:57 [api_server.py:1] Starting vLLM API server\n" +
		"\x1b[2m23:59:58\x1b[0m \x1b[1m   INFO\x1b[0m \x1b[1m\x1b[22mShipped batch 12\x1b[0m\n" +
		"\x1b[2m00:00:01\x1b[0m \x1b[33;1mWARNING\x1b[0m \x1b[33;1m\x1b[22mDropping non-finite metric values\x1b[0m\n" +
		"Traceback (most recent call last):\n" +
		"\x1b[2m00:00:02\x1b[0m \x1b[31;1m  ERROR\x1b[0m \x1b[31;1m\x1b[22mTrainer failed with exit code 1\x1b[0m\n" +
		"2026-11-23T00:00:03Z INFO pipeline started\n"
	anchor := time.Date(2026, 11, 23, 0, 0, 10, 0, time.UTC) // the chunk was written just after midnight
	lines := ParseLogLines("trainer", []byte(data), anchor)
	if len(lines) != 6 {
		t.Fatalf("%d lines", len(lines))
	}
	want := []struct {
		level, text string
		at          time.Time
	}{
		{"INFO", "(APIServer pid=12) INFO 11-22 23:59:57 [api_server.py:1] Starting vLLM API server", time.Date(2026, 11, 22, 23, 59, 57, 0, time.UTC)},
		{"INFO", "23:59:58    INFO Shipped batch 12", time.Date(2026, 11, 22, 23, 59, 58, 0, time.UTC)},
		{"WARNING", "00:00:01 WARNING Dropping non-finite metric values", time.Date(2026, 11, 23, 0, 0, 1, 0, time.UTC)},
		{"", "Traceback (most recent call last):", time.Date(2026, 11, 23, 0, 0, 1, 0, time.UTC)},
		{"ERROR", "00:00:02   ERROR Trainer failed with exit code 1", time.Date(2026, 11, 23, 0, 0, 2, 0, time.UTC)},
		{"INFO", "2026-11-23T00:00:03Z INFO pipeline started", time.Date(2026, 11, 23, 0, 0, 3, 0, time.UTC)},
	}
	for i, w := range want {
		l := lines[i]
		if l.Level != w.level || l.Line != w.text || !l.at.Equal(w.at) {
			t.Errorf("line %d: %q %q at %v; want %q %q at %v", i, l.Level, l.Line, l.at, w.level, w.text, w.at)
		}
	}
	if lines[3].lvl != "WARNING" || lines[3].Time != nil {
		t.Errorf("the traceback takes the level of the line before: %+v", lines[2])
	}
	q := LogQuery{Level: "WARNING"}
	var shown []string
	for _, l := range lines {
		if q.Passes(l) {
			shown = append(shown, l.Level)
		}
	}
	if strings.Join(shown, ",") != "WARNING,,ERROR" {
		t.Errorf("--level WARNING shows %v", shown)
	}
}

// A log grows past several chunk sizes while it is shipped now and then; the chunks in
// storage, in key order, are the file byte for byte, and each chunk but the last ends on a
// line.
func TestLogChunksReassembleTheFile(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	dir := t.TempDir()
	logs := filepath.Join(dir, "logs", "attempt_1")
	if err := os.MkdirAll(filepath.Join(logs, "envs", "train"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("attempt_1", filepath.Join(dir, "logs", "latest")); err != nil {
		t.Fatal(err)
	}
	sh := NewLogShipper(store, "j1", 1)
	sh.Dir(filepath.Join(dir, "logs", "latest"))
	f, err := os.Create(filepath.Join(logs, "trainer.log"))
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	ctx := context.Background()
	for i := range 30000 {
		line := fmt.Sprintf("\x1b[2m10:00:00\x1b[0m SUCCESS Step %d | Loss %.4f | a longer line to fill chunks faster %s\n", i, float64(i)/1e4, strings.Repeat("x", i%50))
		want.WriteString(line)
		f.WriteString(line)
		if i%7000 == 0 {
			if err := sh.Ship(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	f.Close()
	if err := os.WriteFile(filepath.Join(logs, "envs", "train", "gsm8k.log"), []byte("env line\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	before := sh.Stored()
	if err := sh.Ship(ctx); err != nil {
		t.Fatal(err)
	}
	// What the heartbeat's log_bytes says: it grew with what was written, and stays when
	// nothing more is.
	if after := sh.Stored(); after <= before || after < int64(want.Len()) {
		t.Errorf("stored %d bytes after %d, for %d bytes of log", after, before, want.Len())
	}
	mid := sh.Stored()
	if err := sh.Ship(ctx); err != nil {
		t.Fatal(err)
	}
	if again := sh.Stored(); again != mid {
		t.Errorf("a ship with nothing new stored more: %d after %d", again, mid)
	}
	objs, err := store.List(ctx, LogPrefix("j1", 1)+"trainer/")
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
		if o.Size > LogChunkBytes {
			t.Errorf("chunk %s is %d bytes, over %d", o.Key, o.Size, LogChunkBytes)
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
	if _, err := store.Get(ctx, LogPrefix("j1", 1)+"envs/train/gsm8k/000000000000.log"); err != nil {
		t.Errorf("the environment's log: %v", err)
	}
	res, err := ReadLogs(ctx, store, "j1", LogQuery{Component: "envs"})
	if err != nil || len(res.Lines) != 1 || res.Lines[0].Component != "envs/train/gsm8k" {
		t.Errorf("envs: %+v %v", res.Lines, err)
	}
}

// trainer.log is torchrun's tee of rank 0, which puts `[trainer0]:` before each line; the
// loguru time and level after it are read all the same.
func TestParseLogLinesReadsThroughTorchrunsRankPrefix(t *testing.T) {
	t.Parallel()
	data := "[trainer0]:\x1b[2m10:00:01\x1b[0m \x1b[32;1mSUCCESS\x1b[0m \x1b[32;1m\x1b[22mStep 3 | 1.0s | Loss 0.1\x1b[0m\n" +
		"[trainer0]:\x1b[2m10:00:02\x1b[0m \x1b[31;1m  ERROR\x1b[0m \x1b[31;1m\x1b[22mCUDA error\x1b[0m\n" +
		"[not a rank]: 10:00:03 INFO kept as it is\n"
	lines := ParseLogLines("trainer", []byte(data), time.Date(2026, 11, 23, 10, 5, 0, 0, time.UTC))
	if len(lines) != 3 || lines[0].Level != "SUCCESS" || lines[1].Level != "ERROR" || lines[0].Time == nil ||
		!lines[1].Time.Equal(time.Date(2026, 11, 23, 10, 0, 2, 0, time.UTC)) || lines[2].Time != nil {
		t.Errorf("lines %+v", lines)
	}
}

// Dates from times of day: a clock a second behind the next line's is the same day (two
// processes write one file); a line a little newer than its chunk across midnight is the
// next day's; control sequences of every kind are gone.
func TestParseLogLinesDatesByTheNearestDay(t *testing.T) {
	t.Parallel()
	lines := ParseLogLines("orchestrator", []byte("10:00:01    INFO a\n10:00:00    INFO b\n"), time.Date(2026, 11, 23, 10, 0, 5, 0, time.UTC))
	if len(lines) != 2 || lines[0].Time.Day() != 23 || lines[1].Time.Day() != 23 {
		t.Errorf("a second back is a day back: %v %v", lines[0].Time, lines[1].Time)
	}
	lines = ParseLogLines("orchestrator", []byte("23:59:59    INFO a\n00:01:00    INFO b\n"), time.Date(2026, 11, 23, 23, 58, 0, 0, time.UTC))
	if len(lines) != 2 || !lines[1].Time.Equal(time.Date(2026, 11, 24, 0, 1, 0, 0, time.UTC)) ||
		!lines[0].Time.Equal(time.Date(2026, 11, 23, 23, 59, 59, 0, time.UTC)) {
		t.Errorf("across midnight: %v %v", lines[0].Time, lines[1].Time)
	}
	if got := StripANSI("\x1b[?25lbar\x1b]0;title\x07 done \x1b[2K\x1b[1;32mok\x1b[0m"); got != "bar done ok" {
		t.Errorf("StripANSI: %q", got)
	}
}

// A log line over MaxLogLineBytes — here 5 MiB with no newline for a while, as a progress
// bar writes — is shipped cut at that length with a mark saying so, never whole; the lines
// around it are shipped as written, and the chunks stay named by where they start in the file.
func TestALongLogLineIsCut(t *testing.T) {
	t.Parallel()
	store := newStore(t)
	path := filepath.Join(t.TempDir(), "trainer.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sh := NewLogShipper(store, "j1", 1)
	sh.File("trainer", path)
	ctx := context.Background()
	write := func(s string) {
		if _, err := f.WriteString(s); err != nil {
			t.Fatal(err)
		}
		if err := sh.Ship(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write("10:00:00 INFO before\n")
	for range 5 { // shipped while it grows
		write(strings.Repeat("x", 1<<20))
	}
	write("\n10:00:01 INFO after\n")
	for range 4 { // until storage has caught up with the file
		if err := sh.Ship(ctx); err != nil {
			t.Fatal(err)
		}
	}
	objs, err := store.List(ctx, LogPrefix("j1", 1)+"trainer/")
	if err != nil {
		t.Fatal(err)
	}
	var got strings.Builder
	for _, o := range objs {
		rc, err := store.Get(ctx, o.Key)
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(rc)
		rc.Close()
		got.Write(data)
	}
	want := "10:00:00 INFO before\n" + strings.Repeat("x", MaxLogLineBytes) + logLineCut + "\n10:00:01 INFO after\n"
	if got.String() != want {
		t.Errorf("shipped %d bytes in %d chunks, want %d: the long line cut and marked", got.Len(), len(objs), len(want))
	}
	res, err := ReadLogs(ctx, store, "j1", LogQuery{})
	if err != nil || len(res.Lines) != 3 || !strings.HasSuffix(res.Lines[1].Line, logLineCut) || res.Lines[2].Line != "10:00:01 INFO after" {
		t.Errorf("read back %d lines (%v)", len(res.Lines), err)
	}
}
