package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

// isTerminal reports whether w is a terminal (live lines and spinners only there).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

func terminalWidth(w io.Writer) int {
	if f, ok := w.(*os.File); ok {
		if width, _, err := term.GetSize(int(f.Fd())); err == nil {
			return width
		}
	}
	return 0
}

func newLogsCmd() *cobra.Command {
	var o client.LogOptions
	var follow, raw bool
	var output, env string
	c := &cobra.Command{
		Use:   "logs ID",
		Short: "Show a job's logs (trainer, orchestrator, inference, envs, pipeline, install, agent); -f follows",
		Example: `  hostedtrain train logs JOB -f
  hostedtrain train logs JOB --component trainer --level WARNING --since 10m
  hostedtrain train logs JOB --search "CUDA" --tail 500`,
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			if env != "" {
				// the prime CLI's --env: one environment server (a trailing /N is its index)
				if o.Component != "" && o.Component != "envs" && o.Component != "env-server" {
					return fmt.Errorf("--env names an environment server; it goes with no --component (or envs)")
				}
				name, _, _ := strings.Cut(env, "/")
				o.Component = "envs/train/" + name
			} else if o.Component == "env-server" {
				o.Component = "envs" // the prime CLI's name of them
			}
			out := cmd.OutOrStdout()
			show := func(l client.LogLine) {
				switch {
				case output == "json":
					printJSON(out, l)
				case raw:
					fmt.Fprintln(out, l.Line)
				default:
					renderLogLine(out, l)
				}
			}
			if follow {
				following(id, "hostedtrain train logs "+id+" -f")
				return api.FollowLogs(cmd.Context(), id, o, show, func(a int64) {
					if output == "table" {
						fmt.Fprintf(cmd.ErrOrStderr(), "-- the job resumed: following attempt %d --\n", a)
					}
				})
			}
			page, err := api.JobLogs(cmd.Context(), id, o)
			if err != nil {
				return err
			}
			if output == "json" {
				printJSON(out, page)
				return nil
			}
			for _, l := range page.Items {
				show(l)
			}
			if len(page.Items) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "no log lines (yet)")
			}
			return nil
		},
	}
	f := c.Flags()
	f.BoolVarP(&follow, "follow", "f", false, "keep printing new lines until the job ends")
	f.IntVarP(&o.Tail, "tail", "n", 100, "the last N lines")
	f.StringVar(&o.Since, "since", "", "only lines since: a duration back from now (10m) or a time")
	f.StringVarP(&o.Component, "component", "c", "", "one component: trainer, orchestrator, inference, envs (or envs/train/NAME, envs/eval/NAME; env-server is envs), preflight, install, pipeline or agent")
	f.StringVar(&env, "env", "", "one environment server's lines: its name (train components lists them)")
	f.StringVar(&o.Search, "search", "", "only lines containing this text (any case), or matching it with --regex")
	f.BoolVar(&o.Regex, "regex", false, "--search is a regular expression (RE2)")
	f.BoolVarP(&raw, "raw", "r", false, "the lines as written, without time, component or level")
	f.StringVar(&o.Level, "level", "", "the least severe level shown: DEBUG, INFO, WARNING or ERROR")
	f.IntVar(&o.Attempt, "attempt", 0, "the attempt whose logs to show (default the newest)")
	outputFlag(c, &output)
	return c
}

