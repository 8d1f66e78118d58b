package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
	"github.com/hostedtrain/hostedtrain/openapi"
)

// The Prime-compatible surface (/api/v1/...): what the prime CLI's client sends and reads
// (prime_cli/api/rl.py of the prime CLI 0.6.26), so the real `prime` CLI can drive hostedtrain.
// Each handler translates: it turns the Prime request into the /v1 operation it stands for,
// checks that operation's request as the middleware checks one sent to /v1 (asV1: the
// operation's scope, the contract's validation of the translated query and body), calls the
// same function the /v1 handler calls (submit, jobPage, jobAsSeen, cancel, restart,
// deleteOwned, jobLogs, jobMetrics, jobCheckpoints, jobProgress, jobUsage, jobSamples,
// jobDistributions, modelList, gpuTypes) and rewrites its answer, or its problem as the prime
// CLI reads errors (primeFail). Nothing here decides anything /v1 does not.

// primePrefix starts every path of the surface.
const primePrefix = "/api/v1/"

// asV1 checks, for the Prime call r, what serve checks of a request to the /v1 operation opID
// that the call stands for before that operation's handler runs: that the caller holds the
// operation's scope (r was authenticated, for the Prime operation's scope, which may be
// another), and the contract's validation of the request the call is translated into — its
// job id (for the operations on one job), query and JSON body (nil for none). The request it
// returns carries the validated body (a submit reads it); r is still the caller, whose
// context, organization and address (for download links) the /v1 functions use.
func (s *Server) asV1(r *http.Request, opID, id string, query url.Values, body []byte) (*http.Request, *Problem) {
	if scope := openapi.Scope(s.routes[opID].Operation); scope != "" {
		if prob := scopeProblem(principal(r), scope); prob != nil {
			return nil, prob
		}
	}
	ctype := ""
	if body != nil {
		ctype = "application/json"
	}
	return s.validateFor(r.Context(), opID, id, query, ctype, body)
}

// primeFail answers a problem of a /v1 operation a Prime call stands for as the prime CLI
// reads errors, a job file's fields named as the create-run payload names them.
func primeFail(w http.ResponseWriter, p *Problem) {
	writePrimeError(w, p, jobLoc)
}

// writePrimeError answers a problem as the prime CLI reads errors: {"detail": "..."}, or for a
// 422 with field errors FastAPI's {"detail": [{"loc", "msg"}]}, each field named by loc (the
// body's own field names, from its JSON pointer).
func writePrimeError(w http.ResponseWriter, p *Problem, loc func(pointer string) []any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	if p.retryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(p.retryAfter))
	}
	w.WriteHeader(p.Status)
	detail := any(orString(p.Detail, p.Title))
	if p.Status == http.StatusUnprocessableEntity && len(p.Errors) > 0 {
		items := make([]map[string]any, 0, len(p.Errors))
		for _, e := range p.Errors {
			l := []any{"body"}
			switch {
			case e.Parameter != "":
				l = []any{"query", e.Parameter}
			case e.Pointer != "":
				l = append(l, loc(e.Pointer)...)
			}
			items = append(items, map[string]any{"loc": l, "msg": e.Message, "type": "value_error"})
		}
		detail = items
	} else if len(p.Errors) > 0 {
		var msgs []string
		for _, e := range p.Errors {
			msgs = append(msgs, strings.TrimPrefix(e.Pointer+e.Parameter+": ", ": ")+e.Message)
		}
		detail = fmt.Sprintf("%s: %s", detail, strings.Join(msgs, "; "))
	}
	_ = json.NewEncoder(w).Encode(map[string]any{"detail": detail})
}

