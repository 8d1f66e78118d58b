package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/guptarohit/asciigraph"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// The table views of the CLI, kept apart from the commands so golden files can pin them.

func table(w io.Writer) *tabwriter.Writer { return tabwriter.NewWriter(w, 0, 4, 2, ' ', 0) }

// age says how long ago t was, the way a person reads it at a glance.
func age(t, now time.Time) string {
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func envList(j *job.Job) string {
	ids := make([]string, 0, len(j.Config.Env))
	for _, e := range j.Config.Env {
		ids = append(ids, e.ID)
	}
	return strings.Join(ids, ",")
}

// renderJobList is `train list`.
func renderJobList(w io.Writer, jobs []*job.Job, next string, now time.Time) {
	t := table(w)
	fmt.Fprintln(t, "ID\tSTATUS\tKIND\tMODEL\tENVIRONMENTS\tSTEP\tREWARD\tAGE")
	for _, j := range jobs {
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%d/%d\t%s\t%s\n", j.ID, j.Status, j.Kind, j.Config.Model, envList(j),
			j.Progress.Step, j.Progress.MaxSteps, reward(j.Progress), age(j.CreatedAt, now))
	}
	t.Flush()
	if len(jobs) == 0 {
		fmt.Fprintln(w, "no jobs")
	}
	if next != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", next)
	}
}

// renderJob is `train get` and the summary after --wait.
func renderJob(out io.Writer, j *job.Job) {
	w := table(out)
	fmt.Fprintf(w, "job\t%s\n", j.ID)
	if j.Name != "" {
		fmt.Fprintf(w, "name\t%s\n", j.Name)
	}
	fmt.Fprintf(w, "status\t%s\n", j.Status)
	if j.QueueReason != "" {
		ahead := 0
		if j.RunsAhead != nil {
			ahead = *j.RunsAhead
		}
		fmt.Fprintf(w, "queue\t%s (%d ahead)\n", j.QueueReason, ahead)
	}
	if j.Error != "" {
		fmt.Fprintf(w, "error\t%s\n", j.Error)
	}
	renderFailure(w, j.FailureAnalysis)
	fmt.Fprintf(w, "model\t%s\n", j.Config.Model)
	fmt.Fprintf(w, "environments\t%s\n", strings.ReplaceAll(envList(j), ",", ", "))
	if g := j.Config.Resources; g.GPUs > 0 {
		fmt.Fprintf(w, "gpus\t%d×%s\n", g.GPUs, g.GPUType)
	}
	if j.Runtime != nil && j.Runtime.Pipeline != "" {
		p := j.Runtime.Pipeline
		if j.Runtime.Emulated {
			p += " (emulated: no GPU work was done)"
		}
		fmt.Fprintf(w, "pipeline\t%s on %s\n", p, j.Runtime.AgentID)
		if u := j.Runtime.Upstream; u != nil {
			fmt.Fprintf(w, "upstream\t%s\n", u.String())
		}
	}
	if jobspec.RunsPrimeRL(j.Kind) {
		fmt.Fprintf(w, "steps\t%d/%d\n", j.Progress.Step, j.Progress.MaxSteps)
		fmt.Fprintf(w, "last reward\t%s\n", reward(j.Progress))
	}
	if jobspec.RunsPrimeRL(j.Kind) {
		if j.Progress.Checkpoints > 0 {
			fmt.Fprintf(w, "checkpoints\t%d kept, newest at step %d\n", j.Progress.Checkpoints, j.Progress.CheckpointStep)
		} else {
			fmt.Fprintf(w, "checkpoints\tnone\n")
		}
	}
	if ws := j.Config.WarmStart; ws != nil {
		fmt.Fprintf(w, "started from\tjob %s, its checkpoint of step %d\n", ws.Job, ws.Step)
	}
	if ps := j.Progress.Phases; len(ps) > 0 {
		total, parts := 0.0, make([]string, 0, len(ps))
		for _, p := range ps {
			total += p.Seconds
			part := fmt.Sprintf("%s %s", strings.ReplaceAll(p.Name, "_", " "), phaseTime(p.Seconds))
			switch {
			case p.Cached:
				part += " (cached)"
			case p.Bytes > 0:
				part += " (" + size(p.Bytes) + ")"
			}
			parts = append(parts, part)
		}
		fmt.Fprintf(w, "start-up\t%s: %s\n", phaseTime(total), strings.Join(parts, " · "))
	}
	renderResult(w, j.Progress.Result)
	if j.Run > j.Attempt {
		// After a restart or a hand-back the run (what `logs --attempt` counts) is ahead of the
		// attempts the job's retries spent.
		fmt.Fprintf(w, "attempt\t%d (logs: --attempt %d); %d of %d counted against its retries since its last restart\n",
			j.Run, j.Run, j.Attempt, j.MaxAttempts)
	} else {
		fmt.Fprintf(w, "attempt\t%d of %d\n", j.Attempt, j.MaxAttempts)
	}
	fmt.Fprintf(w, "gpu time\t%s\n", gpuHours(j.GPUSeconds))
	if b := j.BudgetGPUSeconds; b > 0 {
		fmt.Fprintf(w, "budget\t%s of %s used (%d %%)\n", gpuHours(j.GPUSeconds), gpuHours(b), int(100*j.GPUSeconds/b))
	}
	fmt.Fprintf(w, "created\t%s\n", j.CreatedAt.Local().Format(time.RFC3339))
	if j.StartedAt != nil && j.FinishedAt != nil {
		fmt.Fprintf(w, "ran for\t%s\n", j.FinishedAt.Sub(*j.StartedAt).Round(100*time.Millisecond))
	}
	w.Flush()
}

