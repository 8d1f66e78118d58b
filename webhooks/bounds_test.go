package webhooks

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/testwait"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

// whKeys are the webhook service's keys in b's Redis, by name.
func (b bundle) whKeys(t *testing.T) []string {
	t.Helper()
	ks, err := b.rdb.Keys(b.ctx, b.svc.k.p+"*").Result()
	if err != nil {
		t.Fatal(err)
	}
	return ks
}

// whMemory is what Redis says the webhook service's keys take (MEMORY USAGE, every sample).
func (b bundle) whMemory(t *testing.T) (bytes int64, keys int) {
	t.Helper()
	for _, k := range b.whKeys(t) {
		n, err := b.rdb.MemoryUsage(b.ctx, k, 0).Result()
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		bytes += n
		keys++
	}
	return bytes, keys
}

// values is every value stored under the webhook service's keys, as one string.
func (b bundle) values(t *testing.T) string {
	t.Helper()
	var sb strings.Builder
	for _, k := range b.whKeys(t) {
		typ, _ := b.rdb.Type(b.ctx, k).Result()
		var vs []string
		var err error
		switch typ {
		case "hash":
			var m map[string]string
			m, err = b.rdb.HGetAll(b.ctx, k).Result()
			for f, v := range m {
				vs = append(vs, f, v)
			}
		case "list":
			vs, err = b.rdb.LRange(b.ctx, k, 0, -1).Result()
		case "set":
			vs, err = b.rdb.SMembers(b.ctx, k).Result()
		case "zset":
			vs, err = b.rdb.ZRange(b.ctx, k, 0, -1).Result()
		case "string":
			var v string
			v, err = b.rdb.Get(b.ctx, k).Result()
			vs = []string{v}
		}
		if err != nil && !errors.Is(err, redis.Nil) {
			t.Fatal(err)
		}
		sb.WriteString(k + "=" + strings.Join(vs, "\x00") + "\n")
	}
	return sb.String()
}

// bigSpec is a job whose config is about size bytes, marked so it can be found.
func bigSpec(size int) jobspec.Spec {
	s := spec()
	s.Env = []jobspec.Env{{ID: "acme/env", Weight: 1, Args: map[string]any{"blob": "CONFIG-MARK-" + strings.Repeat("x", size)}}}
	s.MaxSteps = 1000 // room for the checkpoints runLong reports (the queue refuses steps past max_steps)
	return s
}