func orString(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// pointerLoc is a JSON pointer as a loc: its parts, list indices as numbers.
func pointerLoc(ptr string) []any {
	var out []any
	for _, part := range strings.Split(strings.TrimPrefix(ptr, "/"), "/") {
		part = strings.ReplaceAll(strings.ReplaceAll(part, "~1", "/"), "~0", "~")
		if n, err := strconv.Atoi(part); err == nil {
			out = append(out, n)
		} else {
			out = append(out, part)
		}
	}
	return out
}

// jobLoc names a field of a /v1 job file as the create-run payload it came from spells it
// (primeJob's renames, backwards).
func jobLoc(ptr string) []any {
	l := pointerLoc(ptr)
	if len(l) == 0 {
		return l
	}
	rename := func(l []any) []any {
		switch l[0] {
		case "model":
			return append([]any{"model", "name"}, l[1:]...)
		case "env":
			return append([]any{"environments"}, l[1:]...)
		case "wandb":
			return append([]any{"monitoring", "wandb"}, l[1:]...)
		case "sampling":
			return l[1:] // the sampling keys go flat
		case "infrastructure":
			return []any{"compute_size"}
		case "teacher":
			if len(l) > 1 && l[1] == "model" {
				return append([]any{"teacher", "model", "name"}, l[2:]...)
			}
		}
		return l
	}
	if l[0] == "eval" && len(l) > 1 && l[1] == "env" {
		return append([]any{"eval", "environments"}, l[2:]...)
	}
	return rename(l)
}

// primeJob turns the prime CLI's create-run payload into the /v1 job file it stands for: the
// same keys where the names agree, the rest renamed (jobLoc names them back in errors).
func primeJob(p map[string]any) map[string]any {
	out := map[string]any{"kind": jobspec.KindRL}
	sampling := map[string]any{}
	for k, v := range p {
		switch k {
		case "model":
			if m, ok := v.(map[string]any); ok {
				out["model"] = m["name"]
			}
		case "environments":
			out["env"] = v
		case "secrets":
			sec := map[string]any{}
			items, _ := v.([]any)
			for _, it := range items {
				if kv, ok := it.(map[string]any); ok {
					if key, ok := kv["key"].(string); ok {
						sec[key] = kv["value"]
					}
				}
			}
			if len(sec) > 0 {
				out["secrets"] = sec
			}
		case "monitoring":
			if m, ok := v.(map[string]any); ok && m["wandb"] != nil {
				out["wandb"] = m["wandb"]
			}
		case "max_tokens", "temperature", "temp_scheduler", "extra_body", "enable_thinking", "reasoning_effort":
			sampling[k] = v
		case "eval":
			if m, ok := v.(map[string]any); ok {
				ev := map[string]any{}
				for ek, evv := range m {
					if ek == "environments" {
						ek = "env"
					}
					ev[ek] = evv
				}
				out["eval"] = ev
			}
		case "teacher":
			// The CLI sends [teacher] with its model as {"name": ...}; a job file names it.
			t, ok := v.(map[string]any)
			if !ok {
				out[k] = v
				break
			}
			flat := make(map[string]any, len(t))
			for tk, tv := range t {
				flat[tk] = tv
			}
			if m, ok := t["model"].(map[string]any); ok {
				flat["model"] = m["name"]
			}
			out[k] = flat
		case "compute_size":
			out["infrastructure"] = map[string]any{"compute_size": v}
		case "team_id":
			// A token's organization is the caller's.
		default:
			out[k] = v
		}
	}
	if len(sampling) > 0 {
		out["sampling"] = sampling
	}
	return out
}

// primeRun is a job as the prime CLI's RLRun reads it.
func primeRun(j *job.Job) map[string]any {
	c := j.Config
	run := map[string]any{
		"id": j.ID, "userId": j.Org, "status": string(j.Status), "createdAt": j.CreatedAt, "updatedAt": j.UpdatedAt,
		"kind": "SHARED_RFT_HOSTED", "baseModel": c.Model, "environments": primeEnvs(c.Env),
	}
	if c.Kind == jobspec.KindFFT {
		run["kind"] = "DEDICATED_FULL_FT"
	}
	set := func(k string, v any, ok bool) {
		if ok {
			run[k] = v
		}
	}
	set("name", j.Name, j.Name != "")
	set("maxSteps", c.MaxSteps, c.MaxSteps > 0)
	set("batchSize", c.BatchSize, c.BatchSize > 0)
	set("rolloutsPerExample", c.RolloutsPerExample, c.RolloutsPerExample > 0)
	set("seqLen", c.SeqLen, c.SeqLen > 0)
	set("loss", c.Loss, c.Loss != "")
	set("learningRate", c.LearningRate, c.LearningRate > 0)
	set("maxInflightRollouts", c.MaxInflightRollouts, c.MaxInflightRollouts > 0)
	set("oversamplingFactor", c.OversamplingFactor, c.OversamplingFactor > 0)
	if c.Sampling != nil {
		set("maxTokens", c.Sampling.MaxTokens, c.Sampling.MaxTokens > 0)
	}
	if c.LoRA != nil {
		run["loraAlpha"] = c.LoRA.Alpha
	}
	if c.Teacher != "" {
		t := map[string]any{"model": c.Teacher}
		if c.TeacherClient != nil {
			t["client"] = map[string]any{"base_url": c.TeacherClient.BaseURL, "api_key_var": c.TeacherClient.APIKeyVar}
		}
		run["teacher"] = t
	}
	if c.Eval != nil {
		ev := map[string]any{"environments": primeEnvs(c.Eval.Env)}
		set2 := func(k string, v any, ok bool) {
			if ok {
				ev[k] = v
			}
		}
		set2("interval", c.Eval.Interval, c.Eval.Interval > 0)
		set2("num_examples", c.Eval.NumExamples, c.Eval.NumExamples != 0)
		set2("rollouts_per_example", c.Eval.RolloutsPerExample, c.Eval.RolloutsPerExample > 0)
		run["evalConfig"] = ev
	}
	if c.Val != nil {
		run["valConfig"] = c.Val
	}
	if w := c.Wandb; w != nil {
		set("wandbEntity", w.Entity, w.Entity != "")
		set("wandbProject", w.Project, w.Project != "")
		set("wandbRunName", w.Name, w.Name != "")
	}
	if j.RunsAhead != nil {
		run["runsAhead"] = *j.RunsAhead
	}
	set("queueReason", j.QueueReason, j.QueueReason != "")
	if j.StartedAt != nil {
		run["startedAt"] = *j.StartedAt
	}
	if j.FinishedAt != nil {
		run["completedAt"] = *j.FinishedAt
	}
	if j.Error != "" {
		run["errorMessage"] = j.Error
		if j.Status == job.Failed {
			run["failureAnalysis"] = map[string]any{"rootCause": j.Error}
		}
	}
	return run
}

// primeEnvs are a job's environments as the prime CLI sends them (id, name, ratio, args).
func primeEnvs(envs []jobspec.Env) []map[string]any {
	out := make([]map[string]any, 0, len(envs))
	for _, e := range envs {
		m := map[string]any{"id": e.ID}
		if e.Name != "" {
			m["name"] = e.Name
		}
		if e.Weight > 0 {
			m["ratio"] = e.Weight
		}
		if len(e.Args) > 0 {
			m["args"] = e.Args
		}
		out = append(out, m)
	}
	return out
}

func (s *Server) primeCreateRun(w http.ResponseWriter, r *http.Request) {
	v, _ := validatedBody(r)
	p, _ := v.(map[string]any)
	sub, prob := s.primeSubmit(r, primeJob(p), jobspec.KindRL)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	run := primeRun(sub.Job)
	if len(sub.Warnings) > 0 {
		var notes []string
		for _, fe := range sub.Warnings {
			notes = append(notes, strings.Trim(fmt.Sprint(jobLoc(fe.Pointer)), "[]")+": "+fe.Message)
		}
		run["notice"] = strings.Join(notes, "; ")
	}
	writeJSON(w, http.StatusCreated, map[string]any{"run": run})
}

// primeSubmit submits the job file a Prime create stands for as POST /v1/jobs?kind=kind: the
// file checked against the contract's job schemas as a body sent there is, then submit.
func (s *Server) primeSubmit(r *http.Request, file map[string]any, kind string) (*submitted, *Problem) {
	body, err := json.Marshal(file)
	if err != nil {
		return nil, s.failure(r, err)
	}
	vr, prob := s.asV1(r, "submitJob", "", url.Values{"kind": {kind}}, body)
	if prob != nil {
		return nil, prob
	}
	sub, _, prob := s.submit(r, jobFileOf(vr), "")
	return sub, prob
}

// primeListRuns lists the caller's rl and full fine-tune jobs, newest first: up to
// primeListMax of them (the prime CLI's list takes no page), each kind read by its index.
func (s *Server) primeListRuns(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	paged := in.Has("page") || in.Has("limit") || in.Has("mine")
	upTo := primeListMax
	if paged {
		upTo = primePagedMax // a page, its total and the caller's own runs count them all
	}
	var jobs []*job.Job
	for _, kind := range []string{jobspec.KindRL, jobspec.KindFFT} {
		cursor := ""
		for n := 0; n < upTo; n += 100 {
			q := url.Values{"limit": {"100"}, "kind": {kind}}
			if cursor != "" {
				q.Set("cursor", cursor)
			}
			if _, prob := s.asV1(r, "listJobs", "", q, nil); prob != nil {
				primeFail(w, prob)
				return
			}
			page, prob := s.jobPage(r, jobQueryOf(q))
			if prob != nil {
				primeFail(w, prob)
				return
			}
			jobs = append(jobs, page.Items...)
			if cursor = page.NextCursor; cursor == "" {
				break
			}
		}
	}
	sort.SliceStable(jobs, func(i, j int) bool { return jobs[i].CreatedAt.After(jobs[j].CreatedAt) })
	if !paged {
		// The prime CLI before 0.6.31 sends none and reads every run.
		runs := make([]map[string]any, 0, min(len(jobs), primeListMax))
		for _, j := range jobs[:min(len(jobs), primeListMax)] {
			runs = append(runs, primeRun(j))
		}
		writeJSON(w, http.StatusOK, map[string]any{"runs": runs})
		return
	}
	// The prime CLI from 0.6.31 (prime #880) pages: page (from 1), limit, and mine (the
	// caller's own runs), answered with total, page, limit and total_pages.
	page, perr := strconv.Atoi(orString(in.Get("page"), "1"))
	limit, lerr := strconv.Atoi(orString(in.Get("limit"), strconv.Itoa(primePageDefault)))
	mine, merr := strconv.ParseBool(orString(in.Get("mine"), "false"))
	switch {
	case perr != nil || page < 1 || page > primePagedMax:
		p := newProblem(http.StatusUnprocessableEntity, "bad-query", "a query parameter is not valid")
		p.Errors = []FieldError{{Parameter: "page", Message: fmt.Sprintf("page is a page number from 1 to %d", primePagedMax)}}
		writePrimeError(w, p, jobLoc)
		return
	case lerr != nil || limit < 1 || limit > primePageMax:
		p := newProblem(http.StatusUnprocessableEntity, "bad-query", "a query parameter is not valid")
		p.Errors = []FieldError{{Parameter: "limit", Message: fmt.Sprintf("limit is from 1 to %d runs a page", primePageMax)}}
		writePrimeError(w, p, jobLoc)
		return
	case merr != nil:
		p := newProblem(http.StatusUnprocessableEntity, "bad-query", "a query parameter is not valid")
		p.Errors = []FieldError{{Parameter: "mine", Message: "mine is true or false"}}
		writePrimeError(w, p, jobLoc)
		return
	}
	if mine {
		who := principal(r).Subject
		jobs = slices.DeleteFunc(jobs, func(j *job.Job) bool { return j.CreatedBy != who })
	}
	total := len(jobs)
	from := min((page-1)*limit, total)
	runs := make([]map[string]any, 0, limit)
	for _, j := range jobs[from:min(from+limit, total)] {
		runs = append(runs, primeRun(j))
	}
	writeJSON(w, http.StatusOK, map[string]any{"runs": runs, "total": total, "page": page, "limit": limit,
		"total_pages": (total + limit - 1) / limit})
}

// A page of runs: primePageDefault unless the client says, at most primePageMax; pages count
// up to primePagedMax runs of each kind.
const (
	primePageDefault = 20
	primePageMax     = 100
	primePagedMax    = 10000
)

// primeListMax bounds a list of runs.
const primeListMax = 500

// primeRunID is the run the path names, once it is one of the caller's runs (as GET
// /v1/jobs/{id} answers it): a job that runs prime-rl (an rl job or a full fine-tune); anything
// else is answered 404.
func (s *Server) primeRunID(w http.ResponseWriter, r *http.Request) (string, *job.Job, bool) {
	id := pathParam(r, "runId")
	j, prob := s.v1Job(r, id)
	if prob != nil {
		primeFail(w, prob)
		return "", nil, false
	}
	if !jobspec.RunsPrimeRL(j.Kind) {
		writePrimeError(w, newProblem(http.StatusNotFound, "job-not-found",
			fmt.Sprintf("%s is a %s job, not a training run; see it with hostedtrain", id, j.Kind)), jobLoc)
		return "", nil, false
	}
	return id, j, true
}

// v1Job is GET /v1/jobs/{id} for a Prime call.
func (s *Server) v1Job(r *http.Request, id string) (*job.Job, *Problem) {
	if _, prob := s.asV1(r, "getJob", id, nil, nil); prob != nil {
		return nil, prob
	}
	return s.jobAsSeen(r, id)
}

// primeRunAt runs the /v1 operation opID (act) on the run named in the path and answers
// {"run"}: the job as that operation left it.
func (s *Server) primeRunAt(w http.ResponseWriter, r *http.Request, opID string, act func(*http.Request, *job.Job) (*job.Job, *Problem)) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	if _, prob := s.asV1(r, opID, id, nil, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	after, prob := act(r, j)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run": primeRun(after)})
}

func (s *Server) primeGetRun(w http.ResponseWriter, r *http.Request) {
	if _, j, ok := s.primeRunID(w, r); ok {
		writeJSON(w, http.StatusOK, map[string]any{"run": primeRun(j)})
	}
}

func (s *Server) primeStopRun(w http.ResponseWriter, r *http.Request) {
	s.primeRunAt(w, r, "cancelJob", s.cancel)
}

// primeDeleteRun is the prime CLI's `train delete RUN`: the /v1 delete with ?stop=true (a
// running run is stopped and deleted once it has, as Prime's backend does), answered {} (the
// CLI reads nothing of it) or the /v1 problem as the CLI reads errors.
func (s *Server) primeDeleteRun(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	// Prime's backend tears a running run down and deletes it: stop, then delete.
	if _, prob := s.asV1(r, "deleteJob", id, url.Values{"stop": {"true"}}, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	if _, prob := s.deleteOwned(r, j, true); prob != nil {
		primeFail(w, prob)
		return
	}
	writeJSON(w, http.StatusOK, struct{}{})
}

func (s *Server) primeRestartRun(w http.ResponseWriter, r *http.Request) {
	s.primeRunAt(w, r, "restartJob", s.restart)
}

// primeComponents are the prime CLI's log components as /v1 names them.
var primeComponents = map[string]string{"orchestrator": "orchestrator", "trainer": "trainer", "inference": "inference", "env-server": "envs"}

func (s *Server) primeRunLogs(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	in := r.URL.Query()
	q := url.Values{"tail_lines": {orString(in.Get("tail_lines"), "1000")}}
	comp := primeComponents[orString(in.Get("component"), "orchestrator")]
	if name := in.Get("env_name"); name != "" && comp == "envs" {
		comp = "envs/train/" + name
	}
	q.Set("component", comp)
	if v := in.Get("search"); v != "" {
		q.Set("search", v)
		if in.Get("regex") == "true" {
			q.Set("regex", "true")
		}
	}
	if v := in.Get("level"); v != "" {
		if v == "SUCCESS" {
			v = "INFO" // loguru's SUCCESS sits between INFO and WARNING; /v1 knows the four
		}
		q.Set("level", v)
	}
	if v := in.Get("since_seconds"); v != "" {
		q.Set("since", v+"s")
	}
	page, prob := s.v1Logs(r, id, j, q)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	var b strings.Builder
	for _, l := range page.Items {
		b.WriteString(l.Line)
		b.WriteByte('\n')
	}
	writeJSON(w, http.StatusOK, map[string]any{"logs": b.String()})
}

// v1Logs is GET /v1/jobs/{id}/logs?q (never a stream) for a Prime call.
func (s *Server) v1Logs(r *http.Request, id string, j *job.Job, q url.Values) (*wire.LogPage, *Problem) {
	if _, prob := s.asV1(r, "getJobLogs", id, q, nil); prob != nil {
		return nil, prob
	}
	return s.jobLogs(r, j, logParamsOf(q))
}

// primeRunEnvServers lists a run's environment servers as the prime CLI's `train components`
// reads them: those whose logs the job has (envs/train/<name>).
func (s *Server) primeRunEnvServers(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	page, prob := s.v1Logs(r, id, j, url.Values{"tail_lines": {"1"}})
	if prob != nil {
		primeFail(w, prob)
		return
	}
	servers := []map[string]any{}
	for _, c := range page.Components {
		name, ok := strings.CutPrefix(c, "envs/train/")
		if !ok {
			continue
		}
		servers = append(servers, map[string]any{"env_name": name, "env_index": len(servers), "pod_name": c, "status": primeRun(j)["status"]})
	}
	writeJSON(w, http.StatusOK, map[string]any{"env_servers": servers})
}

// primeRunEnvServerLogs is one environment server's logs: the run's logs of component
// env-server for that environment.
func (s *Server) primeRunEnvServerLogs(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	q.Set("component", "env-server")
	q.Del("env_index")
	r2 := r.Clone(r.Context())
	r2.URL.RawQuery = q.Encode()
	s.primeRunLogs(w, r2)
}

func (s *Server) primeRunMetrics(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	in := r.URL.Query()
	q := url.Values{}
	for _, k := range []string{"min_step", "max_step", "limit"} {
		if v := in.Get(k); v != "" {
			q.Set(k, v)
		}
	}
	if _, prob := s.asV1(r, "getJobMetrics", id, q, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	page, prob := s.jobMetrics(r, j, metricsQueryOf(q))
	if prob != nil {
		primeFail(w, prob)
		return
	}
	rows := page.Items
	if rows == nil {
		rows = []jobdata.Row{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"metrics": rows})
}

func (s *Server) primeRunCheckpoints(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	if _, prob := s.asV1(r, "listJobCheckpoints", id, nil, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	list, prob := s.jobCheckpoints(r, j)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	want := r.URL.Query().Get("status_filter")
	out := []map[string]any{}
	for _, c := range list.Items {
		status := "UPLOADING"
		if c.Status == "committed" {
			status = "READY"
		}
		if want != "" && status != want {
			continue
		}
		at := time.Time{}
		if c.Time != nil {
			at = *c.Time
		}
		cp := map[string]any{"id": fmt.Sprintf("%s-step-%d", id, c.Step), "rftRunId": id, "step": c.Step,
			"status": status, "sizeBytes": c.Bytes, "createdAt": at, "storageUrl": ""}
		if status == "READY" {
			cp["uploadedAt"] = at
			if len(c.Download) > 0 {
				cp["storageUrl"] = c.Download[0].URL
			}
		}
		out = append(out, cp)
	}
	writeJSON(w, http.StatusOK, map[string]any{"checkpoints": out})
}

func (s *Server) primeRunProgress(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	if _, prob := s.asV1(r, "getJobProgress", id, nil, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	p, prob := s.jobProgress(r, j)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	steps := p.StepsWithSamples
	if steps == nil {
		steps = []int{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"latestStep": p.Step, "stepsWithSamples": steps,
		"stepsWithDistributions": steps, "lastUpdatedAt": p.UpdatedAt})
}

// primeRunUsage is the prime CLI's `train usage RUN` (its billing client's RunUsage): the
// job's tokens, and its cost — GPU time at the operator's price, all of it under training
// (the same GPUs serve the rollouts; Prime's per-token prices are not ours).
func (s *Server) primeRunUsage(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	if _, prob := s.asV1(r, "getJobUsage", id, nil, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	u, prob := s.jobUsage(r, j)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	cost := 0.0
	if u.CostUSD != nil {
		cost = *u.CostUSD
	}
	// Inference: what the run's deployed checkpoints served through the gateway (their model
	// servers' GPU time is billed as a job's, not by the token).
	var in, out int64
	if s.cfg.Deployments != nil {
		page, _, err := s.cfg.Deployments.ListAdapters(r.Context(), j.Org, 0, 1000)
		if err != nil {
			primeFail(w, s.failure(r, err))
			return
		}
		for _, a := range page {
			if a.Job == j.ID {
				in, out = in+a.PromptTokens, out+a.CompletionTokens
			}
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"run_id": id, "run_name": u.Name, "base_model": u.Model, "status": primeRun(j)["status"],
		"training":     map[string]any{"tokens": u.Tokens.Total, "input_tokens": u.Tokens.Input, "output_tokens": u.Tokens.Output, "cost_usd": cost},
		"inference":    map[string]any{"tokens": in + out, "input_tokens": in, "output_tokens": out, "cost_usd": 0},
		"total_tokens": u.Tokens.Total + in + out, "total_cost_usd": cost,
		"pricing":      map[string]any{"training_per_mtok": nil, "inference_input_per_mtok": nil, "inference_output_per_mtok": nil},
		"record_count": u.Step,
	})
}

// primeRunSamples is the prime CLI's `train rollouts RUN --step N`.
func (s *Server) primeRunSamples(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	q := url.Values{}
	for _, k := range []string{"step", "page"} {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	if n := intQuery(r, "limit", 0); n > 0 {
		q.Set("limit", strconv.Itoa(min(n, 100)))
	}
	if _, prob := s.asV1(r, "getJobSamples", id, q, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	page, prob := s.jobSamples(r, j, intParam(q, "step", 0), intParam(q, "page", 1), intParam(q, "limit", 100))
	if prob != nil {
		primeFail(w, prob)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"run_id": id, "samples": page.Samples, "total": page.Total,
		"page": page.Page, "limit": page.Limit, "total_pages": page.TotalPages})
}

// primeRunDistributions is the prime CLI's `train distributions RUN [--type T] [--step N]`.
func (s *Server) primeRunDistributions(w http.ResponseWriter, r *http.Request) {
	id, j, ok := s.primeRunID(w, r)
	if !ok {
		return
	}
	q := url.Values{}
	for _, k := range []string{"step", "type"} {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	if _, prob := s.asV1(r, "getJobDistributions", id, q, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	d, prob := s.jobDistributions(r, j, intParam(q, "step", 0), q.Get("type"))
	if prob != nil {
		primeFail(w, prob)
		return
	}
	step := 0
	if d.Step != nil {
		step = *d.Step
	}
	writeJSON(w, http.StatusOK, map[string]any{"bins": d.Bins, "step": step, "type": d.Type})
}

// v1Models is GET /v1/models for a Prime call.
func (s *Server) v1Models(r *http.Request) (*wire.ModelList, *Problem) {
	if _, prob := s.asV1(r, "listModels", "", nil, nil); prob != nil {
		return nil, prob
	}
	return s.modelList(r)
}

func (s *Server) primeListModels(w http.ResponseWriter, r *http.Request) {
	list, prob := s.v1Models(r)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	models := make([]map[string]any, 0, len(list.Items))
	for _, m := range list.Items {
		models = append(models, map[string]any{"name": m.Name, "atCapacity": m.IdleNodes == 0})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

// primeCreateTrainingRun is the prime CLI's full fine-tune path (`prime train CONFIG` with a
// whole prime-rl config): its payload becomes the fft job file it stands for.
func (s *Server) primeCreateTrainingRun(w http.ResponseWriter, r *http.Request) {
	v, _ := validatedBody(r)
	p, _ := v.(map[string]any)
	cfg, _ := p["config"].(map[string]any)
	out := make(map[string]any, len(cfg)+4)
	for k, val := range cfg {
		out[k] = val
	}
	out["kind"] = jobspec.KindFFT
	for from, to := range map[string]string{"name": "name", "imageTag": "image_tag", "gpuType": "gpu_type"} {
		if val, ok := p[from].(string); ok && val != "" {
			out[to] = val
		}
	}
	secrets := map[string]any{}
	for from, to := range map[string]string{"wandbApiKey": "WANDB_API_KEY", "hfToken": "HF_TOKEN"} {
		if val, ok := p[from].(string); ok && val != "" {
			secrets[to] = val
		}
	}
	if len(secrets) > 0 {
		out["secrets"] = secrets
	}
	sub, prob := s.primeSubmit(r, out, jobspec.KindFFT)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	writeJSON(w, http.StatusCreated, map[string]any{"runId": sub.ID, "tokenValue": ""})
}

func (s *Server) primeTrainingGPUTypes(w http.ResponseWriter, r *http.Request) {
	if _, prob := s.asV1(r, "listGPUs", "", nil, nil); prob != nil {
		primeFail(w, prob)
		return
	}
	gpus, prob := s.gpuTypes(r)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	types := []string{}
	for _, g := range gpus {
		types = append(types, g.GPUType)
	}
	writeJSON(w, http.StatusOK, map[string]any{"gpuTypes": types})
}

func (s *Server) primeTrainingFFTModels(w http.ResponseWriter, r *http.Request) {
	list, prob := s.v1Models(r)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	cluster := map[string]any{"clusterId": "hostedtrain", "clusterName": "hostedtrain", "gpuType": jobspec.DefaultGPUType}
	models := make([]map[string]any, 0, len(list.Items))
	for _, m := range list.Items {
		models = append(models, map[string]any{"name": m.Name, "clusters": []any{cluster}})
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}
