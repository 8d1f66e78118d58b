package api

import (
	"net/http"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

func (s *Server) getOrg(w http.ResponseWriter, r *http.Request) {
	st, err := s.cfg.Queue.GetOrg(r.Context(), pathParam(r, "org"))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, st)
}

func (s *Server) setOrg(w http.ResponseWriter, r *http.Request) {
	var set job.OrgSettings
	if !decodeBody(w, r, &set) {
		return
	}
	org := pathParam(r, "org")
	if err := s.cfg.Queue.SetOrg(r.Context(), org, set); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.cfg.Logger.Info("org settings changed", "org", org, "by", principal(r).Subject,
		"weight", set.Weight, "max_running", set.MaxRunning, "max_queued", set.MaxQueued)
	s.getOrg(w, r)
}
