package api

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

func (s *Server) getJobLogs(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	lp := logParamsOf(r.URL.Query())
	if r.URL.Query().Get("follow") != "true" && !wantsStream(r) {
		page, prob := s.jobLogs(r, j, lp)
		if prob != nil {
			writeProblem(w, r, prob)
			return
		}
		writeJSON(w, http.StatusOK, page)
		return
	}
	if !s.storeReady(w, r) {
		return
	}
	lq, prob := lp.query()
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	if pos, ok := decodeLogPosition(r.Header.Get("Last-Event-ID")); ok {
		s.followLogs(w, r, j.ID, lq, pos, false)
		return
	}
	res, err := jobdata.ReadLogs(r.Context(), s.cfg.Store, j.ID, lq)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	pos := logPosition{fence: res.Fence, ends: res.Ends}
	s.followLogs(w, r, j.ID, lq, pos, true, res.Lines...)
}

// logParams are what GET /v1/jobs/{id}/logs asks for, as its query says it.
type logParams struct {
	attempt                         int
	component, search, level, since string
	regex                           bool
	tail                            int
}

// logParamsOf reads logParams from a query that validation has checked.
func logParamsOf(q url.Values) logParams {
	return logParams{attempt: intParam(q, "attempt", 0), component: q.Get("component"), search: q.Get("search"),
		level: q.Get("level"), since: q.Get("since"), regex: q.Get("regex") == "true", tail: intParam(q, "tail_lines", 100)}
}

// query is the read of a job's logs p stands for; a search that is not a regular expression,
// or a since that is neither a time nor a duration, is refused.
func (p logParams) query() (jobdata.LogQuery, *Problem) {
	lq := jobdata.LogQuery{Fence: int64(p.attempt), Component: p.component, Search: p.search, Level: p.level, Tail: p.tail}
	if p.regex && lq.Search != "" {
		re, err := regexp.Compile(lq.Search)
		if err != nil {
			prob := newProblem(http.StatusBadRequest, "invalid-parameter", "search is not a regular expression: "+err.Error())
			prob.Errors = []FieldError{{Parameter: "search", Message: err.Error()}}
			return lq, prob
		}
		lq.Pattern = re
	}
	if since := p.since; since != "" {
		if d, err := time.ParseDuration(since); err == nil {
			lq.Since = time.Now().Add(-d)
		} else if t, err := time.Parse(time.RFC3339Nano, since); err == nil {
			lq.Since = t
		} else {
			prob := newProblem(http.StatusBadRequest, "invalid-parameter", "since is a time such as 2026-11-22T10:00:00Z or a duration such as 10m")
			prob.Errors = []FieldError{{Parameter: "since", Message: err.Error()}}
			return lq, prob
		}
	}
	return lq, nil
}

// jobLogs is a page of the lines of one of the caller's jobs' logs (the tail of one attempt).
func (s *Server) jobLogs(r *http.Request, j *job.Job, p logParams) (*wire.LogPage, *Problem) {
	if prob := s.needStore(); prob != nil {
		return nil, prob
	}
	lq, prob := p.query()
	if prob != nil {
		return nil, prob
	}
	res, err := jobdata.ReadLogs(r.Context(), s.cfg.Store, j.ID, lq)
	if err != nil {
		return nil, s.failure(r, err)
	}
	page := wire.LogPage{Attempt: res.Fence, Attempts: res.Fences, Components: res.Components, Items: res.Lines}
	if page.Items == nil {
		page.Items = []jobdata.LogLine{}
	}
	if page.Attempts == nil {
		page.Attempts = []int64{}
	}
	return &page, nil
}

// logPosition is where a log follower is: the attempt, and how far into each component's
// file it has read. It travels as the SSE event id, so a reconnect resumes.
type logPosition struct {
	fence int64
	ends  map[string]int64
}

func (p logPosition) encode() string {
	comps := make([]string, 0, len(p.ends))
	for c := range p.ends {
		comps = append(comps, c)
	}
	sort.Strings(comps)
	var b strings.Builder
	b.WriteString(strconv.FormatInt(p.fence, 10))
	for _, c := range comps {
		b.WriteString(";" + c + "=" + strconv.FormatInt(p.ends[c], 10))
	}
	return base64.RawURLEncoding.EncodeToString([]byte(b.String()))
}

