// Package lambdaenv builds the dependencies the Lambda functions share from their environment
// variables, so each function's main only wires:
//
//	HOSTEDTRAIN_REDIS_URL      redis:// or rediss:// URL of ElastiCache (required)
//	HOSTEDTRAIN_REDIS_CLUSTER  "true" for a cluster-mode endpoint
//	HOSTEDTRAIN_REDIS_AUTH     the AUTH token (ElastiCache's), if not in the URL
//	HOSTEDTRAIN_REDIS_PREFIX   key prefix and hash tag (default "ht")
//	HOSTEDTRAIN_JWT_KEYS       kid=base64key[,kid=base64key]; the first signs
//	HOSTEDTRAIN_SECRETS_KEYS   kid=base64key[,...] 32-byte AES keys for job secrets; the first seals
//	HOSTEDTRAIN_LEASE_TTL      lease lifetime, a Go duration (default 60s)
//	HOSTEDTRAIN_MAX_CLAIM_WAIT cap on a claim's long poll (default 20s; billed under Lambda)
//	HOSTEDTRAIN_MAX_ATTEMPTS   attempts a job may have: lost leases and platform faults are
//	                           retried until then (default 3)
//	HOSTEDTRAIN_RETRY_ELSEWHERE_FOR  how long a retried job passes over the node it failed on
//	                           (default 5m)
//	HOSTEDTRAIN_QUARANTINE_AFTER     failed health checks of one node within the window that
//	                           quarantine it (default 1; -1: never)
//	HOSTEDTRAIN_QUARANTINE_WINDOW    that window (default 1h)
//	HOSTEDTRAIN_MAX_RUNNING    per-organization running limit unless set per org (default none)
//	HOSTEDTRAIN_MAX_QUEUED     per-organization queued limit unless set per org, restarts included
//	                           (default 1000)
//	HOSTEDTRAIN_JOB_RETENTION  how long a job that ended stays in Redis before it is archived to
//	                           HOSTEDTRAIN_STORE (default 168h)
//	HOSTEDTRAIN_MAX_ENDED      jobs that ended an organization keeps in Redis within the retention;
//	                           its oldest past this are archived early (default 10000)
//	HOSTEDTRAIN_MAX_ORG_BYTES  bytes one organization may hold in Redis (live jobs' configs and
//	                           secrets, records, events); past it 429 (default 67108864; -1: none)
//	HOSTEDTRAIN_DEFAULT_TIME_LIMIT  time limit of a run whose job sets none (default none)
//	HOSTEDTRAIN_USAGE_HALF_LIFE     how fast past GPU use stops counting (default 24h)
//	HOSTEDTRAIN_STOP_GRACE     how long a stopped job's agent has to confirm (default 5m)
//	HOSTEDTRAIN_STORE          s3://BUCKET[/PREFIX] the agents write jobs' data to (optional: without
//	                           it the metrics, checkpoints and artifacts endpoints answer 503)
//	HOSTEDTRAIN_WEBHOOK_SCHEDULE  retry waits of webhook deliveries, comma-separated Go durations
//	                           (default 5s,5m,30m,2h,5h,10h,10h)
//	HOSTEDTRAIN_STREAM_LIMIT   how long an event or log stream lasts before the client reconnects
//	                           (default 25s: API Gateway buffers the answer)
//	HOSTEDTRAIN_JUDGE_BASE_URL the operator's OpenAI-compatible judge endpoint (https): jobs graded by
//	                           a judge they hold no key for are graded through it, billed to them
//	HOSTEDTRAIN_JUDGE_KEY      its key (may come from Secrets Manager); required with the URL
//	HOSTEDTRAIN_MODELS         the operator's list of models training jobs may name: TOML [[model]]
//	                           tables (name, gpus, price_per_gpu_hour); unset: any model
//	HOSTEDTRAIN_STORE_KMS_KEY  the bucket's SSE-KMS key ARN, which agents' credentials may use
//	HOSTEDTRAIN_AGENT_STORAGE_ROLE      role assumed for agents' job-scoped storage credentials
//	HOSTEDTRAIN_AGENT_STORAGE_DURATION  how long those last (15m to 1h, default 1h)
//	HOSTEDTRAIN_WEBHOOKS_ALLOW_LOOPBACK  "true" lets deliveries reach 127.0.0.1 (tests only; never
//	                           in production)
//
// HOSTEDTRAIN_JWT_KEYS, HOSTEDTRAIN_SECRETS_KEYS and HOSTEDTRAIN_REDIS_AUTH may instead be read
// from Secrets Manager at start: set NAME_SECRET to the secret's ARN (see WithSecrets).
package lambdaenv

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

