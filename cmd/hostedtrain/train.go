package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

func newTrainCmd() *cobra.Command {
	// `hostedtrain train CONFIG` submits, as `prime train CONFIG` does: the train command is
	// `train submit` itself when it is given a file.
	submit := newFileSubmitCmd("rl", "Submit an RL training job file (TOML, or JSON if it ends in .json)")
	c := &cobra.Command{
		Use:   "train [CONFIG]",
		Short: "Submit and manage training jobs (`hostedtrain train CONFIG` submits, as `prime train CONFIG` does)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return cmd.Help()
			}
			return submit.RunE(cmd, args)
		},
	}
	c.Flags().AddFlagSet(submit.Flags())
	c.AddCommand(submit, newGetCmd(), newListCmd(), newStopCmd(), newRestartCmd(), newBudgetCmd(), newLogsCmd(), newMetricsCmd(),
		newCheckpointsCmd(), newArtifactsCmd(), newProgressCmd(), newRolloutsCmd(), newDistributionsCmd(), newDeleteCmd(), newConfigsCmd(), newGPUsCmd(), newComponentsCmd(), newForkCmd(), newUsageCmd(), newEventsCmd(), newModelsCmd(), newInitCmd())
	return c
}

// forceFlag adds --force/-f: do not ask before acting (the prime CLI's flag of the same name).
func forceFlag(c *cobra.Command) {
	c.Flags().BoolP("force", "f", false, "do not ask for confirmation")
}

// confirm asks question on a terminal and says whether the answer was yes; with --force it
// does not ask. Off a terminal (a script, a pipe) it does not ask either: an action that can
// be undone goes ahead, and one that cannot (needForce) is refused without --force.
func confirm(cmd *cobra.Command, question string, needForce bool) error {
	if force, _ := cmd.Flags().GetBool("force"); force {
		return nil
	}
	in, ok := cmd.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(in.Fd())) {
		if needForce {
			return fmt.Errorf("%s asks before it acts and cannot ask here (not a terminal): pass --force (-f) to go ahead", cmd.CommandPath())
		}
		return nil
	}
	return confirmFrom(cmd.InOrStdin(), cmd.ErrOrStderr(), question)
}

// errCancelled is a question answered no: nothing was done.
var errCancelled = errors.New("cancelled: nothing was done")

// confirmFrom asks question on w and reads the answer from r: y or yes goes ahead.
func confirmFrom(r io.Reader, w io.Writer, question string) error {
	fmt.Fprintf(w, "%s [y/N]: ", question)
	line, _ := bufio.NewReader(r).ReadString('\n')
	switch strings.ToLower(strings.TrimSpace(line)) {
	case "y", "yes":
		return nil
	}
	return errCancelled
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

// fetchAndPrint is the body of a command that asks the API for one thing and prints it: as
// JSON with -o json, else with render. The -o value is checked before the API is asked.
func fetchAndPrint[T any](cmd *cobra.Command, output string, fetch func(context.Context, *client.Client) (T, error), render func(io.Writer, T)) error {
	if err := checkOutput(output); err != nil {
		return err
	}
	api, err := apiClient()
	if err != nil {
		return err
	}
	v, err := fetch(cmd.Context(), api)
	if err != nil {
		return err
	}
	if output == "json" {
		printJSON(cmd.OutOrStdout(), v)
		return nil
	}
	render(cmd.OutOrStdout(), v)
	return nil
}

// fetchForJob is fetchAndPrint for a command on one job: arg (its id, or a piece of it) is
// resolved to the job's id first.
func fetchForJob[T any](cmd *cobra.Command, output, arg string, fetch func(context.Context, *client.Client, string) (T, error), render func(io.Writer, T)) error {
	return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (T, error) {
		id, err := jobID(ctx, api, arg)
		if err != nil {
			var zero T
			return zero, err
		}
		return fetch(ctx, api, id)
	}, render)
}

func printJSON(w io.Writer, v any) {
	b, _ := json.Marshal(v)
	fmt.Fprintln(w, string(b))
}

// submitOptions are the flags every submit command shares.
type submitOptions struct {
	wait     bool
	dryRun   bool
	output   string
	poll     time.Duration
	env      []string
	envFiles []string
}

