package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// What agents wrote to object storage for a job: metrics, checkpoints, artifacts. The API
// reads it with the same format (package jobdata) the agents write it with.

// storeReady answers 503 when the service runs without object storage configured.
func (s *Server) storeReady(w http.ResponseWriter, r *http.Request) bool {
	if prob := s.needStore(); prob != nil {
		writeProblem(w, r, prob)
		return false
	}
	return true
}

// needStore is the 503 of a read of job data when the service runs without object storage
// configured (nil when it has some).
func (s *Server) needStore() *Problem {
	if s.cfg.Store == nil {
		return newProblem(http.StatusServiceUnavailable, "no-object-storage",
			"this deployment has no object storage configured, so job metrics, checkpoints and artifacts cannot be read")
	}
	return nil
}

func (s *Server) getJobMetrics(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) {
		return s.jobMetrics(r, j, metricsQueryOf(r.URL.Query()))
	})
}

// metricsQueryOf reads what GET /v1/jobs/{id}/metrics asks for from its query, which
// validation has checked.
func metricsQueryOf(in url.Values) jobdata.MetricsQuery {
	q := jobdata.MetricsQuery{
		MinStep: intParam(in, "min_step", 0),
		MaxStep: intParam(in, "max_step", 0),
		Limit:   intParam(in, "limit", 1000),
	}
	for _, n := range strings.Split(in.Get("names"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			q.Names = append(q.Names, n)
		}
	}
	return q
}

// jobMetrics is a page of the rows of one of the caller's jobs' metrics.
func (s *Server) jobMetrics(r *http.Request, j *job.Job, q jobdata.MetricsQuery) (*wire.MetricsPage, *Problem) {
	if prob := s.needStore(); prob != nil {
		return nil, prob
	}
	read, err := jobdata.ReadMetrics(r.Context(), s.cfg.Store, j.ID, q)
	if err != nil {
		return nil, s.failure(r, err)
	}
	s.noteSkipped(r, j.ID, read)
	page := wire.MetricsPage{Items: read.Rows}
	if read.More {
		next := read.Rows[len(read.Rows)-1].Step() + 1
		page.NextMinStep = &next
	}
	return &page, nil
}

// noteSkipped logs the stored lines a read of a job's metrics passed over: the answer holds
// the other rows, and an operator can find what was not one.
func (s *Server) noteSkipped(r *http.Request, jobID string, read jobdata.MetricsPage) {
	if read.Skipped > 0 {
		s.cfg.Logger.Warn("metrics lines passed over: not rows, or too long", "job", jobID, "lines", read.Skipped, "path", r.URL.Path)
	}
}

func (s *Server) listJobCheckpoints(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) { return s.jobCheckpoints(r, j) })
}

// checkpointList is a job's checkpoints, and when the download links in it expire.
type checkpointList struct {
	ExpiresAt time.Time         `json:"expires_at"`
	Items     []wire.Checkpoint `json:"items"`
}

