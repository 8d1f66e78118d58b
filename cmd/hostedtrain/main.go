// Command hostedtrain is the service's CLI: submit and follow training jobs
// (`hostedtrain train submit job.toml --wait`), run the whole service on one machine
// (`hostedtrain dev`), and mint tokens (`hostedtrain admin token`).
//
// It reads HOSTEDTRAIN_URL (default http://127.0.0.1:8080) and HOSTEDTRAIN_TOKEN, else what
// `hostedtrain login` kept in ~/.config/hostedtrain/config.json.
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
	root.AddCommand(newTrainCmd(), newGEPACmd(), newEvalCmd(), newWebhookCmd(), newLoginCmd(), newLogoutCmd(), newDevCmd(), newAdminCmd())
	return root
}

const defaultURL = "http://127.0.0.1:8080"

// apiClient builds a client from the environment, else from `hostedtrain login`'s config.
func apiClient() (*client.Client, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	url := firstNonEmpty(os.Getenv("HOSTEDTRAIN_URL"), cfg.URL, defaultURL)
	token := firstNonEmpty(os.Getenv("HOSTEDTRAIN_TOKEN"), cfg.Token)
	if token == "" {
		return nil, errors.New("no token: run `hostedtrain login`, or export HOSTEDTRAIN_TOKEN (`hostedtrain admin token` makes one; `hostedtrain dev` writes admin.token)")
	}
	return client.New(url, token), nil
}

// explain turns transport errors into advice; API errors already read well.
func explain(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		cfg, _ := loadConfig()
		url := firstNonEmpty(os.Getenv("HOSTEDTRAIN_URL"), cfg.URL, defaultURL)
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