func newMetricsCmd() *cobra.Command {
	var names, output, metric string
	var minStep, maxStep int
	var plot bool
	c := &cobra.Command{
		Use:   "metrics ID",
		Short: "Show a job's metrics a step a row, or --plot a curve in the terminal",
		Example: `  hostedtrain train metrics JOB --plot
  hostedtrain train metrics JOB --names reward,entropy,optim/lr --min-step 100`,
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			j, err := api.GetJob(cmd.Context(), id)
			if err != nil {
				return err
			}
			cols, explicit := metricColumns(j.Progress.Series, splitList(names))
			if plot {
				cols, explicit = metricColumns(j.Progress.Series, []string{metric})
			}
			var wanted []string
			for _, c := range cols {
				wanted = append(wanted, c.key)
			}
			var rows []jobdata.Row
			from := minStep
			for {
				page, err := api.JobMetrics(cmd.Context(), id, from, maxStep, wanted, 10000)
				if err != nil {
					return err
				}
				rows = append(rows, page.Items...)
				if page.NextMinStep == nil {
					break
				}
				from = *page.NextMinStep
			}
			out := cmd.OutOrStdout()
			switch {
			case output == "json":
				printJSON(out, map[string]any{"items": rows})
			case plot:
				width := terminalWidth(out) - 12
				if width < 20 {
					width = 70
				}
				renderPlot(out, rows, cols[0], min(width, 120), 15)
			default:
				renderMetrics(out, rows, cols, explicit)
			}
			return nil
		},
	}
	f := c.Flags()
	f.StringVar(&names, "names", "", "comma-separated headline series (reward, loss, entropy, kl, grad_norm, throughput, seq_len, lr) or prime-rl metric names; default: the headline series")
	f.IntVar(&minStep, "min-step", 0, "the first step")
	f.IntVar(&maxStep, "max-step", 0, "the last step (0: the newest)")
	f.BoolVar(&plot, "plot", false, "draw --metric over the steps")
	f.StringVar(&metric, "metric", "reward", "what --plot draws: a headline series or a prime-rl metric name")
	outputFlag(c, &output)
	return c
}

func newCheckpointsCmd() *cobra.Command {
	var output, to, download, export string
	var pin, unpin int
	c := &cobra.Command{
		Use:   "checkpoints ID",
		Short: "List a job's checkpoints; --download STEP fetches one (its files checked against their sha256)",
		Example: `  hostedtrain train checkpoints JOB
  hostedtrain train checkpoints JOB --download 200 --to ./ckpt
  hostedtrain train checkpoints JOB --download latest
  hostedtrain train checkpoints JOB --download best   # by the job's best_metric
  hostedtrain train checkpoints JOB --export best --to ./adapter   # the weights alone, to load elsewhere
  hostedtrain train checkpoints JOB --pin 200     # keep it past keep_cloud`,
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			if pin > 0 && pin == unpin {
				return fmt.Errorf("--pin %d and --unpin %d: one or the other", pin, unpin)
			}
			if pin > 0 {
				if err := api.PinCheckpoint(cmd.Context(), id, pin, true); err != nil {
					return err
				}
			}
			if unpin > 0 {
				if err := api.PinCheckpoint(cmd.Context(), id, unpin, false); err != nil {
					return err
				}
			}
			cps, err := api.JobCheckpoints(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			// pick is the step a --download or --export names: a number, latest (0) or best.
			pick := func(flag, v string) (int, error) {
				switch v {
				case "latest":
					return 0, nil
				case "best":
					for _, c := range cps {
						if c.Best {
							return c.Step, nil
						}
					}
					return 0, fmt.Errorf("%s best: no committed checkpoint has a value of the job's best_metric yet", flag)
				}
				step, err := strconv.Atoi(v)
				if err != nil || step < 0 {
					return 0, fmt.Errorf("%s %q: a step number, latest or best", flag, v)
				}
				return step, nil
			}
			if cmd.Flags().Changed("download") && cmd.Flags().Changed("export") {
				return errors.New("--download and --export: one or the other")
			}
			if cmd.Flags().Changed("download") {
				step, err := pick("--download", download)
				if err != nil {
					return err
				}
				return downloadCheckpoint(cmd, api, cps, step, to, false)
			}
			if cmd.Flags().Changed("export") {
				step, err := pick("--export", export)
				if err != nil {
					return err
				}
				return downloadCheckpoint(cmd, api, cps, step, to, true)
			}
			if output == "json" {
				printJSON(out, map[string]any{"items": cps})
				return nil
			}
			renderCheckpoints(out, cps)
			return nil
		},
	}
	c.Flags().StringVar(&download, "download", "", "download this step's checkpoint, the newest committed (latest, or 0), or the best (best_metric)")
	c.Flags().StringVar(&export, "export", "", "download only this step's weights (a LoRA adapter with its config, or the model's safetensors) as a folder to load elsewhere: a step, latest or best")
	c.Flags().StringVar(&to, "to", ".", "where --download and --export write step_N/")
	c.Flags().IntVar(&pin, "pin", 0, "keep this committed step past keep_cloud")
	c.Flags().IntVar(&unpin, "unpin", 0, "let this step go with the others again")
	outputFlag(c, &output)
	return c
}

