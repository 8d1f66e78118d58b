package api

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
	"github.com/hostedtrain/hostedtrain/queue"
)

// normalizeOptions are the service's settings jobs are normalized under.
func (s *Server) normalizeOptions() jobspec.Options {
	return jobspec.Options{OperatorJudge: s.cfg.Judge != nil}
}

// jobFile is a job file the contract has validated, and the kind it was sent as.
type jobFile struct {
	value any    // the document as validated
	body  *body  // as read: errors are placed at its lines, a submit is fingerprinted by it
	kind  string // the `kind` query parameter; "" for none
}

// jobFileOf is the job file of a request that passed validation (a submit, a preview).
func jobFileOf(r *http.Request) jobFile {
	v, _ := validatedBody(r)
	return jobFile{value: v, body: requestBody(r), kind: r.URL.Query().Get("kind")}
}

// admitted is a job file that passed the schema and the rules.
type admitted struct {
	spec     jobspec.Spec
	secrets  map[string]string
	warnings []FieldError
	gpusSaid bool  // the file says its GPUs (num_gpus)
	body     *body // what the service's checks place their problems in
}

// admit normalizes a validated job file and checks the rules the schema cannot say.
func admit(f jobFile, opts jobspec.Options) (*admitted, *Problem) {
	m, ok := f.value.(map[string]any)
	if !ok {
		return nil, newProblem(http.StatusBadRequest, "invalid-job", "the job must be a TOML document or a JSON object")
	}
	b := f.body
	// `train submit` (kind rl) takes full fine-tunes too, as `prime train` does.
	if q := f.kind; q != "" && m["kind"] != q && (q != jobspec.KindRL || m["kind"] != jobspec.KindFFT) {
		fe := FieldError{Pointer: "/kind", Message: fmt.Sprintf("this file says kind = %q, but it was submitted as a %s job; "+
			"drop the kind line or submit it with the matching command", m["kind"], q)}
		b.place(&fe)
		return nil, invalidJob([]FieldError{fe}, b)
	}
	res, err := jobspec.NormalizeWith(m, opts)
	if err != nil {
		return nil, newProblem(http.StatusUnprocessableEntity, "invalid-job", err.Error())
	}
	if len(res.Errors) > 0 {
		return nil, invalidJob(placed(res.Errors, b), b)
	}
	_, gpusSaid := m["num_gpus"]
	return &admitted{spec: res.Spec, secrets: res.Secrets, warnings: placed(res.Warnings, b), gpusSaid: gpusSaid, body: b}, nil
}

func placed(issues []jobspec.Issue, b *body) []FieldError {
	out := make([]FieldError, 0, len(issues))
	for _, is := range issues {
		fe := FieldError{Pointer: is.Pointer, Message: is.Message}
		b.place(&fe)
		out = append(out, fe)
	}
	return out
}

// submitted is the answer to a submit: the job and what will surprise about it.
type submitted struct {
	*job.Job
	Warnings []FieldError `json:"warnings,omitempty"`
}

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	sub, replayed, prob := s.submit(r, jobFileOf(r), r.Header.Get("Idempotency-Key"))
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+sub.ID)
	if replayed {
		w.Header().Set("Idempotent-Replayed", "true")
	}
	writeJSON(w, http.StatusCreated, sub)
}

// submit queues a job file for the caller of r, as POST /v1/jobs does: admitted, checked
// against the service, its secrets sealed. With idemKey ("" for none) a repeat of the same
// file answers the job the key made first (replayed, without warnings).
func (s *Server) submit(r *http.Request, f jobFile, idemKey string) (*submitted, bool, *Problem) {
	a, prob := admit(f, s.normalizeOptions())
	if prob != nil {
		return nil, false, prob
	}
	seal := func(id string) (string, *Problem, error) {
		if len(a.secrets) == 0 {
			return "", nil, nil
		}
		plain, _ := jobspec.Encode(a.secrets)
		sealed, err := s.cfg.Secrets.Seal(plain, id)
		return sealed, nil, err
	}
	fp := ""
	if idemKey != "" {
		fp = fingerprint(f)
	}
	j, replayed, prob := s.enqueue(r, a, nil, seal, idemKey, fp)
	switch {
	case prob != nil:
		return nil, false, prob
	case replayed:
		return &submitted{Job: j}, true, nil
	}
	return &submitted{Job: j, Warnings: a.warnings}, false, nil
}

