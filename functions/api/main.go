// Command api is the hostedtrain API as an AWS Lambda function behind an API Gateway HTTP API
// (payload v2). It is the same http.Handler that `hostedtrain dev` serves; the Lambda event is
// converted at this edge by aws-lambda-go-api-proxy and nowhere else.
package main

import (
	"context"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"
	"github.com/awslabs/aws-lambda-go-api-proxy/httpadapter"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/internal/auth"
)

func main() {
	ctx := context.Background()
	h, err := newHandler(ctx, os.Getenv, lambdaenv.AWS(ctx), slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(lambdaHandler(h))
}

// newHandler builds the API from the function's environment.
func newHandler(ctx context.Context, getenv lambdaenv.Getenv, clients lambdaenv.Clients, logger *slog.Logger) (http.Handler, error) {
	getenv, err := lambdaenv.Env(ctx, getenv, clients)
	if err != nil {
		return nil, err
	}
	rdb, q, qc, err := lambdaenv.Jobs(ctx, getenv)
	if err != nil {
		return nil, err
	}
	keys, err := lambdaenv.Keys(getenv)
	if err != nil {
		return nil, err
	}
	secrets, err := lambdaenv.Secrets(getenv)
	if err != nil {
		return nil, err
	}
	store, err := lambdaenv.Store(ctx, getenv)
	if err != nil {
		return nil, err
	}
	storage, err := lambdaenv.Storage(getenv, clients.STS)
	if err != nil {
		return nil, err
	}
	hooks, err := lambdaenv.Webhooks(getenv, rdb, q, qc, secrets, logger)
	if err != nil {
		return nil, err
	}
	// API Gateway buffers a function's answer: an event or log stream must end within the
	// integration's timeout for the client to see it, and the client reconnects from there.
	streamLimit := 25 * time.Second
	if v := getenv("HOSTEDTRAIN_STREAM_LIMIT"); v != "" {
		if streamLimit, err = time.ParseDuration(v); err != nil {
			return nil, fmt.Errorf("HOSTEDTRAIN_STREAM_LIMIT: %w", err)
		}
	}
	// HOSTEDTRAIN_MODELS, if set, is the operator's list of models ([[model]] tables in TOML).
	var models []api.Model
	if v := getenv("HOSTEDTRAIN_MODELS"); v != "" {
		if models, err = api.ParseModels([]byte(v)); err != nil {
			return nil, fmt.Errorf("HOSTEDTRAIN_MODELS: %w", err)
		}
	}
	judge, err := judgeEndpoint(getenv)
	if err != nil {
		return nil, err
	}
	return api.New(api.Config{Queue: q, Verifier: auth.NewVerifier(keys, nil), Secrets: secrets, Store: store, Storage: storage, Webhooks: hooks,
		StreamLimit: streamLimit, Logger: logger, Models: models, Judge: judge})
}

// judgeEndpoint is the operator's judge (HOSTEDTRAIN_JUDGE_BASE_URL and _KEY), if set.
func judgeEndpoint(getenv func(string) string) (*api.Judge, error) {
	u, key := getenv("HOSTEDTRAIN_JUDGE_BASE_URL"), getenv("HOSTEDTRAIN_JUDGE_KEY")
	switch {
	case u == "" && key == "":
		return nil, nil
	case !strings.HasPrefix(u, "https://"):
		return nil, fmt.Errorf("HOSTEDTRAIN_JUDGE_BASE_URL must be an https URL, got %q", u)
	case key == "":
		return nil, errors.New("HOSTEDTRAIN_JUDGE_BASE_URL needs HOSTEDTRAIN_JUDGE_KEY (or HOSTEDTRAIN_JUDGE_KEY_SECRET)")
	}
	return &api.Judge{BaseURL: u, Key: key}, nil
}

// lambdaHandler converts API Gateway HTTP API events to requests of h and back.
func lambdaHandler(h http.Handler) func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
	return httpadapter.NewV2(h).ProxyWithContext
}