// runLong takes a job of org through queued, started, n checkpoints and completed.
func (b bundle) runLong(t *testing.T, org string, s jobspec.Spec, n int) string {
	t.Helper()
	j, _, err := b.q.Submit(b.ctx, job.Submission{Org: org, Spec: s}, "", "")
	if err != nil {
		t.Fatal(err)
	}
	cl, err := b.q.Claim(b.ctx, job.ClaimRequest{AgentID: "a", GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	if _, err := b.q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true}); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= n; i++ {
		if _, err := b.q.Heartbeat(b.ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, Running: true, Checkpoints: []int{i}}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := b.q.Complete(b.ctx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
		t.Fatal(err)
	}
	return j.ID
}

// A job with a 256 KiB config and 43 events, to 5 endpoints, stores each event once and no
// config: what Redis reports for the webhook keys stays at a few hundred bytes a delivery,
// pending or delivered, where a copy of the job in each delivery would be 55 MiB.
func TestAJobsWebhooksTakeBoundedMemory(t *testing.T) {
	t.Parallel()
	b := setup(t)
	const configSize, checkpoints, endpoints = 256 << 10, 40, 5
	var recvs []*receiver
	for range endpoints {
		r := newReceiver(t)
		ep, err := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
		if err != nil {
			t.Fatal(err)
		}
		r.trust(ep.Secret)
		r.answer.Store(http.StatusServiceUnavailable)
		r.retry.Store("1") // every delivery stays pending while the receivers refuse
		recvs = append(recvs, r)
	}
	base, _ := b.whMemory(t)
	b.runLong(t, "acme", bigSpec(configSize), checkpoints)
	infoBefore := b.usedMemory(t)
	events := checkpoints + 3
	deliveries := events * endpoints
	b.dispatchUntil(t, "every delivery made and each endpoint's first tried", func() bool {
		n, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
		tried := 0
		for _, r := range recvs {
			tried += int(r.requests.Load())
		}
		return len(n) == deliveries && tried >= endpoints
	})
	pending, keys := b.whMemory(t)
	pending -= base
	infoGrowth := b.usedMemory(t) - infoBefore
	if v := b.values(t); strings.Contains(v, "CONFIG-MARK") {
		t.Fatal("a webhook key holds the job's config")
	}
	evs, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"ev:*").Result()
	if len(evs) != events {
		t.Errorf("%d events stored, want %d (once each, not once per endpoint)", len(evs), events)
	}
	perDelivery := pending / int64(deliveries)
	t.Logf("pending: %d deliveries of %d events in %d keys take %d bytes (MEMORY USAGE), %d a delivery; "+
		"INFO used_memory grew %d bytes; a copy of the job in each delivery would be %d bytes",
		deliveries, events, keys, pending, perDelivery, infoGrowth, int64(deliveries)*configSize)
	if perDelivery > 1024 {
		t.Errorf("%d bytes a pending delivery, want at most 1024", perDelivery)
	}
	// used_memory counts more than keys (client buffers that held the job as it was read,
	// scripts): bound it by a sixteenth of what one copy of the job per delivery would take.
	if infoGrowth > int64(deliveries)*configSize/16 {
		t.Errorf("used_memory grew %d bytes for %d deliveries", infoGrowth, deliveries)
	}

	// Delivered, each with its attempts: still bounded, and every receiver got the job.
	for _, r := range recvs {
		r.answer.Store(0)
	}
	b.dispatchUntil(t, "everything delivered", func() bool {
		n := 0
		for _, r := range recvs {
			n += len(r.received())
		}
		return n == deliveries
	})
	for _, r := range recvs {
		if got := r.received(); got[0].data.Job == nil || !strings.Contains(got[0].body, "CONFIG-MARK") {
			t.Fatalf("the delivery does not carry the job: %.200s", got[0].body)
		}
	}
	done, keys := b.whMemory(t)
	done -= base
	t.Logf("delivered: %d deliveries in %d keys take %d bytes, %d a delivery", deliveries, keys, done, done/int64(deliveries))
	if done/int64(deliveries) > 1536 {
		t.Errorf("%d bytes a delivered delivery (with two attempts), want at most 1536", done/int64(deliveries))
	}
	// The same job's events with a config 16 times smaller take the same: the size is the
	// deliveries', not the job's.
	b2 := setup(t)
	for range endpoints {
		r := newReceiver(t)
		ep, err := b2.svc.Create(b2.ctx, "acme", r.URL, []string{"*"}, "")
		if err != nil {
			t.Fatal(err)
		}
		r.trust(ep.Secret)
	}
	b2.runLong(t, "acme", bigSpec(configSize/16), checkpoints)
	b2.dispatchUntil(t, "everything delivered", func() bool {
		n, _ := b2.rdb.Keys(b2.ctx, b2.svc.k.p+"dl:*").Result()
		return len(n) == deliveries && b2.allSettled(t)
	})
	small, _ := b2.whMemory(t)
	t.Logf("with a %d-byte config: %d bytes", configSize/16, small)
	if diff := done - small; diff > int64(deliveries)*256 || diff < -int64(deliveries)*256 {
		t.Errorf("with a 16 times larger config the webhook keys take %d bytes, with the smaller %d", done, small)
	}
}

// allSettled reports whether no delivery is pending.
func (b bundle) allSettled(t *testing.T) bool {
	t.Helper()
	ids, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
	for _, k := range ids {
		if st, _ := b.rdb.HGet(b.ctx, k, "status").Result(); st == "pending" {
			return false
		}
	}
	return true
}

// usedMemory is INFO memory's used_memory.
func (b bundle) usedMemory(t *testing.T) int64 {
	t.Helper()
	info, err := b.rdb.Info(b.ctx, "memory").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			n, _ := strconv.ParseInt(v, 10, 64)
			return n
		}
	}
	return 0
}

// holder is a receiver that holds every request until released, counting how many it holds.
type holder struct {
	*httptest.Server
	release      chan struct{}
	held, most   atomic.Int64
	total        atomic.Int64
	releasedOnce sync.Once
}