// jobCheckpoints are the checkpoints of one of the caller's jobs, each committed one's files
// with download links to where r reached the API.
func (s *Server) jobCheckpoints(r *http.Request, j *job.Job) (*checkpointList, *Problem) {
	if prob := s.needStore(); prob != nil {
		return nil, prob
	}
	cps, err := jobdata.ListCheckpoints(r.Context(), s.cfg.Store, j.ID)
	if err != nil {
		return nil, s.failure(r, err)
	}
	// pins and metrics are extras: the list (and its download links) does not fail for them
	pinned, err := jobdata.PinnedSteps(r.Context(), s.cfg.Store, j.ID)
	if err != nil {
		s.cfg.Logger.Warn("checkpoints: read the job's pins", "job", j.ID, "err", err)
	}
	var committed []int
	for _, c := range cps {
		if c.Committed {
			committed = append(committed, c.Step)
		}
	}
	metrics, err := s.checkpointMetrics(r, j, committed)
	if err != nil {
		s.cfg.Logger.Warn("checkpoints: read the metrics of their steps", "job", j.ID, "err", err)
	}
	bestBy := j.Config.Checkpoints.Best(j.Config.Eval != nil)
	best, bestValue := -1, math.Inf(-1)
	for _, step := range committed {
		if v, ok := metrics[step][bestBy]; ok && v > bestValue {
			best, bestValue = step, v
		}
	}
	expires := time.Now().Add(downloadTTL).UTC().Truncate(time.Second)
	items := make([]wire.Checkpoint, 0, len(cps))
	for _, c := range cps {
		it := wire.Checkpoint{Step: c.Step, Status: "uploading", Bytes: c.Bytes, Files: c.Files, Pinned: pinned[c.Step] && c.Committed,
			Metrics: metrics[c.Step], Best: c.Committed && c.Step == best}
		if !c.Time.IsZero() {
			t := c.Time.UTC()
			it.Time = &t
		}
		if c.Committed {
			it.Status = "committed"
			files, err := s.checkpointDownloads(r, j.ID, c.Step, expires)
			if err != nil {
				return nil, s.failure(r, err)
			}
			it.Download = files
		}
		items = append(items, it)
	}
	return &checkpointList{ExpiresAt: expires, Items: items}, nil
}

// checkpointMetrics are, for each of the steps (ascending), the training reward of the step and
// the reward of the newest online evaluation since the step before it, at or before it (the
// series the job's progress names: with several evaluation environments, the first by name).
func (s *Server) checkpointMetrics(r *http.Request, j *job.Job, steps []int) (map[int]map[string]float64, error) {
	out := map[int]map[string]float64{}
	keys := map[string]string{}
	for _, name := range []string{"reward", "eval_reward"} {
		if k := j.Progress.Series[name]; k != "" {
			keys[name] = k
		}
	}
	if len(steps) == 0 || len(keys) == 0 {
		return out, nil
	}
	names := make([]string, 0, len(keys))
	for _, k := range keys {
		names = append(names, k)
	}
	last := steps[len(steps)-1]
	reward, eval := map[int]float64{}, map[int]float64{}
	for minStep := 0; ; {
		read, err := jobdata.ReadMetrics(r.Context(), s.cfg.Store, j.ID, jobdata.MetricsQuery{MinStep: minStep, MaxStep: last, Names: names, Limit: 10000})
		if err != nil {
			return nil, err
		}
		for _, row := range read.Rows {
			if v, ok := row.Float(keys["reward"]); ok {
				reward[row.Step()] = v
			}
			if v, ok := row.Float(keys["eval_reward"]); ok {
				eval[row.Step()] = v
			}
		}
		if !read.More || len(read.Rows) == 0 {
			break
		}
		minStep = read.Rows[len(read.Rows)-1].Step() + 1
	}
	evalSteps := slices.Sorted(maps.Keys(eval))
	prev := 0
	for _, step := range steps {
		m := map[string]float64{}
		if v, ok := reward[step]; ok {
			m["reward"] = v
		}
		// the newest evaluation after the checkpoint before and at or before this one: of the
		// weights this checkpoint holds, never the base model's (step 0) or an older one's
		i, found := slices.BinarySearch(evalSteps, step)
		if found {
			i++
		}
		if i > 0 && evalSteps[i-1] > prev {
			m["eval_reward"] = eval[evalSteps[i-1]]
		}
		if len(m) > 0 {
			out[step] = m
		}
		prev = step
	}
	return out, nil
}

