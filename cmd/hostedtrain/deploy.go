package main

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// Deployments from the CLI: `hostedtrain deploy JOB[@STEP|@best]`, `hostedtrain deployments
// ls|get|rm`, and `hostedtrain chat MODEL "text"` through the inference gateway.

func newDeployCmd() *cobra.Command {
	var output string
	var wait time.Duration
	c := &cobra.Command{
		Use:   "deploy JOB[@STEP|@best|@latest]",
		Short: "Deploy a committed checkpoint of a job for inference (the newest by default); chat with it: hostedtrain chat MODEL",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			ref, step, _ := strings.Cut(args[0], "@")
			api, id, err := jobAPI(cmd, ref)
			if err != nil {
				return err
			}
			d, err := api.Deploy(cmd.Context(), id, step)
			if err != nil {
				return err
			}
			if wait > 0 {
				deadline := time.Now().Add(wait)
				for d.DeploymentStatus == "DEPLOYING" && time.Now().Before(deadline) {
					select {
					case <-cmd.Context().Done():
						return cmd.Context().Err()
					case <-time.After(500 * time.Millisecond):
					}
					if d, err = api.Deployment(cmd.Context(), d.ID); err != nil {
						return err
					}
				}
			}
			if output == "json" {
				printJSON(cmd.OutOrStdout(), d)
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: step %d of %s, %s\n  model  %s\n  chat   hostedtrain chat %s \"hello\"\n",
				d.ID, d.Step, d.Job, strings.ToLower(d.DeploymentStatus), d.Model, d.Model)
			return nil
		},
	}
	c.Flags().StringVarP(&output, "output", "o", "table", "table|json")
	c.Flags().DurationVar(&wait, "wait", 2*time.Minute, "wait this long for the deployment to be deployed (0: do not wait)")
	return c
}

func renderDeployments(w io.Writer, ds []wire.Deployment) {
	t := table(w)
	fmt.Fprintln(t, "ID\tMODEL\tJOB\tSTEP\tSTATUS\tNODE\tREQUESTS\tTOKENS\tLAST USED")
	for _, d := range ds {
		used := "-"
		if d.LastUsedAt != nil {
			used = d.LastUsedAt.Local().Format(time.DateTime)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%d\t%d\t%s\n", d.ID, d.Model, shortID(d.Job), d.Step, d.DeploymentStatus,
			orDash(d.Node), d.Requests, d.PromptTokens+d.CompletionTokens, used)
	}
	t.Flush()
}

func shortID(id string) string {
	if len(id) > 13 {
		return id[:13]
	}
	return id
}

func newDeploymentsCmd() *cobra.Command {
	c := &cobra.Command{Use: "deployments", Aliases: []string{"deployment"}, Short: "Your deployments: list, show, unload"}
	var output string
	var limit int
	ls := &cobra.Command{
		Use: "ls", Aliases: []string{"list"}, Short: "Deployments, newest first", Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) ([]wire.Deployment, error) {
				ds, _, err := api.Deployments(ctx, 0, limit)
				return ds, err
			}, renderDeployments)
		},
	}
	ls.Flags().StringVarP(&output, "output", "o", "table", "table|json")
	ls.Flags().IntVar(&limit, "limit", 100, "at most this many")
	var getOutput string
	get := &cobra.Command{
		Use: "get ID", Short: "One deployment: where it runs, its requests, tokens and errors", Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchAndPrint(cmd, getOutput, func(ctx context.Context, api *client.Client) (*wire.Deployment, error) {
				return api.Deployment(ctx, args[0])
			}, func(w io.Writer, d *wire.Deployment) {
				renderDeployments(w, []wire.Deployment{*d})
				if d.Server != "" {
					fmt.Fprintf(w, "server job %s\n", d.Server)
				}
				if d.Error != "" {
					fmt.Fprintf(w, "error: %s\n", d.Error)
				}
				fmt.Fprintf(w, "requests %d (%d failed), prompt tokens %d, completion tokens %d\n", d.Requests, d.Failures, d.PromptTokens, d.CompletionTokens)
			})
		},
	}
	get.Flags().StringVarP(&getOutput, "output", "o", "table", "table|json")
	rm := &cobra.Command{
		Use: "rm ID", Aliases: []string{"unload"}, Short: "Unload a deployment (deploy it again at will)", Args: needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			d, err := api.Undeploy(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s %s\n", d.ID, strings.ToLower(d.DeploymentStatus))
			return nil
		}),
	}
	c.AddCommand(ls, get, rm)
	return c
}

func newChatCmd() *cobra.Command {
	var system, inference string
	var noStream bool
	c := &cobra.Command{
		Use:   "chat MODEL TEXT",
		Short: "Chat with a deployment through the inference gateway (MODEL is BASE:ID, as `hostedtrain deployments ls` shows it); streams",
		Args:  needArgs(2),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			msgs := []map[string]string{}
			if system != "" {
				msgs = append(msgs, map[string]string{"role": "system", "content": system})
			}
			msgs = append(msgs, map[string]string{"role": "user", "content": args[1]})
			body, _ := json.Marshal(map[string]any{"model": args[0], "messages": msgs, "stream": !noStream})
			base := strings.TrimRight(cmp.Or(inference, api.BaseURL+"/api/v1"), "/")
			req, err := http.NewRequestWithContext(cmd.Context(), http.MethodPost, base+"/chat/completions", bytes.NewReader(body))
			if err != nil {
				return err
			}
			req.Header.Set("Authorization", "Bearer "+api.Token)
			req.Header.Set("Content-Type", "application/json")
			resp, err := (&http.Client{}).Do(req)
			if err != nil {
				return err
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				var e struct{ Error struct{ Message string } }
				b, _ := io.ReadAll(io.LimitReader(resp.Body, 8192))
				if json.Unmarshal(b, &e) == nil && e.Error.Message != "" {
					return fmt.Errorf("%s: %s", resp.Status, e.Error.Message)
				}
				return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(b)))
			}
			out := cmd.OutOrStdout()
			if noStream {
				var r struct {
					Choices []struct{ Message struct{ Content string } }
				}
				if err := json.NewDecoder(resp.Body).Decode(&r); err != nil || len(r.Choices) == 0 {
					return fmt.Errorf("an answer with no choices (%v)", err)
				}
				fmt.Fprintln(out, r.Choices[0].Message.Content)
				return nil
			}
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				data, ok := strings.CutPrefix(sc.Text(), "data: ")
				if !ok || data == "[DONE]" {
					continue
				}
				var ch struct {
					Choices []struct{ Delta struct{ Content string } }
					Error   *struct{ Message string }
				}
				if json.Unmarshal([]byte(data), &ch) != nil {
					continue
				}
				if ch.Error != nil {
					fmt.Fprintln(out)
					return fmt.Errorf("the stream broke: %s", ch.Error.Message)
				}
				for _, c := range ch.Choices {
					fmt.Fprint(out, c.Delta.Content)
				}
			}
			fmt.Fprintln(out)
			return sc.Err()
		}),
	}
	c.Flags().StringVarP(&system, "system", "s", "", "a system prompt")
	c.Flags().BoolVar(&noStream, "no-stream", false, "wait for the whole answer")
	c.Flags().StringVar(&inference, "inference-url", os.Getenv("HOSTEDTRAIN_INFERENCE_URL"),
		"the inference gateway, as PRIME_INFERENCE_URL names it (https://GATEWAY/api/v1); default: the API's own /api/v1, as hostedtrain dev serves it")
	return c
}