func (o *submitOptions) register(c *cobra.Command) {
	c.Flags().BoolVar(&o.wait, "wait", false, "follow the job to its end; exit 0 only if it COMPLETED")
	c.Flags().BoolVar(&o.dryRun, "dry-run", false, "validate and show the job as it would run, the GPUs it needs and its place in the queue; queue nothing")
	c.Flags().DurationVar(&o.poll, "poll", 500*time.Millisecond, "how often --wait asks for news")
	c.Flags().StringArrayVarP(&o.env, "env", "e", nil, "a secret for the run: KEY=VALUE, or KEY to take it from this environment (repeatable)")
	c.Flags().StringArrayVar(&o.envFiles, "env-file", nil, "a secrets file (KEY=VALUE lines) for the run, besides the ones the job names (repeatable)")
	c.Flags().BoolP("yes", "y", false, "accepted for the prime CLI's habit; hostedtrain does not ask before submitting")
	outputFlag(c, &o.output)
}

// newFileSubmitCmd is `train submit`, `gepa submit` and `eval submit`: a job file of kind.
func newFileSubmitCmd(kind, short string) *cobra.Command {
	var o submitOptions
	var allowOutside bool
	c := &cobra.Command{
		Use:   "submit FILE",
		Short: short,
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(o.output); err != nil {
				return err
			}
			b, err := jobspec.ReadJobFileWith(args[0], o.env, jobspec.ReadOptions{AllowOutsideEnvFile: allowOutside, EnvFiles: o.envFiles})
			if err != nil {
				return err
			}
			return submit(cmd, kind, args[0], b, o)
		},
	}
	o.register(c)
	c.Flags().BoolVar(&allowOutside, "allow-outside-env-file", false,
		"read env files the job names outside the job file's folder (by ../, an absolute path or a symbolic link); refused by default")
	return c
}

// submit previews the job (showing its warnings before anything is queued), then submits it
// and, with --wait, follows it.
func submit(cmd *cobra.Command, kind, name string, b *jobspec.JobBody, o submitOptions) error {
	api, err := apiClient()
	if err != nil {
		return err
	}
	ctx, out, errOut := cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr()
	prev, err := api.PreviewJob(ctx, b.Data, b.ContentType, kind)
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
		renderEstimate(out, prev.Estimate)
		return nil
	}
	sub, err := api.SubmitJob(ctx, b.Data, b.ContentType, kind)
	if err != nil {
		return fmt.Errorf("%s: %w", name, err)
	}
	j := &sub.Job
	if o.output == "table" {
		fmt.Fprintf(out, "submitted %s job %s (%s)\n", j.Kind, j.ID, j.Status)
		if len(b.SecretNames) > 0 {
			fmt.Fprintf(out, "  secrets sent: %s (their values are never shown again)\n", strings.Join(b.SecretNames, ", "))
		}
	}
	if !o.wait {
		if o.output == "json" {
			printJSON(out, sub)
		}
		return nil
	}
	following(j.ID, "hostedtrain train events "+j.ID+" -f")
	final, err := follow(ctx, api, j.ID, o.output == "table", out, o.poll)
	if err != nil {
		return err
	}
	if o.output == "json" {
		printJSON(out, final)
	} else {
		renderJob(out, final)
	}
	if final.Status != job.Completed {
		return exitError{code: 1}
	}
	return nil
}

// follow prints each event of the job as it happens and its progress while it runs — on a
// terminal as one live line under the events, elsewhere a line per new step — and returns
// the job once it has ended.
func follow(ctx context.Context, api *client.Client, id string, show bool, out io.Writer, every time.Duration) (*job.Job, error) {
	live := show && isTerminal(out)
	width := terminalWidth(out)
	var seq int64
	lastStep := -1
	shown := ""
	clear := func() {
		if shown != "" {
			fmt.Fprint(out, "\r\033[K")
			shown = ""
		}
	}
	for {
		evs, err := api.Events(ctx, id, seq)
		if err != nil {
			return nil, err
		}
		for _, e := range evs {
			seq = e.Seq
			if show {
				clear()
				renderEvent(out, e)
			}
		}
		j, err := api.GetJob(ctx, id)
		if err != nil {
			return nil, err
		}
		switch {
		case live && j.Status == job.Running:
			if line := progressLine(j, width); line != shown {
				clear()
				fmt.Fprint(out, line)
				shown = line
			}
		case show && j.Status == job.Running && j.Progress.Step != lastStep:
			lastStep = j.Progress.Step
			fmt.Fprintf(out, "  step %d/%d%s\n", j.Progress.Step, j.Progress.MaxSteps, metricsLine(j.Progress))
		}
		if j.Status.Terminal() {
			clear()
			// The last events may have landed after our read of them.
			if rest, err := api.Events(ctx, id, seq); err == nil && show {
				for _, e := range rest {
					renderEvent(out, e)
				}
			}
			return j, nil
		}
		select {
		case <-ctx.Done():
			clear()
			return nil, ctx.Err()
		case <-time.After(every):
		}
	}
}

