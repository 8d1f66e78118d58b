package gpuagent_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/api/apitest"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

// recorder keeps every answer the API gives, but the claims it hands agents (the one channel
// that must carry a job's secrets, to the lease holder's pipeline).
type recorder struct {
	mu      sync.Mutex
	answers []string
}

func (rec *recorder) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		cw := &copyWriter{ResponseWriter: w}
		h.ServeHTTP(cw, r)
		if r.URL.Path == "/v1/agent/claim" {
			return
		}
		rec.mu.Lock()
		rec.answers = append(rec.answers, r.Method+" "+r.URL.String()+"\n"+fmt.Sprint(cw.Header())+"\n"+cw.buf.String())
		rec.mu.Unlock()
	})
}

type copyWriter struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (c *copyWriter) Write(b []byte) (int, error) {
	c.buf.Write(b)
	return c.ResponseWriter.Write(b)
}

func (c *copyWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// The secret audit: jobs submitted with known secret values run to the end; then every API
// answer (but the agents' claims), every log line of the API, the webhooks and the agent,
// every event, every webhook body, every object stored and every value in Redis is searched
// for those values. None may hold one.
func TestSecretAudit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	values := []string{"sk-audit-openai-5f1e7c2a9b", "hf_audit_token_0d4b8e", "wandb-audit-93c1a7f2"}
	var logs lockedBuffer
	logger := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	storeDir := t.TempDir()
	store, err := blob.NewDir(storeDir)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{}
	s := apitest.Start(t, apitest.Options{
		Queue: queue.Config{}, Store: store, Logger: logger, Wrap: rec.wrap,
		Webhooks: &webhooks.Config{Logger: logger, Schedule: []time.Duration{time.Millisecond}, Guard: &webhook.Guard{AllowLoopback: true}},
	})
	user := client.New(s.URL, s.Token("acme", auth.ScopeJobsRead, auth.ScopeJobsWrite, auth.ScopeWebhooks))
	var hookMu sync.Mutex
	var hookBodies []string
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		hookMu.Lock()
		hookBodies = append(hookBodies, fmt.Sprint(r.Header)+string(b))
		hookMu.Unlock()
	}))
	defer recv.Close()
	if _, err := user.CreateWebhook(ctx, recv.URL, webhook.EventTypes, ""); err != nil {
		t.Fatal(err)
	}
	b := bundle{stack: s, user: user, store: store}
	cfg := b.agentConfig(t, "agent-audit", "--emulate.step-time", "20ms")
	cfg.Logger = logger
	b.run(t, cfg)

	job1 := withSteps(6) + fmt.Sprintf("[secrets]\nOPENAI_API_KEY = %q\nHF_TOKEN = %q\n", values[0], values[1])
	job2 := withSteps(4) + fmt.Sprintf("[secrets]\nWANDB_API_KEY = %q\n", values[2])
	var ids []string
	for _, body := range []string{job1, job2} {
		j := b.submit(t, body)
		ids = append(ids, j.ID)
	}
	for _, id := range ids {
		if done := b.waitFor(t, id, "ended", terminal); done.Status != job.Completed {
			t.Fatalf("job %s: %s (%s)", id, done.Status, done.Error)
		}
		// Read everything a user can read of it, so that those answers are audited too.
		_, _ = user.Events(ctx, id, 0)
		_, _ = user.JobMetrics(ctx, id, 0, 0, nil, 0)
		_, _ = user.JobCheckpoints(ctx, id)
		_, _ = user.JobArtifacts(ctx, id)
		_, _ = user.JobLogs(ctx, id, client.LogOptions{})
		_, _ = user.JobProgress(ctx, id)
	}
	if _, _, err := user.ListJobs(ctx, job.ListFilter{}, "", 0); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Webhooks.DrainFor(ctx, 10*time.Second); err != nil {
		t.Fatal(err)
	}

	var places []string
	search := func(where, text string) {
		for _, v := range values {
			if strings.Contains(text, v) {
				places = append(places, fmt.Sprintf("%s holds %s", where, v))
			}
		}
	}
	rec.mu.Lock()
	for _, a := range rec.answers {
		search("an API answer ("+strings.SplitN(a, "\n", 2)[0]+")", a)
	}
	answers := len(rec.answers)
	rec.mu.Unlock()
	search("the logs", logs.String())
	hookMu.Lock()
	for _, body := range hookBodies {
		search("a webhook delivery", body)
	}
	deliveries := len(hookBodies)
	hookMu.Unlock()
	objects := 0
	err = filepath.WalkDir(storeDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		objects++
		search("stored object "+strings.TrimPrefix(path, storeDir), string(b))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, err := s.Redis.Keys(ctx, "*").Result()
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		search("Redis key "+k, redisValue(ctx, t, s, k))
	}
	for _, p := range places {
		t.Error(p)
	}
	if answers < 20 || deliveries < 4 || objects < 10 || len(keys) < 10 || len(logs.String()) == 0 {
		t.Errorf("the audit saw too little: %d answers, %d deliveries, %d objects, %d Redis keys, %d bytes of logs",
			answers, deliveries, objects, len(keys), len(logs.String()))
	}
}

// redisValue is everything key holds, as text.
func redisValue(ctx context.Context, t *testing.T, s *apitest.Stack, key string) string {
	r := s.Redis
	typ, err := r.Type(ctx, key).Result()
	if err != nil {
		t.Fatal(err)
	}
	var v any
	switch typ {
	case "string":
		v, err = r.Get(ctx, key).Result()
	case "hash":
		v, err = r.HGetAll(ctx, key).Result()
	case "list":
		v, err = r.LRange(ctx, key, 0, -1).Result()
	case "set":
		v, err = r.SMembers(ctx, key).Result()
	case "zset":
		v, err = r.ZRangeWithScores(ctx, key, 0, -1).Result()
	case "stream":
		v, err = r.XRange(ctx, key, "-", "+").Result()
	case "none":
		return "" // expired since it was listed
	default:
		t.Fatalf("Redis key %s is a %s, which the audit cannot read", key, typ)
	}
	if err != nil {
		t.Fatal(err)
	}
	return fmt.Sprint(v)
}
