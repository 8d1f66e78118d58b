package lambdaenv

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awsconfig "github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/service/secretsmanager"
	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/hostedtrain/hostedtrain/internal/grant"
)

// SecretVars are the variables whose values may come from Secrets Manager instead: set
// NAME_SECRET to the secret's ARN (or name) and NAME is read from it at start. The values then
// never appear in the function's configuration.
var SecretVars = []string{"HOSTEDTRAIN_JWT_KEYS", "HOSTEDTRAIN_SECRETS_KEYS", "HOSTEDTRAIN_REDIS_AUTH", "HOSTEDTRAIN_JUDGE_KEY"}

// SecretGetter is the one Secrets Manager call made (*secretsmanager.Client in production).
type SecretGetter interface {
	GetSecretValue(ctx context.Context, in *secretsmanager.GetSecretValueInput, opts ...func(*secretsmanager.Options)) (*secretsmanager.GetSecretValueOutput, error)
}

// WithSecrets reads the values of SecretVars that name a secret (NAME_SECRET) from Secrets
// Manager, through the client sm returns (called only when one is needed), all at once, and
// returns a Getenv that answers them. NAME set directly wins over NAME_SECRET.
func WithSecrets(ctx context.Context, getenv Getenv, sm func() (SecretGetter, error)) (Getenv, error) {
	ids := map[string]string{} // variable -> secret
	for _, name := range SecretVars {
		if id := getenv(name + "_SECRET"); id != "" && getenv(name) == "" {
			ids[name] = id
		}
	}
	values := map[string]string{}
	if len(ids) > 0 {
		client, err := sm()
		if err != nil {
			return nil, err
		}
		// In parallel: each read is a round trip of a cold start.
		var mu sync.Mutex
		var wg sync.WaitGroup
		var errs []error
		for name, id := range ids {
			wg.Go(func() {
				v, err := readSecret(ctx, client, id)
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					errs = append(errs, fmt.Errorf("%s_SECRET: %w", name, err))
					return
				}
				values[name] = v
			})
		}
		wg.Wait()
		if err := errors.Join(errs...); err != nil {
			return nil, err
		}
	}
	return func(k string) string {
		if v, ok := values[k]; ok {
			return v
		}
		return getenv(k)
	}, nil
}

func readSecret(ctx context.Context, client SecretGetter, id string) (string, error) {
	out, err := client.GetSecretValue(ctx, &secretsmanager.GetSecretValueInput{SecretId: aws.String(id)})
	if err != nil {
		return "", err
	}
	if out.SecretString == nil || *out.SecretString == "" {
		return "", fmt.Errorf("secret %s has no string value", id)
	}
	return *out.SecretString, nil
}

// Storage is the granter that hands agents credentials limited to one job's data, when
// HOSTEDTRAIN_AGENT_STORAGE_ROLE names the role to assume (nil otherwise: agents then need
// storage of their own). The store is HOSTEDTRAIN_STORE's;
// HOSTEDTRAIN_AGENT_STORAGE_DURATION (15m to 1h, default 1h) is how long credentials last and
// HOSTEDTRAIN_STORE_KMS_KEY the bucket's key, which they may use through S3.
func Storage(getenv Getenv, stsClient func() (grant.AssumeRoler, error)) (grant.Granter, error) {
	role := getenv("HOSTEDTRAIN_AGENT_STORAGE_ROLE")
	if role == "" {
		return nil, nil
	}
	store := getenv("HOSTEDTRAIN_STORE")
	if store == "" {
		return nil, errors.New("HOSTEDTRAIN_AGENT_STORAGE_ROLE needs HOSTEDTRAIN_STORE")
	}
	cfg, err := parseStore(store)
	if err != nil {
		return nil, err
	}
	d, err := duration(getenv, "HOSTEDTRAIN_AGENT_STORAGE_DURATION")
	if err != nil {
		return nil, err
	}
	if d != 0 && (d < 15*time.Minute || d > time.Hour) {
		return nil, fmt.Errorf("HOSTEDTRAIN_AGENT_STORAGE_DURATION: %v is outside 15m to 1h", d)
	}
	c, err := stsClient()
	if err != nil {
		return nil, err
	}
	return &grant.STS{
		Client: c, RoleARN: role, Bucket: cfg.Bucket, Prefix: cfg.Prefix, Region: cfg.Region,
		KMSKeyARN: getenv("HOSTEDTRAIN_STORE_KMS_KEY"), Duration: d,
	}, nil
}

// Clients make the SDK clients the functions use; each is called only when needed.
type Clients struct {
	SecretsManager func() (SecretGetter, error)
	STS            func() (grant.AssumeRoler, error)
}

// AWS is the clients from the SDK's default configuration (the function's role), loaded once
// and only when a client is first needed.
func AWS(ctx context.Context) Clients {
	cfg := sync.OnceValues(func() (aws.Config, error) { return awsconfig.LoadDefaultConfig(ctx) })
	return FromConfig(cfg)
}

// FromConfig is the clients from the configuration cfg returns.
func FromConfig(cfg func() (aws.Config, error)) Clients {
	return Clients{
		SecretsManager: func() (SecretGetter, error) {
			c, err := cfg()
			if err != nil {
				return nil, err
			}
			return secretsmanager.NewFromConfig(c), nil
		},
		STS: func() (grant.AssumeRoler, error) {
			c, err := cfg()
			if err != nil {
				return nil, err
			}
			return sts.NewFromConfig(c), nil
		},
	}
}

// Env is the function's environment, with the secrets WithSecrets reads.
func Env(ctx context.Context, getenv Getenv, c Clients) (Getenv, error) {
	return WithSecrets(ctx, getenv, c.SecretsManager)
}
