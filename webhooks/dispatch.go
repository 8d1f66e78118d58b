package webhooks

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/lifecycle"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
)

// Message is what a delivery's body holds: the Standard Webhooks payload shape.
type Message struct {
	Type      string    `json:"type"`
	Timestamp time.Time `json:"timestamp"`
	Data      any       `json:"data"`
}

// JobEvent is the data of a job event: the event as it happened (its per-job sequence number,
// the job's status then, a detail), and the job as it stands when the delivery is sent —
// never with secret values, which a job never holds. The job is read when the delivery is
// sent rather than kept with it, so a delivery's record stays small whatever the job's size.
type JobEvent struct {
	JobID    string   `json:"job_id"`
	Sequence int64    `json:"sequence"`
	Status   string   `json:"status"`
	Detail   string   `json:"detail,omitempty"`
	Job      *job.Job `json:"job,omitempty"`
}

// event is what the outbox (or the service itself) says happened, stored once as ev:{msg}
// for all its deliveries.
type event struct {
	msg, org, typ, jobID string
	seq                  int64
	status, detail       string
	at                   time.Time
	data                 []byte // an event not about a job: its data, JSON
}

// Stats counts what dispatching did.
type Stats struct {
	Events, Deliveries, Delivered, Failed int
}

// Idle reports whether the round found nothing to do.
func (s Stats) Idle() bool { return s.Events == 0 && s.Deliveries == 0 }

// tally adds up the Stats of deliveries that end on their own goroutines.
type tally struct {
	mu sync.Mutex
	st Stats
	wg sync.WaitGroup // the deliveries started and not yet ended
}

func (t *tally) add(events, deliveries int) {
	t.mu.Lock()
	t.st.Events += events
	t.st.Deliveries += deliveries
	t.mu.Unlock()
}

func (t *tally) ended(status string) {
	t.mu.Lock()
	switch status {
	case "delivered":
		t.st.Delivered++
	case "failed":
		t.st.Failed++
	}
	t.mu.Unlock()
}

func (t *tally) stats() Stats {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.st
}

// Dispatcher is the service's dispatch loop as a lifecycle.Service, looking for work every
// interval when there was none.
func (s *Service) Dispatcher(interval time.Duration) lifecycle.Service {
	return lifecycle.Func(func(ctx context.Context) error {
		s.Run(ctx, interval)
		return nil
	})
}

// Run dispatches until ctx ends: it takes more due deliveries whenever a sender is free, and
// checks for work every interval when there was none. Deliveries under way when ctx ends are
// left to their lease, and taken again when it runs out.
func (s *Service) Run(ctx context.Context, interval time.Duration) {
	var t tally
	defer t.wg.Wait()
	for ctx.Err() == nil {
		events, started, err := s.launch(ctx, ctx, &t)
		if err != nil && ctx.Err() == nil {
			s.cfg.Logger.Warn("webhook dispatch", "err", err)
		}
		if (events == 0 && started == 0) || err != nil {
			select {
			case <-ctx.Done():
			case <-s.freed:
			case <-time.After(interval):
			}
		}
	}
}

// DrainFor dispatches until there is nothing to do or budget has passed (a scheduled Lambda's
// run), then waits for the deliveries it started, which run under ctx, not the budget.
func (s *Service) DrainFor(ctx context.Context, budget time.Duration) (Stats, error) {
	taking, cancel := context.WithTimeout(ctx, budget)
	defer cancel()
	var t tally
	var err error
	for taking.Err() == nil {
		var events, started int
		events, started, err = s.launch(taking, ctx, &t)
		if err != nil {
			if taking.Err() != nil {
				err = nil
			}
			break
		}
		if events == 0 && started == 0 {
			if len(s.slots) == 0 {
				break // nothing to take and nothing under way
			}
			select {
			case <-taking.Done():
			case <-s.freed:
			}
		}
	}
	t.wg.Wait()
	return t.stats(), err
}

