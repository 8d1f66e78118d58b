package api_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/sts"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/grant"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/mototest"
)

// The agent that claims a job gets STS credentials for it (moto's STS), fresh ones on a
// heartbeat that asks while its lease is current, and none with a stale lease.
func TestClaimCarriesStorageCredentials(t *testing.T) {
	t.Parallel()
	moto := mototest.Start(t)
	st := apitest.Start(t, apitest.Options{Storage: &grant.STS{
		Client: sts.NewFromConfig(moto.AWSConfig()), RoleARN: "arn:aws:iam::123456789012:role/agent-storage",
		Bucket: "ht-data", Prefix: "prod/", Region: "us-east-1",
	}})
	ctx := context.Background()
	user := client.New(st.URL, st.Token("acme", "jobs:write", "jobs:read"))
	sub, err := user.SubmitJob(ctx, fixture(t, "hosted-basic.toml"), "application/toml", "")
	if err != nil {
		t.Fatal(err)
	}
	agent := client.New(st.URL, st.AgentToken("agent-1"))
	cl, err := agent.Claim(ctx, job.ClaimRequest{GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v %v", cl, err)
	}
	g := cl.Storage
	if cl.Job.ID != sub.ID || g == nil || g.Bucket != "ht-data" || g.Prefix != "prod/" || g.AccessKeyID == "" ||
		g.SessionToken == "" || time.Until(g.Expiration) < 50*time.Minute {
		t.Fatalf("claim's storage: %+v", g)
	}

	rep, err := agent.Heartbeat(ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token})
	if err != nil || rep.Storage != nil {
		t.Fatalf("a heartbeat that did not ask got %+v %v", rep.Storage, err)
	}
	rep, err = agent.Heartbeat(ctx, cl.Job.ID, job.Heartbeat{Token: cl.Lease.Token, StorageRefresh: true})
	if err != nil || rep.Storage == nil || rep.Storage.AccessKeyID == "" || rep.Storage.AccessKeyID == g.AccessKeyID {
		t.Fatalf("refresh: %+v %v", rep.Storage, err)
	}
	_, err = agent.Heartbeat(ctx, cl.Job.ID, job.Heartbeat{Token: "1.stale", StorageRefresh: true})
	if !errors.Is(err, job.ErrLeaseLost) {
		t.Fatalf("a stale lease asked for credentials: %v", err)
	}
}

type failingGranter struct{ calls atomic.Int32 }

func (f *failingGranter) Grant(context.Context, string, ...string) (*job.StorageGrant, error) {
	f.calls.Add(1)
	return nil, errors.New("sts: throttled")
}

// When credentials cannot be issued the claim answers 503 with Retry-After and the job is
// queued again at once (a hand-back, which spends no attempt).
func TestClaimWithoutStorageHandsTheJobBack(t *testing.T) {
	t.Parallel()
	g := &failingGranter{}
	st := apitest.Start(t, apitest.Options{Storage: g})
	ctx := context.Background()
	user := client.New(st.URL, st.Token("acme", "jobs:write", "jobs:read"))
	sub, err := user.SubmitJob(ctx, fixture(t, "hosted-basic.toml"), "application/toml", "")
	if err != nil {
		t.Fatal(err)
	}
	agent := client.New(st.URL, st.AgentToken("agent-1"))
	_, err = agent.Claim(ctx, job.ClaimRequest{GPUs: []job.GPU{{Model: "H100", Count: 8}}})
	var apiErr *client.Error
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusServiceUnavailable || g.calls.Load() != 1 {
		t.Fatalf("claim: %v (grants asked %d)", err, g.calls.Load())
	}
	j, err := user.GetJob(ctx, sub.ID)
	if err != nil || j.Status != job.Queued || j.Error != "" {
		t.Fatalf("job after the failed grant: %+v %v", j, err)
	}
	evs, err := user.Events(ctx, sub.ID, 0)
	if err != nil || len(evs) == 0 {
		t.Fatal(evs, err)
	}
	if last := evs[len(evs)-1]; last.Type != "job.retrying" || !strings.Contains(last.Detail, "storage credentials") {
		t.Errorf("last event %+v", last)
	}
}