// Getenv reads a variable; os.Getenv in production, a map in tests.
type Getenv func(string) string

// Redis connects to the configured Redis (a single server or a cluster).
func Redis(getenv Getenv) (redis.UniversalClient, error) {
	url := getenv("HOSTEDTRAIN_REDIS_URL")
	if url == "" {
		return nil, errors.New("HOSTEDTRAIN_REDIS_URL is not set")
	}
	if getenv("HOSTEDTRAIN_REDIS_CLUSTER") == "true" {
		o, err := redis.ParseClusterURL(url)
		if err != nil {
			return nil, fmt.Errorf("HOSTEDTRAIN_REDIS_URL: %w", err)
		}
		if pw := getenv("HOSTEDTRAIN_REDIS_AUTH"); pw != "" {
			o.Password = pw
		}
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("HOSTEDTRAIN_REDIS_URL: %w", err)
	}
	if pw := getenv("HOSTEDTRAIN_REDIS_AUTH"); pw != "" {
		o.Password = pw
	}
	return redis.NewClient(o), nil
}

// Queue is the queue configuration.
func Queue(getenv Getenv) (queue.Config, error) {
	c := queue.Config{Prefix: getenv("HOSTEDTRAIN_REDIS_PREFIX")}
	durations := map[string]*time.Duration{
		"HOSTEDTRAIN_LEASE_TTL":           &c.LeaseTTL,
		"HOSTEDTRAIN_MAX_CLAIM_WAIT":      &c.MaxClaimWait,
		"HOSTEDTRAIN_DEFAULT_TIME_LIMIT":  &c.DefaultTimeLimit,
		"HOSTEDTRAIN_USAGE_HALF_LIFE":     &c.UsageHalfLife,
		"HOSTEDTRAIN_STOP_GRACE":          &c.StopGrace,
		"HOSTEDTRAIN_JOB_RETENTION":       &c.Retention,
		"HOSTEDTRAIN_RETRY_ELSEWHERE_FOR": &c.RetryElsewhereFor,
		"HOSTEDTRAIN_QUARANTINE_WINDOW":   &c.QuarantineWindow,
		"HOSTEDTRAIN_HELD_TTL":            &c.HeldTTL,
	}
	for name, d := range durations {
		v, err := duration(getenv, name)
		if err != nil {
			return c, err
		}
		*d = v
	}
	ints := map[string]*int{
		"HOSTEDTRAIN_MAX_ATTEMPTS":     &c.MaxAttempts,
		"HOSTEDTRAIN_MAX_RUNNING":      &c.MaxRunning,
		"HOSTEDTRAIN_MAX_QUEUED":       &c.MaxQueued,
		"HOSTEDTRAIN_MAX_ENDED":        &c.MaxEnded,
		"HOSTEDTRAIN_QUARANTINE_AFTER": &c.QuarantineAfter,
	}
	for name, n := range ints {
		if v := getenv(name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || (i < 0 && !(name == "HOSTEDTRAIN_QUARANTINE_AFTER" && i == -1)) {
				return c, fmt.Errorf("%s: want a whole number, got %q", name, v)
			}
			*n = i
		}
	}
	if v := getenv("HOSTEDTRAIN_MAX_ORG_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || (n < 0 && n != -1) {
			return c, fmt.Errorf("HOSTEDTRAIN_MAX_ORG_BYTES: want a whole number of bytes (-1: none), got %q", v)
		}
		c.MaxOrgBytes = n
	}
	floats := []struct {
		name string
		v    *float64
		min  float64 // the least allowed: 0 allowed where min is 0, else above it
	}{{"HOSTEDTRAIN_WEIGHTS_RATE", &c.WeightsRate, 1}, {"HOSTEDTRAIN_WAIT_FOR_WEIGHTS", &c.WaitForWeights, 0}}
	for _, f := range floats {
		if v := getenv(f.name); v != "" {
			r, err := strconv.ParseFloat(v, 64)
			if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r < f.min {
				return c, fmt.Errorf("%s: want a number of at least %g, got %q", f.name, f.min, v)
			}
			*f.v = r
		}
	}
	return c, nil
}

