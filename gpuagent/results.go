package gpuagent

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// collectResults turns what a GEPA or eval run wrote under root into job data: the result the
// API shows on the job, and metrics rows (per environment, an eval's average reward and its
// size; per GEPA candidate, its score and the best score so far). Nil when there is nothing.
func (r *jobRun) collectResults(root string) (*job.Result, []jobdata.Row) {
	var res job.Result
	var rows []jobdata.Row
	evals, erows := evalResults(root)
	res.Eval, rows = evals, append(rows, erows...)
	if g, grows := gepaResults(root); g != nil {
		res.GEPA, rows = g, append(rows, grows...)
	}
	if len(res.Eval) == 0 && res.GEPA == nil {
		r.warn("the pipeline wrote no results this agent can read (eval metadata.json, GEPA metadata.json)")
		return nil, nil
	}
	for _, e := range res.Eval {
		r.note("eval result", "env", e.Env, "examples", e.NumExamples, "rollouts_per_example", e.RolloutsPerExample, "avg_reward", fmtPtr(e.AvgReward))
		if e.AvgError != nil {
			r.warn(fmt.Sprintf("%.0f%% of the rollouts of %s ended in an error; the first: %s", *e.AvgError*100, e.Env, e.FirstError))
		}
	}
	if g := res.GEPA; g != nil {
		r.note("GEPA result", "best_score", fmtPtr(g.BestScore), "candidates", g.Candidates)
	}
	return &res, rows
}

func fmtPtr(f *float64) string {
	if f == nil {
		return "none"
	}
	return fmt.Sprintf("%.4g", *f)
}

// evalMetadata is what verifiers' eval writes in metadata.json (save_metadata: GenerateMetadata).
type evalMetadata struct {
	EvalKind           string             `json:"eval_kind"` // "gepa" for GEPA's metadata.json, which is not an eval's
	EnvID              string             `json:"env_id"`
	Name               string             `json:"name"`
	Model              string             `json:"model"`
	NumExamples        int                `json:"num_examples"`
	RolloutsPerExample int                `json:"rollouts_per_example"`
	AvgReward          *float64           `json:"avg_reward"`
	AvgError           *float64           `json:"avg_error"`
	AvgMetrics         map[string]float64 `json:"avg_metrics"`
}

// evalResults reads every eval result folder under root (a folder with both results.jsonl and
// metadata.json, as verifiers counts them).
func evalResults(root string) ([]job.EvalSummary, []jobdata.Row) {
	var out []job.EvalSummary
	var rows []jobdata.Row
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "metadata.json" {
			return nil
		}
		dir := filepath.Dir(p)
		if _, err := os.Stat(filepath.Join(dir, "results.jsonl")); err != nil {
			return nil
		}
		data, err := nolink.ReadFile(p)
		if err != nil {
			return nil
		}
		var m evalMetadata
		if json.Unmarshal(data, &m) != nil || m.EnvID == "" || m.EvalKind == "gepa" {
			return nil
		}
		env := m.Name
		if env == "" {
			env = m.EnvID
		}
		n, rewards, firstErr := rollouts(filepath.Join(dir, "results.jsonl"))
		s := job.EvalSummary{Env: env, Model: m.Model, NumExamples: m.NumExamples, RolloutsPerExample: m.RolloutsPerExample,
			Rollouts: n, AvgReward: finite(m.AvgReward), AvgMetrics: finiteMap(m.AvgMetrics), Rewards: rewards}
		if e := finite(m.AvgError); e != nil && *e > 0 {
			s.AvgError, s.FirstError = e, firstErr
		}
		out = append(out, s)
		row := jobdata.Row{"step": raw(1)}
		prefix := "eval/" + env + "/"
		if s.AvgReward != nil {
			row[prefix+"avg_reward"] = raw(*s.AvgReward)
		}
		row[prefix+"num_examples"] = raw(s.NumExamples)
		row[prefix+"rollouts_per_example"] = raw(s.RolloutsPerExample)
		for k, v := range s.AvgMetrics {
			row[prefix+"metrics/"+k] = raw(v)
		}
		rows = append(rows, row)
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Env < out[j].Env })
	if len(out) > 32 {
		out = out[:32]
	}
	return out, rows
}

// rollouts reads an eval's results.jsonl once: how many rollouts it holds, the
// rewards' distribution (rollouts without a finite reward left out), and the first rollout error.
func rollouts(path string) (n int, rewards *job.Distribution, firstErr string) {
	f, err := nolink.Open(path)
	if err != nil {
		return 0, nil, ""
	}
	defer f.Close()
	var vs []float64
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	for sc.Scan() {
		line := bytes.TrimSpace(sc.Bytes())
		if len(line) == 0 {
			continue
		}
		n++
		var r struct {
			Reward *float64 `json:"reward"`
			Error  any      `json:"error"`
		}
		if json.Unmarshal(line, &r) != nil {
			continue
		}
		if v := finite(r.Reward); v != nil {
			vs = append(vs, *v)
		}
		if r.Error != nil && firstErr == "" {
			msg, ok := r.Error.(string)
			if !ok {
				b, _ := json.Marshal(r.Error)
				msg = string(b)
			}
			if len(msg) > 1000 {
				msg = msg[:1000] + "..."
			}
			firstErr = msg
		}
	}
	if len(vs) > 0 {
		d := jobdata.Histogram(vs)
		rewards = &d
	}
	return n, rewards, firstErr
}