// DispatchOnce turns the outbox's new events into deliveries, then sends the deliveries that
// are due and that there are free senders for, and waits for them.
func (s *Service) DispatchOnce(ctx context.Context) (Stats, error) {
	var t tally
	_, _, err := s.launch(ctx, ctx, &t)
	t.wg.Wait()
	return t.stats(), err
}

// launch fans out the outbox's new events, takes as many due deliveries as there are free
// senders (no more than OrgConcurrency of an organization's at once, over all dispatchers),
// and starts sending them under sendCtx. It reports the events read and deliveries started.
func (s *Service) launch(ctx, sendCtx context.Context, t *tally) (int, int, error) {
	events, err := s.readOutbox(ctx)
	t.add(events, 0)
	if err != nil {
		return events, 0, err
	}
	free := cap(s.slots) - len(s.slots)
	if free == 0 {
		return events, 0, nil
	}
	ids, err := s.call(ctx, "take", s.cfg.Now(), map[string]any{"lease_ms": (s.cfg.Timeout + 30*time.Second).Milliseconds(),
		"want": free, "cap": s.cfg.OrgConcurrency}).StringSlice()
	if err != nil {
		return events, 0, fmt.Errorf("webhooks: take: %w", err)
	}
	t.add(0, len(ids))
	bodies := &bodies{s: s}
	for _, id := range ids {
		s.slots <- struct{}{}
		t.wg.Add(1)
		go func() {
			defer func() {
				<-s.slots
				t.wg.Done()
				select {
				case s.freed <- struct{}{}:
				default:
				}
			}()
			status, err := s.deliver(sendCtx, id, bodies)
			if err != nil && sendCtx.Err() == nil {
				s.cfg.Logger.Warn("webhook delivery bookkeeping", "delivery", id, "err", err)
			}
			t.ended(status)
		}()
	}
	return events, len(ids), nil
}

// readOutbox fans out the outbox events this consumer has not handled: ones another
// dispatcher read and never acknowledged (it died), then new ones. A delivery's id is a hash of
// its message and endpoint, so an event fanned out twice (acknowledged late) makes nothing
// twice.
func (s *Service) readOutbox(ctx context.Context) (int, error) {
	events, err := s.outbox.Read(ctx, s.cfg.Consumer, 200)
	if err != nil {
		return 0, fmt.Errorf("webhooks: %w", err)
	}
	entries := make([]string, 0, len(events))
	for _, e := range events {
		if _, err := s.makeDeliveries(ctx, eventOf(e), "", ""); err != nil {
			return 0, err
		}
		entries = append(entries, e.Entry)
	}
	if err := s.outbox.Ack(ctx, entries...); err != nil {
		return 0, fmt.Errorf("webhooks: %w", err)
	}
	return len(events), nil
}

// eventOf is the event an outbox event is; its message id comes from the outbox entry, so it
// is the same every time the entry is read.
func eventOf(e queue.OutboxEvent) event {
	return event{msg: "msg_" + e.Entry, org: e.Org, typ: e.Type, jobID: e.JobID, seq: e.Seq,
		status: string(e.Status), detail: e.Detail, at: e.Time}
}

func (s *Service) makeDeliveries(ctx context.Context, ev event, only, except string) ([]string, error) {
	ids, err := s.call(ctx, "fanout", s.cfg.Now(), map[string]any{"org": ev.org, "type": ev.typ, "job_id": ev.jobID, "seq": ev.seq,
		"msg": ev.msg, "status": ev.status, "detail": ev.detail, "time": ms(ev.at), "data": ev.data,
		"only": only, "except": except, "keep": s.cfg.KeepDeliveries, "max_pending": s.cfg.MaxPending}).StringSlice()
	if err != nil {
		return nil, fmt.Errorf("webhooks: fan out %s: %w", ev.msg, err)
	}
	return ids, nil
}

// bodies builds the bodies of the deliveries one take started, each event's once, reading
// each job once.
type bodies struct {
	s    *Service
	mu   sync.Mutex
	msgs map[string][]byte
	jobs map[string]*job.Job
}

