// Command hostedtrain is the service's CLI: submit and follow training jobs
// (`hostedtrain train submit job.toml --wait`), run the whole service on one machine
// (`hostedtrain dev`), and mint tokens (`hostedtrain admin token`).
//
// It reads HOSTEDTRAIN_URL (default http://127.0.0.1:8080) and HOSTEDTRAIN_TOKEN.
package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/client"
)

// exitError carries an exit status without another message.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := newRoot()
	err := root.ExecuteContext(ctx)
	if err == nil {
		return
	}
	var ee exitError
	if errors.As(err, &ee) {
		os.Exit(ee.code)
	}
	fmt.Fprintln(os.Stderr, "error:", explain(err))
	os.Exit(1)
}

func newRoot() *cobra.Command {
	root := &cobra.Command{
		Use:           "hostedtrain",
		Short:         "Hosted RL training: submit prime-rl jobs and follow them to the end",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTrainCmd(), newGEPACmd(), newEvalCmd(), newWebhookCmd(), newDevCmd(), newAdminCmd())
	return root
}

const defaultURL = "http://127.0.0.1:8080"

// apiClient builds a client from the environment.
func apiClient() (*client.Client, error) {
	url := os.Getenv("HOSTEDTRAIN_URL")
	if url == "" {
		url = defaultURL
	}
	token := os.Getenv("HOSTEDTRAIN_TOKEN")
	if token == "" {
		return nil, errors.New("HOSTEDTRAIN_TOKEN is not set: export a token (`hostedtrain admin token`, or the admin.token that `hostedtrain dev` writes)")
	}
	return client.New(url, token), nil
}

// explain turns transport errors into advice; API errors already read well.
func explain(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		url := os.Getenv("HOSTEDTRAIN_URL")
		if url == "" {
			url = defaultURL
		}
		return fmt.Sprintf("cannot reach the API at %s (%v); is `hostedtrain dev` running, or HOSTEDTRAIN_URL set?", url, opErr.Err)
	}
	var apiErr *client.Error
	if errors.As(err, &apiErr) {
		switch apiErr.Status {
		case 401:
			return apiErr.Error() + "\n  (check HOSTEDTRAIN_TOKEN: it is missing, expired or not for this service)"
		case 403:
			return apiErr.Error() + "\n  (the token lacks the scope; mint one with `hostedtrain admin token --scopes ...`)"
		}
	}
	return err.Error()
}
