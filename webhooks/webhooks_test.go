package webhooks

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
)

type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

type bundle struct {
	svc   *Service
	q     *queue.Client
	rdb   *redis.Client
	clock *clock
	ctx   context.Context
}

func setup(t *testing.T, adjust ...func(*Config)) bundle {
	t.Helper()
	rdb := redistest.Client(t)
	clk := &clock{}
	q := queue.New(rdb, queue.Config{LeaseTTL: time.Hour, Now: clk.Now})
	t.Cleanup(func() { _ = q.Close() })
	entry, _ := seal.NewKey("k1")
	ring, _ := seal.Parse(entry)
	cfg := Config{
		Secrets: ring, Guard: &webhook.Guard{AllowLoopback: true}, Jobs: q, Hooks: q,
		Schedule: []time.Duration{20 * time.Millisecond, 40 * time.Millisecond, 80 * time.Millisecond},
		Timeout:  2 * time.Second, Now: clk.Now,
	}
	for _, f := range adjust {
		f(&cfg)
	}
	svc, err := New(rdb, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return bundle{svc: svc, q: q, rdb: rdb, clock: clk, ctx: context.Background()}
}

// receiver is a webhook receiver that verifies every delivery with the endpoint's secret.
type receiver struct {
	*httptest.Server
	mu       sync.Mutex
	secrets  []string
	got      []received
	answer   atomic.Int64 // status to answer; 0: 204
	retry    atomic.Value // Retry-After to send with a failure
	requests atomic.Int64
	t        *testing.T
}

type received struct {
	id   string
	msg  Message
	data JobEvent
	raw  map[string]any
	body string
}

func newReceiver(t *testing.T) *receiver {
	r := &receiver{t: t}
	r.retry.Store("")
	r.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		r.requests.Add(1)
		body, _ := io.ReadAll(req.Body)
		if code := int(r.answer.Load()); code != 0 {
			if ra := r.retry.Load().(string); ra != "" {
				w.Header().Set("Retry-After", ra)
			}
			w.WriteHeader(code)
			return
		}
		r.mu.Lock()
		defer r.mu.Unlock()
		verified := false
		for _, s := range r.secrets {
			if webhook.Verify(s, req.Header, body, time.Now()) == nil {
				verified = true
			}
		}
		if !verified {
			t.Errorf("a delivery did not verify: %s %s", req.Header.Get(webhook.HeaderSignature), body)
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var got received
		got.id = req.Header.Get(webhook.HeaderID)
		got.body = string(body)
		_ = json.Unmarshal(body, &got.msg)
		_ = json.Unmarshal(body, &got.raw)
		data, _ := json.Marshal(got.raw["data"])
		_ = json.Unmarshal(data, &got.data)
		r.got = append(r.got, got)
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(r.Close)
	return r
}

func (r *receiver) trust(secret string) {
	r.mu.Lock()
	r.secrets = append(r.secrets, secret)
	r.mu.Unlock()
}

func (r *receiver) received() []received {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]received(nil), r.got...)
}

func spec() jobspec.Spec {
	return jobspec.Spec{Kind: "rl", Model: "m", MaxSteps: 10, Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"},
		Env: []jobspec.Env{{ID: "acme/env", Weight: 1}}, Secrets: []string{"WANDB_API_KEY"}}
}