// checkpointDownloads lists a committed checkpoint's files, as its manifest has them, with
// download links.
func (s *Server) checkpointDownloads(r *http.Request, jobID string, step int, expires time.Time) ([]wire.DownloadFile, error) {
	prefix := jobdata.CheckpointPrefix(jobID, step)
	rc, err := s.cfg.Store.Get(r.Context(), prefix+jobdata.ManifestName)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil // pruned between the listing and now
	}
	if err != nil {
		return nil, err
	}
	var m jobdata.Manifest
	err = json.NewDecoder(rc).Decode(&m)
	rc.Close()
	if err != nil {
		return nil, fmt.Errorf("manifest of step %d: %w", step, err)
	}
	out := make([]wire.DownloadFile, 0, len(m.Files))
	for _, f := range m.Files {
		u, err := s.downloadURL(r.Context(), r, prefix+f.Path, expires)
		if err != nil {
			return nil, err
		}
		out = append(out, wire.DownloadFile{Path: f.Path, Bytes: f.Size, SHA256: f.SHA256, URL: u})
	}
	return out, nil
}

func (s *Server) listJobArtifacts(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok || !s.storeReady(w, r) {
		return
	}
	prefix := jobdata.ArtifactPrefix(j.ID)
	objs, err := s.cfg.Store.List(r.Context(), prefix)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	expires := time.Now().Add(downloadTTL).UTC().Truncate(time.Second)
	items := make([]wire.Artifact, 0, len(objs))
	for _, o := range objs {
		t := o.Modified.UTC()
		u, err := s.downloadURL(r.Context(), r, o.Key, expires)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		items = append(items, wire.Artifact{Name: strings.TrimPrefix(o.Key, prefix), Bytes: o.Size, Time: &t, URL: u})
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "expires_at": expires})
}

// progressWindow is how many of the newest steps the pace is measured over.
const progressWindow = 20

func (s *Server) getJobProgress(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) { return s.jobProgress(r, j) })
}

// jobProgress is where one of the caller's jobs stands: its step, pace and the steps that
// have rollouts.
func (s *Server) jobProgress(r *http.Request, j *job.Job) (*wire.JobProgress, *Problem) {
	p := wire.JobProgress{JobID: j.ID, Status: j.Status, Step: j.Progress.Step, MaxSteps: j.Progress.MaxSteps,
		Metrics: j.Progress.Metrics, Series: j.Progress.Series, Result: j.Progress.Result, CheckpointStep: j.Progress.CheckpointStep,
		StartedAt: j.StartedAt, UpdatedAt: j.UpdatedAt}
	if p.MaxSteps > 0 {
		p.Percent = math.Round(1000*float64(p.Step)/float64(p.MaxSteps)) / 10
	}
	if j.StartedAt != nil {
		end := time.Now()
		if j.FinishedAt != nil {
			end = *j.FinishedAt
		}
		e := end.Sub(*j.StartedAt).Seconds()
		p.ElapsedSeconds = &e
	}
	if s.cfg.Store != nil && p.Step > 1 {
		read, err := jobdata.ReadMetrics(r.Context(), s.cfg.Store, j.ID, jobdata.MetricsQuery{
			MinStep: max(0, p.Step-progressWindow), Names: []string{"time"}})
		if err != nil {
			return nil, s.failure(r, err)
		}
		s.noteSkipped(r, j.ID, read)
		if pace, ok := stepPace(read.Rows); ok {
			p.StepSeconds = &pace
			if j.Status == job.Running && p.MaxSteps > p.Step {
				eta := pace * float64(p.MaxSteps-p.Step)
				p.ETASeconds = &eta
			}
		}
	}
	if s.cfg.Store != nil && jobspec.RunsPrimeRL(j.Config.Kind) && p.Step > 0 {
		// a side answer: progress does not fail for it
		if steps, err := jobdata.RolloutSteps(r.Context(), s.cfg.Store, j.ID); err == nil {
			p.StepsWithSamples = steps
		} else {
			s.cfg.Logger.Warn("progress: list the job's rollouts", "job", j.ID, "err", err)
		}
	}
	return &p, nil
}