// body is the body of the message msg: the event, with the job as it stands now.
func (b *bodies) body(ctx context.Context, msg string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if body, ok := b.msgs[msg]; ok {
		return body, nil
	}
	m, err := b.s.rdb.HGetAll(ctx, b.s.k.event(msg)).Result()
	if err != nil {
		return nil, err
	}
	if len(m) == 0 {
		return nil, nil
	}
	var data any = json.RawMessage(m["data"])
	if m["data"] == "" {
		seq, _ := strconv.ParseInt(m["seq"], 10, 64)
		ev := JobEvent{JobID: m["job_id"], Sequence: seq, Status: m["status"], Detail: m["detail"]}
		j, ok := b.jobs[ev.JobID]
		if !ok {
			if j, err = b.s.cfg.Jobs.Get(ctx, ev.JobID); err != nil && !errors.Is(err, job.ErrNotFound) {
				return nil, fmt.Errorf("webhooks: read job %s: %w", ev.JobID, err)
			}
			if b.jobs == nil {
				b.jobs = map[string]*job.Job{}
			}
			b.jobs[ev.JobID] = j
		}
		ev.Job = j
		data = ev
	}
	body, err := json.Marshal(Message{Type: m["type"], Timestamp: fromMS(m["time"]), Data: data})
	if err != nil {
		return nil, err
	}
	if b.msgs == nil {
		b.msgs = map[string][]byte{}
	}
	b.msgs[msg] = body
	return body, nil
}

// deliver makes one attempt at a delivery and records it; it returns the delivery's status.
func (s *Service) deliver(ctx context.Context, id string, bodies *bodies) (string, error) {
	d, err := s.rdb.HGetAll(ctx, s.k.delivery(id)).Result()
	if err != nil {
		return "", err
	}
	if len(d) == 0 {
		return "", nil // expired or removed; nothing to do
	}
	ep, err := s.rdb.HGetAll(ctx, s.k.endpoint(d["ep"])).Result()
	if err != nil {
		return "", err
	}
	if len(ep) == 0 {
		// Deleted, and the deletion stopped before it removed this: finish it.
		return "", s.purge(ctx, d["ep"])
	}
	if ep["enabled"] != "1" && d["force"] != "1" {
		return s.record(ctx, id, d["org"], d["ep"], "skipped", 0, 0, "the endpoint is disabled: "+ep["disabled_reason"], time.Time{})
	}
	secrets, err := s.secrets(d["ep"], ep, s.cfg.Now())
	if err != nil {
		return s.record(ctx, id, d["org"], d["ep"], "failed", 0, 0, err.Error(), time.Time{})
	}
	body := []byte(d["body"]) // deliveries made before events were stored apart carry their body
	if len(body) == 0 {
		if body, err = bodies.body(ctx, d["msg"]); err != nil {
			return "", err
		}
		if body == nil {
			return s.record(ctx, id, d["org"], d["ep"], "failed", 0, 0, "the event is no longer kept", time.Time{})
		}
	}
	code, latency, retryAfter, sendErr := s.send(ctx, ep["url"], d["msg"], body, secrets)
	if ctx.Err() != nil {
		return "", ctx.Err() // shutting down: the take's lease brings it back
	}
	attempts, _ := strconv.Atoi(d["attempts"])
	errText := ""
	if sendErr != nil {
		errText = sendErr.Error()
	}
	switch {
	case sendErr == nil && code >= 200 && code < 300:
		return s.record(ctx, id, d["org"], d["ep"], "delivered", code, latency, "", time.Time{})
	case code == http.StatusGone:
		return s.record(ctx, id, d["org"], d["ep"], "gone", code, latency, "410 Gone: the receiver asks for no more deliveries", time.Time{})
	case attempts >= len(s.cfg.Schedule):
		return s.record(ctx, id, d["org"], d["ep"], "failed", code, latency, errText, time.Time{})
	}
	wait := retryAfter
	if wait <= 0 {
		wait = s.jittered(s.cfg.Schedule[attempts])
	}
	return s.record(ctx, id, d["org"], d["ep"], "retry", code, latency, errText, s.cfg.Now().Add(wait))
}