// renderFailure is a failed attempt's analysis: what it was, whose fault, what was done about
// it and the lines it rests on.
func renderFailure(w io.Writer, a *job.FailureAnalysis) {
	if a == nil {
		return
	}
	what := "not retried"
	switch {
	case a.Retried:
		what = "retried on another node"
	case a.Fault == job.FaultUser:
		what = "not retried: the job's own fault"
	case a.Fault == job.FaultPlatform:
		what = "not retried: no attempt left, or too unsure to spend GPU hours on"
	}
	fault := string(a.Fault) + " fault"
	if a.Fault == job.FaultUnknown {
		fault = "fault unknown"
	}
	fmt.Fprintf(w, "failure\t%s (attempt %d; %s, confidence %.2f; %s)\n", a.Class, a.Attempt, fault, a.Confidence, what)
	fmt.Fprintf(w, "\t%s\n", a.Summary)
	for _, e := range a.Evidence {
		fmt.Fprintf(w, "\t> %s\n", e)
	}
}

func gpuHours(sec float64) string {
	if sec < 3600 {
		return fmt.Sprintf("%.1f GPU-minutes", sec/60)
	}
	return fmt.Sprintf("%.2f GPU-hours", sec/3600)
}

// renderLogLine prints one line with its component in front: "trainer      | ...".
func renderLogLine(w io.Writer, l client.LogLine) {
	fmt.Fprintf(w, "%-12s | %s\n", l.Component, l.Line)
}

// renderResult is a GEPA or eval job's result in `train get`: per environment, the eval's size
// and average reward; GEPA's best score and prompt.
func renderResult(w io.Writer, r *job.Result) {
	if r == nil {
		return
	}
	for _, e := range r.Eval {
		avg := "-"
		if e.AvgReward != nil {
			avg = fmt.Sprintf("%.4f", *e.AvgReward)
		}
		fmt.Fprintf(w, "eval %s\taverage reward %s over %d examples × %d rollouts (%d scored)\n", e.Env, avg, e.NumExamples, e.RolloutsPerExample, e.Rollouts)
		if e.AvgError != nil {
			fmt.Fprintf(w, "\t%.0f%% of the rollouts ended in an error; the first: %s\n", *e.AvgError*100, e.FirstError)
		}
	}
	if g := r.GEPA; g != nil {
		best := "-"
		if g.BestScore != nil {
			best = fmt.Sprintf("%.4f", *g.BestScore)
		}
		fmt.Fprintf(w, "gepa\tbest score %s of %d candidates (%d metric calls)\n", best, g.Candidates, g.MetricCalls)
		prompt := strings.Join(strings.Fields(g.BestPrompt), " ")
		if len(prompt) > 200 {
			prompt = prompt[:200] + "… (the whole prompt: train artifacts --download)"
		}
		fmt.Fprintf(w, "best prompt\t%s\n", prompt)
	}
}

// defaultMetricColumns are the headline series `train metrics` shows unless --names says.
var defaultMetricColumns = []string{"reward", "loss", "entropy", "kl", "grad_norm", "seq_len", "eval_reward", "gepa_best"}