// downloadCheckpoint fetches a committed checkpoint's files into to/step_N, each checked
// against its manifest's sha256; weights downloads only its weights (jobdata.WeightsDir), at
// the folder's top: a LoRA adapter with adapter_config.json, or the model's safetensors.
func downloadCheckpoint(cmd *cobra.Command, api *client.Client, cps []client.Checkpoint, step int, to string, weights bool) error {
	var pick *client.Checkpoint
	for i := range cps {
		if cps[i].Status == "committed" && (step == 0 || cps[i].Step == step) {
			pick = &cps[i]
		}
	}
	if pick == nil {
		return fmt.Errorf("no committed checkpoint of step %d (see `hostedtrain train checkpoints`)", step)
	}
	dir := filepath.Join(to, fmt.Sprintf("step_%d", pick.Step))
	files := pick.Download
	if weights {
		files = nil
		for _, f := range pick.Download {
			if rel, ok := strings.CutPrefix(f.Path, jobdata.WeightsDir); ok {
				f.Path = rel
				files = append(files, f)
			}
		}
		if len(files) == 0 {
			return fmt.Errorf("step %d has no weights to export: prime-rl wrote none to disk for it (a run that sends its weights to inference over NCCL, "+
				"full weights with inference on the node, writes none; a LoRA run writes its adapter); --download %d fetches the trainer's checkpoint", pick.Step, pick.Step)
		}
	}
	for _, f := range files {
		if !filepath.IsLocal(filepath.FromSlash(f.Path)) {
			return fmt.Errorf("the manifest names a path outside the checkpoint: %q", f.Path)
		}
		p := filepath.Join(dir, filepath.FromSlash(f.Path))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		fh, err := os.Create(p)
		if err != nil {
			return err
		}
		h := sha256.New()
		n, err := api.Download(cmd.Context(), f.URL, io.MultiWriter(fh, h))
		if cerr := fh.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return fmt.Errorf("%s: %w", f.Path, err)
		}
		if n != f.Bytes || (f.SHA256 != "" && hex.EncodeToString(h.Sum(nil)) != f.SHA256) {
			return fmt.Errorf("%s: got %d bytes that do not match the manifest (%d bytes, sha256 %s)", f.Path, n, f.Bytes, f.SHA256)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "%s  %s (sha256 ok)\n", p, size(n))
	}
	return nil
}

func newArtifactsCmd() *cobra.Command {
	var output, to string
	var download bool
	c := &cobra.Command{
		Use:   "artifacts ID",
		Short: "List a job's outputs (GEPA prompts, eval results); --download fetches them",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			arts, err := api.JobArtifacts(cmd.Context(), id)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if download {
				for _, a := range arts {
					p := filepath.Join(to, filepath.FromSlash(a.Name))
					if !filepath.IsLocal(filepath.FromSlash(a.Name)) {
						return fmt.Errorf("an artifact name points outside the folder: %q", a.Name)
					}
					if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
						return err
					}
					fh, err := os.Create(p)
					if err != nil {
						return err
					}
					n, err := api.Download(cmd.Context(), a.URL, fh)
					fh.Close()
					if err != nil {
						return fmt.Errorf("%s: %w", a.Name, err)
					}
					fmt.Fprintf(out, "%s  %s\n", p, size(n))
				}
				return nil
			}
			if output == "json" {
				printJSON(out, map[string]any{"items": arts})
				return nil
			}
			renderArtifacts(out, arts)
			return nil
		},
	}
	c.Flags().BoolVar(&download, "download", false, "download every artifact")
	c.Flags().StringVar(&to, "to", ".", "where --download writes")
	outputFlag(c, &output)
	return c
}

func newProgressCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "progress ID",
		Short: "Where a run stands: its step, newest metrics, pace and ETA",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*client.JobProgress, error) {
				return api.JobProgress(ctx, id)
			}, renderProgress)
		},
	}
	outputFlag(c, &output)
	return c
}

// newBudgetCmd is `train budget ID`: a job's budget set anew (a job its budget stopped is then
// restarted with `train restart`).
func newBudgetCmd() *cobra.Command {
	var hours, cost float64
	var none bool
	c := &cobra.Command{
		Use:   "budget ID",
		Short: "Set a job's budget: the GPU hours or the cost it may use over all its runs",
		Example: `  hostedtrain train budget 01a2 --max-gpu-hours 20
  hostedtrain train budget 01a2 --max-cost 150
  hostedtrain train budget 01a2 --none`,
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if (hours > 0 || cost > 0) == none {
				return errors.New("say the new budget: --max-gpu-hours N, --max-cost N (both: the lower binds), or --none to remove it")
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			j, err := api.SetBudget(cmd.Context(), id, hours, cost)
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			if j.BudgetGPUSeconds == 0 {
				fmt.Fprintf(out, "job %s has no budget now\n", j.ID)
				return nil
			}
			fmt.Fprintf(out, "job %s may use %s of GPU time (%s used so far)\n", j.ID, gpuHours(j.BudgetGPUSeconds), gpuHours(j.GPUSeconds))
			if j.Status == job.Stopped && j.GPUSeconds < j.BudgetGPUSeconds {
				fmt.Fprintf(out, "to run it again: hostedtrain train restart %s\n", j.ID)
			}
			return nil
		},
	}
	c.Flags().Float64Var(&hours, "max-gpu-hours", 0, "GPU hours over all its runs")
	c.Flags().Float64Var(&cost, "max-cost", 0, "cost over all its runs, at the operator's price per GPU-hour of its model")
	c.Flags().BoolVar(&none, "none", false, "remove the budget")
	return c
}

func newUsageCmd() *cobra.Command {
	var output, cursor string
	var limit int
	var watch bool
	var every time.Duration
	c := &cobra.Command{
		Use:   "usage [ID]",
		Short: "GPU time used by your organization and by each job; with ID, one job's GPU time, cost and tokens",
		Example: `  hostedtrain train usage
  hostedtrain train usage 01a2 --watch`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				if watch {
					return errors.New("--watch follows one job: give its ID (train usage ID --watch)")
				}
				return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (*client.Usage, error) {
					return api.Usage(ctx, cursor, limit)
				}, renderUsage)
			}
			if err := checkOutput(output); err != nil {
				return err
			}
			if every < time.Second {
				return fmt.Errorf("--interval %s: at least 1s", every)
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			if watch {
				following(id, "hostedtrain train usage "+id+" --watch")
			}
			for {
				u, err := api.JobUsage(ctx, id)
				if err != nil {
					return err
				}
				if output == "json" {
					printJSON(out, u)
				} else {
					if watch && isTerminal(out) {
						fmt.Fprint(out, "\033[H\033[2J")
					}
					renderJobUsage(out, u)
				}
				if !watch || u.Status.Terminal() {
					return nil
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(every):
				}
				if output != "json" && !isTerminal(out) {
					fmt.Fprintln(out)
				}
			}
		},
	}
	c.Flags().IntVar(&limit, "limit", 20, "jobs per page (1-100)")
	c.Flags().StringVar(&cursor, "cursor", "", "continue after a previous page")
	c.Flags().BoolVarP(&watch, "watch", "w", false, "with ID: refresh until the job ends")
	c.Flags().DurationVar(&every, "interval", 5*time.Second, "how often --watch refreshes")
	outputFlag(c, &output)
	return c
}