// send POSTs the body, signed, and reports the status code, the latency, the wait the
// receiver asked for (Retry-After), and an error for anything but a 2xx. The answer's body is
// never read into the error, nor kept: it could be anything the URL reaches, and the delivery
// log is shown to the organization. The error is the status and a fixed hint.
func (s *Service) send(ctx context.Context, url, msgID string, body []byte, secrets []string) (int, time.Duration, time.Duration, error) {
	h, err := webhook.Headers(msgID, s.cfg.Now(), body, secrets...)
	if err != nil {
		return 0, 0, 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, 0, 0, err
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "hostedtrain-webhooks/1")
	began := time.Now()
	resp, err := s.http.Do(req)
	latency := time.Since(began)
	if err != nil {
		return 0, latency, 0, fmt.Errorf("no answer: %w", err)
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so the connection can be reused
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp.StatusCode, latency, 0, nil
	}
	return resp.StatusCode, latency, retryAfter(resp.Header.Get("Retry-After"), s.cfg.Now()), errors.New(failureHint(resp.StatusCode))
}

// failureHint is the error of a delivery answered with code: the status and what usually
// causes it. It is all a user sees of the answer.
func failureHint(code int) string {
	msg := fmt.Sprintf("HTTP %d", code)
	switch {
	case code >= 300 && code < 400:
		return msg + " (redirects are not followed: register the final URL)"
	case code == http.StatusTooManyRequests:
		return msg + " (the receiver asked for fewer deliveries; its Retry-After is honoured)"
	case code == http.StatusUnauthorized || code == http.StatusForbidden:
		return msg + " (the receiver refused the delivery: check that it verifies with the endpoint's current secret)"
	case code >= 400 && code < 500:
		return msg + " (the receiver refused the delivery; its answer's body is not kept: see the receiver's own logs)"
	default:
		return msg + " (the receiver failed; its answer's body is not kept: see the receiver's own logs)"
	}
}

// retryAfter reads a Retry-After header (seconds or an HTTP date), bounded to 1 s..10 h; 0 when
// there is none.
func retryAfter(v string, now time.Time) time.Duration {
	if v == "" {
		return 0
	}
	var d time.Duration
	if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil {
		d = time.Duration(n) * time.Second
	} else if t, err := http.ParseTime(v); err == nil {
		d = t.Sub(now)
	} else {
		return 0
	}
	return min(max(d, time.Second), 10*time.Hour)
}

func (s *Service) jittered(d time.Duration) time.Duration {
	f := 1 + s.cfg.Jitter*(2*rand.Float64()-1)
	return time.Duration(float64(d) * f)
}

// record writes down an attempt; when it disabled the endpoint, it tells the organization's
// other endpoints.
func (s *Service) record(ctx context.Context, id, org, ep, outcome string, code int, latency time.Duration, errText string, next time.Time) (string, error) {
	now := s.cfg.Now()
	codeText := ""
	if code > 0 {
		codeText = strconv.Itoa(code)
	}
	line, _ := json.Marshal(webhook.Attempt{At: now.UTC(), ResponseCode: code, LatencyMS: latency.Milliseconds(), Error: errText})
	nextMS := ""
	if !next.IsZero() {
		nextMS = ms(next)
	}
	reason := fmt.Sprintf("every delivery failed for %s; fix the receiver, then re-enable the endpoint", human(s.cfg.DisableAfter))
	res, err := s.call(context.WithoutCancel(ctx), "record", now, map[string]any{"id": id, "outcome": outcome, "code": codeText,
		"latency_ms": latency.Milliseconds(), "error": errText, "next_at": nextMS, "line": line,
		"disable_after_ms": s.cfg.DisableAfter.Milliseconds(), "disable_reason": reason, "keep_s": int64(s.cfg.Retention.Seconds())}).StringSlice()
	if err != nil {
		return "", fmt.Errorf("webhooks: record %s: %w", id, err)
	}
	if len(res) == 2 && res[1] != "" {
		s.cfg.Logger.Warn("webhook endpoint disabled", "endpoint", ep, "org", org, "reason", res[1])
		if err := s.notifyDisabled(ctx, org, ep, res[1]); err != nil {
			return res[0], err
		}
	}
	return res[0], nil
}