// column is a metric shown by `train metrics`: its key in the rows and its heading.
type column struct{ key, label string }

// metricColumns turns the names asked for (headline series or metric names; none for the
// default series) into columns, by the job's own keys for the series.
func metricColumns(series map[string]string, names []string) ([]column, bool) {
	explicit := len(names) > 0
	if !explicit {
		names = defaultMetricColumns
	}
	cols := make([]column, 0, len(names))
	for _, n := range names {
		cols = append(cols, column{key: seriesKey(series, n), label: n})
	}
	return cols, explicit
}

// renderMetrics is `train metrics` as a table, one row a step, a column a metric; the
// default columns show only the series the job has.
func renderMetrics(w io.Writer, rows []jobdata.Row, cols []column, explicit bool) {
	if !explicit {
		present := map[string]bool{}
		for _, r := range rows {
			for k := range r {
				present[k] = true
			}
		}
		var kept []column
		for _, c := range cols {
			if present[c.key] {
				kept = append(kept, c)
			}
		}
		cols = kept
	}
	t := table(w)
	fmt.Fprint(t, "STEP")
	for _, c := range cols {
		fmt.Fprintf(t, "\t%s", strings.ToUpper(c.label))
	}
	fmt.Fprintln(t)
	for _, r := range rows {
		fmt.Fprintf(t, "%s", r["step"])
		for _, c := range cols {
			v := "-"
			if raw, ok := r[c.key]; ok {
				var f float64
				if json.Unmarshal(raw, &f) == nil {
					v = fmt.Sprintf("%.4f", f)
				}
			}
			fmt.Fprintf(t, "\t%s", v)
		}
		fmt.Fprintln(t)
	}
	t.Flush()
	if len(rows) == 0 {
		fmt.Fprintln(w, "no metrics yet")
	}
	if len(cols) > 0 && len(rows) > 0 {
		var keys []string
		for _, c := range cols {
			if c.label != c.key {
				keys = append(keys, c.label+" = "+c.key)
			}
		}
		if len(keys) > 0 {
			fmt.Fprintf(w, "(prime-rl's names: %s)\n", strings.Join(keys, ", "))
		}
	}
}

// renderPlot draws one metric over the steps in the terminal.
func renderPlot(w io.Writer, rows []jobdata.Row, c column, width, height int) {
	name := c.key
	var ys []float64
	first, last := 0, 0
	for _, r := range rows {
		var v float64
		var step int
		if json.Unmarshal(r[name], &v) != nil || json.Unmarshal(r["step"], &step) != nil || math.IsNaN(v) {
			continue
		}
		if len(ys) == 0 {
			first = step
		}
		last = step
		ys = append(ys, v)
	}
	if len(ys) < 2 {
		fmt.Fprintf(w, "%s: not enough steps to plot (%d)\n", c.label, len(ys))
		return
	}
	caption := c.label
	if c.label != c.key {
		caption += " (" + c.key + ")"
	}
	fmt.Fprintln(w, asciigraph.Plot(ys, asciigraph.Width(width), asciigraph.Height(height),
		asciigraph.Caption(fmt.Sprintf("%s, steps %d to %d", caption, first, last)), asciigraph.Precision(3)))
}

func size(b int64) string {
	switch {
	case b >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30))
	case b >= 1<<20:
		return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20))
	case b >= 1<<10:
		return fmt.Sprintf("%.1f KiB", float64(b)/(1<<10))
	}
	return fmt.Sprintf("%d B", b)
}

