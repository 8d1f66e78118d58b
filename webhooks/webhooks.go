// Package webhooks keeps organizations' webhook endpoints and delivers job events to them,
// signed by the Standard Webhooks specification, at least once, in order per job.
//
// Events come from the queue's outbox (a Redis stream written in the same function as each
// state change, for organizations that have an endpoint). A dispatcher reads it through a
// consumer group, turns each event into one delivery per subscribed endpoint, and sends the
// deliveries: one at a time per endpoint and job, so a receiver sees a job's events in
// sequence order even through its own outages, and at most a few at a time per organization,
// so one organization's slow receivers cannot hold every sender; failures are retried on a schedule (5 s, 5 min,
// 30 min, 2 h, 5 h, 10 h, 10 h, with jitter, or the receiver's Retry-After). A 410 disables
// the endpoint; so do five days of nothing but failures. Every target is checked against our
// own network when it is registered and again on the address each delivery dials.
//
// State lives in Redis beside the queue, under the same hash tag, changed by small Lua
// scripts so a delivery's bookkeeping is one step. What one organization can store is
// bounded: a number of endpoints, a number of deliveries kept per endpoint, each delivery a
// few hundred bytes that refer to the event (stored once, without the job; the job is read
// when the delivery is sent), and no answer's body. Deleting an endpoint deletes its
// deliveries.
package webhooks

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redisfn"
	"github.com/hostedtrain/hostedtrain/internal/rediskeys"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
)

// Jobs is where the dispatcher reads the job an event is about.
type Jobs interface {
	Get(ctx context.Context, id string) (*job.Job, error)
}

// Hooks is the queue's side of webhooks: the switch that sends an organization's events to
// the outbox, and the outbox, read as a consumer group.
type Hooks interface {
	SetHooked(ctx context.Context, org string, hooked bool) error
	Outbox(group string) *queue.Outbox
}

// Config configures the service.
type Config struct {
	// Prefix is the hash tag of the keys; the queue's (default "ht").
	Prefix string
	// Secrets seals signing secrets at rest.
	Secrets *seal.Keyring
	// Guard vets targets at registration and on every dial.
	Guard *webhook.Guard
	Jobs  Jobs
	Hooks Hooks
	// Schedule is the wait before each retry (default 5 s, 5 min, 30 min, 2 h, 5 h, 10 h,
	// 10 h); after the last, a delivery has failed.
	Schedule []time.Duration
	// Jitter spreads each wait by ± this fraction (default 0.2).
	Jitter float64
	// Timeout bounds one delivery attempt (default 15 s).
	Timeout time.Duration
	// DisableAfter disables an endpoint whose deliveries have all failed this long (default
	// 5 days).
	DisableAfter time.Duration
	// RotationOverlap is how long a replaced secret keeps signing beside the new one
	// (default 24 h).
	RotationOverlap time.Duration
	// Retention is how long finished deliveries are kept for the log (default 30 days).
	Retention time.Duration
	// Concurrency is how many deliveries one dispatcher sends at once (default 16).
	Concurrency int
	// OrgConcurrency is how many deliveries of one organization are sent at once, over all
	// dispatchers (default a quarter of Concurrency, at least 1).
	OrgConcurrency int
	// MaxEndpoints is how many endpoints an organization may register (default 20).
	MaxEndpoints int
	// MaxPending is how many deliveries of one endpoint may wait to be sent at once (default
	// 1000): past it an event makes no delivery to it, and the endpoint counts it
	// (dropped_deliveries). With KeepDeliveries it bounds what an organization's endpoints hold
	// in Redis.
	MaxPending int
	// KeepDeliveries is how many deliveries an endpoint's log keeps; older finished ones are
	// removed as new ones come (default 1000).
	KeepDeliveries int
	// TestsPerEndpoint and TestsPerOrg are how many test deliveries an endpoint, and an
	// organization, may ask for in TestWindow (defaults 5 and 20 a minute).
	TestsPerEndpoint, TestsPerOrg int
	TestWindow                    time.Duration
	// Consumer names this dispatcher in the outbox's consumer group (default host-pid-random).
	Consumer string
	Now      func() time.Time
	Logger   *slog.Logger
}

// DefaultSchedule is the retry schedule.
var DefaultSchedule = []time.Duration{5 * time.Second, 5 * time.Minute, 30 * time.Minute, 2 * time.Hour,
	5 * time.Hour, 10 * time.Hour, 10 * time.Hour}