// serviceChecks are what an admitted job is checked for against the service's own state, for
// a preview, a submit and a fork alike: the model offered, the warm start's checkpoint (its
// problems' pointers renamed by rename), the budget priced (returned in GPU-ms).
func (s *Server) serviceChecks(r *http.Request, a *admitted, rename map[string]string) (int64, *Problem) {
	if prob := s.offered(a); prob != nil {
		return 0, prob
	}
	if prob := s.resolveWarmStart(r, a, rename); prob != nil {
		return 0, prob
	}
	budget, fe := s.budgetOf(a.spec)
	if fe != nil {
		return 0, budgetProblem(a.body, fe)
	}
	return budget, nil
}

// enqueue queues an admitted job for the caller of r, as a submit and a fork both do:
// serviceChecks, a new id, the estimate, the secrets sealed for the new job (seal), the queue's
// limits and the idempotency key (idemKey, with fp the fingerprint of what it was sent with).
func (s *Server) enqueue(r *http.Request, a *admitted, rename map[string]string,
	seal func(id string) (string, *Problem, error), idemKey, fp string) (j *job.Job, replayed bool, prob *Problem) {
	budget, prob := s.serviceChecks(r, a, rename)
	if prob != nil {
		return nil, false, prob
	}
	id, err := job.NewID()
	if err != nil {
		return nil, false, s.failure(r, err)
	}
	sub := job.Submission{ID: id, Org: principal(r).Org, Spec: a.spec, BudgetGPUMs: budget,
		CreatedBy: principal(r).Subject, TokenID: principal(r).TokenID, PricePerGPUHour: s.price(a.spec.Model)}
	if sub.EstimateGPUMs, err = s.estimateGPUMs(r.Context(), sub.Org, a.spec); err != nil {
		return nil, false, s.failure(r, err)
	}
	if sub.SealedSecrets, prob, err = seal(id); prob != nil || err != nil {
		if prob == nil {
			prob = s.failure(r, err)
		}
		return nil, false, prob
	}
	j, replayed, err = s.cfg.Queue.Submit(r.Context(), sub, idemKey, fp)
	var limit *job.LimitError
	var conflict *job.IdempotencyConflictError
	switch {
	case errors.As(err, &limit):
		return nil, false, limitProblem(limit)
	case errors.As(err, &conflict):
		return nil, false, newProblem(http.StatusConflict, "idempotency-key-reused", fmt.Sprintf(
			"this Idempotency-Key was used for job %s with another body; use a new key for a new job", conflict.JobID))
	case err != nil:
		return nil, false, s.failure(r, err)
	}
	return j, replayed, nil
}

// limitProblem answers a submit or restart past one of the organization's limits.
func limitProblem(limit *job.LimitError) *Problem {
	if limit.Limit == "bytes" {
		p := newProblem(http.StatusTooManyRequests, "limit-bytes", fmt.Sprintf(
			"organization %s holds %.1f MiB in the job store, its limit is %.0f MiB: jobs give back their config and secrets when they end "+
				"and the rest when they are archived; wait for some to end, or delete jobs you no longer need (hostedtrain train delete)",
			limit.Org, float64(limit.Current)/(1<<20), float64(limit.Max)/(1<<20)))
		p.retryAfter = limitBytesRetry
		return p
	}
	return newProblem(http.StatusTooManyRequests, "limit-"+limit.Limit, fmt.Sprintf(
		"organization %s already has %d jobs %s, its limit: wait for some to start, or stop some (hostedtrain train cancel)",
		limit.Org, limit.Current, limit.Limit))
}

// limitBytesRetry is when to try again past the job-store limit: jobs that end meanwhile give
// back theirs, and the archiver runs every minute.
const limitBytesRetry = 60

