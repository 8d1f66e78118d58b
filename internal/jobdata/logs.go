package jobdata

import (
	"bytes"
	"context"
	"io"
	"path"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// LogChunk is one stored piece of one log file: the attempt (lease fence), the component and
// where in the file the chunk starts. Modified is when it was last written, which dates lines
// that carry only a time of day.
type LogChunk struct {
	Key       string
	Fence     int64
	Component string
	Offset    int64
	Size      int64
	Modified  time.Time
}

// ListLogChunks lists a job's log chunks, by attempt, component and offset.
func ListLogChunks(ctx context.Context, store blob.Store, jobID string) ([]LogChunk, error) {
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
		out = append(out, LogChunk{Key: o.Key, Fence: fence, Component: strings.TrimSuffix(dir, "/"), Offset: off, Size: o.Size, Modified: o.Modified})
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

// LogLine is one line of a job's log, its colour codes removed.
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
	Component string // "" for all; "envs" takes every envs/..., "envs/train" every envs/train/...
	Since     time.Time
	Search    string
	// Pattern, when set, is what a line must match instead of containing Search.
	Pattern *regexp.Regexp
	Level   string // the least severe level shown
	Tail    int    // the last N lines that pass; 0 for all
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

// levels orders log levels by severity: loguru's (prime-rl: TRACE … SUCCESS … CRITICAL) and
// Python logging's (vLLM).
var levels = map[string]int{"TRACE": 0, "DEBUG": 1, "INFO": 2, "SUCCESS": 2, "WARN": 3, "WARNING": 3, "ERROR": 4, "CRITICAL": 5, "FATAL": 5}

// ReadLogs reads the lines of one attempt of a job's logs that q asks for, merged across
// components by time (file order within one), oldest first. For a tail it reads chunks from
// the newest back, only as far as it needs.
func ReadLogs(ctx context.Context, store blob.Store, jobID string, q LogQuery) (LogResult, error) {
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
	return want == "" || want == comp || ((want == "envs" || want == "envs/train" || want == "envs/eval") && strings.HasPrefix(comp, want+"/"))
}

// readComponent reads one component's lines that pass q: all chunks, or for a tail or a
// since, from the newest chunk back until it has enough.
func readComponent(ctx context.Context, store blob.Store, comp string, cs []LogChunk, q LogQuery) ([]LogLine, error) {
	var kept [][]LogLine // per chunk, newest chunk first
	n := 0
	for i := len(cs) - 1; i >= 0; i-- {
		data, err := getAll(ctx, store, cs[i].Key)
		if err != nil {
			return nil, err
		}
		// A chunk may start mid-line (a line longer than a chunk): that is fine, it is read
		// as it was written.
		lines := ParseLogLines(comp, data, cs[i].Modified)
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

func getAll(ctx context.Context, store blob.Store, key string) ([]byte, error) {
	rc, err := store.Get(ctx, key)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	// An agent writes chunks of LogChunkBytes; no more than a few times that is read.
	return io.ReadAll(io.LimitReader(rc, 4*LogChunkBytes))
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
	if q.Pattern != nil {
		return q.Pattern.MatchString(l.Line)
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

// ansi matches terminal control sequences — colour and style codes, which loguru writes even
// into files; cursor codes (`\x1b[?25l`) progress bars write; OSC titles and links — and
// other escapes.
var ansi = regexp.MustCompile(`\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(\x07|\x1b\\)|\x1b[@-Z\\-_]`)

// StripANSI removes terminal colour codes.
func StripANSI(s string) string {
	if !strings.Contains(s, "\x1b") {
		return s
	}
	return ansi.ReplaceAllString(s, "")
}

// vllmLine is Python logging as vLLM configures it: `INFO 08-21 14:03:07 [file.py:12] ...`,
// possibly after a process prefix such as `(APIServer pid=12) `.
var vllmLine = regexp.MustCompile(`^(?:\([^)]*\) )?(DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL) (\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)`)

// ParseLogLines splits whole lines of a log and reads what each says of itself, in the
// formats the pipeline's programs write:
//
//   - prime-rl's loguru lines: `HH:mm:ss   LEVEL message` with colour codes (trainer,
//     orchestrator, environment servers, the launcher);
//   - vLLM's: `LEVEL MM-DD HH:mm:ss [file:line] message` (the inference server);
//   - an RFC 3339 time and a level word: `2026-11-22T10:00:00Z INFO message` (the agent).
//
// Colour codes are removed. Lines with a time of day only are dated from anchor, the time
// the chunk was written (UTC: the agent runs pipelines with TZ=UTC), going back a day
// wherever the clock goes backwards. A line without a time continues the line before it (a
// traceback): it takes that line's time and level for ordering and filtering.
func ParseLogLines(component string, data []byte, anchor time.Time) []LogLine {
	var out []LogLine
	var clocks []int // per line: seconds of the day for clock-only times, -1 otherwise
	for _, raw := range bytes.Split(bytes.TrimRight(data, "\n"), []byte{'\n'}) {
		text := StripANSI(strings.TrimRight(string(raw), "\r"))
		if strings.TrimSpace(text) == "" {
			continue
		}
		l := LogLine{Component: component, Line: text}
		clock := -1
		if t, lvl, ok := parseRFC3339(text); ok {
			t = t.UTC()
			l.Time, l.Level = &t, lvl
		} else if sec, lvl, ok := parseLoguru(text); ok {
			clock, l.Level = sec, lvl
		} else if m := vllmLine.FindStringSubmatch(text); m != nil {
			mon, _ := strconv.Atoi(m[2])
			day, _ := strconv.Atoi(m[3])
			h, _ := strconv.Atoi(m[4])
			mi, _ := strconv.Atoi(m[5])
			s, _ := strconv.Atoi(m[6])
			y := anchor.UTC().Year()
			t := time.Date(y, time.Month(mon), day, h, mi, s, 0, time.UTC)
			if t.After(anchor.Add(24 * time.Hour)) { // December's lines read in January
				t = t.AddDate(-1, 0, 0)
			}
			l.Time, l.Level = &t, m[1]
			if l.Level == "WARN" {
				l.Level = "WARNING"
			}
		}
		out = append(out, l)
		clocks = append(clocks, clock)
	}
	dateClockTimes(out, clocks, anchor)
	var last time.Time
	lastLevel := ""
	for i := range out {
		l := &out[i]
		if l.Time != nil {
			last, lastLevel = *l.Time, l.Level
			l.at, l.lvl = last, l.Level
			continue
		}
		l.at, l.lvl = last, lastLevel
	}
	return out
}

// dateClockTimes gives the lines that carry only a time of day their date. The newest is
// dated nearest the anchor (the time its chunk was written: the line is at most minutes
// older, or a little newer where clocks differ), so 00:01 in a chunk written at 23:58 is the
// next day's. Each earlier line takes the day of the line after it, or the day before where
// its clock is more than 12 hours later than that line's (it was written before midnight);
// a clock a little later than the next line's is two processes writing one file, or a clock
// stepped back, not a day.
func dateClockTimes(lines []LogLine, clocks []int, anchor time.Time) {
	const halfDay = 12 * 3600
	anchor = anchor.UTC()
	if anchor.IsZero() {
		anchor = time.Now().UTC()
	}
	day := time.Date(anchor.Year(), anchor.Month(), anchor.Day(), 0, 0, 0, 0, time.UTC)
	anchorClock := anchor.Hour()*3600 + anchor.Minute()*60 + anchor.Second()
	nextClock, newest := anchorClock, true
	for i := len(lines) - 1; i >= 0; i-- {
		c := clocks[i]
		if c < 0 {
			if lines[i].Time != nil {
				t := lines[i].Time.UTC()
				day = time.Date(t.Year(), t.Month(), t.Day(), 0, 0, 0, 0, time.UTC)
				nextClock, newest = t.Hour()*3600+t.Minute()*60+t.Second(), false
			}
			continue
		}
		switch {
		case newest && c-anchorClock > halfDay:
			day = day.AddDate(0, 0, -1)
		case newest && anchorClock-c > halfDay:
			day = day.AddDate(0, 0, 1)
		case !newest && c-nextClock > halfDay:
			day = day.AddDate(0, 0, -1)
		}
		newest = false
		t := day.Add(time.Duration(c) * time.Second)
		lines[i].Time = &t
		nextClock = c
	}
}

func parseRFC3339(text string) (time.Time, string, bool) {
	first, rest, _ := strings.Cut(text, " ")
	if len(first) < 20 || first[4] != '-' {
		return time.Time{}, "", false
	}
	t, err := time.Parse(time.RFC3339Nano, first)
	if err != nil {
		return time.Time{}, "", false
	}
	word, _, _ := strings.Cut(strings.TrimSpace(rest), " ")
	word = strings.ToUpper(strings.Trim(word, "[]:|"))
	if _, ok := levels[word]; !ok {
		word = ""
	}
	return t, word, true
}

// parseLoguru reads `HH:mm:ss LEVEL` at the start of a line (the level right-aligned to 7),
// after the `[trainer0]:` that torchrun puts before each line it tees into trainer.log.
func parseLoguru(text string) (int, string, bool) {
	text = stripRankPrefix(text)
	if len(text) < 10 || text[2] != ':' || text[5] != ':' || text[8] != ' ' {
		return 0, "", false
	}
	h, err1 := strconv.Atoi(text[0:2])
	m, err2 := strconv.Atoi(text[3:5])
	s, err3 := strconv.Atoi(text[6:8])
	if err1 != nil || err2 != nil || err3 != nil || h > 23 || m > 59 || s > 60 {
		return 0, "", false
	}
	word, _, _ := strings.Cut(strings.TrimLeft(text[9:], " "), " ")
	if _, ok := levels[word]; !ok {
		return 0, "", false
	}
	return h*3600 + m*60 + s, word, true
}

// stripRankPrefix drops torchrun's `[<role><rank>]:` prefix (torch.distributed.elastic's
// tee, which prime-rl's launcher uses for trainer.log), if the line has one.
func stripRankPrefix(text string) string {
	if len(text) < 4 || text[0] != '[' {
		return text
	}
	end := strings.Index(text, "]:")
	if end < 2 || end > 32 || strings.ContainsAny(text[1:end], " []") {
		return text
	}
	if c := text[end-1]; c < '0' || c > '9' {
		return text
	}
	return text[end+2:]
}