// jobCmd is a command that acts on one job by id and shows the job it gets back.
// jobCmd is a command on one job (ID or a unique prefix of one); with a question, it asks it
// (confirm) before it acts.
func jobCmd(use, short, question string, act func(*client.Client, context.Context, string) (*job.Job, error),
	show func(io.Writer, *job.Job)) *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*job.Job, error) {
				if question != "" {
					if err := confirm(cmd, fmt.Sprintf(question, id), false); err != nil {
						return nil, err
					}
				}
				return act(api, ctx, id)
			}, show)
		},
	}
	outputFlag(c, &output)
	return c
}

func newGetCmd() *cobra.Command {
	return jobCmd("get", "Show one job", "", (*client.Client).GetJob, renderJob)
}

func newListCmd() *cobra.Command {
	var output, cursor, status, kind, since, before string
	var limit, page int
	c := &cobra.Command{
		Use:   "list",
		Short: "List your jobs, newest first",
		Example: `  hostedtrain train list --status RUNNING,QUEUED
  hostedtrain train list --kind eval --since 24h`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			f := job.ListFilter{Kind: kind}
			for _, st := range splitList(strings.ToUpper(status)) {
				f.Statuses = append(f.Statuses, job.Status(st))
			}
			var err error
			if f.CreatedAfter, err = parseWhen(since, "--since"); err != nil {
				return err
			}
			if f.CreatedBefore, err = parseWhen(before, "--before"); err != nil {
				return err
			}
			api, err := apiClient()
			if err != nil {
				return err
			}
			// --page N (the prime CLI's paging) walks the cursor past the pages before it.
			for ; page > 1; page-- {
				_, next, err := api.ListJobs(cmd.Context(), f, cursor, limit)
				if err != nil {
					return err
				}
				if next == "" {
					return fmt.Errorf("there is no page %d of %d jobs", page, limit)
				}
				cursor = next
			}
			jobs, next, err := api.ListJobs(cmd.Context(), f, cursor, limit)
			if err != nil {
				return err
			}
			if output == "json" {
				printJSON(cmd.OutOrStdout(), map[string]any{"items": jobs, "next_cursor": next})
				return nil
			}
			renderJobList(cmd.OutOrStdout(), jobs, next, time.Now())
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&status, "status", "", "only these statuses, comma-separated (QUEUED, PENDING, RUNNING, COMPLETED, FAILED, STOPPED)")
	f.StringVar(&kind, "kind", "", "only jobs of this kind: rl, gepa, eval or fft (full fine-tune)")
	f.StringVar(&since, "since", "", "only jobs created since: a duration back from now (24h) or a time (2026-11-22T10:00:00Z)")
	f.StringVar(&before, "before", "", "only jobs created before: a duration back from now or a time")
	f.IntVar(&limit, "limit", 20, "jobs per page (1-100)")
	f.IntVarP(&limit, "num", "n", 20, "jobs per page (1-100): the prime CLI's name of --limit")
	f.IntVarP(&page, "page", "p", 1, "the page to show (the prime CLI's paging; --cursor continues a page too)")
	f.StringVar(&cursor, "cursor", "", "continue after a previous page")
	outputFlag(c, &output)
	return c
}

// parseWhen reads a time flag: a duration back from now, or an RFC 3339 time.
func parseWhen(v, flag string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	if d, err := time.ParseDuration(v); err == nil {
		return time.Now().Add(-d), nil
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s %q: give a duration back from now (24h) or a time (2026-11-22T10:00:00Z)", flag, v)
	}
	return t, nil
}

func newRestartCmd() *cobra.Command {
	c := jobCmd("restart", "Run a failed or stopped job again from its newest checkpoint (a running one stops first)",
		"Restart job %s from its newest checkpoint? (a running one is stopped first)",
		(*client.Client).RestartJob, renderRestart)
	forceFlag(c)
	return c
}