// renderCheckpoints is `train checkpoints`.
func renderCheckpoints(w io.Writer, cps []client.Checkpoint) {
	t := table(w)
	fmt.Fprintln(t, "STEP\tSTATUS\tREWARD\tEVAL REWARD\tSIZE\tFILES\tTIME")
	for _, c := range cps {
		when := "-"
		if c.Time != nil {
			when = c.Time.Local().Format(time.DateTime)
		}
		status := c.Status
		if c.Pinned {
			status += ", pinned"
		}
		if c.Best {
			status += ", best"
		}
		metric := func(name string) string {
			if v, ok := c.Metrics[name]; ok {
				return fmt.Sprintf("%.4f", v)
			}
			return "-"
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%d\t%s\n", c.Step, status, metric("reward"), metric("eval_reward"), size(c.Bytes), c.Files, when)
	}
	t.Flush()
	if len(cps) == 0 {
		fmt.Fprintln(w, "no checkpoints yet")
	}
}

// renderArtifacts is `train artifacts`.
func renderArtifacts(w io.Writer, arts []client.Artifact) {
	t := table(w)
	fmt.Fprintln(t, "NAME\tSIZE\tTIME")
	for _, a := range arts {
		when := "-"
		if a.Time != nil {
			when = a.Time.Local().Format(time.DateTime)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\n", a.Name, size(a.Bytes), when)
	}
	t.Flush()
	if len(arts) == 0 {
		fmt.Fprintln(w, "no artifacts")
	}
}

func seconds(s float64) string {
	return (time.Duration(s * float64(time.Second))).Round(time.Second).String()
}

// renderProgress is `train progress`.
func renderProgress(out io.Writer, p *client.JobProgress) {
	w := table(out)
	fmt.Fprintf(w, "job\t%s\n", p.JobID)
	fmt.Fprintf(w, "status\t%s\n", p.Status)
	fmt.Fprintf(w, "step\t%d/%d (%.1f%%)\n", p.Step, p.MaxSteps, p.Percent)
	names := make([]string, 0, len(p.Metrics))
	for n := range p.Metrics {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		if label := seriesName(p.Series, n); label != n {
			fmt.Fprintf(w, "%s\t%.4f  (%s)\n", label, p.Metrics[n], n)
		} else {
			fmt.Fprintf(w, "%s\t%.4f\n", n, p.Metrics[n])
		}
	}
	renderResult(w, p.Result)
	if p.CheckpointStep > 0 {
		fmt.Fprintf(w, "newest checkpoint\tstep %d\n", p.CheckpointStep)
	}
	if n := len(p.StepsWithSamples); n > 0 {
		fmt.Fprintf(w, "rollouts\t%s (train rollouts %s --step N)\n", stepsLine(p.StepsWithSamples), p.JobID)
	}
	if p.StepSeconds != nil {
		fmt.Fprintf(w, "pace\t%.2f s a step\n", *p.StepSeconds)
	}
	if p.ElapsedSeconds != nil {
		fmt.Fprintf(w, "elapsed\t%s\n", seconds(*p.ElapsedSeconds))
	}
	if p.ETASeconds != nil {
		fmt.Fprintf(w, "eta\t%s\n", seconds(*p.ETASeconds))
	}
	w.Flush()
}

// renderComponents is `train components`.
func renderComponents(w io.Writer, p *client.LogPage) {
	t := table(w)
	fmt.Fprintln(t, "COMPONENT\tLOGS WITH")
	for _, c := range p.Components {
		with := "--component " + c
		if name, ok := strings.CutPrefix(c, "envs/train/"); ok {
			with = "--env " + name
		}
		fmt.Fprintf(t, "%s\t%s\n", c, with)
	}
	t.Flush()
	if len(p.Components) == 0 {
		fmt.Fprintln(w, "no logs yet")
	}
}

// renderGPUs is `train gpus`.
func renderGPUs(w io.Writer, gpus []client.GPUType) {
	t := table(w)
	fmt.Fprintln(t, "GPU\tPER NODE\tIDLE NODES (BY GPUS FREE)")
	for _, g := range gpus {
		var idle []string
		for i, n := range g.IdleNodes {
			idle = append(idle, fmt.Sprintf("%d: %d", i+1, n))
		}
		fmt.Fprintf(t, "%s\t%d\t%s\n", g.GPUType, g.PerNode, strings.Join(idle, "  "))
	}
	t.Flush()
	fmt.Fprintln(w, "a job asks for its GPUs with num_gpus (1 to a node's); with none idle it queues")
}

// renderJobUsage is `train usage ID`.
func renderJobUsage(out io.Writer, u *client.JobUsage) {
	w := table(out)
	fmt.Fprintf(w, "job\t%s (%s, %s)\n", u.JobID, u.Kind, u.Status)
	if u.Model != "" {
		fmt.Fprintf(w, "model\t%s\n", u.Model)
	}
	gpus := "none"
	if u.GPUs > 0 {
		gpus = fmt.Sprintf("%d×%s", u.GPUs, u.GPUType)
	}
	fmt.Fprintf(w, "gpus\t%s\n", gpus)
	fmt.Fprintf(w, "gpu time\t%s\n", gpuHours(u.GPUSeconds))
	if u.CostUSD != nil {
		fmt.Fprintf(w, "cost\t$%.2f (at $%.2f/GPU-hour)\n", *u.CostUSD, u.PricePerGPUHour)
	} else {
		fmt.Fprintf(w, "cost\t- (no price set for %s)\n", orDash(u.Model))
	}
	if u.MaxSteps > 0 {
		fmt.Fprintf(w, "step\t%d/%d\n", u.Step, u.MaxSteps)
	}
	if u.ProjectedGPUSeconds != nil {
		line := gpuHours(*u.ProjectedGPUSeconds)
		if u.ProjectedCostUSD != nil {
			line += fmt.Sprintf(", $%.2f", *u.ProjectedCostUSD)
		}
		fmt.Fprintf(w, "projected\t%s at the end, at the pace so far\n", line)
	}
	if u.Tokens.Total > 0 {
		fmt.Fprintf(w, "tokens\t%d (%d in, %d out)\n", u.Tokens.Total, u.Tokens.Input, u.Tokens.Output)
	}
	if u.StorageBytes > 0 {
		fmt.Fprintf(w, "storage\t%s (checkpoints, metrics, logs, artifacts)\n", size(u.StorageBytes))
	}
	w.Flush()
}

// renderUsage is `train usage`.
func renderUsage(w io.Writer, u *client.Usage) {
	fmt.Fprintf(w, "organization %s: %s in all; %d job(s) running on %d GPU(s) now; %s in storage\n\n", u.Organization.Org,
		gpuHours(u.Organization.GPUSeconds), u.Organization.Running, u.Organization.RunningGPUs, size(u.Organization.StorageBytes))
	if in := u.Organization.Inference; in != nil {
		fmt.Fprintf(w, "deployments served %d request(s): %d prompt and %d completion tokens\n\n", in.Requests, in.PromptTokens, in.CompletionTokens)
	}
	t := table(w)
	fmt.Fprintln(t, "ID\tKIND\tSTATUS\tGPUS\tGPU TIME\tSTORAGE")
	for _, j := range u.Jobs {
		g := "-"
		if j.GPUs > 0 {
			g = fmt.Sprintf("%d×%s", j.GPUs, j.GPUType)
		}
		stored := "-"
		if j.StorageBytes > 0 {
			stored = size(j.StorageBytes)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", j.ID, j.Kind, j.Status, g, gpuHours(j.GPUSeconds), stored)
	}
	t.Flush()
	if u.NextCursor != "" {
		fmt.Fprintf(w, "more: --cursor %s\n", u.NextCursor)
	}
	for _, part := range []struct {
		head   string
		shares []job.UsageShare
	}{{"BY USER", u.ByUser}, {"BY TOKEN", u.ByToken}} {
		if len(part.shares) == 0 {
			continue
		}
		fmt.Fprintln(w)
		t := table(w)
		fmt.Fprintf(t, "%s\tGPU TIME\tCOST\n", part.head)
		for _, s := range part.shares {
			cost := "-"
			if s.CostUSD > 0 {
				cost = fmt.Sprintf("$%.2f", s.CostUSD)
			}
			fmt.Fprintf(t, "%s\t%s\t%s\n", s.Who, gpuHours(s.GPUSeconds), cost)
		}
		t.Flush()
	}
}

// progressLine is the live line of --wait: a bar, the step, the newest metrics.
func progressLine(j *job.Job, width int) string {
	p := j.Progress
	frac := 0.0
	if p.MaxSteps > 0 {
		frac = min(1, float64(p.Step)/float64(p.MaxSteps))
	}
	const bar = 20
	filled := int(frac * bar)
	line := fmt.Sprintf("%s [%s%s] %d/%d %3.0f%%%s", j.Status, strings.Repeat("#", filled), strings.Repeat(".", bar-filled),
		p.Step, p.MaxSteps, 100*frac, metricsLine(p))
	if width > 0 && len(line) > width-1 {
		line = line[:width-1]
	}
	return line
}

// renderEvent is one event line of --wait and `train events`.
func renderEvent(w io.Writer, e job.Event) {
	line := fmt.Sprintf("  %s  %-9s %s", e.Time.Local().Format("15:04:05"), e.Status, e.Type)
	if e.Detail != "" {
		line += "  (" + e.Detail + ")"
	}
	fmt.Fprintln(w, line)
}

// renderModels lists models with the GPUs an rl job of each takes and the price.
func renderModels(w io.Writer, list *client.ModelList) {
	t := table(w)
	fmt.Fprintln(t, "MODEL\tGPUS\tPRICE\tRENDERER\tIDLE NODES")
	for _, m := range list.Items {
		price := "-"
		if m.PricePerGPUHour > 0 {
			price = fmt.Sprintf("$%.2f/GPU-hour", m.PricePerGPUHour)
		}
		fmt.Fprintf(t, "%s\t%d\t%s\t%s\t%d\n", m.Name, m.GPUs, price, orDash(m.Renderer), m.IdleNodes)
	}
	t.Flush()
	fmt.Fprintln(w, "idle nodes: nodes waiting for work now with the model's GPUs free (0: a new job queues)")
	if !list.OperatorList {
		fmt.Fprintln(w, "any other Hugging Face model trains too, with renderer = \"...\" in the job")
	}
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// renderNodes is `admin nodes list`.
func renderNodes(w io.Writer, nodes []job.Node, now time.Time) {
	t := table(w)
	fmt.Fprintln(t, "NODE\tSTATE\tSINCE\tFAULTS\tLAST SEEN\tFREE\tCACHE HITS (MODEL/ENV/COMPILE)\tCACHED\tREASON")
	for _, n := range nodes {
		since, seen := "-", "-"
		if n.Since != nil {
			since = age(*n.Since, now)
		}
		if n.LastSeen != nil {
			seen = age(*n.LastSeen, now) + " ago"
		}
		free := make([]string, 0, len(n.Free))
		for _, g := range n.Free {
			free = append(free, fmt.Sprintf("%d×%s", g.Count, g.Model))
		}
		hits, cached := "-", "-"
		if len(n.Cache) > 0 {
			rates := make([]string, 0, 3)
			var held int64
			for _, kind := range []string{"model", "env", "compile"} {
				s := n.Cache[kind]
				held += s.Bytes
				if s.Hits+s.Misses == 0 {
					rates = append(rates, "-")
				} else {
					rates = append(rates, fmt.Sprintf("%.0f%%", 100*s.HitRate()))
				}
			}
			hits, cached = strings.Join(rates, "/"), size(held)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", n.ID, n.State, since, n.RecentFaults, seen, strings.Join(free, ","), hits, cached, n.Reason)
	}
	t.Flush()
	if len(nodes) == 0 {
		fmt.Fprintln(w, "no nodes seen lately")
	}
}

// renderEstimate is a dry run's estimate of what a training job would take.
func renderEstimate(w io.Writer, e *client.Estimate) {
	if e == nil {
		return
	}
	d := func(sec float64) string { return (time.Duration(sec) * time.Second).Round(time.Minute).String() }
	r := e.DurationSeconds
	fmt.Fprintf(w, "estimate: %s for %d steps (%s to %s), %.2f GPU-hours (%.2f to %.2f)", d(r.Expected), e.Steps, d(r.Low), d(r.High),
		e.GPUHours.Expected, e.GPUHours.Low, e.GPUHours.High)
	if c := e.Cost; c != nil {
		fmt.Fprintf(w, ", cost %.2f (%.2f to %.2f) at %g a GPU-hour", c.Expected, c.Low, c.High, e.PricePerGPUHour)
	}
	fmt.Fprintf(w, "\n  based on %s\n", e.BasedOn)
}

// renderRestart says what a restart did, from the job as the service answered it.
func renderRestart(w io.Writer, j *job.Job) {
	switch {
	case j.Status == job.Queued:
		from := "the start"
		if j.ResumeStep > 0 {
			from = fmt.Sprintf("the checkpoint of step %d", j.ResumeStep)
		}
		fmt.Fprintf(w, "job %s is queued again, to resume from %s\n", j.ID, from)
	case !j.Status.Terminal() && j.StopRequested:
		fmt.Fprintf(w, "job %s is stopping; it will be queued again once its run has stopped\n", j.ID)
	case !j.Status.Terminal():
		fmt.Fprintf(w, "job %s is %s\n", j.ID, j.Status)
	default:
		why := j.Error
		if why == "" {
			why = "see `hostedtrain train events " + j.ID + "`"
		}
		fmt.Fprintf(w, "job %s was not queued again: it is %s (%s)\n", j.ID, j.Status, why)
	}
}

// phaseTime writes a stretch of start-up: milliseconds below a second.
func phaseTime(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.0f ms", s*1000)
	}
	return fmt.Sprintf("%.1f s", s)
}
