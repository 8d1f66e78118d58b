// Command reaper is a scheduled AWS Lambda function (EventBridge, every minute) that returns
// jobs whose lease lapsed to the queue, or fails them when their attempts are spent, and
// archives jobs that ended more than HOSTEDTRAIN_JOB_RETENTION ago to HOSTEDTRAIN_STORE. The
// same loop runs inside `hostedtrain dev`.
package main

import (
	"context"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/queue"
)

func main() {
	ctx := context.Background()
	getenv, err := lambdaenv.Env(ctx, os.Getenv, lambdaenv.AWS(ctx))
	if err != nil {
		log.Fatal(err)
	}
	reaper, err := newReaper(ctx, getenv, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(handler(reaper))
}

func newReaper(ctx context.Context, getenv lambdaenv.Getenv, logger *slog.Logger) (*queue.Reaper, error) {
	_, q, _, err := lambdaenv.Jobs(ctx, getenv)
	if err != nil {
		return nil, err
	}
	return queue.NewReaper(q, 0, logger), nil
}

// result is what one run did, for the function's log.
type result struct {
	Reaped int `json:"reaped"`
}

// handler reaps once per scheduled event.
func handler(reaper *queue.Reaper) func(context.Context, events.EventBridgeEvent) (result, error) {
	return func(ctx context.Context, _ events.EventBridgeEvent) (result, error) {
		n, err := reaper.RunOnce(ctx)
		return result{Reaped: n}, err
	}
}
