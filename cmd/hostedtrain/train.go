package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

func newTrainCmd() *cobra.Command {
	c := &cobra.Command{Use: "train", Short: "Submit and manage training jobs"}
	c.AddCommand(newFileSubmitCmd("rl", "Submit an RL training job file (TOML, or JSON if it ends in .json)"),
		newGetCmd(), newListCmd(), newCancelCmd(), newRestartCmd())
	return c
}

// outputFlag adds -o table|json.
func outputFlag(c *cobra.Command, p *string) {
	c.Flags().StringVarP(p, "output", "o", "table", "output format: table or json")
}

func checkOutput(o string) error {
	if o != "table" && o != "json" {
		return fmt.Errorf("-o %q: want table or json", o)
	}
	return nil
}

func printJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}

// submitOptions are the flags every submit command shares.
type submitOptions struct {
	wait   bool
	dryRun bool
	output string
	poll   time.Duration
	env    []string
}

func (o *submitOptions) register(c *cobra.Command) {
	c.Flags().BoolVar(&o.wait, "wait", false, "follow the job to its end; exit 0 only if it COMPLETED")
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "validate and show the job as it would run, the GPUs it needs and its place in the queue; queue nothing")
	c.Flags().DurationVar(&o.poll, "poll", 500*time.Millisecond, "how often --wait asks for news")
	c.Flags().StringArrayVarP(&o.env, "env", "e", nil, "a secret for the run: KEY=VALUE, or KEY to take it from this environment (repeatable)")
	outputFlag(c, &o.output)
}

// newFileSubmitCmd is `train submit`, `gepa submit` and `eval submit`: a job file of kind.
func newFileSubmitCmd(kind, short string) *cobra.Command {
	var o submitOptions
	c := &cobra.Command{
		Use:   "submit FILE",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			b, err := readJobFile(args[0], o.env)
			if err != nil {
				return err
			}
			return submit(cmd, kind, args[0], b, o)
		},
	}
	o.register(c)
	return c
}

// submit previews the job (showing its warnings before anything is queued), then submits it
// and, with --wait, follows it.
func submit(cmd *cobra.Command, kind, name string, b *jobBody, o submitOptions) error {
	api, err := apiClient()
	if err != nil {
		return err
	}
	ctx, out, errOut := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	prev, err := api.PreviewJob(ctx, b.data, b.contentType, kind)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	for _, w := range prev.Warnings {
		fmt.Fprintf(errOut, "warning: %s\n", w)
	}
	if o.dryRun {
		if o.output == "json" {
			printJSON(out, prev)
			return nil
		}
		var cfg bytes.Buffer
		_ = json.Indent(&cfg, prev.Config, "", "  ")
		fmt.Fprintf(out, "%s is valid; it would run as:\n%s\n", name, cfg.String())
		fmt.Fprintf(out, "needs %d×%s; %d job(s) would run before it\n", prev.GPUs.Count, prev.GPUs.Type, prev.Queue.RunsAhead)
		return nil
	}
	sub, err := api.SubmitJob(ctx, b.data, b.contentType, kind)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	j := &sub.Job
	if o.output == "table" {
		fmt.Fprintf(out, "submitted %s job %s (%s)\n", j.Kind, j.ID, j.Status)
		if len(b.secretNames) > 0 {
			fmt.Fprintf(out, "  secrets sent: %s (their values are never shown again)\n", strings.Join(b.secretNames, ", "))
		}
	}
	if !o.wait {
		if o.output == "json" {
			printJSON(out, sub)
		}
		return nil
	}
	final, err := follow(ctx, api, j.ID, o.output == "table", out, o.poll)
	if err != nil {
		return err
	}
	if o.output == "json" {
		printJSON(out, final)
	} else {
		printSummary(out, final)
	}
	if final.Status != job.Completed {
		return exitError{code: 1}
	}
	return nil
}

// follow prints each event of the job as it happens and its progress while it runs, and
// returns the job once it has ended.
func follow(ctx context.Context, api *client.Client, id string, show bool, out io.Writer, every time.Duration) (*job.Job, error) {
	var seq int64
	lastStep := -1
	for {
		evs, err := api.Events(ctx, id, seq)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			seq = e.Seq
			if show {
				line := fmt.Sprintf("  %s  %-9s %s", e.Time.Local().Format("15:04:05"), e.Status, e.Type)
				if e.Detail != "" {
					line += "  (" + e.Detail + ")"
				}
				fmt.Fprintln(out, line)
			}
		}
		j, err := api.GetJob(ctx, id)
		if err != nil {
			return nil, err
		}
		if show && j.Status == job.Running && j.Progress.Step != lastStep {
			lastStep = j.Progress.Step
			fmt.Fprintf(out, "  step %d/%d%s\n", j.Progress.Step, j.Progress.MaxSteps, metricsLine(j.Progress.Metrics))
		}
		if j.Status.Terminal() {
			// The last events may have landed after our read of them.
			if rest, err := api.Events(ctx, id, seq); err == nil && show {
				for _, e := range rest {
					fmt.Fprintf(out, "  %s  %-9s %s\n", e.Time.Local().Format("15:04:05"), e.Status, e.Type)
				}
			}
			return j, nil
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(every):
		}
	}
}