// notifyDisabled sends webhook.endpoint_disabled to the organization's other endpoints.
func (s *Service) notifyDisabled(ctx context.Context, org, ep, reason string) error {
	m, err := s.rdb.HGetAll(ctx, s.k.endpoint(ep)).Result()
	if err != nil {
		return err
	}
	now := s.cfg.Now().UTC()
	data, err := json.Marshal(map[string]any{"webhook_id": ep, "url": m["url"], "reason": reason, "disabled_at": now})
	if err != nil {
		return err
	}
	ev := event{msg: "msg_" + randomHex(12), org: org, typ: webhook.EventEndpointDisabled, at: now, data: data}
	_, err = s.makeDeliveries(context.WithoutCancel(ctx), ev, "", ep)
	return err
}

func human(d time.Duration) string {
	if d%(24*time.Hour) == 0 {
		n := int(d / (24 * time.Hour))
		if n == 1 {
			return "1 day"
		}
		return fmt.Sprintf("%d days", n)
	}
	return d.String()
}

// Deliveries lists an endpoint's deliveries, newest first, limit at a time; cursor is the
// previous page's next cursor ("" for the first).
func (s *Service) Deliveries(ctx context.Context, org, ep, cursor string, limit int) ([]*webhook.Delivery, string, error) {
	if _, err := s.Get(ctx, org, ep); err != nil {
		return nil, "", err
	}
	max, afterID := "+inf", ""
	if cursor != "" {
		at, id, ok := strings.Cut(cursor, ".")
		if _, err := strconv.ParseInt(at, 10, 64); !ok || err != nil {
			return nil, "", &webhook.InvalidError{Field: "cursor", Msg: "cursor is not one this endpoint gave"}
		}
		max, afterID = at, id
	}
	zs, err := s.rdb.ZRevRangeByScoreWithScores(ctx, s.k.log(ep), &redis.ZRangeBy{Max: max, Min: "-inf", Count: int64(limit + 64)}).Result()
	if err != nil {
		return nil, "", err
	}
	var out []*webhook.Delivery
	next := ""
	for _, z := range zs {
		id := z.Member.(string)
		if afterID != "" && strconv.FormatInt(int64(z.Score), 10) == max && id >= afterID {
			continue // on the previous page
		}
		if len(out) == limit {
			last := out[len(out)-1]
			next = strconv.FormatInt(last.CreatedAt.UnixMilli(), 10) + "." + last.ID
			break
		}
		d, err := s.delivery(ctx, id)
		if err != nil {
			return nil, "", err
		}
		if d != nil {
			out = append(out, d)
		}
	}
	return out, next, nil
}

// Delivery returns one of an endpoint's deliveries.
func (s *Service) Delivery(ctx context.Context, org, ep, id string) (*webhook.Delivery, error) {
	if _, err := s.Get(ctx, org, ep); err != nil {
		return nil, err
	}
	d, err := s.delivery(ctx, id)
	if err != nil {
		return nil, err
	}
	if d == nil || d.WebhookID != ep {
		return nil, webhook.ErrNotFound
	}
	return d, nil
}

