package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A scheduled run drains the outbox: an event of an organization with an endpoint reaches the
// endpoint, signed.
func TestAScheduledRunDeliversTheOutbox(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	sealKey, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	env := map[string]string{
		"HOSTEDTRAIN_REDIS_URL":               "redis://" + rs.Addr + "/0",
		"HOSTEDTRAIN_SECRETS_KEYS":            sealKey,
		"HOSTEDTRAIN_WEBHOOKS_ALLOW_LOOPBACK": "true",
		"HOSTEDTRAIN_WEBHOOK_SCHEDULE":        "1s,2s",
	}
	svc, err := newService(func(k string) string { return env[k] }, nil)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var secret string
	var bodies []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if err := webhook.Verify(secret, r.Header, b, time.Now()); err != nil {
			t.Errorf("delivery does not verify: %v", err)
		}
		bodies = append(bodies, string(b))
	}))
	defer recv.Close()
	ctx := context.Background()
	ep, err := svc.Create(ctx, "acme", recv.URL, []string{"job.queued"}, "")
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	secret = ep.Secret
	mu.Unlock()
	q := queue.New(redis.NewClient(&redis.Options{Addr: rs.Addr}), queue.Config{})
	defer q.Close()
	spec := jobspec.Spec{Kind: "rl", Model: "m", MaxSteps: 1, Resources: jobspec.Resources{GPUs: 1, GPUType: "H100"}, Env: []jobspec.Env{{ID: "e", Weight: 1}}}
	if _, _, err := q.Submit(ctx, job.Submission{Org: "acme", Spec: spec}, "", ""); err != nil {
		t.Fatal(err)
	}

	raw, err := os.ReadFile(filepath.Join("testdata", "scheduled-event.json"))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.EventBridgeEvent
	if err := json.Unmarshal(raw, &ev); err != nil {
		t.Fatal(err)
	}
	lctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	res, err := handler(svc)(lctx, ev)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if res.Events != 1 || res.Delivered != 1 || len(bodies) != 1 {
		t.Fatalf("run %+v, %d bodies", res, len(bodies))
	}
	var msg struct {
		Type string
		Data struct {
			JobID    string `json:"job_id"`
			Sequence int64
		}
	}
	if err := json.Unmarshal([]byte(bodies[0]), &msg); err != nil || msg.Type != "job.queued" || msg.Data.Sequence != 1 {
		t.Errorf("body %s", bodies[0])
	}
}
