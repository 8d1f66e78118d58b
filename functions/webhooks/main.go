// Command webhooks is a scheduled AWS Lambda function (EventBridge, every minute) that drains
// the webhook outbox: it turns new job events into deliveries and sends the deliveries that are
// due, until there is nothing left or its time is nearly up. The same dispatcher runs in a loop
// inside `hostedtrain dev`.
package main

import (
	"context"
	"log"
	"log/slog"
	"os"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

func main() {
	ctx := context.Background()
	getenv, err := lambdaenv.Env(ctx, os.Getenv, lambdaenv.AWS(ctx))
	if err != nil {
		log.Fatal(err)
	}
	svc, err := newService(getenv, slog.New(slog.NewJSONHandler(os.Stderr, nil)))
	if err != nil {
		log.Fatal(err)
	}
	lambda.Start(handler(svc))
}

func newService(getenv lambdaenv.Getenv, logger *slog.Logger) (*webhooks.Service, error) {
	rdb, q, qc, err := lambdaenv.Jobs(context.Background(), getenv)
	if err != nil {
		return nil, err
	}
	secrets, err := lambdaenv.Secrets(getenv)
	if err != nil {
		return nil, err
	}
	return lambdaenv.Webhooks(getenv, rdb, q, qc, secrets, logger)
}

// result is what one run did, for the function's log.
type result struct {
	Events     int `json:"events"`
	Deliveries int `json:"deliveries"`
	Delivered  int `json:"delivered"`
	Failed     int `json:"failed"`
}

// handler drains until 10 s before the invocation's deadline (a delivery may take 15 s, and
// one cut short is taken again by the next run).
func handler(svc *webhooks.Service) func(context.Context, events.EventBridgeEvent) (result, error) {
	return func(ctx context.Context, _ events.EventBridgeEvent) (result, error) {
		budget := 50 * time.Second
		if dl, ok := ctx.Deadline(); ok {
			budget = time.Until(dl) - 20*time.Second
		}
		if budget < time.Second {
			budget = time.Second
		}
		st, err := svc.DrainFor(ctx, budget)
		return result{Events: st.Events, Deliveries: st.Deliveries, Delivered: st.Delivered, Failed: st.Failed}, err
	}
}
