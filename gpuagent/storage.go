package gpuagent

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// grantedCreds are the storage credentials the service granted for one job: they reach that
// job's data alone and expire; the run asks for fresh ones on a heartbeat before they do, and
// the S3 client picks the fresh ones up when the old ones lapse.
type grantedCreds struct {
	mu       sync.Mutex
	grant    job.StorageGrant
	lifetime time.Duration // of the newest grant, as received
}

func newGrantedCreds(g *job.StorageGrant, now time.Time) *grantedCreds {
	c := &grantedCreds{}
	c.update(g, now)
	return c
}

// expirySkew signs nothing with credentials in their last seconds, whatever the clocks say.
const expirySkew = 30 * time.Second

// Retrieve implements aws.CredentialsProvider.
func (c *grantedCreds) Retrieve(context.Context) (aws.Credentials, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return aws.Credentials{
		AccessKeyID: c.grant.AccessKeyID, SecretAccessKey: c.grant.SecretAccessKey, SessionToken: c.grant.SessionToken,
		Source: "hostedtrain job grant", CanExpire: true, Expires: c.grant.Expiration.Add(-expirySkew),
	}, nil
}

func (c *grantedCreds) update(g *job.StorageGrant, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.grant, c.lifetime = *g, g.Expiration.Sub(now)
}

// due says whether to ask for fresh credentials: within 15 minutes of expiry, or half the
// lifetime of a shorter-lived grant.
func (c *grantedCreds) due(now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.grant.Expiration.Sub(now) < min(15*time.Minute, c.lifetime/2)
}

// storeFor is the storage a claimed job's data goes to: the service's grant when the claim
// carries one, else the agent's own store.
func (a *Agent) storeFor(ctx context.Context, cl *job.Claim) (blob.Store, *grantedCreds, error) {
	g := cl.Storage
	if g == nil {
		if a.cfg.Store == nil {
			return nil, nil, errors.New("the service granted no storage with the claim and the agent has no store of its own (--store)")
		}
		return a.cfg.Store, nil, nil
	}
	creds := newGrantedCreds(g, time.Now())
	store, err := blob.NewS3(ctx, blob.S3Config{
		Bucket: g.Bucket, Prefix: g.Prefix, Endpoint: g.Endpoint, Region: g.Region, Credentials: creds,
		PartSize: a.cfg.PartSize, Concurrency: a.cfg.Concurrency,
	})
	if err != nil {
		return nil, nil, err
	}
	return store, creds, nil
}