// stepPace is the mean time between consecutive steps of rows (by their `time`), over the
// longest run of consecutive steps at their end.
func stepPace(rows []jobdata.Row) (float64, bool) {
	var times []float64
	var steps []int
	for _, r := range rows {
		var t float64
		if json.Unmarshal(r["time"], &t) == nil && t > 0 {
			times = append(times, t)
			steps = append(steps, r.Step())
		}
	}
	if len(times) < 2 {
		return 0, false
	}
	first := len(times) - 1
	for first > 0 && steps[first-1] == steps[first]-1 && times[first-1] <= times[first] {
		first--
	}
	n := len(times) - 1 - first
	if n < 1 {
		return 0, false
	}
	return (times[len(times)-1] - times[first]) / float64(n), true
}

func (s *Server) getUsage(w http.ResponseWriter, r *http.Request) {
	org := principal(r).Org
	st, err := s.cfg.Queue.GetOrg(r.Context(), org)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	jobs, next, err := s.cfg.Queue.List(r.Context(), org, job.ListFilter{}, r.URL.Query().Get("cursor"), intQuery(r, "limit", 20))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	ids := make([]string, len(jobs))
	for i, j := range jobs {
		ids[i] = j.ID
	}
	stored, err := s.cfg.Queue.StoredBytes(r.Context(), org, ids)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	items := make([]wire.UsageJob, 0, len(jobs))
	for _, j := range jobs {
		items = append(items, wire.UsageJob{ID: j.ID, Name: j.Name, Kind: j.Kind, Status: j.Status, GPUs: j.Config.Resources.GPUs,
			GPUType: j.Config.Resources.GPUType, GPUSeconds: round3(j.GPUSeconds), StorageBytes: stored[j.ID], CreatedAt: j.CreatedAt})
	}
	// By user and token: the counters of ended holds, and the holds of the jobs live now.
	live, _, err := s.cfg.Queue.List(r.Context(), org, job.ListFilter{Statuses: []job.Status{job.Pending, job.Running}}, "", 1000)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	users, tokens, err := s.cfg.Queue.UsageBy(r.Context(), org, live, s.price)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	var inference *wire.InferenceUsage
	if s.cfg.Deployments != nil {
		n, p, c, err := s.cfg.Deployments.InferenceUsage(r.Context(), org)
		if err != nil {
			s.internalError(w, r, err)
			return
		}
		if n > 0 {
			inference = &wire.InferenceUsage{Requests: n, PromptTokens: p, CompletionTokens: c}
		}
	}
	writeJSON(w, http.StatusOK, wire.Usage{
		Organization: wire.OrgUsage{Org: org, GPUSeconds: round3(st.GPUSeconds), Running: st.Running, RunningGPUs: st.RunningGPUs,
			StorageBytes: st.StorageBytes, Inference: inference},
		Jobs: items, NextCursor: next, ByUser: users, ByToken: tokens,
	})
}

func round3(f float64) float64 { return math.Round(f*1000) / 1000 }

// tokenKeys are the orchestrator's per-batch token counts (traces: metrics-keys.json).
var tokenKeys = []string{"progress/input_tokens", "progress/output_tokens"}

// getJobUsage is what one job used: GPU time (and its cost at the operator's price for the
// job's model), projected to the run's end at its pace so far, and its rollouts' tokens summed
// over the stored metrics rows.
func (s *Server) getJobUsage(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) { return s.jobUsage(r, j) })
}

