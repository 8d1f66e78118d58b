package main

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redistest"
	"github.com/hostedtrain/hostedtrain/internal/seal"
)

func loadEvent(t *testing.T, name, token string) events.APIGatewayV2HTTPRequest {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	var ev events.APIGatewayV2HTTPRequest
	if err := json.Unmarshal(b, &ev); err != nil {
		t.Fatal(err)
	}
	if _, ok := ev.Headers["authorization"]; ok {
		ev.Headers["authorization"] = "Bearer " + token
	}
	return ev
}

// lambdaEnv is the environment an API function needs: a private redis-server, signing keys and
// sealing keys; it returns the keys too, to issue tokens with.
func lambdaEnv(t *testing.T) (map[string]string, *auth.KeySet) {
	t.Helper()
	rs := redistest.Start(t)
	keys, err := auth.NewKeySet()
	if err != nil {
		t.Fatal(err)
	}
	sealKey, err := seal.NewKey("k1")
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"HOSTEDTRAIN_REDIS_URL":    "redis://" + rs.Addr + "/0",
		"HOSTEDTRAIN_JWT_KEYS":     keys.String(),
		"HOSTEDTRAIN_SECRETS_KEYS": sealKey,
	}, keys
}

func TestLambdaServesTheAPI(t *testing.T) {
	t.Parallel()
	env, keys := lambdaEnv(t)
	h, err := newHandler(context.Background(), func(k string) string { return env[k] }, lambdaenv.Clients{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	handle := lambdaHandler(h)
	tok, err := keys.Issue(auth.TokenRequest{Org: "acme", Scopes: []string{auth.ScopeJobsRead, auth.ScopeJobsWrite}, TTL: time.Hour}, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()

	resp, err := handle(ctx, loadEvent(t, "healthz.json", ""))
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, `"ok"`) {
		t.Fatalf("healthz: %d %q %v", resp.StatusCode, resp.Body, err)
	}

	resp, err = handle(ctx, loadEvent(t, "submit-job.json", tok))
	if err != nil || resp.StatusCode != http.StatusCreated {
		t.Fatalf("submit: %d %s %v", resp.StatusCode, resp.Body, err)
	}
	var j job.Job
	if err := json.Unmarshal([]byte(resp.Body), &j); err != nil {
		t.Fatal(err)
	}
	if j.Status != job.Queued || j.Org != "acme" || j.Config.MaxSteps != 20 || resp.Headers["Location"] != "/v1/jobs/"+j.ID {
		t.Errorf("submitted %+v, headers %v", j, resp.Headers)
	}

	resp, err = handle(ctx, loadEvent(t, "list-jobs.json", tok))
	if err != nil || resp.StatusCode != http.StatusOK || !strings.Contains(resp.Body, j.ID) {
		t.Fatalf("list: %d %s %v", resp.StatusCode, resp.Body, err)
	}

	resp, err = handle(ctx, loadEvent(t, "list-jobs.json", "forged"))
	if err != nil || resp.StatusCode != http.StatusUnauthorized || resp.Headers["Content-Type"] != "application/problem+json" {
		t.Errorf("forged token: %d %v %v", resp.StatusCode, resp.Headers, err)
	}
}

// HOSTEDTRAIN_MODELS is the operator's list of models; a list that does not parse stops the
// function at its start, naming the variable, rather than serving without it.
func TestLambdaTakesTheOperatorsModels(t *testing.T) {
	t.Parallel()
	env, _ := lambdaEnv(t)
	env["HOSTEDTRAIN_MODELS"] = "[[model]]\nname = \"Qwen/Qwen3-4B-Instruct-2507\"\n"
	getenv := func(k string) string { return env[k] }
	if _, err := newHandler(context.Background(), getenv, lambdaenv.Clients{}, nil); err == nil || !strings.Contains(err.Error(), "HOSTEDTRAIN_MODELS") {
		t.Errorf("a list without gpus: %v", err)
	}
	env["HOSTEDTRAIN_MODELS"] += "gpus = 2\n"
	if _, err := newHandler(context.Background(), getenv, lambdaenv.Clients{}, nil); err != nil {
		t.Errorf("a good list: %v", err)
	}
}