func newHolder(t *testing.T) *holder {
	h := &holder{release: make(chan struct{})}
	h.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.total.Add(1)
		n := h.held.Add(1)
		for {
			m := h.most.Load()
			if n <= m || h.most.CompareAndSwap(m, n) {
				break
			}
		}
		defer h.held.Add(-1)
		select {
		case <-h.release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(func() { h.free(); h.Close() })
	return h
}

func (h *holder) free() { h.releasedOnce.Do(func() { close(h.release) }) }

// One organization with 100 endpoints on a receiver that holds every request gets no more
// than its share of the senders; another organization's delivery arrives while those
// requests are still held.
func TestOneOrganizationsSlowReceiversDoNotHoldAnothers(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Timeout = time.Minute; c.MaxEndpoints = 100 })
	slow := newHolder(t)
	for i := range 100 {
		if _, err := b.svc.Create(b.ctx, "slowco", fmt.Sprintf("%s/hook/%d", slow.URL, i), []string{"*"}, ""); err != nil {
			t.Fatal(err)
		}
	}
	fast := newReceiver(t)
	ep, err := b.svc.Create(b.ctx, "acme", fast.URL, []string{"job.queued"}, "")
	if err != nil {
		t.Fatal(err)
	}
	fast.trust(ep.Secret)

	ctx, cancel := context.WithCancel(b.ctx)
	stopped := make(chan struct{})
	go func() { b.svc.Run(ctx, 10*time.Millisecond); close(stopped) }()
	t.Cleanup(func() { slow.free(); cancel(); <-stopped })

	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "slowco", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	want := int64(b.svc.cfg.OrgConcurrency)
	testwait.Until(t, 30*time.Second, "slowco's share of the senders held", func() bool { return slow.held.Load() == want })
	if _, _, err := b.q.Submit(b.ctx, job.Submission{Org: "acme", Spec: spec()}, "", ""); err != nil {
		t.Fatal(err)
	}
	testwait.Until(t, 30*time.Second, "acme's delivery", func() bool { return len(fast.received()) == 1 })
	if held, total := slow.held.Load(), slow.total.Load(); held != want || total != want {
		t.Errorf("when acme's delivery arrived slowco had %d requests held and %d made, want %d and %d", held, total, want, want)
	}
	if most := slow.most.Load(); most > want {
		t.Errorf("slowco held %d senders at once, want at most %d of %d", most, want, b.svc.cfg.Concurrency)
	}
	// Released, slowco's deliveries all go, still no more than its share at once.
	slow.free()
	testwait.Until(t, 30*time.Second, "all of slowco's deliveries", func() bool { return slow.total.Load() == 100 })
	if most := slow.most.Load(); most > want {
		t.Errorf("slowco held %d senders at once, want at most %d", most, want)
	}
}

// An organization has at most MaxEndpoints endpoints, even when it asks for many at once;
// deleting one makes room.
func TestEndpointsPerOrganizationAreCapped(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.MaxEndpoints = 3 })
	var wg sync.WaitGroup
	var made, refused atomic.Int64
	for range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.svc.Create(b.ctx, "acme", "https://93.184.216.34/hooks", []string{"*"}, "")
			var le *webhook.LimitError
			switch {
			case err == nil:
				made.Add(1)
			case errors.As(err, &le) && le.Limit == webhook.LimitEndpoints && le.Max == 3:
				refused.Add(1)
			default:
				t.Errorf("create: %v", err)
			}
		}()
	}
	wg.Wait()
	list, _ := b.svc.List(b.ctx, "acme")
	if made.Load() != 3 || refused.Load() != 7 || len(list) != 3 {
		t.Fatalf("made %d, refused %d, listed %d; want 3, 7, 3", made.Load(), refused.Load(), len(list))
	}
	if _, err := b.svc.Create(b.ctx, "globex", "https://93.184.216.34/hooks", []string{"*"}, ""); err != nil {
		t.Errorf("another organization's first endpoint: %v", err)
	}
	if err := b.svc.Delete(b.ctx, "acme", list[0].ID); err != nil {
		t.Fatal(err)
	}
	if _, err := b.svc.Create(b.ctx, "acme", "https://93.184.216.34/hooks", []string{"*"}, ""); err != nil {
		t.Errorf("after a delete: %v", err)
	}
}

