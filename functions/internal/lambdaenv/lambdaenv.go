// Package lambdaenv builds the dependencies the Lambda functions share from their environment
// variables, so each function's main only wires:
//
//	HOSTEDTRAIN_REDIS_URL      redis:// or rediss:// URL of ElastiCache (required)
//	HOSTEDTRAIN_REDIS_CLUSTER  "true" for a cluster-mode endpoint
//	HOSTEDTRAIN_REDIS_PREFIX   key prefix and hash tag (default "ht")
//	HOSTEDTRAIN_JWT_KEYS       kid=base64key[,kid=base64key]; the first signs
//	HOSTEDTRAIN_SECRETS_KEYS   kid=base64key[,...] 32-byte AES keys for job secrets; the first seals
//	HOSTEDTRAIN_LEASE_TTL      lease lifetime, a Go duration (default 60s)
//	HOSTEDTRAIN_MAX_CLAIM_WAIT cap on a claim's long poll (default 20s; billed under Lambda)
package lambdaenv

import (
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/queue"
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
		return redis.NewClusterClient(o), nil
	}
	o, err := redis.ParseURL(url)
	if err != nil {
		return nil, fmt.Errorf("HOSTEDTRAIN_REDIS_URL: %w", err)
	}
	return redis.NewClient(o), nil
}

// Queue is the queue configuration.
func Queue(getenv Getenv) (queue.Config, error) {
	c := queue.Config{Prefix: getenv("HOSTEDTRAIN_REDIS_PREFIX")}
	var err error
	if c.LeaseTTL, err = duration(getenv, "HOSTEDTRAIN_LEASE_TTL"); err != nil {
		return c, err
	}
	if c.MaxClaimWait, err = duration(getenv, "HOSTEDTRAIN_MAX_CLAIM_WAIT"); err != nil {
		return c, err
	}
	return c, nil
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