// run takes a job through its life on the queue: queued, started, two checkpoints, completed.
func (b bundle) run(t *testing.T, org string) string {
	t.Helper()
	j, _, err := b.q.Submit(b.ctx, job.Submission{Org: org, Spec: spec(), SealedSecrets: "sealed:sk-live-0123456789"}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "a", GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	for _, hb := range []job.Heartbeat{{Running: true}, {Running: true, Checkpoints: []int{5}}, {Running: true, Checkpoints: []int{10}}} {
		hb.Token = cl.Lease.Token
		if _, err := b.q.Heartbeat(b.ctx, cl.Job.ID, hb); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.q.Complete(b.ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// dispatchUntil dispatches until cond holds, for at most two minutes: on a loaded machine the
// bounds test's 215 deliveries of a 256 KiB job take far longer than on a quiet one.
func (b bundle) dispatchUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	testwait.Until(t, 2*time.Minute, what, func() bool {
		if _, err := b.svc.DispatchOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
		return cond()
	})
}

var jobLifecycle = []string{"job.queued", "job.started", "job.checkpoint", "job.checkpoint", "job.completed"}

func TestEndpointsAreKeptPerOrganization(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ep, err := b.svc.Create(b.ctx, "acme", "https://93.184.216.34/hooks", []string{"job.completed", "job.failed", "job.completed"}, "ci")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(ep.Secret, "whsec_") || !ep.Enabled || strings.Join(ep.Events, ",") != "job.completed,job.failed" {
		t.Errorf("created %+v", ep)
	}
	got, err := b.svc.Get(b.ctx, "acme", ep.ID)
	if err != nil || got.Secret != "" || got.URL != ep.URL {
		t.Errorf("get: %+v %v (the secret is shown once)", got, err)
	}
	if _, err := b.svc.Get(b.ctx, "other", ep.ID); !errors.Is(err, webhook.ErrNotFound) {
		t.Errorf("another organization reads it: %v", err)
	}
	if hooked, _ := b.rdb.HGet(b.ctx, "{ht}:org:acme", "hooked").Result(); hooked != "1" {
		t.Errorf("the organization's events do not go to the outbox (hooked=%q)", hooked)
	}
	off := false
	upd, err := b.svc.Update(b.ctx, "acme", ep.ID, webhook.Patch{Enabled: &off, Events: []string{"*", "job.failed"}, RotateSecret: true})
	if err != nil {
		t.Fatal(err)
	}
	if upd.Enabled || upd.Events[0] != "*" || len(upd.Events) != 1 || upd.Secret == "" || upd.Secret == ep.Secret || upd.PreviousSecretExpiresAt == nil {
		t.Errorf("updated %+v", upd)
	}
	for _, bad := range []struct {
		p     webhook.Patch
		field string
	}{
		{webhook.Patch{URL: ptr("http://10.0.0.1/x")}, "/url"},
		{webhook.Patch{Events: []string{"job.exploded"}}, "/events/0"},
		{webhook.Patch{Events: []string{}}, "/events"},
	} {
		_, err := b.svc.Update(b.ctx, "acme", ep.ID, bad.p)
		var inv *webhook.InvalidError
		if !errors.As(err, &inv) || inv.Field != bad.field {
			t.Errorf("%+v: %v; want an webhook.InvalidError at %s", bad.p, err, bad.field)
		}
	}
	if _, err := b.svc.Create(b.ctx, "acme", "http://169.254.169.254/latest", []string{"*"}, ""); err == nil {
		t.Error("registered the metadata address")
	}
	list, _ := b.svc.List(b.ctx, "acme")
	if len(list) != 1 {
		t.Errorf("list: %d endpoints", len(list))
	}
	if err := b.svc.Delete(b.ctx, "acme", ep.ID); err != nil {
		t.Fatal(err)
	}
	if hooked, _ := b.rdb.HGet(b.ctx, "{ht}:org:acme", "hooked").Result(); hooked != "" {
		t.Error("an organization without endpoints still feeds the outbox")
	}
}

func ptr[T any](v T) *T { return &v }

// Every event of a job's life reaches the endpoint, signed, in sequence order, with the job
// and without any secret value; an endpoint that subscribes to fewer events gets just those.
func TestJobEventsAreDeliveredSignedAndInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t)
	all, some := newReceiver(t), newReceiver(t)
	epAll, err := b.svc.Create(b.ctx, "acme", all.URL+"/hooks", []string{"*"}, "")
	if err != nil {
		t.Fatal(err)
	}
	all.trust(epAll.Secret)
	epSome, _ := b.svc.Create(b.ctx, "acme", some.URL, []string{"job.completed"}, "")
	some.trust(epSome.Secret)
	ids := []string{b.run(t, "acme"), b.run(t, "acme")}
	b.run(t, "someone-else") // no endpoint: nothing delivered
	b.dispatchUntil(t, "every event delivered", func() bool { return len(all.received()) == 10 && len(some.received()) == 2 })

	perJob := map[string][]received{}
	for _, r := range all.received() {
		perJob[r.data.JobID] = append(perJob[r.data.JobID], r)
	}
	for _, id := range ids {
		evs := perJob[id]
		for i, e := range evs {
			if e.msg.Type != jobLifecycle[i] || e.data.Sequence <= 0 || (i > 0 && e.data.Sequence <= evs[i-1].data.Sequence) {
				t.Errorf("job %s event %d: %s seq %d", id, i, e.msg.Type, e.data.Sequence)
			}
			if e.data.Job == nil || e.data.Job.ID != id || e.data.Job.Config.Model != "m" {
				t.Errorf("event without the job: %+v", e.data)
			}
			if strings.Contains(e.body, "sk-live") {
				t.Errorf("a delivery carries the job's secret: %s", e.body)
			}
			if !strings.HasPrefix(e.id, "msg_") || e.msg.Timestamp.IsZero() {
				t.Errorf("message id %q, timestamp %v", e.id, e.msg.Timestamp)
			}
		}
	}
	for _, r := range some.received() {
		if r.msg.Type != "job.completed" {
			t.Errorf("the job.completed endpoint got %s", r.msg.Type)
		}
	}
	ds, _, err := b.svc.Deliveries(b.ctx, "acme", epAll.ID, "", 100)
	if err != nil || len(ds) != 10 || ds[0].Status != "delivered" || ds[0].ResponseCode != 204 || ds[0].Attempts != 1 || len(ds[0].AttemptLog) != 1 {
		t.Fatalf("deliveries: %d %v %+v", len(ds), err, ds[0])
	}
}

// A receiver that is down gets every event when it is back, each job's in order, none twice;
// its Retry-After is honoured; the attempts are logged.
func TestAReceiverThatWasDownGetsEverythingInOrder(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.Schedule = []time.Duration{30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond, 30 * time.Millisecond}
	})
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.trust(ep.Secret)
	r.answer.Store(http.StatusServiceUnavailable)
	r.retry.Store("1")
	ids := []string{b.run(t, "acme"), b.run(t, "acme"), b.run(t, "acme")}
	b.dispatchUntil(t, "a few refused attempts", func() bool { return r.requests.Load() >= 6 })
	// While it is down, only the head of each job's line is tried: the rest wait their turn.
	ds, _, _ := b.svc.Deliveries(b.ctx, "acme", ep.ID, "", 100)
	tried := 0
	for _, d := range ds {
		if d.Attempts > 0 {
			tried++
			if d.Type != "job.queued" || d.ResponseCode != 503 || d.NextAttemptAt == nil || !strings.Contains(d.Error, "HTTP 503") {
				t.Errorf("a tried delivery: %+v", d)
			}
			if gap := d.NextAttemptAt.Sub(*d.LastAttemptAt); gap < 900*time.Millisecond {
				t.Errorf("Retry-After: 1 not honoured: next attempt %v after the last", gap)
			}
		}
	}
	if tried != 3 {
		t.Errorf("%d deliveries tried while the receiver was down, want the 3 heads", tried)
	}
	r.answer.Store(0)
	b.dispatchUntil(t, "everything delivered", func() bool { return len(r.received()) == 15 })
	seen := map[string]bool{}
	last := map[string]int64{}
	for _, e := range r.received() {
		if seen[e.id] {
			t.Errorf("message %s delivered twice", e.id)
		}
		seen[e.id] = true
		if e.data.Sequence <= last[e.data.JobID] {
			t.Errorf("job %s: sequence %d after %d", e.data.JobID, e.data.Sequence, last[e.data.JobID])
		}
		last[e.data.JobID] = e.data.Sequence
	}
	if len(last) != len(ids) {
		t.Errorf("events of %d jobs, want %d", len(last), len(ids))
	}
	ep2, _ := b.svc.Get(b.ctx, "acme", ep.ID)
	if ep2.FailingSince != nil || !ep2.Enabled {
		t.Errorf("after recovering: %+v", ep2)
	}
}

