package api

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// Server-Sent Events for what changes while a job runs: its events and its logs.

// wantsStream reports whether the client asked for an event stream.
func wantsStream(r *http.Request) bool {
	return strings.Contains(r.Header.Get("Accept"), "text/event-stream")
}

// sse writes one Server-Sent Events stream.
type sse struct {
	w       http.ResponseWriter
	flusher http.Flusher
	wrote   time.Time
}

func startSSE(w http.ResponseWriter) *sse {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // a proxy must not hold the stream back
	w.WriteHeader(http.StatusOK)
	s := &sse{w: w, wrote: time.Now()}
	s.flusher, _ = w.(http.Flusher)
	s.flush()
	return s
}

func (s *sse) flush() {
	if s.flusher != nil {
		s.flusher.Flush()
	}
}

// send writes one event: its id (where a reconnect resumes), its name and its data as JSON.
func (s *sse) send(id, name string, data any) error {
	b, err := json.Marshal(data)
	if err != nil {
		return err
	}
	if id != "" {
		fmt.Fprintf(s.w, "id: %s\n", id)
	}
	if name != "" {
		fmt.Fprintf(s.w, "event: %s\n", name)
	}
	if _, err := fmt.Fprintf(s.w, "data: %s\n\n", b); err != nil {
		return err
	}
	s.wrote = time.Now()
	s.flush()
	return nil
}

// keepAlive writes a comment when nothing was written for a while, so proxies and clients
// keep the connection.
func (s *sse) keepAlive() {
	if time.Since(s.wrote) >= 15*time.Second {
		fmt.Fprint(s.w, ": keep-alive\n\n")
		s.wrote = time.Now()
		s.flush()
	}
}

// DefaultMaxStreams is how many event and log streams one organization may hold open at once.
const DefaultMaxStreams = 20

// openStream takes a place for a stream among the organization's (Config.MaxStreams) and bounds
// it by the deployment's StreamLimit and by its token: it ends when the token expires (with the
// verifier's leeway) or is revoked, looked at every RevocationCheck, when it loses its place,
// and when the request ends. A stream opened with a token must not outlive it. Without a place
// it answers 429 with Retry-After and reports false.
func (s *Server) openStream(w http.ResponseWriter, r *http.Request) (context.Context, context.CancelFunc, bool) {
	p := principal(r)
	base, cancel := context.WithCancel(r.Context())
	ctx, stops := base, []context.CancelFunc{cancel}
	bound := func(c context.Context, stop context.CancelFunc) { ctx, stops = c, append(stops, stop) }
	stop := func() {
		for _, stop := range stops {
			stop()
		}
	}
	lease := max(3*s.cfg.RevocationCheck, 15*time.Second)
	name := ""
	if s.cfg.MaxStreams > 0 {
		b := make([]byte, 12)
		_, _ = rand.Read(b)
		name = hex.EncodeToString(b)
		ok, err := s.cfg.Queue.OpenStream(r.Context(), p.Org, name, s.cfg.MaxStreams, lease)
		if err != nil {
			stop()
			s.internalError(w, r, err)
			return nil, nil, false
		}
		if !ok {
			stop()
			prob := newProblem(http.StatusTooManyRequests, "limit-streams", fmt.Sprintf(
				"organization %s has %d event and log streams open, its limit: close one (or read without follow) and try again", p.Org, s.cfg.MaxStreams))
			prob.retryAfter = int(lease.Seconds())
			writeProblem(w, r, prob)
			return nil, nil, false
		}
		stops = append(stops, func() {
			cctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 5*time.Second)
			defer cancel()
			_ = s.cfg.Queue.CloseStream(cctx, p.Org, name)
		})
	}
	if s.cfg.StreamLimit > 0 {
		bound(context.WithTimeout(ctx, s.cfg.StreamLimit))
	}
	if !p.ExpiresAt.IsZero() {
		bound(context.WithDeadline(ctx, p.ExpiresAt.Add(auth.Leeway)))
	}
	if p.TokenID != "" || name != "" {
		go func() {
			t := time.NewTicker(s.cfg.RevocationCheck)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					if p.TokenID != "" {
						if revoked, err := s.cfg.Queue.TokenRevoked(ctx, p.TokenID); err == nil && revoked {
							s.cfg.Logger.Info("stream ended: its token was revoked", "jti", p.TokenID)
							cancel() // ends ctx, derived from base
							return
						}
					}
					if name != "" {
						if kept, err := s.cfg.Queue.RenewStream(ctx, p.Org, name, lease); err == nil && !kept {
							s.cfg.Logger.Info("stream ended: it lost its place among its organization's", "org", p.Org)
							cancel()
							return
						}
					}
				}
			}
		}()
	}
	return ctx, stop, true
}

// streamEvents sends a job's events after `after`, then new ones as they come, until the job
// has ended and every event is sent.
func (s *Server) streamEvents(w http.ResponseWriter, r *http.Request, id string, after int64) {
	ctx, cancel, ok := s.openStream(w, r)
	if !ok {
		return
	}
	defer cancel()
	out := startSSE(w)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		evs, err := s.cfg.Queue.Events(ctx, id, after, 100)
		if err != nil {
			if ctx.Err() == nil {
				s.cfg.Logger.Error("event stream", "job", id, "err", err)
			}
			return
		}
		for _, e := range evs {
			if out.send(strconv.FormatInt(e.Seq, 10), e.Type, e) != nil {
				return
			}
			after = e.Seq
		}
		if len(evs) == 100 {
			continue
		}
		if len(evs) == 0 {
			j, err := s.cfg.Queue.Get(ctx, id)
			if err != nil || j.Status.Terminal() {
				// Ended: one more look catches an event written with the last state change.
				if more, _ := s.cfg.Queue.Events(ctx, id, after, 100); len(more) == 0 {
					return
				}
				continue
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			out.keepAlive()
		}
	}
}