// Jobs is the queue on the configured Redis, archiving to the configured store: the client,
// the queue and its configuration.
func Jobs(ctx context.Context, getenv Getenv) (redis.UniversalClient, *queue.Client, queue.Config, error) {
	qc, err := Queue(getenv)
	if err != nil {
		return nil, nil, qc, err
	}
	if qc.Store, err = Store(ctx, getenv); err != nil {
		return nil, nil, qc, err
	}
	rdb, err := Redis(getenv)
	if err != nil {
		return nil, nil, qc, err
	}
	return rdb, queue.New(rdb, qc), qc, nil
}

// Keys are the token signing keys.
func Keys(getenv Getenv) (*auth.KeySet, error) {
	v := getenv("HOSTEDTRAIN_JWT_KEYS")
	if v == "" {
		return nil, errors.New("HOSTEDTRAIN_JWT_KEYS is not set")
	}
	return auth.ParseKeySet(v)
}

// Secrets is the key ring that seals job secrets.
func Secrets(getenv Getenv) (*seal.Keyring, error) {
	v := getenv("HOSTEDTRAIN_SECRETS_KEYS")
	if v == "" {
		return nil, errors.New("HOSTEDTRAIN_SECRETS_KEYS is not set")
	}
	return seal.Parse(v)
}

func duration(getenv Getenv, name string) (time.Duration, error) {
	v := getenv(name)
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", name, err)
	}
	return d, nil
}

// Store is the object storage jobs' data lives in; nil when HOSTEDTRAIN_STORE is not set.
func Store(ctx context.Context, getenv Getenv) (blob.Store, error) {
	v := getenv("HOSTEDTRAIN_STORE")
	if v == "" {
		return nil, nil
	}
	cfg, err := parseStore(v)
	if err != nil {
		return nil, err
	}
	return blob.NewS3(ctx, cfg)
}

func parseStore(v string) (blob.S3Config, error) {
	cfg, err := blob.ParseS3URL(v)
	if err != nil {
		return cfg, fmt.Errorf("HOSTEDTRAIN_STORE: %w", err)
	}
	return cfg, nil
}

// Webhooks is the webhook service over the queue q, sealing secrets with secrets.
func Webhooks(getenv Getenv, rdb redis.UniversalClient, q *queue.Client, qc queue.Config, secrets *seal.Keyring, logger *slog.Logger) (*webhooks.Service, error) {
	cfg := webhooks.Config{
		Prefix: qc.Prefix, Secrets: secrets, Jobs: q, Hooks: q, Logger: logger,
		Guard: &webhook.Guard{AllowLoopback: getenv("HOSTEDTRAIN_WEBHOOKS_ALLOW_LOOPBACK") == "true"},
	}
	if v := getenv("HOSTEDTRAIN_WEBHOOK_SCHEDULE"); v != "" {
		sched, err := webhooks.ParseSchedule(v)
		if err != nil {
			return nil, fmt.Errorf("HOSTEDTRAIN_WEBHOOK_SCHEDULE: %w", err)
		}
		cfg.Schedule = sched
	}
	ints := map[string]*int{
		"HOSTEDTRAIN_WEBHOOK_MAX_ENDPOINTS":      &cfg.MaxEndpoints,
		"HOSTEDTRAIN_WEBHOOK_ORG_CONCURRENCY":    &cfg.OrgConcurrency,
		"HOSTEDTRAIN_WEBHOOK_KEEP_DELIVERIES":    &cfg.KeepDeliveries,
		"HOSTEDTRAIN_WEBHOOK_TESTS_PER_ENDPOINT": &cfg.TestsPerEndpoint,
		"HOSTEDTRAIN_WEBHOOK_TESTS_PER_ORG":      &cfg.TestsPerOrg,
	}
	for name, n := range ints {
		if v := getenv(name); v != "" {
			i, err := strconv.Atoi(v)
			if err != nil || i < 1 {
				return nil, fmt.Errorf("%s: want a whole number above 0, got %q", name, v)
			}
			*n = i
		}
	}
	return webhooks.New(rdb, cfg)
}
