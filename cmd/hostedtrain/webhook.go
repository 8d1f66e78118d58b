package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

func newWebhookCmd() *cobra.Command {
	c := &cobra.Command{Use: "webhook", Short: "Webhook endpoints: signed job events pushed to your URL (scope webhooks)"}
	c.AddCommand(newWebhookCreateCmd(), newWebhookListCmd(), newWebhookGetCmd(), newWebhookUpdateCmd(),
		newWebhookDeleteCmd(), newWebhookTestCmd(), newWebhookDeliveriesCmd(), newWebhookRedeliverCmd())
	return c
}

func printEndpoint(out io.Writer, ep *webhook.Endpoint) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "id\t%s\nurl\t%s\nevents\t%s\nenabled\t%v\n", ep.ID, ep.URL, strings.Join(ep.Events, ", "), ep.Enabled)
	if ep.Description != "" {
		fmt.Fprintf(w, "description\t%s\n", ep.Description)
	}
	if ep.DisabledReason != "" {
		fmt.Fprintf(w, "disabled\t%s (%s)\n", ep.DisabledReason, ep.DisabledAt.Local().Format(time.DateTime))
	}
	if ep.FailingSince != nil {
		fmt.Fprintf(w, "failing since\t%s\n", ep.FailingSince.Local().Format(time.DateTime))
	}
	if ep.Secret != "" {
		fmt.Fprintf(w, "secret\t%s\t(shown once: keep it to verify deliveries)\n", ep.Secret)
	}
	if ep.PreviousSecretExpiresAt != nil {
		fmt.Fprintf(w, "old secret\tsigns beside the new one until %s\n", ep.PreviousSecretExpiresAt.Local().Format(time.DateTime))
	}
	w.Flush()
}

func newWebhookCreateCmd() *cobra.Command {
	var output, events, description string
	c := &cobra.Command{
		Use:   "create URL",
		Short: "Register an endpoint; prints its signing secret once",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (*webhook.Endpoint, error) {
				return api.CreateWebhook(ctx, args[0], splitList(events), description)
			}, printEndpoint)
		},
	}
	c.Flags().StringVar(&events, "events", "*", "comma-separated events: "+strings.Join(webhook.EventTypes, ", ")+", or * for all")
	c.Flags().StringVar(&description, "description", "", "a note for yourself")
	outputFlag(c, &output)
	return c
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func newWebhookListCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "list",
		Short: "List your endpoints",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, err := apiClient()
			if err != nil {
				return err
			}
			eps, err := api.ListWebhooks(cmd.Context())
			if err != nil {
				return err
			}
			if output == "json" {
				printJSON(cmd.OutOrStdout(), map[string]any{"items": eps})
				return nil
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tENABLED\tEVENTS\tURL")
			for _, ep := range eps {
				fmt.Fprintf(w, "%s\t%v\t%s\t%s\n", ep.ID, ep.Enabled, strings.Join(ep.Events, ","), ep.URL)
			}
			return w.Flush()
		},
	}
	outputFlag(c, &output)
	return c
}

func newWebhookGetCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "get ID",
		Short: "Show an endpoint",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (*webhook.Endpoint, error) {
				return api.GetWebhook(ctx, args[0])
			}, printEndpoint)
		},
	}
	outputFlag(c, &output)
	return c
}

func newWebhookUpdateCmd() *cobra.Command {
	var output, url, events, description string
	var enable, disable, rotate bool
	c := &cobra.Command{
		Use:   "update ID",
		Short: "Change an endpoint's URL or events, enable or disable it, or rotate its secret",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			patch := map[string]any{}
			if cmd.Flags().Changed("url") {
				patch["url"] = url
			}
			if cmd.Flags().Changed("events") {
				patch["events"] = splitList(events)
			}
			if cmd.Flags().Changed("description") {
				patch["description"] = description
			}
			switch {
			case enable && disable:
				return fmt.Errorf("--enable or --disable, not both")
			case enable:
				patch["enabled"] = true
			case disable:
				patch["enabled"] = false
			}
			if rotate {
				patch["rotate_secret"] = true
			}
			if len(patch) == 0 {
				return fmt.Errorf("nothing to change: pass --url, --events, --enable, --disable, --description or --rotate-secret")
			}
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (*webhook.Endpoint, error) {
				return api.UpdateWebhook(ctx, args[0], patch)
			}, printEndpoint)
		},
	}
	f := c.Flags()
	f.StringVar(&url, "url", "", "the new URL")
	f.StringVar(&events, "events", "", "the new comma-separated events")
	f.StringVar(&description, "description", "", "the new note")
	f.BoolVar(&enable, "enable", false, "enable the endpoint (after a 410 or five days of failures)")
	f.BoolVar(&disable, "disable", false, "stop deliveries to it")
	f.BoolVar(&rotate, "rotate-secret", false, "make a new secret (printed once); the old one signs beside it for 24 hours")
	outputFlag(c, &output)
	return c
}

func newWebhookDeleteCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "delete ID",
		Short: "Remove an endpoint",
		Args:  needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			if err := api.DeleteWebhook(cmd.Context(), args[0]); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s removed\n", args[0])
			return nil
		}),
	}
}

func newWebhookTestCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "test ID",
		Short: "Send a webhook.test delivery; see it with `hostedtrain webhook deliveries ID`",
		Args:  needArgs(1),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			d, err := api.TestWebhook(cmd.Context(), args[0])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "test delivery %s queued (message %s)\n", d.ID, d.MessageID)
			return nil
		}),
	}
}

func newWebhookDeliveriesCmd() *cobra.Command {
	var output, cursor string
	var limit int
	c := &cobra.Command{
		Use:   "deliveries ID",
		Short: "An endpoint's deliveries, newest first: status, attempts, response code, latency",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, err := apiClient()
			if err != nil {
				return err
			}
			ds, next, err := api.WebhookDeliveries(cmd.Context(), args[0], cursor, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				printJSON(out, map[string]any{"items": ds, "next_cursor": next})
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tTYPE\tJOB\tSEQ\tSTATUS\tATTEMPTS\tCODE\tLATENCY\tERROR")
			for _, d := range ds {
				code := "-"
				if d.ResponseCode != 0 {
					code = fmt.Sprint(d.ResponseCode)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d\t%s\t%d\t%s\t%dms\t%s\n", d.ID, d.Type, d.JobID, d.Sequence, d.Status,
					d.Attempts, code, d.LatencyMS, d.Error)
			}
			w.Flush()
			if next != "" {
				fmt.Fprintf(out, "more: hostedtrain webhook deliveries %s --cursor %s\n", args[0], next)
			}
			return nil
		},
	}
	c.Flags().IntVar(&limit, "limit", 20, "deliveries per page (1-100)")
	c.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	outputFlag(c, &output)
	return c
}

func newWebhookRedeliverCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "redeliver ID DELIVERY_ID",
		Short: "Send a delivery again now (same message id)",
		Args:  needArgs(2),
		RunE: withAPI(func(cmd *cobra.Command, args []string, api *client.Client) error {
			d, err := api.RedeliverWebhook(cmd.Context(), args[0], args[1])
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s queued again (%d attempts so far)\n", d.ID, d.Attempts)
			return nil
		}),
	}
}
