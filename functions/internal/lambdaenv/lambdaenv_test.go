package lambdaenv_test

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"

	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/mototest"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/queue"
)

// The keys and the Redis AUTH token come from Secrets Manager (moto's) when the function's
// configuration names their secrets; the values themselves are nowhere in it.
func TestSecretsComeFromSecretsManager(t *testing.T) {
	t.Parallel()
	moto := mototest.Start(t)
	ctx := context.Background()
	clients := lambdaenv.FromConfig(func() (aws.Config, error) { return moto.AWSConfig(), nil })
	sm, err := clients.SecretsManager()
	if err != nil {
		t.Fatal(err)
	}
	keys, err := auth.NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	const redisAuth = "an-elasticache-auth-token-of-32-chars"
	arns := map[string]string{}
	for name, value := range map[string]string{"jwt": keys.String(), "redis": redisAuth} {
		out, err := sm.(*secretsmanager.Client).CreateSecret(ctx, &secretsmanager.CreateSecretInput{
			Name: aws.String("hostedtrain/test/" + name), SecretString: aws.String(value)})
		if err != nil {
			t.Fatal(err)
		}
		arns[name] = *out.ARN
	}
	rs := redistest.Start(t, func(o *redisproc.Options) { o.Args = append(o.Args, "--requirepass", redisAuth) })
	env := map[string]string{
		"HOSTEDTRAIN_REDIS_URL":         "redis://" + rs.Addr + "/0",
		"HOSTEDTRAIN_REDIS_AUTH_SECRET": arns["redis"],
		"HOSTEDTRAIN_JWT_KEYS_SECRET":   arns["jwt"],
	}
	getenv, err := lambdaenv.Env(ctx, func(k string) string { return env[k] }, clients)
	if err != nil {
		t.Fatal(err)
	}
	ks, err := lambdaenv.Keys(getenv)
	if err != nil || ks.String() != keys.String() {
		t.Fatalf("keys from the secret: %v", err)
	}
	rdb, err := lambdaenv.Redis(getenv)
	if err != nil {
		t.Fatal(err)
	}
	defer rdb.Close()
	if err := rdb.Ping(ctx).Err(); err != nil {
		t.Fatalf("redis with the AUTH token from the secret: %v", err)
	}

	env["HOSTEDTRAIN_SECRETS_KEYS_SECRET"] = "hostedtrain/test/missing"
	if _, err := lambdaenv.Env(ctx, func(k string) string { return env[k] }, clients); err == nil ||
		!strings.Contains(err.Error(), "HOSTEDTRAIN_SECRETS_KEYS_SECRET") {
		t.Errorf("a missing secret: %v", err)
	}
}

// Without a _SECRET variable no AWS client is made: `hostedtrain dev`-like configurations and
// the handler tests need no AWS.
func TestPlainEnvironmentNeedsNoAWS(t *testing.T) {
	t.Parallel()
	var made atomic.Int32
	clients := lambdaenv.Clients{
		SecretsManager: func() (lambdaenv.SecretGetter, error) { made.Add(1); return nil, nil },
	}
	env := map[string]string{"HOSTEDTRAIN_JWT_KEYS": "k1=AAAA", "HOSTEDTRAIN_JWT_KEYS_SECRET": "ignored: set directly"}
	getenv, err := lambdaenv.Env(context.Background(), func(k string) string { return env[k] }, clients)
	if err != nil || getenv("HOSTEDTRAIN_JWT_KEYS") != "k1=AAAA" || made.Load() != 0 {
		t.Fatalf("%v %q %d", err, getenv("HOSTEDTRAIN_JWT_KEYS"), made.Load())
	}
	g, err := lambdaenv.Storage(getenv, nil)
	if err != nil || g != nil {
		t.Fatalf("storage without a role: %v %v", g, err)
	}
}