// 410 disables the endpoint; the organization's other endpoints hear of it; later events to
// the disabled one are skipped.
func TestGoneDisablesTheEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t)
	gone, other := newReceiver(t), newReceiver(t)
	gone.answer.Store(http.StatusGone)
	ep, _ := b.svc.Create(b.ctx, "acme", gone.URL, []string{"*"}, "")
	ep2, _ := b.svc.Create(b.ctx, "acme", other.URL, []string{webhook.EventEndpointDisabled}, "")
	other.trust(ep2.Secret)
	b.run(t, "acme")
	b.dispatchUntil(t, "the notice", func() bool { return len(other.received()) == 1 })
	n := other.received()[0]
	if n.msg.Type != webhook.EventEndpointDisabled || n.raw["data"].(map[string]any)["webhook_id"] != ep.ID ||
		!strings.Contains(n.raw["data"].(map[string]any)["reason"].(string), "410") {
		t.Errorf("notice %+v", n.raw)
	}
	got, _ := b.svc.Get(b.ctx, "acme", ep.ID)
	if got.Enabled || !strings.Contains(got.DisabledReason, "410") || got.DisabledAt == nil {
		t.Errorf("endpoint %+v", got)
	}
	b.dispatchUntil(t, "the rest skipped", func() bool {
		ds, _, _ := b.svc.Deliveries(b.ctx, "acme", ep.ID, "", 100)
		skipped := 0
		for _, d := range ds {
			if d.Status == "skipped" {
				skipped++
			}
		}
		return skipped == 4
	})
	if gone.requests.Load() != 1 {
		t.Errorf("%d requests to a gone endpoint, want 1", gone.requests.Load())
	}
}