// Deleting an endpoint deletes its deliveries, pending and finished, their attempts, its
// lines and its share of the events; another endpoint's deliveries of the same events stay,
// and so do the events they need.
func TestDeletingAnEndpointDeletesItsDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.Schedule = []time.Duration{time.Hour} })
	down, up := newReceiver(t), newReceiver(t)
	down.answer.Store(http.StatusServiceUnavailable)
	gone, _ := b.svc.Create(b.ctx, "acme", down.URL, []string{"*"}, "")
	kept, _ := b.svc.Create(b.ctx, "acme", up.URL, []string{"*"}, "")
	up.trust(kept.Secret)
	only, _ := b.svc.Create(b.ctx, "acme", down.URL, []string{"*"}, "")
	b.run(t, "acme")
	b.run(t, "acme")
	b.dispatchUntil(t, "the kept endpoint's deliveries", func() bool { return len(up.received()) == 10 && down.requests.Load() >= 4 })
	if _, err := b.svc.Test(b.ctx, "acme", only.ID); err != nil { // an event only `only` has
		t.Fatal(err)
	}
	if err := b.svc.Delete(b.ctx, "acme", gone.ID); err != nil {
		t.Fatal(err)
	}
	if err := b.svc.Delete(b.ctx, "acme", only.ID); err != nil {
		t.Fatal(err)
	}
	for _, ep := range []string{gone.ID, only.ID} {
		if v := b.values(t); strings.Contains(v, ep) {
			t.Errorf("after deleting %s Redis still holds:\n%s", ep, grepLines(v, ep))
		}
	}
	ds, _, err := b.svc.Deliveries(b.ctx, "acme", kept.ID, "", 100)
	if err != nil || len(ds) != 10 {
		t.Fatalf("the kept endpoint's deliveries: %d %v", len(ds), err)
	}
	evs, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"ev:*").Result()
	if len(evs) != 10 {
		t.Errorf("%d events kept, want the kept endpoint's 10", len(evs))
	}
	// They can still be sent again.
	if _, err := b.svc.Redeliver(b.ctx, "acme", kept.ID, ds[0].ID); err != nil {
		t.Fatal(err)
	}
	b.dispatchUntil(t, "the redelivery", func() bool { return len(up.received()) == 11 })
	if err := b.svc.Delete(b.ctx, "acme", kept.ID); err != nil {
		t.Fatal(err)
	}
	for _, k := range b.whKeys(t) {
		// The organization's count of test deliveries lasts out its window.
		ttl, _ := b.rdb.TTL(b.ctx, k).Result()
		if k != b.svc.k.p+"rate:test:org:acme" || ttl <= 0 || ttl > b.svc.cfg.TestWindow {
			t.Errorf("with every endpoint deleted, Redis still holds %s (TTL %v)", k, ttl)
		}
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// An endpoint's log keeps its newest KeepDeliveries deliveries: older finished ones go, with
// their events once no delivery refers to them.
func TestAnEndpointKeepsItsNewestDeliveries(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.KeepDeliveries = 4 })
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.trust(ep.Secret)
	var last string
	for range 3 {
		last = b.run(t, "acme")
		b.dispatchUntil(t, "delivered", func() bool { return b.allSettled(t) })
	}
	if n := len(r.received()); n != 15 {
		t.Fatalf("%d delivered, want 15", n)
	}
	dls, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
	evs, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"ev:*").Result()
	logged, _ := b.rdb.ZCard(b.ctx, b.svc.k.log(ep.ID)).Result()
	// Each new delivery trims the log as it is made, before it is delivered: the log holds
	// at most KeepDeliveries and the one just made.
	if len(dls) > 5 || len(evs) > 5 || logged > 5 {
		t.Errorf("%d deliveries, %d events, %d logged; want at most 5 each", len(dls), len(evs), logged)
	}
	ds, _, _ := b.svc.Deliveries(b.ctx, "acme", ep.ID, "", 100)
	kept := false
	for _, d := range ds {
		kept = kept || (d.JobID == last && d.Type == "job.completed")
		if d.JobID != last {
			t.Errorf("kept %s of job %s, older than the last job's", d.Type, d.JobID)
		}
	}
	if !kept {
		t.Error("the newest delivery, the last job's job.completed, was not kept")
	}
}