func newEventsCmd() *cobra.Command {
	var output string
	var followFlag bool
	c := &cobra.Command{
		Use:   "events ID",
		Short: "A job's events; -f follows them live",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			out := cmd.OutOrStdout()
			show := func(e job.Event) {
				if output == "json" {
					printJSON(out, e)
				} else {
					renderEvent(out, e)
				}
			}
			if followFlag {
				following(id, "hostedtrain train events "+id+" -f")
				return api.FollowEvents(cmd.Context(), id, 0, show)
			}
			var after int64
			for {
				evs, err := api.Events(cmd.Context(), id, after)
				if err != nil {
					return err
				}
				for _, e := range evs {
					show(e)
					after = e.Seq
				}
				if len(evs) < 100 {
					return nil
				}
			}
		},
	}
	c.Flags().BoolVarP(&followFlag, "follow", "f", false, "keep printing events until the job ends")
	outputFlag(c, &output)
	return c
}

// spinner frames for a wait on a terminal.
var spinner = []string{"⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"}

func newStopCmd() *cobra.Command {
	var output string
	var timeout time.Duration
	var noWait bool
	c := &cobra.Command{
		Use:     "stop ID",
		Aliases: []string{"cancel"},
		Short:   "Stop a job and wait until it is STOPPED (a queued one at once; a running one through its agent)",
		Args:    needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkOutput(output); err != nil {
				return err
			}
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			ctx, out := cmd.Context(), cmd.OutOrStdout()
			if err := confirm(cmd, fmt.Sprintf("Stop job %s?", id), false); err != nil {
				return err
			}
			j, err := api.CancelJob(ctx, id)
			if err != nil {
				return err
			}
			live := output == "table" && isTerminal(out)
			began := time.Now()
			for frame := 0; !j.Status.Terminal() && !noWait; frame++ {
				if time.Since(began) > timeout {
					if live {
						fmt.Fprint(out, "\r\033[K")
					}
					return fmt.Errorf("job %s is still %s after %s: its agent may be finishing a checkpoint (the stop grace lets it); look again with `hostedtrain train get %s`",
						j.ID, j.Status, timeout, j.ID)
				}
				switch {
				case live:
					fmt.Fprintf(out, "\r%s stopping job %s (%s)", spinner[frame%len(spinner)], j.ID, time.Since(began).Round(time.Second))
				case frame == 0 && output == "table":
					fmt.Fprintf(out, "job %s is stopping; waiting (up to %s)\n", j.ID, timeout)
				}
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(250 * time.Millisecond):
				}
				if j, err = api.GetJob(ctx, id); err != nil {
					return err
				}
			}
			if live {
				fmt.Fprint(out, "\r\033[K")
			}
			if output == "json" {
				printJSON(out, j)
				return nil
			}
			if j.Status.Terminal() {
				fmt.Fprintf(out, "job %s %s", j.ID, j.Status)
				if j.Progress.CheckpointStep > 0 {
					fmt.Fprintf(out, " (newest checkpoint: step %d; `hostedtrain train restart %s` resumes from it)", j.Progress.CheckpointStep, j.ID)
				}
				fmt.Fprintln(out)
				return nil
			}
			fmt.Fprintf(out, "job %s is stopping (its agent hears on its next heartbeat)\n", j.ID)
			return nil
		},
	}
	c.Flags().DurationVar(&timeout, "timeout", 5*time.Minute, "how long to wait for STOPPED")
	c.Flags().BoolVar(&noWait, "no-wait", false, "ask for the stop and return at once")
	forceFlag(c)
	outputFlag(c, &output)
	return c
}

