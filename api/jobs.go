package api

import (
	"errors"
	"net/http"
	"strconv"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

func (s *Server) submitJob(w http.ResponseWriter, r *http.Request) {
	v, _ := validatedBody(r)
	m, ok := v.(map[string]any)
	if !ok {
		writeProblem(w, r, newProblem(http.StatusBadRequest, "invalid-job", "the job must be a TOML document or a JSON object"))
		return
	}
	spec, err := jobspec.FromValue(m)
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusUnprocessableEntity, "invalid-job", err.Error()))
		return
	}
	j, err := s.cfg.Queue.Submit(r.Context(), principal(r).Org, spec)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	w.Header().Set("Location", "/v1/jobs/"+j.ID)
	writeJSON(w, http.StatusCreated, j)
}

type jobList struct {
	Items      []*job.Job `json:"items"`
	NextCursor string     `json:"next_cursor,omitempty"`
}

func (s *Server) listJobs(w http.ResponseWriter, r *http.Request) {
	limit := intQuery(r, "limit", 20)
	jobs, next, err := s.cfg.Queue.List(r.Context(), principal(r).Org, r.URL.Query().Get("cursor"), limit)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if jobs == nil {
		jobs = []*job.Job{}
	}
	writeJSON(w, http.StatusOK, jobList{Items: jobs, NextCursor: next})
}

// ownJob loads the job named in the path if the caller's organization owns it. Another
// organization's job reads exactly like a missing one, so nothing leaks.
func (s *Server) ownJob(w http.ResponseWriter, r *http.Request) (*job.Job, bool) {
	id := pathParam(r, "id")
	j, err := s.cfg.Queue.Get(r.Context(), id)
	if errors.Is(err, job.ErrNotFound) || (err == nil && j.Org != principal(r).Org) {
		writeProblem(w, r, newProblem(http.StatusNotFound, "job-not-found", "no job "+id+" in your organization"))
		return nil, false
	}
	if err != nil {
		s.internalError(w, r, err)
		return nil, false
	}
	return j, true
}

func (s *Server) getJob(w http.ResponseWriter, r *http.Request) {
	if j, ok := s.ownJob(w, r); ok {
		writeJSON(w, http.StatusOK, j)
	}
}

func (s *Server) cancelJob(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
		return
	}
	after, err := s.cfg.Queue.Cancel(r.Context(), j.ID)
	switch {
	case errors.Is(err, job.ErrConflict):
		writeProblem(w, r, newProblem(http.StatusConflict, "job-finished",
			"job "+j.ID+" already ended ("+string(j.Status)+"); there is nothing to stop"))
	case err != nil:
		s.internalError(w, r, err)
	default:
		writeJSON(w, http.StatusOK, after)
	}
}

type eventList struct {
	Items []job.Event `json:"items"`
}

func (s *Server) listJobEvents(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok {
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
	v := r.URL.Query().Get(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return def
	}
	return n
}
