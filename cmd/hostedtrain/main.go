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
	neturl "net/url"
	"os"
	"os/signal"
	"strings"
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
	if ctx.Err() != nil && (err != nil || resume.job != "") {
		// Ctrl-C (or SIGTERM) cut a command short (`dev`, which stops cleanly on it, returns
		// nil): what was being followed goes on; say so, and how to follow it again.
		if resume.job != "" {
			fmt.Fprintf(os.Stderr, "\ninterrupted: job %s goes on (stop it with `hostedtrain train stop %s`)\nfollow it again: %s\n",
				resume.job, resume.job, resume.command)
		} else {
			fmt.Fprintln(os.Stderr, "\ninterrupted")
		}
		os.Exit(130)
	}
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
	root.AddCommand(newTrainCmd(), newGEPACmd(), newEvalCmd(), newDeployCmd(), newDeploymentsCmd(), newChatCmd(), newGatewayCmd(), newWebhookCmd(), newLoginCmd(), newLogoutCmd(), newDevCmd(), newAdminCmd())
	return root
}

const defaultURL = "http://127.0.0.1:8080"

// resume is what an interrupted command that follows a job tells the user.
var resume struct{ job, command string }

// following records that the command now follows job: on Ctrl-C, command follows it again.
func following(job, command string) { resume.job, resume.command = job, command }

// withAPI is the preamble of a command that calls the API: run gets the client apiClient builds.
func withAPI(run func(cmd *cobra.Command, args []string, api *client.Client) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		api, err := apiClient()
		if err != nil {
			return err
		}
		return run(cmd, args, api)
	}
}

// jobAPI is the preamble of a command about one job: the API client and the job's whole id
// from what the user typed (a prefix or a name; jobID).
func jobAPI(cmd *cobra.Command, arg string) (*client.Client, string, error) {
	api, err := apiClient()
	if err != nil {
		return nil, "", err
	}
	id, err := jobID(cmd.Context(), api, arg)
	return api, id, err
}

// apiClient builds a client from the environment, else from `hostedtrain login`'s config.
func apiClient() (*client.Client, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	url, err := apiURL(firstNonEmpty(os.Getenv("HOSTEDTRAIN_URL"), cfg.URL, defaultURL))
	if err != nil {
		return nil, err
	}
	token := firstNonEmpty(os.Getenv("HOSTEDTRAIN_TOKEN"), cfg.Token)
	if token == "" {
		return nil, errors.New("no token: run `hostedtrain login`, or export HOSTEDTRAIN_TOKEN (`hostedtrain admin token` makes one; `hostedtrain dev` writes admin.token)")
	}
	return client.New(url, token), nil
}

// apiURL reads the API's address: one without a scheme is taken as https, or as http on this
// machine ("localhost:8080", "127.0.0.1:8080"), as people write it.
func apiURL(raw string) (string, error) {
	s := strings.TrimSpace(raw)
	if !strings.Contains(s, "://") {
		host := s
		if h, _, err := net.SplitHostPort(s); err == nil {
			host = h
		}
		if host == "localhost" || net.ParseIP(strings.Trim(host, "[]")).IsLoopback() {
			s = "http://" + s
		} else {
			s = "https://" + s
		}
	}
	s = strings.TrimRight(s, "/")
	u, err := neturl.Parse(s)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("the API's address %q is not an http(s) URL such as https://train.example.com or http://127.0.0.1:8080 (HOSTEDTRAIN_URL, or `hostedtrain login --url`)", raw)
	}
	return s, nil
}

// explain turns transport errors into advice; API errors already read well.
func explain(err error) string {
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Op == "dial" {
		cfg, _ := loadConfig()
		url, _ := apiURL(firstNonEmpty(os.Getenv("HOSTEDTRAIN_URL"), cfg.URL, defaultURL))
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