// An endpoint whose deliveries all fail for five days is disabled, and says why.
func TestFiveDaysOfFailuresDisableTheEndpoint(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) {
		c.Schedule = []time.Duration{time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond, time.Millisecond}
	})
	r := newReceiver(t)
	r.answer.Store(http.StatusInternalServerError)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	b.run(t, "acme")
	b.dispatchUntil(t, "a first failure", func() bool { return r.requests.Load() >= 1 })
	got, _ := b.svc.Get(b.ctx, "acme", ep.ID)
	if got.FailingSince == nil || !got.Enabled {
		t.Fatalf("after one failure: %+v", got)
	}
	b.clock.Advance(5*24*time.Hour + time.Minute)
	b.dispatchUntil(t, "the endpoint disabled", func() bool {
		got, _ = b.svc.Get(b.ctx, "acme", ep.ID)
		return !got.Enabled
	})
	if !strings.Contains(got.DisabledReason, "5 days") {
		t.Errorf("reason %q", got.DisabledReason)
	}
}

// A redirect is a failure (not followed); so is no answer within the timeout; neither is lost.
func TestRedirectsAndTimeoutsAreFailures(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Timeout = 300 * time.Millisecond; c.Schedule = []time.Duration{time.Hour} })
	redirect := httptest.NewServer(http.RedirectHandler("https://93.184.216.34/", http.StatusFound))
	defer redirect.Close()
	slow := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { time.Sleep(2 * time.Second) }))
	defer slow.Close()
	e1, _ := b.svc.Create(b.ctx, "acme", redirect.URL, []string{"job.queued"}, "")
	e2, _ := b.svc.Create(b.ctx, "acme", slow.URL, []string{"job.queued"}, "")
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	b.dispatchUntil(t, "both tried", func() bool {
		d1, _, _ := b.svc.Deliveries(b.ctx, "acme", e1.ID, "", 1)
		d2, _, _ := b.svc.Deliveries(b.ctx, "acme", e2.ID, "", 1)
		return len(d1) == 1 && d1[0].Attempts == 1 && len(d2) == 1 && d2[0].Attempts == 1
	})
	d1, _, _ := b.svc.Deliveries(b.ctx, "acme", e1.ID, "", 1)
	d2, _, _ := b.svc.Deliveries(b.ctx, "acme", e2.ID, "", 1)
	if d1[0].Status != "pending" || d1[0].ResponseCode != 302 || !strings.Contains(d1[0].Error, "redirects are not followed") {
		t.Errorf("redirect: %+v", d1[0])
	}
	if d2[0].Status != "pending" || d2[0].ResponseCode != 0 || !strings.Contains(d2[0].Error, "no answer") {
		t.Errorf("timeout: %+v", d2[0])
	}
}

// After the schedule runs out a delivery has failed, and the next one of the job goes.
func TestADeliveryFailsAfterTheScheduleAndTheNextGoes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Schedule = []time.Duration{time.Millisecond, time.Millisecond} })
	var n atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1) <= 3 { // the first message's three attempts
			w.WriteHeader(http.StatusBadGateway)
		}
	}))
	defer srv.Close()
	ep, _ := b.svc.Create(b.ctx, "acme", srv.URL, []string{"*"}, "")
	b.run(t, "acme")
	b.dispatchUntil(t, "all settled", func() bool {
		ds, _, _ := b.svc.Deliveries(b.ctx, "acme", ep.ID, "", 100)
		done := 0
		for _, d := range ds {
			if d.Status != "pending" {
				done++
			}
		}
		return len(ds) == 5 && done == 5
	})
	ds, _, _ := b.svc.Deliveries(b.ctx, "acme", ep.ID, "", 100)
	var first *webhook.Delivery
	for _, d := range ds {
		if d.Type == "job.queued" {
			first = d
		}
	}
	if first == nil {
		t.Fatal("no job.queued delivery")
	}
	if first.Type != "job.queued" || first.Status != "failed" || first.Attempts != 3 || len(first.AttemptLog) != 3 {
		t.Errorf("first: %+v", first)
	}
	// Redelivery sends it again now, with the same message id.
	again, err := b.svc.Redeliver(b.ctx, "acme", ep.ID, first.ID)
	if err != nil || again.Status != "pending" {
		t.Fatalf("redeliver: %+v %v", again, err)
	}
	b.dispatchUntil(t, "redelivered", func() bool {
		d, _ := b.svc.Delivery(b.ctx, "acme", ep.ID, first.ID)
		return d.Status == "delivered" && d.Attempts == 4
	})
}