// jobUsage is what one of the caller's jobs used (getJobUsage).
func (s *Server) jobUsage(r *http.Request, j *job.Job) (*wire.JobUsage, *Problem) {
	c := j.Config
	u := wire.JobUsage{JobID: j.ID, Name: j.Name, Kind: j.Kind, Status: j.Status, Model: c.Model, GPUs: c.Resources.GPUs,
		GPUType: c.Resources.GPUType, GPUSeconds: round3(j.GPUSeconds), Step: j.Progress.Step, MaxSteps: j.Progress.MaxSteps, UpdatedAt: j.UpdatedAt}
	stored, err := s.cfg.Queue.StoredBytes(r.Context(), j.Org, []string{j.ID})
	if err != nil {
		return nil, s.failure(r, err)
	}
	u.StorageBytes = stored[j.ID]
	if jt, err := s.judgeTokens(r, j); err != nil {
		return nil, s.failure(r, err)
	} else if jt != nil {
		u.JudgeTokens = &wire.TokenCounts{Input: jt.in, Output: jt.out, Total: jt.in + jt.out}
	}
	for _, m := range s.cfg.Models {
		if m.Name == c.Model && m.PricePerGPUHour > 0 {
			u.PricePerGPUHour = m.PricePerGPUHour
			cost := round3(j.GPUSeconds / 3600 * m.PricePerGPUHour)
			u.CostUSD = &cost
		}
	}
	from := 0 // the step the GPU time's first step followed: a warm start's
	if ws := c.WarmStart; ws != nil {
		from = ws.Step
	}
	if j.Status == job.Running && u.Step > from && u.MaxSteps > u.Step {
		gs := round3(j.GPUSeconds * float64(u.MaxSteps-from) / float64(u.Step-from))
		u.ProjectedGPUSeconds = &gs
		if u.CostUSD != nil {
			cost := round3(gs / 3600 * u.PricePerGPUHour)
			u.ProjectedCostUSD = &cost
		}
	}
	if s.cfg.Store != nil && jobspec.RunsPrimeRL(j.Kind) && u.Step > 0 {
		for minStep := 0; ; {
			read, err := jobdata.ReadMetrics(r.Context(), s.cfg.Store, j.ID, jobdata.MetricsQuery{MinStep: minStep, Names: tokenKeys, Limit: 10000})
			if err != nil {
				return nil, s.failure(r, err)
			}
			for _, row := range read.Rows {
				in, _ := row.Float(tokenKeys[0])
				out, _ := row.Float(tokenKeys[1])
				u.Tokens.Input += int64(in)
				u.Tokens.Output += int64(out)
			}
			if !read.More || len(read.Rows) == 0 {
				break
			}
			minStep = read.Rows[len(read.Rows)-1].Step() + 1
		}
		u.Tokens.Total = u.Tokens.Input + u.Tokens.Output
	}
	return &u, nil
}

// rolloutsOf reads a step of a job's rollouts (0: the newest), and the steps that have them.
// rs is nil when the job has none yet; a named step without rollouts is a 404.
func (s *Server) rolloutsOf(r *http.Request, jobID string, step int) (rs *jobdata.RolloutStep, steps []int, prob *Problem) {
	steps, err := jobdata.RolloutSteps(r.Context(), s.cfg.Store, jobID)
	if err != nil {
		return nil, nil, s.failure(r, err)
	}
	if steps == nil {
		steps = []int{}
	}
	if step == 0 {
		if len(steps) == 0 {
			return nil, steps, nil
		}
		step = steps[len(steps)-1]
	}
	got, err := jobdata.GetRollouts(r.Context(), s.cfg.Store, jobID, step)
	if errors.Is(err, blob.ErrNotFound) {
		p := newProblem(http.StatusNotFound, "no-rollouts", fmt.Sprintf("step %d has no stored rollouts; %s", step, describeSteps(steps)))
		p.Errors = []FieldError{{Parameter: "step", Message: "no rollouts stored for this step"}}
		return nil, nil, p
	}
	if err != nil {
		return nil, nil, s.failure(r, err)
	}
	return &got, steps, nil
}

// describeSteps names the steps that have rollouts, briefly.
func describeSteps(steps []int) string {
	switch n := len(steps); {
	case n == 0:
		return "none has yet (a step's rollouts are stored once the trainer takes it)"
	case n == 1:
		return fmt.Sprintf("step %d has", steps[0])
	case n <= 10:
		parts := make([]string, n)
		for i, st := range steps {
			parts[i] = strconv.Itoa(st)
		}
		return "steps " + strings.Join(parts, ", ") + " have"
	default:
		return fmt.Sprintf("%d steps from %d to %d have", n, steps[0], steps[n-1])
	}
}