func decodeLogPosition(id string) (logPosition, bool) {
	raw, err := base64.RawURLEncoding.DecodeString(id)
	if id == "" || err != nil {
		return logPosition{}, false
	}
	parts := strings.Split(string(raw), ";")
	fence, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil {
		return logPosition{}, false
	}
	p := logPosition{fence: fence, ends: map[string]int64{}}
	for _, kv := range parts[1:] {
		c, n, ok := strings.Cut(kv, "=")
		off, err := strconv.ParseInt(n, 10, 64)
		if !ok || err != nil {
			return logPosition{}, false
		}
		p.ends[c] = off
	}
	return p, true
}

// followLogs streams the tail, then each new line while the job runs. A newer attempt (the
// job resumed elsewhere) is followed from its start, announced by an `attempt` event.
func (s *Server) followLogs(w http.ResponseWriter, r *http.Request, id string, q jobdata.LogQuery, pos logPosition, fresh bool, tail ...jobdata.LogLine) {
	ctx, cancel, ok := s.openStream(w, r)
	if !ok {
		return
	}
	defer cancel()
	out := startSSE(w)
	for _, l := range tail {
		if out.send(pos.encode(), "log", l) != nil {
			return
		}
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	// Storage is read when the agent says it wrote more log (its heartbeat's log_bytes, sent as
	// soon as it did), when the job changes state or attempt, and every LogRecheck regardless
	// (an agent that does not say, a report lost); the job, in Redis, is looked at every second.
	type mark struct {
		bytes   int64
		attempt int
		status  job.Status
	}
	var seen mark
	var lastRead time.Time
	for {
		j, err := s.cfg.Queue.Get(ctx, id)
		ended := err != nil || j.Status.Terminal()
		var now mark
		if j != nil {
			now = mark{j.LogBytes, j.Attempt, j.Status}
		}
		if !ended && now == seen && time.Since(lastRead) < s.cfg.LogRecheck {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				out.keepAlive()
			}
			continue
		}
		seen, lastRead = now, time.Now()
		lines, next, err := s.readOn(ctx, id, q, pos, ended)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Error("log stream", "job", id, "err", err)
			}
			return
		}
		if next.fence != pos.fence {
			if out.send(next.encode(), "attempt", map[string]int64{"attempt": next.fence}) != nil {
				return
			}
		}
		pos = next
		for _, l := range lines {
			if out.send(pos.encode(), "log", l) != nil {
				return
			}
		}
		if ended && len(lines) == 0 {
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			out.keepAlive()
		}
	}
}

// readOn reads what each component gained past pos: whole lines only, unless the job has
// ended (then the rest too).
func (s *Server) readOn(ctx context.Context, id string, q jobdata.LogQuery, pos logPosition, ended bool) ([]jobdata.LogLine, logPosition, error) {
	chunks, err := jobdata.ListLogChunks(ctx, s.cfg.Store, id)
	if err != nil {
		return nil, pos, err
	}
	newest := pos.fence
	for _, c := range chunks {
		newest = max(newest, c.Fence)
	}
	next := logPosition{fence: pos.fence, ends: map[string]int64{}}
	for c, e := range pos.ends {
		next.ends[c] = e
	}
	if newest != pos.fence {
		next = logPosition{fence: newest, ends: map[string]int64{}}
	}
	var out []jobdata.LogLine
	for _, c := range chunks {
		if c.Fence != next.fence || c.Offset+c.Size <= next.ends[c.Component] || !strings.HasPrefix(c.Component+"/", firstPart(q.Component)) {
			continue
		}
		rc, err := s.cfg.Store.Get(ctx, c.Key)
		if err != nil {
			return nil, pos, err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return nil, pos, err
		}
		from := next.ends[c.Component] - c.Offset
		if from < 0 || from > int64(len(data)) {
			from = 0
		}
		data = data[from:]
		if !ended {
			if i := strings.LastIndexByte(string(data), '\n'); i >= 0 {
				data = data[:i+1]
			} else {
				data = nil
			}
		}
		next.ends[c.Component] = c.Offset + from + int64(len(data))
		for _, l := range jobdata.ParseLogLines(c.Component, data, c.Modified) {
			if q.Passes(l) {
				out = append(out, l)
			}
		}
	}
	return out, next, nil
}

// firstPart is the prefix a component filter matches ("envs" → "envs/", "trainer" →
// "trainer/", "" → "").
func firstPart(component string) string {
	if component == "" {
		return ""
	}
	return component + "/"
}