// HOSTEDTRAIN_AGENT_STORAGE_ROLE makes the API hand agents STS credentials for the store.
func TestStorageGrantsFromTheRole(t *testing.T) {
	t.Parallel()
	moto := mototest.Start(t)
	clients := lambdaenv.FromConfig(func() (aws.Config, error) { return moto.AWSConfig(), nil })
	env := map[string]string{
		"HOSTEDTRAIN_STORE":                  "s3://ht-data/prod?region=eu-west-1",
		"HOSTEDTRAIN_AGENT_STORAGE_ROLE":     "arn:aws:iam::123456789012:role/agent-storage",
		"HOSTEDTRAIN_AGENT_STORAGE_DURATION": "20m",
	}
	getenv := func(k string) string { return env[k] }
	g, err := lambdaenv.Storage(getenv, clients.STS)
	if err != nil {
		t.Fatal(err)
	}
	sg, err := g.Grant(context.Background(), "01936b2e-8f7a-7c3e-9d1a-2b3c4d5e6f70")
	if err != nil {
		t.Fatal(err)
	}
	if sg.Bucket != "ht-data" || sg.Prefix != "prod/" || sg.Region != "eu-west-1" || time.Until(sg.Expiration) > 21*time.Minute {
		t.Errorf("grant %+v", sg)
	}
	env["HOSTEDTRAIN_AGENT_STORAGE_DURATION"] = "12h"
	if _, err := lambdaenv.Storage(getenv, clients.STS); err == nil {
		t.Error("a 12h duration was accepted (STS caps a chained role at 1h)")
	}
}

// The webhook limits come from the environment; a value that is not a positive whole number
// is refused, naming the variable.
func TestWebhookLimitsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	entry, _ := seal.NewKey("k1")
	ring, _ := seal.Parse(entry)
	rdb := redistest.Client(t)
	qc := queue.Config{}
	q := queue.New(rdb, qc)
	t.Cleanup(func() { _ = q.Close() })
	env := map[string]string{"HOSTEDTRAIN_WEBHOOK_MAX_ENDPOINTS": "1"}
	svc, err := lambdaenv.Webhooks(func(k string) string { return env[k] }, rdb, q, qc, ring, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := svc.Create(ctx, "acme", "https://93.184.216.34/a", []string{"*"}, ""); err != nil {
		t.Fatal(err)
	}
	if _, err := svc.Create(ctx, "acme", "https://93.184.216.34/b", []string{"*"}, ""); err == nil {
		t.Error("HOSTEDTRAIN_WEBHOOK_MAX_ENDPOINTS=1 allowed a second endpoint")
	}
	for _, bad := range []string{"0", "-3", "many"} {
		env := map[string]string{"HOSTEDTRAIN_WEBHOOK_TESTS_PER_ORG": bad}
		if _, err := lambdaenv.Webhooks(func(k string) string { return env[k] }, rdb, q, qc, ring, nil); err == nil ||
			!strings.Contains(err.Error(), "HOSTEDTRAIN_WEBHOOK_TESTS_PER_ORG") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}

// Delay scheduling's settings come from the environment; a number that is no rate or factor is
// refused.
func TestPlacementSettingsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	env := map[string]string{"HOSTEDTRAIN_WEIGHTS_RATE": "5e8", "HOSTEDTRAIN_WAIT_FOR_WEIGHTS": "1.5", "HOSTEDTRAIN_HELD_TTL": "30m"}
	c, err := lambdaenv.Queue(func(k string) string { return env[k] })
	if err != nil || c.WeightsRate != 5e8 || c.WaitForWeights != 1.5 || c.HeldTTL != 30*time.Minute {
		t.Fatalf("rate %v, factor %v, held TTL %v, %v; want 5e8, 1.5 and 30m", c.WeightsRate, c.WaitForWeights, c.HeldTTL, err)
	}
	for name, bad := range map[string][]string{
		"HOSTEDTRAIN_WEIGHTS_RATE":     {"0", "fast", "-1", "NaN", "+Inf"},
		"HOSTEDTRAIN_WAIT_FOR_WEIGHTS": {"-1", "twice", "Inf"},
	} {
		for _, v := range bad {
			env := map[string]string{name: v}
			if _, err := lambdaenv.Queue(func(k string) string { return env[k] }); err == nil || !strings.Contains(err.Error(), name) {
				t.Errorf("%s=%s: %v; want it refused", name, v, err)
			}
		}
	}
	c, err = lambdaenv.Queue(func(string) string { return "" })
	if err != nil || c.WaitForWeights != 0 {
		t.Fatalf("unset: factor %v, %v; want 0, never waiting", c.WaitForWeights, err)
	}
}