func newDeleteCmd() *cobra.Command {
	c := &cobra.Command{
		Use:   "delete ID",
		Short: "Delete a job that ended, with its metrics, logs, checkpoints and rollouts (asks first)",
		Long: "Deletes a COMPLETED, FAILED or STOPPED job and everything it stored. It cannot be undone:\n" +
			"on a terminal it asks first; elsewhere it needs --force. A live job is refused: stop it first,\n" +
			"or give --stop to stop it and delete it once it has ended.",
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			api, id, err := jobAPI(cmd, args[0])
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			// Unasked, a piece of an id could delete a job the user did not mean: the whole id.
			if force, _ := cmd.Flags().GetBool("force"); force && id != args[0] {
				return fmt.Errorf("delete --force takes a job's whole id (%q fits %s): give it, or leave out --force to be asked", args[0], id)
			}
			if err := confirm(cmd, fmt.Sprintf("Permanently delete job %s and everything it stored?", id), true); err != nil {
				return err
			}
			if stop, _ := cmd.Flags().GetBool("stop"); stop {
				deleted, stopping, err := api.StopAndDeleteJob(ctx, id)
				if err != nil {
					return err
				}
				if !deleted {
					fmt.Fprintf(cmd.OutOrStdout(), "job %s is %s: it is deleted as soon as it has stopped\n", id, stopping.Status)
					return nil
				}
			} else if err := api.DeleteJob(ctx, id); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "job %s deleted\n", id)
			return nil
		},
	}
	forceFlag(c)
	c.Flags().Bool("stop", false, "stop a live job first, then delete it once it has ended")
	return c
}

func newGPUsCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "gpus",
		Short: "The GPUs jobs run on, and how many nodes are idle now",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) ([]client.GPUType, error) {
				return api.GPUs(ctx)
			}, renderGPUs)
		},
	}
	outputFlag(c, &output)
	return c
}

func newComponentsCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "components ID",
		Short: "The parts of a run that write logs: trainer, orchestrator, inference, each environment server, ...",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*client.LogPage, error) {
				page, err := api.JobLogs(ctx, id, client.LogOptions{Tail: 1})
				if err != nil {
					return nil, err
				}
				page.Items = nil
				return page, nil
			}, renderComponents)
		},
	}
	outputFlag(c, &output)
	return c
}

func newForkCmd() *cobra.Command {
	var output string
	var req client.ForkRequest
	c := &cobra.Command{
		Use:   "fork ID",
		Short: "Start a new run from a committed checkpoint of a job (any state), with changes",
		Example: `  hostedtrain train fork JOB --max-steps 400     # from its newest checkpoint, further
  hostedtrain train fork JOB --step 40 --learning-rate 5e-6   # from step 40, to its max_steps`,
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*job.Job, error) {
				return api.ForkJob(ctx, id, req)
			}, func(w io.Writer, j *job.Job) {
				fmt.Fprintf(w, "job %s is queued: it starts from job %s's checkpoint of step %d and runs to step %d\n",
					j.ID, j.Config.WarmStart.Job, j.Config.WarmStart.Step, j.Config.MaxSteps)
			})
		},
	}
	f := c.Flags()
	f.IntVar(&req.Step, "step", 0, "the committed checkpoint's step (default: the newest)")
	f.IntVar(&req.MaxSteps, "max-steps", 0, "the new run's max_steps (default: the job's)")
	f.StringVar(&req.Name, "name", "", "the new run's name")
	f.Float64Var(&req.LearningRate, "learning-rate", 0, "the new run's learning rate")
	f.StringVar(&req.TimeLimit, "time-limit", "", "the new run's time limit (48h, 90m)")
	outputFlag(c, &output)
	return c
}