// fingerprint identifies a submission's content for idempotency: its kind and its body.
func fingerprint(f jobFile) string {
	h := sha256.New()
	h.Write([]byte(f.kind + "\n" + f.body.mediaType + "\n"))
	h.Write(f.body.raw)
	return hex.EncodeToString(h.Sum(nil))
}

type preview struct {
	Config   jobspec.Spec   `json:"config"`
	Warnings []FieldError   `json:"warnings"`
	GPUs     previewGPUs    `json:"gpus"`
	Queue    previewQueue   `json:"queue"`
	Estimate *wire.Estimate `json:"estimate,omitempty"`
}

type previewGPUs struct {
	Count int    `json:"count"`
	Type  string `json:"type"`
}

type previewQueue struct {
	RunsAhead int    `json:"runs_ahead"`
	Reason    string `json:"reason,omitempty"`
}

func (s *Server) previewJob(w http.ResponseWriter, r *http.Request) {
	a, prob := admit(jobFileOf(r), s.normalizeOptions())
	if prob == nil {
		_, prob = s.serviceChecks(r, a, nil)
	}
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	pos, err := s.cfg.Queue.RunsAhead(r.Context(), principal(r).Org, a.spec)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	est, err := s.estimate(r.Context(), principal(r).Org, a.spec)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, preview{
		Config:   a.spec,
		Warnings: a.warnings,
		GPUs:     previewGPUs{Count: a.spec.Resources.GPUs, Type: a.spec.Resources.GPUType},
		Queue:    previewQueue{RunsAhead: pos.RunsAhead, Reason: pos.Reason},
		Estimate: est,
	})
}

