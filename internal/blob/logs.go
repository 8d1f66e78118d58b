package blob

import (
	"bytes"
	"context"
	"io"
	"path"
	"sort"
	"strconv"
	"strings"
	"time"
)

// LogChunk is one stored piece of one log file: the attempt (lease fence), the component and
// where in the file the chunk starts.
type LogChunk struct {
	Key       string
	Fence     int64
	Component string
	Offset    int64
	Size      int64
}

// ListLogChunks lists a job's log chunks, by attempt, component and offset.
func ListLogChunks(ctx context.Context, store Store, jobID string) ([]LogChunk, error) {
	prefix := JobPrefix(jobID) + "logs/attempt_"
	objs, err := store.List(ctx, prefix)
	if err != nil {
		return nil, err
	}
	var out []LogChunk
	for _, o := range objs {
		rest := strings.TrimPrefix(o.Key, prefix)
		fenceText, rest, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		fence, err := strconv.ParseInt(fenceText, 10, 64)
		if err != nil {
			continue
		}
		dir, file := path.Split(rest)
		off, err := strconv.ParseInt(strings.TrimSuffix(file, ".log"), 10, 64)
		if err != nil || dir == "" || !strings.HasSuffix(file, ".log") {
			continue
		}
		out = append(out, LogChunk{Key: o.Key, Fence: fence, Component: strings.TrimSuffix(dir, "/"), Offset: off, Size: o.Size})
	}
	sort.Slice(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Fence != b.Fence {
			return a.Fence < b.Fence
		}
		if a.Component != b.Component {
			return a.Component < b.Component
		}
		return a.Offset < b.Offset
	})
	return out, nil
}

// LogLine is one line of a job's log.
type LogLine struct {
	Time      *time.Time `json:"time,omitempty"`
	Component string     `json:"component"`
	Level     string     `json:"level,omitempty"`
	Line      string     `json:"line"`

	at  time.Time // the line's time, or the last time its component showed before it
	lvl string    // its level, or that of the line it continues
	seq int       // its place in its component, to keep file order among equal times
}

// LogQuery selects lines of one attempt of a job's logs.
type LogQuery struct {
	Fence     int64  // 0: the newest attempt
	Component string // "" for all; "envs" takes every envs/<name>
	Since     time.Time
	Search    string
	Level     string // the least severe level shown
	Tail      int    // the last N lines that pass; 0 for all
}

// LogResult is what ReadLogs found.
type LogResult struct {
	Fence      int64
	Fences     []int64
	Components []string
	Lines      []LogLine
	// Ends is where each component's stored log ends (the next byte): a follower reads on
	// from there.
	Ends map[string]int64
}

// levels orders log levels by severity.
var levels = map[string]int{"TRACE": 0, "DEBUG": 1, "INFO": 2, "SUCCESS": 2, "WARN": 3, "WARNING": 3, "ERROR": 4, "CRITICAL": 5, "FATAL": 5}

// ReadLogs reads the lines of one attempt of a job's logs that q asks for, merged across
// components by time (file order within one), oldest first. For a tail it reads chunks from
// the newest back, only as far as it needs.
func ReadLogs(ctx context.Context, store Store, jobID string, q LogQuery) (LogResult, error) {
	chunks, err := ListLogChunks(ctx, store, jobID)
	if err != nil {
		return LogResult{}, err
	}
	res := LogResult{Ends: map[string]int64{}}
	for _, c := range chunks {
		if len(res.Fences) == 0 || res.Fences[len(res.Fences)-1] != c.Fence {
			res.Fences = append(res.Fences, c.Fence)
		}
	}
	if len(res.Fences) == 0 {
		return res, nil
	}
	res.Fence = q.Fence
	if res.Fence == 0 {
		res.Fence = res.Fences[len(res.Fences)-1]
	}
	byComp := map[string][]LogChunk{}
	for _, c := range chunks {
		if c.Fence != res.Fence || !componentWanted(q.Component, c.Component) {
			continue
		}
		byComp[c.Component] = append(byComp[c.Component], c)
	}
	for comp := range byComp {
		res.Components = append(res.Components, comp)
	}
	sort.Strings(res.Components)
	var all []LogLine
	for _, comp := range res.Components {
		cs := byComp[comp]
		last := cs[len(cs)-1]
		res.Ends[comp] = last.Offset + last.Size
		lines, err := readComponent(ctx, store, comp, cs, q)
		if err != nil {
			return LogResult{}, err
		}
		all = append(all, lines...)
	}
	sort.SliceStable(all, func(i, j int) bool {
		if !all[i].at.Equal(all[j].at) {
			return all[i].at.Before(all[j].at)
		}
		if all[i].Component != all[j].Component {
			return all[i].Component < all[j].Component
		}
		return all[i].seq < all[j].seq
	})
	if q.Tail > 0 && len(all) > q.Tail {
		all = all[len(all)-q.Tail:]
	}
	res.Lines = all
	return res, nil
}

