// Command reaper is a scheduled AWS Lambda function (EventBridge, every minute) that returns
// jobs whose lease lapsed to the queue, or fails them when their attempts are spent. The same
// loop runs inside `hostedtrain dev`.
package main

import (
	"context"
	"log"
	"log/slog"
	"os"

	"github.com/aws/aws-lambda-go/lambda"

	"github.com/hostedtrain/hostedtrain/functions/internal/lambdaenv"
	"github.com/hostedtrain/hostedtrain/queue"
)

func main() {
	rdb, err := lambdaenv.Redis(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	qc, err := lambdaenv.Queue(os.Getenv)
	if err != nil {
		log.Fatal(err)
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	reaper := queue.NewReaper(queue.New(rdb, qc), 0, logger)
	lambda.Start(func(ctx context.Context) (map[string]int, error) {
		n, err := reaper.RunOnce(ctx)
		return map[string]int{"reaped": n}, err
	})
}