func (s *Service) delivery(ctx context.Context, id string) (*webhook.Delivery, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.delivery(id)).Result()
	if err != nil || len(m) == 0 {
		return nil, err
	}
	seq, _ := strconv.ParseInt(m["seq"], 10, 64)
	attempts, _ := strconv.Atoi(m["attempts"])
	code, _ := strconv.Atoi(m["last_code"])
	lat, _ := strconv.ParseInt(m["last_latency_ms"], 10, 64)
	d := &webhook.Delivery{ID: id, WebhookID: m["ep"], MessageID: m["msg"], Type: m["type"], JobID: m["job_id"], Sequence: seq,
		Status: m["status"], Attempts: attempts, ResponseCode: code, LatencyMS: lat, Error: m["last_error"],
		CreatedAt: fromMS(m["created_at"]), AttemptLog: []webhook.Attempt{}}
	if t := fromMS(m["last_at"]); !t.IsZero() {
		d.LastAttemptAt = &t
	}
	if t := fromMS(m["next_at"]); !t.IsZero() && d.Status == "pending" {
		d.NextAttemptAt = &t
	}
	lines, err := s.rdb.LRange(ctx, s.k.attempts(id), 0, -1).Result()
	if err != nil {
		return nil, err
	}
	for _, l := range lines {
		var a webhook.Attempt
		if json.Unmarshal([]byte(l), &a) == nil {
			d.AttemptLog = append(d.AttemptLog, a)
		}
	}
	return d, nil
}

// Redeliver sends a delivery again at once (its message id stays the same, so a receiver that
// already has it can tell).
func (s *Service) Redeliver(ctx context.Context, org, ep, id string) (*webhook.Delivery, error) {
	if _, err := s.Delivery(ctx, org, ep, id); err != nil {
		return nil, err
	}
	ok, err := s.call(ctx, "redeliver", s.cfg.Now(), map[string]any{"id": id, "ep": ep}).Int()
	if err != nil {
		return nil, fmt.Errorf("webhooks: redeliver: %w", err)
	}
	if ok != 1 {
		return nil, webhook.ErrNotFound // not the endpoint's, or its event is no longer kept
	}
	return s.Delivery(ctx, org, ep, id)
}

// Test queues a webhook.test delivery to the endpoint (sent even if the endpoint does not
// subscribe to it, or is disabled) and returns it. An endpoint may be tested TestsPerEndpoint
// times, and an organization's endpoints TestsPerOrg times, in TestWindow; past that it is a
// *webhook.LimitError.
func (s *Service) Test(ctx context.Context, org, ep string) (*webhook.Delivery, error) {
	if _, err := s.Get(ctx, org, ep); err != nil {
		return nil, err
	}
	if err := s.countTest(ctx, org, ep); err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC()
	data, err := json.Marshal(map[string]any{
		"webhook_id": ep, "message": "a test delivery from hostedtrain: if its signature verifies, the endpoint is ready",
	})
	if err != nil {
		return nil, err
	}
	ev := event{msg: "msg_test_" + randomHex(10), org: org, typ: webhook.EventTest, at: now, data: data}
	ids, err := s.makeDeliveries(ctx, ev, ep, "")
	if err != nil {
		return nil, err
	}
	if len(ids) != 1 {
		return nil, fmt.Errorf("webhooks: test delivery to %s not made", ep)
	}
	return s.Delivery(ctx, org, ep, ids[0])
}

// countTest counts a test delivery against the endpoint's and the organization's rates.
func (s *Service) countTest(ctx context.Context, org, ep string) error {
	res, err := s.call(ctx, "test_rate", s.cfg.Now(), map[string]any{"ep": ep, "org": org, "per_ep": s.cfg.TestsPerEndpoint,
		"per_org": s.cfg.TestsPerOrg, "window_ms": s.cfg.TestWindow.Milliseconds()}).Int64Slice()
	if err != nil {
		return fmt.Errorf("webhooks: count a test delivery: %w", err)
	}
	if len(res) != 2 || res[0] == 0 {
		return nil
	}
	le := &webhook.LimitError{Limit: webhook.LimitTests, Window: s.cfg.TestWindow, RetryAfter: time.Duration(res[1]) * time.Millisecond,
		Max: s.cfg.TestsPerEndpoint, Scope: "endpoint"}
	if res[0] == 2 {
		le.Max, le.Scope = s.cfg.TestsPerOrg, "organization"
	}
	return le
}