func (s *Server) getJobSamples(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) {
		return s.jobSamples(r, j, intQuery(r, "step", 0), intQuery(r, "page", 1), intQuery(r, "limit", 100))
	})
}

// jobSamples is page page (from 1, limit samples a page) of the samples of a step (0: the
// newest) of one of the caller's jobs' rollouts.
func (s *Server) jobSamples(r *http.Request, j *job.Job, step, page, limit int) (*wire.SamplesPage, *Problem) {
	if prob := s.needStore(); prob != nil {
		return nil, prob
	}
	rs, steps, prob := s.rolloutsOf(r, j.ID, step)
	if prob != nil {
		return nil, prob
	}
	p := wire.SamplesPage{JobID: j.ID, Steps: steps, Samples: []jobdata.Sample{}, Page: page, Limit: limit}
	if rs != nil {
		p.Step, p.Episodes, p.Total = &rs.Step, rs.Episodes, len(rs.Samples)
		p.TotalPages = (p.Total + p.Limit - 1) / p.Limit
		if from := (p.Page - 1) * p.Limit; from < p.Total {
			p.Samples = rs.Samples[from:min(from+p.Limit, p.Total)]
		}
	}
	return &p, nil
}

func (s *Server) getJobDistributions(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) {
		return s.jobDistributions(r, j, intQuery(r, "step", 0), r.URL.Query().Get("type"))
	})
}

// jobDistributions is the histogram of type typ ("": rewards) of a step (0: the newest) of one
// of the caller's jobs' rollouts.
func (s *Server) jobDistributions(r *http.Request, j *job.Job, step int, typ string) (*wire.DistributionPage, *Problem) {
	if prob := s.needStore(); prob != nil {
		return nil, prob
	}
	rs, steps, prob := s.rolloutsOf(r, j.ID, step)
	if prob != nil {
		return nil, prob
	}
	page := wire.DistributionPage{JobID: j.ID, Type: orString(typ, "rewards"), Steps: steps}
	page.Bins = []jobdata.Bin{}
	if rs != nil {
		page.Step = &rs.Step
		if d, ok := rs.Distributions[page.Type]; ok {
			page.Distribution = d
		}
	}
	return &page, nil
}

// pinCheckpoint (PUT) keeps a committed checkpoint of the job past its keep_cloud; unpin
// (DELETE) lets the agent prune it again with the others. Pinning a step that is not
// committed is refused naming it.
func (s *Server) pinCheckpoint(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok || !s.storeReady(w, r) {
		return
	}
	step, err := strconv.Atoi(pathParam(r, "step"))
	if err != nil || step < 1 {
		writeProblem(w, r, newProblem(http.StatusBadRequest, "invalid-step", "a checkpoint's step is a whole number from 1"))
		return
	}
	if r.Method == http.MethodDelete {
		if err := s.cfg.Store.Delete(r.Context(), jobdata.PinKey(j.ID, step)); err != nil && !errors.Is(err, blob.ErrNotFound) {
			s.internalError(w, r, err)
			return
		}
		w.WriteHeader(http.StatusNoContent)
		return
	}
	committed, err := jobdata.CommittedSteps(r.Context(), s.cfg.Store, j.ID)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if !slices.Contains(committed, step) {
		p := newProblem(http.StatusNotFound, "no-checkpoint", fmt.Sprintf("job %s has no committed checkpoint of step %d; it has %s", j.ID, step, stepList(committed)))
		p.Errors = []FieldError{{Parameter: "step", Message: "no committed checkpoint of this step"}}
		writeProblem(w, r, p)
		return
	}
	if err := s.cfg.Store.Put(r.Context(), jobdata.PinKey(j.ID, step), strings.NewReader("pinned\n")); err != nil {
		s.internalError(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