// Test deliveries are counted per endpoint and per organization in Redis; past the limit the
// error says when to come back, and after the window they are allowed again.
func TestTestDeliveriesAreRateLimited(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.TestsPerEndpoint, c.TestsPerOrg, c.TestWindow = 2, 3, time.Hour })
	e1, _ := b.svc.Create(b.ctx, "acme", "https://93.184.216.34/a", []string{"*"}, "")
	e2, _ := b.svc.Create(b.ctx, "acme", "https://93.184.216.34/b", []string{"*"}, "")
	limited := func(ep, scope string) {
		t.Helper()
		_, err := b.svc.Test(b.ctx, "acme", ep)
		var le *webhook.LimitError
		if !errors.As(err, &le) || le.Limit != webhook.LimitTests || le.Scope != scope ||
			le.RetryAfter <= 0 || le.RetryAfter > time.Hour {
			t.Errorf("test of %s: %v; want the %s's limit", ep, err, scope)
		}
	}
	for range 2 {
		if _, err := b.svc.Test(b.ctx, "acme", e1.ID); err != nil {
			t.Fatal(err)
		}
	}
	limited(e1.ID, "endpoint")
	if _, err := b.svc.Test(b.ctx, "acme", e2.ID); err != nil {
		t.Fatal(err)
	}
	limited(e2.ID, "organization")
	// Another service on the same Redis (another Lambda instance) counts the same.
	other, err := New(b.rdb, b.svc.cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := other.Test(b.ctx, "acme", e2.ID); err == nil {
		t.Error("another instance allowed a test past the organization's limit")
	}
	dls, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
	if len(dls) != 3 {
		t.Errorf("%d test deliveries made, want 3", len(dls))
	}

	short := setup(t, func(c *Config) { c.TestsPerEndpoint, c.TestWindow = 1, 200*time.Millisecond })
	ep, _ := short.svc.Create(short.ctx, "acme", "https://93.184.216.34/a", []string{"*"}, "")
	if _, err := short.svc.Test(short.ctx, "acme", ep.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := short.svc.Test(short.ctx, "acme", ep.ID); err == nil {
		t.Fatal("a second test in the window was allowed")
	}
	testwait.Until(t, 10*time.Second, "the window to pass", func() bool {
		_, err := short.svc.Test(short.ctx, "acme", ep.ID)
		return err == nil
	})
}

// A delivery made by the previous version (its body inline, in the single due set) is still
// sent after an upgrade, and then settles like any other.
func TestADeliveryFromBeforeTheUpgradeIsSent(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.trust(ep.Secret)
	now := ms(b.clock.Now())
	did, body := "dlv_0123456789abcdef01234567", `{"type":"job.queued","timestamp":"2026-01-01T00:00:00Z","data":{"job_id":"j1","sequence":1}}`
	if err := b.rdb.HSet(b.ctx, b.svc.k.delivery(did), "ep", ep.ID, "org", "acme", "msg", "msg_old", "type", "job.queued",
		"job_id", "", "seq", "1", "body", body, "status", "pending", "attempts", "0", "created_at", now, "next_at", now).Err(); err != nil {
		t.Fatal(err)
	}
	b.rdb.ZAdd(b.ctx, b.svc.k.log(ep.ID), redis.Z{Score: float64(b.clock.Now().UnixMilli()), Member: did})
	b.rdb.ZAdd(b.ctx, b.svc.k.p+"due", redis.Z{Score: float64(b.clock.Now().UnixMilli()), Member: did})
	b.dispatchUntil(t, "the old delivery", func() bool { return len(r.received()) == 1 })
	if got := r.received()[0]; got.body != body || got.id != "msg_old" {
		t.Errorf("got %s %s", got.id, got.body)
	}
	d, err := b.svc.Delivery(b.ctx, "acme", ep.ID, did)
	if err != nil || d.Status != "delivered" {
		t.Errorf("%+v %v", d, err)
	}
	if n, _ := b.rdb.Exists(b.ctx, b.svc.k.p+"due").Result(); n != 0 {
		t.Error("the old due set is still there")
	}
}

// A receiver that answers nothing holds at most MaxPending deliveries of its endpoint waiting
// (red team, issue 29: pending deliveries were never bounded, so an organization's events for a
// dead receiver grew Redis for as long as it kept submitting): past it an event makes no
// delivery to it, the endpoint counts what it missed, and its deliveries hold bounded memory.
func TestADeadReceiversBacklogIsBounded(t *testing.T) {
	t.Parallel()
	b := setup(t, func(c *Config) { c.KeepDeliveries, c.MaxPending = 4, 5 })
	r := newReceiver(t)
	ep, _ := b.svc.Create(b.ctx, "acme", r.URL, []string{"*"}, "")
	r.Close() // dead from here on: every delivery fails and waits to be tried again
	for range 4 {
		b.run(t, "acme")
	}
	b.dispatchUntil(t, "every event fanned out", func() bool {
		dls, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
		got, err := b.svc.Get(b.ctx, "acme", ep.ID)
		return err == nil && int64(len(dls))+got.DroppedDeliveries >= 4*5
	})
	dls, _ := b.rdb.Keys(b.ctx, b.svc.k.p+"dl:*").Result()
	logged, _ := b.rdb.ZCard(b.ctx, b.svc.k.log(ep.ID)).Result()
	if len(dls) > 9 || logged > 9 {
		t.Errorf("%d deliveries, %d logged for a dead receiver; want at most KeepDeliveries + MaxPending (9)", len(dls), logged)
	}
	got, err := b.svc.Get(b.ctx, "acme", ep.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.DroppedDeliveries == 0 || int64(len(dls))+got.DroppedDeliveries < 4*5 {
		t.Errorf("the endpoint counts %d dropped of %d events (%d deliveries made)", got.DroppedDeliveries, 4*5, len(dls))
	}
}