// A test delivery goes to the endpoint even though it subscribes to other events.
func TestTheTestDelivery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"job.failed"}, "")
	r.trust(ep.Secret)
	d, err := b.svc.Test(b.ctx, "acme", ep.ID)
	if err != nil || d.Type != webhook.EventTest || d.Status != "pending" {
		t.Fatalf("test: %+v %v", d, err)
	}
	b.dispatchUntil(t, "the test delivered", func() bool { return len(r.received()) == 1 })
	if r.received()[0].msg.Type != webhook.EventTest {
		t.Errorf("got %+v", r.received()[0].msg)
	}
	if _, err := b.svc.Test(b.ctx, "other", ep.ID); !errors.Is(err, webhook.ErrNotFound) {
		t.Errorf("another organization tested it: %v", err)
	}
}

// During a rotation both signatures are sent: a receiver still on the old secret verifies,
// and so does one on the new.
func TestRotationSignsWithBothSecrets(t *testing.T) {
	t.Parallel()
	b := setup(t)
	oldOnly, newOnly := newReceiver(t), newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", oldOnly.URL, []string{"job.queued"}, "")
	oldOnly.trust(ep.Secret)
	rot, err := b.svc.Update(b.ctx, "acme", ep.ID, webhook.Patch{RotateSecret: true})
	if err != nil {
		t.Fatal(err)
	}
	newOnly.trust(rot.Secret)
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	b.dispatchUntil(t, "delivered to the old-secret receiver", func() bool { return len(oldOnly.received()) == 1 })
	if _, err := b.svc.Update(b.ctx, "acme", ep.ID, webhook.Patch{URL: ptr(newOnly.URL)}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	b.dispatchUntil(t, "delivered to the new-secret receiver", func() bool { return len(newOnly.received()) == 1 })
	// After the overlap only the new secret signs.
	b.clock.Advance(25 * time.Hour)
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	var sigs string
	seen := make(chan string, 1)
	final := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case seen <- r.Header.Get(webhook.HeaderSignature):
		default:
		}
	}))
	defer final.Close()
	if _, err := b.svc.Update(b.ctx, "acme", ep.ID, webhook.Patch{URL: ptr(final.URL)}); err != nil {
		t.Fatal(err)
	}
	b.dispatchUntil(t, "the post-overlap delivery", func() bool {
		select {
		case sigs = <-seen:
			return true
		default:
			return false
		}
	})
	if n := len(strings.Fields(sigs)); n != 1 {
		t.Errorf("%d signatures after the overlap, want 1", n)
	}
}

// The same outbox entry handled twice (a dispatcher that died before acknowledging it) makes
// its deliveries once.
func TestAnOutboxEntryHandledTwiceDeliversOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.trust(ep.Secret)
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	// Read by a consumer group of the test's own, so the dispatcher's still gets it: three
	// fan-outs of one event in all.
	events, err := b.q.Outbox("replay").Read(b.ctx, "t", 10)
	if err != nil || len(events) != 1 {
		t.Fatalf("outbox: %v %v", events, err)
	}
	for range 2 {
		if _, err := b.svc.makeDeliveries(b.ctx, eventOf(events[0]), "", ""); err != nil {
			t.Fatal(err)
		}
	}
	b.dispatchUntil(t, "delivered", func() bool { return len(r.received()) == 1 })
	for range 5 {
		if _, err := b.svc.DispatchOnce(b.ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(r.received()); n != 1 {
		t.Errorf("%d deliveries of one event", n)
	}
}

func TestDeliveriesPageNewestFirst(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.trust(ep.Secret)
	for range 3 {
		b.run(t, "acme")
	}
	b.dispatchUntil(t, "delivered", func() bool { return len(r.received()) == 15 })
	seen := map[string]bool{}
	cursor := ""
	var last time.Time
	for page := 0; ; page++ {
		ds, next, err := b.svc.Deliveries(b.ctx, "acme", ep.ID, cursor, 4)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range ds {
			if seen[d.ID] {
				t.Errorf("%s on two pages", d.ID)
			}
			seen[d.ID] = true
			if !last.IsZero() && d.CreatedAt.After(last) {
				t.Errorf("not newest first")
			}
			last = d.CreatedAt
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) != 15 {
		t.Errorf("paged through %d deliveries, want 15", len(seen))
	}
}