type jobList struct {
	Items      []*job.Job `json:"items"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

// jobQuery is what a listing of jobs asks for (GET /v1/jobs): which jobs, from where, how many.
type jobQuery struct {
	filter job.ListFilter
	cursor string
	limit  int
}

// jobQueryOf reads a jobQuery from GET /v1/jobs's query, which validation has checked.
func jobQueryOf(q url.Values) jobQuery {
	f := job.ListFilter{Kind: q.Get("kind")}
	for _, st := range strings.Split(q.Get("status"), ",") {
		if st != "" {
			f.Statuses = append(f.Statuses, job.Status(st))
		}
	}
	f.CreatedAfter, _ = time.Parse(time.RFC3339Nano, q.Get("created_after"))
	f.CreatedBefore, _ = time.Parse(time.RFC3339Nano, q.Get("created_before"))
	return jobQuery{filter: f, cursor: q.Get("cursor"), limit: intParam(q, "limit", 20)}
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	list, prob := s.jobPage(r, jobQueryOf(r.URL.Query()))
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, list)
}

// jobPage is a page of the caller's organization's jobs, newest first.
func (s *Server) jobPage(r *http.Request, q jobQuery) (*jobList, *Problem) {
	jobs, next, err := s.cfg.Queue.List(r.Context(), principal(r).Org, q.filter, q.cursor, q.limit)
	if err != nil {
		return nil, s.failure(r, err)
	}
	if jobs == nil {
		jobs = []*job.Job{}
	}
	return &jobList{Items: jobs, NextCursor: next}, nil
}

// ownJob loads the job named in the path if the caller's organization owns it (ownedJob),
// answering the problem when not.
func (s *Server) ownJob(w http.ResponseWriter, r *http.Request) (*job.Job, bool) {
	j, prob := s.ownedJob(r, pathParam(r, "id"))
	if prob != nil {
		writeProblem(w, r, prob)
		return nil, false
	}
	return j, true
}

// onOwnJob answers an operation on one of the caller's jobs: what core makes of it (200), or
// its problem. The operation's answer is core's; the Prime surface calls the same cores.
func onOwnJob(s *Server, w http.ResponseWriter, r *http.Request, core func(*http.Request, *job.Job) (any, *Problem)) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	v, prob := core(r, j)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, v)
}

// ownedJob is job id if the caller's organization owns it. Another organization's job reads
// exactly like a missing one, so nothing leaks.
func (s *Server) ownedJob(r *http.Request, id string) (*job.Job, *Problem) {
	j, err := s.cfg.Queue.Get(r.Context(), id)
	if errors.Is(err, job.ErrNotFound) || (err == nil && j.Org != principal(r).Org) {
		return nil, newProblem(http.StatusNotFound, "job-not-found", "no job "+id+" in your organization")
	}
	if err != nil {
		return nil, s.failure(r, err)
	}
	return j, nil
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	j, prob := s.jobAsSeen(r, pathParam(r, "id"))
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, j)
}

// jobAsSeen is the caller's job id as GET /v1/jobs/{id} answers it: while it is queued, with
// how many runs are ahead of it and why it waits.
func (s *Server) jobAsSeen(r *http.Request, id string) (*job.Job, *Problem) {
	j, prob := s.ownedJob(r, id)
	if prob != nil {
		return nil, prob
	}
	if j.Status == job.Queued {
		pos, queued, err := s.cfg.Queue.Position(r.Context(), j.ID)
		if err != nil {
			return nil, s.failure(r, err)
		}
		if queued {
			j.RunsAhead, j.QueueReason = &pos.RunsAhead, pos.Reason
		}
	}
	return j, nil
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) { return s.cancel(r, j) })
}

// cancel stops one of the caller's jobs (POST /v1/jobs/{id}/cancel) and is the job after.
func (s *Server) cancel(r *http.Request, j *job.Job) (*job.Job, *Problem) {
	after, err := s.cfg.Queue.Cancel(r.Context(), j.ID)
	switch {
	case errors.Is(err, job.ErrConflict):
		return nil, newProblem(http.StatusConflict, "job-finished",
			"job "+j.ID+" already ended ("+string(j.Status)+"); there is nothing to stop")
	case err != nil:
		return nil, s.failure(r, err)
	}
	return after, nil
}

func (s *Server) deleteJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	stopping, prob := s.deleteOwned(r, j, r.URL.Query().Get("stop") == "true")
	switch {
	case prob != nil:
		writeProblem(w, r, prob)
	case stopping != nil:
		writeJSON(w, http.StatusAccepted, stopping)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// deleteOwned deletes one of the caller's jobs that ended (DELETE /v1/jobs/{id}); with stop, a
// live one is stopped and deleted once it has: stopping is the job then, while it stops (nil
// once it is gone). It decides before it deletes anything: the job is marked as being deleted
// (a restart is refused from then on), then its data in object storage goes, then the job; a
// delete that fails part way leaves the mark and is finished by asking again.
func (s *Server) deleteOwned(r *http.Request, j *job.Job, stop bool) (stopping *job.Job, prob *Problem) {
	live := func() *Problem {
		return newProblem(http.StatusConflict, "job-live",
			"job "+j.ID+" is "+string(j.Status)+": stop it first (hostedtrain train stop "+j.ID+"), then delete it, or delete it with ?stop=true (hostedtrain train delete --stop) to do both")
	}
	if !j.Status.Terminal() && stop {
		// Stop, then delete (Prime's delete of a running run): at once when it has ended by
		// then (a queued job), else by the reaper once it has.
		done, err := s.cfg.Queue.StopThenDelete(r.Context(), j.ID)
		switch {
		case errors.Is(err, job.ErrNotFound):
			return nil, nil
		case err != nil:
			return nil, s.failure(r, err)
		case !done:
			cur, gerr := s.cfg.Queue.Get(r.Context(), j.ID)
			if gerr != nil {
				return nil, s.failure(r, gerr)
			}
			return cur, nil
		}
		j.Status = job.Stopped
	}
	if !j.Status.Terminal() {
		return nil, live()
	}
	switch err := s.cfg.Queue.BeginDelete(r.Context(), j.ID); {
	case errors.Is(err, job.ErrNotFound):
		return nil, nil // deleted meanwhile by another request
	case errors.Is(err, job.ErrConflict):
		if cur, gerr := s.cfg.Queue.Get(r.Context(), j.ID); gerr == nil {
			j = cur
		}
		return nil, live() // restarted since it was read: nothing was deleted
	case err != nil:
		return nil, s.failure(r, err)
	}
	// Its deployments go first: their weights are the job's data.
	if s.cfg.Deployments != nil {
		if _, err := s.cfg.Deployments.ForgetJob(r.Context(), j.Org, j.ID); err != nil {
			return nil, s.failure(r, err)
		}
	}
	if s.cfg.Store != nil {
		if _, err := jobdata.DeleteJob(r.Context(), s.cfg.Store, j.ID); err != nil {
			s.cfg.Logger.Warn("delete a job's data", "job", j.ID, "err", err)
			p := newProblem(http.StatusServiceUnavailable, "storage-unavailable",
				"object storage failed part way through deleting job "+j.ID+"'s data; the job is still there (it cannot be restarted): send the delete again to finish it")
			p.retryAfter = RetryAfterSeconds
			return nil, p
		}
	}
	switch err := s.cfg.Queue.Delete(r.Context(), j.ID); {
	case errors.Is(err, job.ErrNotFound):
		// deleted meanwhile by another request
	case err != nil:
		return nil, s.failure(r, err)
	default:
		s.cfg.Logger.Info("job deleted", "job", j.ID, "org", j.Org)
	}
	return nil, nil
}

func (s *Server) restartJob(w http.ResponseWriter, r *http.Request) {
	onOwnJob(s, w, r, func(r *http.Request, j *job.Job) (any, *Problem) { return s.restart(r, j) })
}

// restart queues one of the caller's jobs that ended again (POST /v1/jobs/{id}/restart) and is
// the job after.
func (s *Server) restart(r *http.Request, j *job.Job) (*job.Job, *Problem) {
	if budgetSpent(j) {
		return nil, newProblem(http.StatusConflict, "budget-spent", fmt.Sprintf(
			"job %s has used its budget (%.4f of %.4f GPU-hours): raise it first (PUT /v1/jobs/%s/budget, `hostedtrain train budget`)",
			j.ID, j.GPUSeconds/3600, j.BudgetGPUSeconds/3600, j.ID))
	}
	after, err := s.cfg.Queue.Restart(r.Context(), j.ID)
	var limit *job.LimitError
	switch {
	case errors.As(err, &limit):
		// A restart queues the job again: it counts against the queued limit as a submit does.
		return nil, limitProblem(limit)
	case errors.Is(err, queue.ErrArchived):
		return nil, newProblem(http.StatusConflict, "cannot-restart",
			"job "+j.ID+" ended ("+string(j.Status)+") longer ago than jobs are kept ready to run, and only its record remains: submit it again")
	case errors.Is(err, queue.ErrDeleting):
		return nil, newProblem(http.StatusConflict, "cannot-restart",
			"job "+j.ID+" is being deleted (a delete began, and its checkpoints may be gone): send the delete again to finish it")
	case errors.Is(err, job.ErrConflict):
		why := "it is waiting in the queue already"
		if j.Status == job.Completed {
			why = "it completed; submit a new job to train further"
		}
		return nil, newProblem(http.StatusConflict, "cannot-restart",
			"job "+j.ID+" is "+string(j.Status)+" and cannot be restarted: "+why)
	case err != nil:
		return nil, s.failure(r, err)
	}
	return after, nil
}

type eventList struct {
	Items []job.Event `json:"items"`
}

func (s *Server) listJobEvents(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	if wantsStream(r) {
		after := int64(intQuery(r, "after", 0))
		if id, err := strconv.ParseInt(r.Header.Get("Last-Event-ID"), 10, 64); err == nil && id >= 0 {
			after = id
		}
		s.streamEvents(w, r, j.ID, after)
		return
	}
	evs, err := s.cfg.Queue.Events(r.Context(), j.ID, int64(intQuery(r, "after", 0)), intQuery(r, "limit", 20))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, eventList{Items: evs})
}

// intQuery reads an integer query parameter that validation has already checked.
func intQuery(r *http.Request, name string, def int) int {
	return intParam(r.URL.Query(), name, def)
}

// intParam reads the integer parameter name of q, def when it is absent (or not a number).
func intParam(q url.Values, name string, def int) int {
	v := q.Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return n
}