// failedEvals says which environments' evals failed in every rollout: the run "completed",
// but measured nothing.
func failedEvals(res *job.Result) string {
	if res == nil {
		return ""
	}
	var out []string
	for _, e := range res.Eval {
		if e.AvgError != nil && *e.AvgError >= 1 {
			out = append(out, fmt.Sprintf("every rollout of %s failed: %s", e.Env, e.FirstError))
		}
	}
	return strings.Join(out, "; ")
}

// gepaMetadata is GEPA's metadata.json (verifiers/legacy/gepa/gepa_utils.py, save_gepa_results).
type gepaMetadata struct {
	EvalKind         string   `json:"eval_kind"`
	NumCandidates    int      `json:"num_candidates"`
	BestIdx          int      `json:"best_idx"`
	BestScore        *float64 `json:"best_score"`
	TotalMetricCalls int      `json:"total_metric_calls"`
	SystemPromptPath string   `json:"system_prompt_path"`
	ResultsPath      string   `json:"results_path"`
}

// gepaCandidate is one line of GEPA's results.jsonl.
type gepaCandidate struct {
	Score float64 `json:"score"`
	Info  struct {
		CandidateIdx   int  `json:"candidate_idx"`
		IsBest         bool `json:"is_best"`
		DiscoveryCalls *int `json:"discovery_metric_calls"`
	} `json:"info"`
}

// gepaResults reads a GEPA run folder under root (the one whose metadata.json says eval_kind
// "gepa"): the best prompt and score, and one metrics row per candidate in the order GEPA found
// them, with the best score so far.
func gepaResults(root string) (*job.GEPASummary, []jobdata.Row) {
	var dir string
	var meta gepaMetadata
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "metadata.json" || dir != "" {
			return nil
		}
		data, err := nolink.ReadFile(p)
		if err == nil && json.Unmarshal(data, &meta) == nil && meta.EvalKind == "gepa" {
			dir = filepath.Dir(p)
		}
		return nil
	})
	if dir == "" {
		return nil, nil
	}
	g := &job.GEPASummary{BestScore: finite(meta.BestScore), Candidates: meta.NumCandidates, MetricCalls: meta.TotalMetricCalls}
	promptFile := meta.SystemPromptPath
	if promptFile == "" {
		promptFile = "system_prompt.txt"
	}
	if b, err := nolink.ReadFile(filepath.Join(dir, filepath.Base(promptFile))); err == nil {
		g.BestPrompt = string(b)
		if len(b) > job.MaxPromptBytes {
			g.BestPrompt, g.PromptTruncated = strings.ToValidUTF8(string(b[:job.MaxPromptBytes]), ""), true
		}
	}
	resultsFile := meta.ResultsPath
	if resultsFile == "" {
		resultsFile = "results.jsonl"
	}
	var rows []jobdata.Row
	f, err := nolink.Open(filepath.Join(dir, filepath.Base(resultsFile)))
	if err == nil {
		defer f.Close()
		var cands []gepaCandidate
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), jobdata.MaxLineBytes)
		for sc.Scan() {
			var c gepaCandidate
			if json.Unmarshal(sc.Bytes(), &c) == nil {
				cands = append(cands, c)
			}
		}
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].Info.CandidateIdx < cands[j].Info.CandidateIdx })
		best := math.Inf(-1)
		for i, c := range cands {
			if math.IsNaN(c.Score) || math.IsInf(c.Score, 0) {
				continue
			}
			best = math.Max(best, c.Score)
			row := jobdata.Row{"step": raw(i + 1), "gepa/score": raw(c.Score), "gepa/best_score": raw(best), "gepa/candidate": raw(c.Info.CandidateIdx)}
			if c.Info.DiscoveryCalls != nil {
				row["gepa/metric_calls"] = raw(*c.Info.DiscoveryCalls)
			}
			rows = append(rows, row)
		}
		if g.Candidates == 0 {
			g.Candidates = len(cands)
		}
	}
	g.Pareto, g.ParetoRows = paretoFrontier(filepath.Join(dir, "pareto_frontier.jsonl"))
	return g, rows
}

// paretoFrontier reads GEPA's pareto_frontier.jsonl (one object per validation row, written
// when GEPA has per-row scores): its first job.MaxParetoRows rows by row number, and how many
// rows it has.
func paretoFrontier(path string) ([]job.ParetoRow, int) {
	f, err := nolink.Open(path)
	if err != nil {
		return nil, 0
	}
	defer f.Close()
	var out []job.ParetoRow
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), jobdata.MaxLineBytes)
	for sc.Scan() {
		var r struct {
			Row       *int     `json:"valset_row"`
			BestScore *float64 `json:"best_score"`
			Best      []struct {
				Idx int `json:"candidate_idx"`
			} `json:"best_candidates"`
		}
		if json.Unmarshal(sc.Bytes(), &r) != nil || r.Row == nil || finite(r.BestScore) == nil {
			continue
		}
		row := job.ParetoRow{Row: *r.Row, BestScore: *r.BestScore, Candidates: []int{}}
		for _, c := range r.Best {
			if len(row.Candidates) < job.MaxParetoCandidates {
				row.Candidates = append(row.Candidates, c.Idx)
			}
		}
		out = append(out, row)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Row < out[j].Row })
	n := len(out)
	if n > job.MaxParetoRows {
		out = out[:job.MaxParetoRows]
	}
	return out, n
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

func finite(f *float64) *float64 {
	if f == nil || math.IsNaN(*f) || math.IsInf(*f, 0) {
		return nil
	}
	return f
}

func finiteMap(m map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range m {
		if !math.IsNaN(v) && !math.IsInf(v, 0) && len(out) < 32 {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}