func metricsLine(m map[string]float64) string {
	var parts []string
	for _, k := range []string{"reward/all/mean", "entropy/mean", "loss/mean"} {
		if v, ok := m[k]; ok {
			parts = append(parts, fmt.Sprintf("%s %.4f", shortMetric(k), v))
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "  " + strings.Join(parts, "  ")
}

func shortMetric(k string) string {
	switch k {
	case "reward/all/mean":
		return "reward"
	case "entropy/mean":
		return "entropy"
	case "loss/mean":
		return "loss"
	}
	return k
}

func printSummary(out io.Writer, j *job.Job) {
	w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "job\t%s\n", j.ID)
	fmt.Fprintf(w, "status\t%s\n", j.Status)
	if j.QueueReason != "" {
		fmt.Fprintf(w, "queue\t%s\n", j.QueueReason)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", j.Error)
	}
	fmt.Fprintf(w, "model\t%s\n", j.Config.Model)
	var envs []string
	for _, e := range j.Config.Env {
		envs = append(envs, e.ID)
	}
	fmt.Fprintf(w, "environments\t%s\n", strings.Join(envs, ", "))
	if j.Runtime != nil && j.Runtime.Pipeline != "" {
		p := j.Runtime.Pipeline
		if j.Runtime.Emulated {
			p += " (emulated: no GPU work was done)"
		}
		fmt.Fprintf(w, "pipeline\t%s on %s\n", p, j.Runtime.AgentID)
	}
	fmt.Fprintf(w, "steps\t%d/%d\n", j.Progress.Step, j.Progress.MaxSteps)
	if v, ok := j.Progress.Metrics["reward/all/mean"]; ok {
		fmt.Fprintf(w, "last reward\t%.4f\n", v)
	} else {
		fmt.Fprintf(w, "last reward\t-\n")
	}
	if j.Progress.Checkpoints > 0 {
		fmt.Fprintf(w, "checkpoints\t%d kept, newest at step %d\n", j.Progress.Checkpoints, j.Progress.CheckpointStep)
	} else {
		fmt.Fprintf(w, "checkpoints\tnone\n")
	}
	fmt.Fprintf(w, "attempt\t%d of %d\n", j.Attempt, j.MaxAttempts)
	fmt.Fprintf(w, "created\t%s\n", j.CreatedAt.Local().Format(time.RFC3339))
	if j.StartedAt != nil && j.FinishedAt != nil {
		fmt.Fprintf(w, "ran for\t%s\n", j.FinishedAt.Sub(*j.StartedAt).Round(100*time.Millisecond))
	}
	w.Flush()
}

// jobCmd is a command that acts on one job by id and shows the job it gets back.
func jobCmd(use, short string, act func(*client.Client, context.Context, string) (*job.Job, error),
	show func(io.Writer, *job.Job)) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, err := apiClient()
			if err != nil {
				return err
			}
			j, err := act(api, cmd.Context(), args[0])
			if err != nil {
				return err
			}
			if output == "json" {
				printJSON(cmd.OutOrStdout(), j)
			} else {
				show(cmd.OutOrStdout(), j)
			}
			return nil
		},
	}
	outputFlag(c, &output)
	return c
}

func newGetCmd() *cobra.Command {
	return jobCmd("get", "Show one job", (*client.Client).GetJob, printSummary)
}

func newListCmd() *cobra.Command {
	var output, cursor string
	var limit int
	c := &cobra.Command{
		Use:   "list",
		Short: "List your jobs, newest first",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, err := apiClient()
			if err != nil {
				return err
			}
			jobs, next, err := api.ListJobs(cmd.Context(), cursor, limit)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if output == "json" {
				printJSON(out, map[string]any{"items": jobs, "next_cursor": next})
				return nil
			}
			w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
			fmt.Fprintln(w, "ID\tSTATUS\tMODEL\tSTEP\tREWARD\tCREATED")
			for _, j := range jobs {
				reward := "-"
				if v, ok := j.Progress.Metrics["reward/all/mean"]; ok {
					reward = fmt.Sprintf("%.4f", v)
				}
				fmt.Fprintf(w, "%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Status, j.Config.Model,
					j.Progress.Step, j.Progress.MaxSteps, reward, j.CreatedAt.Local().Format("2006-01-02 15:04:05"))
			}
			w.Flush()
			if next != "" {
				fmt.Fprintf(out, "more: hostedtrain train list --cursor %s\n", next)
			}
			return nil
		},
	}
	c.Flags().IntVar(&limit, "limit", 20, "jobs per page (1-100)")
	c.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	outputFlag(c, &output)
	return c
}

func newCancelCmd() *cobra.Command {
	return jobCmd("cancel", "Stop a job (at once if queued; through its agent if running)", (*client.Client).CancelJob,
		func(w io.Writer, j *job.Job) {
			if j.Status == job.Stopped {
				fmt.Fprintf(w, "job %s STOPPED\n", j.ID)
			} else {
				fmt.Fprintf(w, "job %s is stopping (its agent hears on its next heartbeat)\n", j.ID)
			}
		})
}

func newRestartCmd() *cobra.Command {
	return jobCmd("restart", "Run a failed or stopped job again from its newest checkpoint (a running one stops first)",
		(*client.Client).RestartJob, func(w io.Writer, j *job.Job) {
			if j.Status == job.Queued {
				from := "the start"
				if j.ResumeStep > 0 {
					from = fmt.Sprintf("the checkpoint of step %d", j.ResumeStep)
				}
				fmt.Fprintf(w, "job %s is queued again, to resume from %s\n", j.ID, from)
			} else {
				fmt.Fprintf(w, "job %s is stopping; it will be queued again once its run has stopped\n", j.ID)
			}
		})
}