func componentWanted(want, comp string) bool {
	return want == "" || want == comp || (want == "envs" && strings.HasPrefix(comp, "envs/"))
}

// readComponent reads one component's lines that pass q: all chunks, or for a tail or a
// since, from the newest chunk back until it has enough.
func readComponent(ctx context.Context, store Store, comp string, cs []LogChunk, q LogQuery) ([]LogLine, error) {
	var kept [][]LogLine // per chunk, newest chunk first
	n := 0
	for i := len(cs) - 1; i >= 0; i-- {
		data, err := getAll(ctx, store, cs[i].Key)
		if err != nil {
			return nil, err
		}
		// A chunk may start mid-line (a line longer than a chunk): that is fine, it is read
		// as it was written.
		lines := ParseLogLines(comp, data)
		var pass []LogLine
		oldest := time.Time{}
		for _, l := range lines {
			if !l.at.IsZero() && (oldest.IsZero() || l.at.Before(oldest)) {
				oldest = l.at
			}
			if q.passes(l) {
				pass = append(pass, l)
			}
		}
		kept = append(kept, pass)
		n += len(pass)
		// Older chunks cannot add to the last Tail lines (every component's share of them is
		// within its own last Tail), nor to lines since Since once this chunk began before it.
		if q.Tail > 0 && n >= q.Tail {
			break
		}
		if !q.Since.IsZero() && !oldest.IsZero() && oldest.Before(q.Since) {
			break
		}
	}
	var out []LogLine
	seq := 0
	for i := len(kept) - 1; i >= 0; i-- {
		for _, l := range kept[i] {
			l.seq = seq
			seq++
			out = append(out, l)
		}
	}
	return out, nil
}

func getAll(ctx context.Context, store Store, key string) ([]byte, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	return io.ReadAll(rc)
}

func (q LogQuery) passes(l LogLine) bool {
	if !q.Since.IsZero() && (l.at.IsZero() || l.at.Before(q.Since)) {
		return false
	}
	if q.Level != "" {
		lv := l.lvl
		if lv == "" {
			lv = "INFO"
		}
		if levels[lv] < levels[strings.ToUpper(q.Level)] {
			return false
		}
	}
	if q.Search != "" && !strings.Contains(strings.ToLower(l.Line), strings.ToLower(q.Search)) {
		return false
	}
	return true
}

// Passes reports whether a line passes q's filters (for a follower's new lines).
func (q LogQuery) Passes(l LogLine) bool {
	return componentWanted(q.Component, l.Component) && q.passes(l)
}

// ParseLogLines splits whole lines of a log and reads what each says of itself: a leading RFC
// 3339 time and a level word after it ("2026-11-22T10:00:00Z INFO step 3"). A line without a
// time continues the line before it (a traceback): it takes that line's time and level for
// ordering and filtering.
func ParseLogLines(component string, data []byte) []LogLine {
	var out []LogLine
	var last time.Time
	lastLevel := ""
	for _, raw := range bytes.Split(bytes.TrimRight(data, "\n"), []byte{'\n'}) {
		text := strings.TrimRight(string(raw), "\r")
		if text == "" {
			continue
		}
		l := LogLine{Component: component, Line: text, at: last, lvl: lastLevel}
		first, rest, _ := strings.Cut(text, " ")
		if t, err := time.Parse(time.RFC3339Nano, first); err == nil {
			t = t.UTC()
			l.Time, l.at, last = &t, t, t
			l.lvl, lastLevel = "", ""
			word, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
			if _, ok := levels[strings.ToUpper(strings.Trim(word, "[]:|"))]; ok {
				l.Level = strings.ToUpper(strings.Trim(word, "[]:|"))
				l.lvl, lastLevel = l.Level, l.Level
			}
		}
		out = append(out, l)
	}
	return out
}