func (c *Config) defaults() error {
	if c.Secrets == nil || c.Guard == nil || c.Jobs == nil || c.Hooks == nil {
		return errors.New("webhooks: Config needs Secrets, Guard, Jobs and Hooks")
	}
	if c.Prefix == "" {
		c.Prefix = "ht"
	}
	if c.Schedule == nil {
		c.Schedule = DefaultSchedule
	}
	if c.Jitter == 0 {
		c.Jitter = 0.2
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.Timeout, 15*time.Second)
	def(&c.DisableAfter, 5*24*time.Hour)
	def(&c.RotationOverlap, 24*time.Hour)
	def(&c.Retention, 30*24*time.Hour)
	if c.Concurrency == 0 {
		c.Concurrency = 16
	}
	if c.OrgConcurrency == 0 {
		c.OrgConcurrency = max(1, c.Concurrency/4)
	}
	defInt := func(n *int, v int) {
		if *n == 0 {
			*n = v
		}
	}
	defInt(&c.MaxEndpoints, 20)
	defInt(&c.KeepDeliveries, 1000)
	defInt(&c.MaxPending, 1000)
	defInt(&c.TestsPerEndpoint, 5)
	defInt(&c.TestsPerOrg, 20)
	def(&c.TestWindow, time.Minute)
	if c.Consumer == "" {
		c.Consumer = "dispatcher-" + randomHex(6)
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Service keeps endpoints and delivers to them.
type Service struct {
	rdb   redis.UniversalClient
	funcs *redisfn.Caller
	cfg   Config
	k     keys
	http  *http.Client

	outbox *queue.Outbox
	slots  chan struct{} // one per delivery being sent; Concurrency of them
	freed  chan struct{} // signalled when a delivery ends, for Run to take more
}

// New returns the service.
func New(rdb redis.UniversalClient, cfg Config) (*Service, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	return &Service{rdb: rdb, funcs: redisfn.NewCaller(rdb, library), cfg: cfg, k: keys{p: "{" + cfg.Prefix + "}:wh:"}, outbox: cfg.Hooks.Outbox(group),
		http: cfg.Guard.Client(cfg.Timeout), slots: make(chan struct{}, cfg.Concurrency), freed: make(chan struct{}, 1)}, nil
}

// call runs one of the library's functions (scripts.go) at now, routed by the set of
// organizations with work due, with its arguments by name.
func (s *Service) call(ctx context.Context, fn string, now time.Time, a map[string]any, rest ...any) *redis.Cmd {
	return s.funcs.Call(ctx, fn, s.k.dueOrgs(), []any{s.k.p, ms(now)}, a, rest...)
}

type keys struct {
	p string
}

// The keys, under "{tag}:wh:", are named in internal/rediskeys (rediskeys.Webhooks), with what
// each holds; the scripts' key builders are generated from the same table.
func (k keys) named(lua string, names ...string) string {
	return rediskeys.Webhooks.NamedKey(k.p, lua, names...)
}
func (k keys) endpoint(id string) string { return k.named("epkey", id) }
func (k keys) org(org string) string     { return k.named("orgeps", org) }
func (k keys) event(msg string) string   { return k.named("evkey", msg) }
func (k keys) delivery(id string) string { return k.named("dlkey", id) }
func (k keys) attempts(id string) string { return k.named("attkey", id) }
func (k keys) log(ep string) string      { return k.named("logkey", ep) }
func (k keys) dueOrgs() string           { return rediskeys.Webhooks.FixedName(k.p, "DUEORGS") }
func (k keys) testRate(ep string) string { return k.named("eprate", ep) }

// group is the outbox's consumer group of webhook dispatchers.
const group = "webhooks"

// Create registers an endpoint for org and returns it with its secret.
func (s *Service) Create(ctx context.Context, org, url string, events []string, description string) (*webhook.Endpoint, error) {
	if err := s.checkURL(ctx, url); err != nil {
		return nil, err
	}
	events, err := checkEvents(events)
	if err != nil {
		return nil, err
	}
	secret, err := webhook.NewSecret()
	if err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC()
	id := "wh_" + randomHex(12)
	sealed, err := s.cfg.Secrets.Seal([]byte(secret), id)
	if err != nil {
		return nil, err
	}
	made, err := s.call(ctx, "create", now, map[string]any{"org": org, "max": s.cfg.MaxEndpoints, "ep": id},
		"org", org, "url", url, "events", strings.Join(events, ","), "enabled", "1",
		"description", description, "secret", sealed, "created_at", ms(now), "updated_at", ms(now)).Int()
	if err != nil {
		return nil, fmt.Errorf("webhooks: create: %w", err)
	}
	if made == 0 {
		return nil, &webhook.LimitError{Limit: webhook.LimitEndpoints, Max: s.cfg.MaxEndpoints}
	}
	if err := s.cfg.Hooks.SetHooked(ctx, org, true); err != nil {
		return nil, err
	}
	ep := &webhook.Endpoint{ID: id, URL: url, Events: events, Enabled: true, Description: description, CreatedAt: now, UpdatedAt: now, Secret: secret}
	return ep, nil
}

func (s *Service) checkURL(ctx context.Context, url string) error {
	if err := s.cfg.Guard.CheckURL(ctx, url); err != nil {
		return &webhook.InvalidError{Field: "/url", Msg: err.Error()}
	}
	return nil
}

func checkEvents(events []string) ([]string, error) {
	if len(events) == 0 {
		return nil, &webhook.InvalidError{Field: "/events", Msg: `name the events to deliver, or ["*"] for all`}
	}
	out := make([]string, 0, len(events))
	for i, e := range events {
		if e != webhook.EventAll && !slices.Contains(webhook.EventTypes, e) {
			return nil, &webhook.InvalidError{Field: fmt.Sprintf("/events/%d", i),
				Msg: fmt.Sprintf("%q is not an event type; use %s or \"*\"", e, strings.Join(webhook.EventTypes, ", "))}
		}
		if !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	if slices.Contains(out, webhook.EventAll) {
		return []string{webhook.EventAll}, nil
	}
	return out, nil
}

// Get returns org's endpoint id (without its secret).
func (s *Service) Get(ctx context.Context, org, id string) (*webhook.Endpoint, error) {
	m, err := s.rdb.HGetAll(ctx, s.k.endpoint(id)).Result()
	if err != nil {
		return nil, fmt.Errorf("webhooks: get: %w", err)
	}
	if len(m) == 0 || m["org"] != org {
		return nil, webhook.ErrNotFound
	}
	return endpointFrom(id, m, s.cfg.Now()), nil
}

func endpointFrom(id string, m map[string]string, now time.Time) *webhook.Endpoint {
	ep := &webhook.Endpoint{
		ID: id, URL: m["url"], Events: strings.Split(m["events"], ","), Enabled: m["enabled"] == "1",
		Description: m["description"], CreatedAt: fromMS(m["created_at"]), UpdatedAt: fromMS(m["updated_at"]),
		DisabledReason: m["disabled_reason"],
	}
	if t := fromMS(m["prev_until"]); !t.IsZero() && t.After(now) {
		ep.PreviousSecretExpiresAt = &t
	}
	if t := fromMS(m["disabled_at"]); !t.IsZero() {
		ep.DisabledAt = &t
	}
	if t := fromMS(m["failing_since"]); !t.IsZero() {
		ep.FailingSince = &t
	}
	ep.DroppedDeliveries, _ = strconv.ParseInt(m["dropped"], 10, 64)
	return ep
}

// List returns org's endpoints, oldest first.
func (s *Service) List(ctx context.Context, org string) ([]*webhook.Endpoint, error) {
	ids, err := s.rdb.SMembers(ctx, s.k.org(org)).Result()
	if err != nil {
		return nil, fmt.Errorf("webhooks: list: %w", err)
	}
	out := make([]*webhook.Endpoint, 0, len(ids))
	for _, id := range ids {
		ep, err := s.Get(ctx, org, id)
		if errors.Is(err, webhook.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ep)
	}
	slices.SortFunc(out, func(a, b *webhook.Endpoint) int { return a.CreatedAt.Compare(b.CreatedAt) })
	return out, nil
}

// Update applies p to org's endpoint id. A rotated secret is returned once; the old one keeps
// signing beside it for RotationOverlap. Enabling clears the reason it was disabled.
func (s *Service) Update(ctx context.Context, org, id string, p webhook.Patch) (*webhook.Endpoint, error) {
	if _, err := s.Get(ctx, org, id); err != nil {
		return nil, err
	}
	now := s.cfg.Now().UTC()
	fields := []any{"updated_at", ms(now)}
	if p.URL != nil {
		if err := s.checkURL(ctx, *p.URL); err != nil {
			return nil, err
		}
		fields = append(fields, "url", *p.URL)
	}
	if p.Events != nil {
		ev, err := checkEvents(p.Events)
		if err != nil {
			return nil, err
		}
		fields = append(fields, "events", strings.Join(ev, ","))
	}
	if p.Description != nil {
		fields = append(fields, "description", *p.Description)
	}
	var del []string
	if p.Enabled != nil {
		if *p.Enabled {
			fields = append(fields, "enabled", "1")
			del = append(del, "disabled_reason", "disabled_at", "failing_since")
		} else {
			fields = append(fields, "enabled", "0", "disabled_reason", "disabled by a user", "disabled_at", ms(now))
		}
	}
	var secret string
	if p.RotateSecret {
		cur, err := s.rdb.HGet(ctx, s.k.endpoint(id), "secret").Result()
		if err != nil {
			return nil, fmt.Errorf("webhooks: rotate: %w", err)
		}
		if secret, err = webhook.NewSecret(); err != nil {
			return nil, err
		}
		sealed, err := s.cfg.Secrets.Seal([]byte(secret), id)
		if err != nil {
			return nil, err
		}
		fields = append(fields, "secret", sealed, "prev_secret", cur, "prev_until", ms(now.Add(s.cfg.RotationOverlap)))
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSet(ctx, s.k.endpoint(id), fields...)
	if len(del) > 0 {
		pipe.HDel(ctx, s.k.endpoint(id), del...)
	}
	if _, err := pipe.Exec(ctx); err != nil {
		return nil, fmt.Errorf("webhooks: update: %w", err)
	}
	ep, err := s.Get(ctx, org, id)
	if err != nil {
		return nil, err
	}
	ep.Secret = secret
	return ep, nil
}

// Delete removes org's endpoint id and its deliveries, pending or finished.
func (s *Service) Delete(ctx context.Context, org, id string) error {
	if _, err := s.Get(ctx, org, id); err != nil {
		return err
	}
	pipe := s.rdb.TxPipeline()
	pipe.Del(ctx, s.k.endpoint(id), s.k.testRate(id))
	pipe.SRem(ctx, s.k.org(org), id)
	card := pipe.SCard(ctx, s.k.org(org))
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("webhooks: delete: %w", err)
	}
	// The endpoint is gone, so nothing new is made for it; should this stop half way, the
	// dispatcher finishes the purge when it meets one of the deliveries left.
	if err := s.purge(ctx, id); err != nil {
		return err
	}
	if card.Val() == 0 {
		return s.cfg.Hooks.SetHooked(ctx, org, false)
	}
	return nil
}

// purge removes a deleted endpoint's deliveries, a batch at a time.
func (s *Service) purge(ctx context.Context, ep string) error {
	for {
		left, err := s.call(ctx, "purge", s.cfg.Now(), map[string]any{"ep": ep, "count": 200,
			"keep_s": int64(s.cfg.Retention.Seconds())}).Int()
		if err != nil {
			return fmt.Errorf("webhooks: remove the deliveries of %s: %w", ep, err)
		}
		if left == 0 {
			return nil
		}
	}
}

// secrets opens an endpoint's signing secrets: the current one, and the replaced one while
// its overlap lasts.
func (s *Service) secrets(id string, m map[string]string, now time.Time) ([]string, error) {
	cur, err := s.cfg.Secrets.Open(m["secret"], id)
	if err != nil {
		return nil, fmt.Errorf("webhooks: open the secret of %s: %w", id, err)
	}
	out := []string{string(cur)}
	if until := fromMS(m["prev_until"]); m["prev_secret"] != "" && until.After(now) {
		prev, err := s.cfg.Secrets.Open(m["prev_secret"], id)
		if err == nil {
			out = append(out, string(prev))
		}
	}
	return out, nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func ms(t time.Time) string { return strconv.FormatInt(t.UnixMilli(), 10) }

func fromMS(s string) time.Time {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n == 0 {
		return time.Time{}
	}
	return time.UnixMilli(n).UTC()
}

// FormatSchedule writes a retry schedule as ParseSchedule reads it.
func FormatSchedule(s []time.Duration) string {
	parts := make([]string, len(s))
	for i, d := range s {
		v := d.String() // "5m0s", "2h0m0s": the zero units dropped
		if strings.HasSuffix(v, "m0s") {
			v = strings.TrimSuffix(v, "0s")
		}
		if strings.HasSuffix(v, "h0m") {
			v = strings.TrimSuffix(v, "0m")
		}
		parts[i] = v
	}
	return strings.Join(parts, ",")
}

// ParseSchedule reads a retry schedule: comma-separated Go durations ("5s,5m,30m").
func ParseSchedule(v string) ([]time.Duration, error) {
	var out []time.Duration
	for _, p := range strings.Split(v, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(p))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("%q is not a positive duration", p)
		}
		out = append(out, d)
	}
	return out, nil
}
