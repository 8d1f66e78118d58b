package main

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

func newRolloutsCmd() *cobra.Command {
	var output string
	var step, page, num int
	c := &cobra.Command{
		Use:   "rollouts ID",
		Short: "A step's episodes: what the model was asked, what it answered, how it scored",
		Long: "The episodes prime-rl scored for a training step, as the agent kept them: up to 32 a step,\n" +
			"evenly spaced over the batch. Without --step, the newest step that has them.",
		Args: needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*client.SamplesPage, error) {
				return api.JobSamples(ctx, id, step, page, num)
			}, renderSamples)
		},
	}
	c.Flags().IntVarP(&step, "step", "s", 0, "the step (default: the newest with rollouts)")
	c.Flags().IntVarP(&page, "page", "p", 1, "page number (1-indexed)")
	c.Flags().IntVarP(&num, "num", "n", 100, "samples per page (1-100)")
	outputFlag(c, &output)
	return c
}

func newDistributionsCmd() *cobra.Command {
	var output, kind string
	var step int
	c := &cobra.Command{
		Use:   "distributions ID",
		Short: "A step's histogram of rewards (or advantages) over its whole batch",
		Args:  needArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if kind != "rewards" && kind != "advantages" {
				return fmt.Errorf("--type %q: want rewards or advantages", kind)
			}
			return fetchForJob(cmd, output, args[0], func(ctx context.Context, api *client.Client, id string) (*client.DistributionPage, error) {
				return api.JobDistribution(ctx, id, step, kind)
			}, renderDistribution)
		},
	}
	c.Flags().StringVarP(&kind, "type", "t", "rewards", "rewards or advantages")
	c.Flags().IntVarP(&step, "step", "s", 0, "the step (default: the newest with rollouts)")
	outputFlag(c, &output)
	return c
}

// renderSamples is `train rollouts`.
func renderSamples(w io.Writer, p *client.SamplesPage) {
	if p.Step == nil {
		fmt.Fprintln(w, "no rollouts yet: a step's are kept once the trainer takes it")
		return
	}
	fmt.Fprintf(w, "step %d: %d of its %d episodes kept; page %d of %d (%s)\n", *p.Step, p.Total, p.Episodes, p.Page, max(p.TotalPages, 1), stepsLine(p.Steps))
	for _, s := range p.Samples {
		state := "ok"
		if !s.OK {
			state = "failed"
		}
		if s.StopCondition != "" {
			state += ", " + s.StopCondition
		}
		fmt.Fprintf(w, "\n── episode %d · reward %.4f · advantage %+.4f · %s", s.Index, s.Reward, s.Advantage, state)
		if s.OutputTokens > 0 {
			fmt.Fprintf(w, " · %d tokens out", s.OutputTokens)
		}
		fmt.Fprintln(w)
		for _, part := range []struct {
			name string
			msgs []jobdata.SampleMessage
		}{{"prompt", s.Prompt}, {"completion", s.Completion}} {
			fmt.Fprintf(w, "%s:\n", part.name)
			for _, m := range part.msgs {
				fmt.Fprintf(w, "  [%s] %s\n", m.Role, strings.ReplaceAll(m.Content, "\n", "\n    "))
			}
		}
		for _, e := range s.Errors {
			fmt.Fprintf(w, "error: %s\n", e)
		}
		if len(s.Rewards) > 0 {
			fmt.Fprintf(w, "rewards: %s\n", floatMap(s.Rewards))
		}
		if len(s.Metrics) > 0 {
			fmt.Fprintf(w, "metrics: %s\n", floatMap(s.Metrics))
		}
		if s.Truncated {
			fmt.Fprintln(w, "(cut to size when it was kept)")
		}
	}
}

// histogramWidth is the longest bar `train distributions` draws.
const histogramWidth = 40

// renderDistribution is `train distributions`.
func renderDistribution(w io.Writer, d *client.DistributionPage) {
	if d.Step == nil {
		fmt.Fprintln(w, "no rollouts yet: a step's are kept once the trainer takes it")
		return
	}
	fmt.Fprintf(w, "%s at step %d over %d episodes: mean %.4f, std %.4f, min %.4f, max %.4f (%s)\n",
		d.Type, *d.Step, d.Count, d.Mean, d.Std, d.Min, d.Max, stepsLine(d.Steps))
	most := 0
	for _, b := range d.Bins {
		most = max(most, b.Count)
	}
	t := table(w)
	for _, b := range d.Bins {
		bar := 0
		if most > 0 {
			bar = (b.Count*histogramWidth + most - 1) / most
		}
		fmt.Fprintf(t, "%+.4f … %+.4f\t%s\t%d\n", b.Min, b.Max, strings.Repeat("█", bar), b.Count)
	}
	t.Flush()
}

// stepsLine says which steps have rollouts.
func stepsLine(steps []int) string {
	switch len(steps) {
	case 0:
		return "no step has rollouts"
	case 1:
		return fmt.Sprintf("step %d has rollouts", steps[0])
	}
	return fmt.Sprintf("%d steps have rollouts, %d to %d", len(steps), steps[0], steps[len(steps)-1])
}

func floatMap(m map[string]float64) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, fmt.Sprintf("%s=%g", k, m[k]))
	}
	return strings.Join(parts, " ")
}
