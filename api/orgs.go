package api

import (
	"net/http"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
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
	s.budgets.Delete(org) // this process's submits see the new budget at once
	s.cfg.Logger.Info("org settings changed", "org", org, "by", principal(r).Subject,
		"weight", set.Weight, "max_running", set.MaxRunning, "max_queued", set.MaxQueued, "monthly_gpu_hours", set.MonthlyGPUHours)
	s.getOrg(w, r)
}

type revokeRequest struct {
	Token     string    `json:"token"`
	JTI       string    `json:"jti"`
	ExpiresAt time.Time `json:"expires_at"`
}

type revokeReply struct {
	JTI          string    `json:"jti"`
	RevokedUntil time.Time `json:"revoked_until"`
}

// revokeToken refuses a token from now on: by the token itself, or by its id and expiry.
func (s *Server) revokeToken(w http.ResponseWriter, r *http.Request) {
	var req revokeRequest
	if !decodeBody(w, r, &req) {
		return
	}
	jti, until := req.JTI, req.ExpiresAt
	if req.Token != "" {
		var err error
		if jti, until, err = auth.TokenID(req.Token); err != nil {
			p := newProblem(http.StatusUnprocessableEntity, "invalid-token", err.Error())
			p.Errors = []FieldError{{Pointer: "/token", Message: err.Error()}}
			writeProblem(w, r, p)
			return
		}
	}
	if jti == "" || until.IsZero() {
		p := newProblem(http.StatusUnprocessableEntity, "invalid-body", "send the token, or its jti and expires_at")
		p.Errors = []FieldError{{Pointer: "/token", Message: "send the token, or its jti and expires_at"}}
		writeProblem(w, r, p)
		return
	}
	if err := s.cfg.Queue.RevokeToken(r.Context(), jti, until); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.cfg.Logger.Info("token revoked", "jti", jti, "until", until, "by", principal(r).Subject)
	writeJSON(w, http.StatusOK, revokeReply{JTI: jti, RevokedUntil: until.UTC()})
}

func (s *Server) listNodes(w http.ResponseWriter, r *http.Request) {
	nodes, err := s.cfg.Queue.Nodes(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if nodes == nil {
		nodes = []job.Node{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": nodes})
}

// setNode cordons, drains or uncordons a node; the answer is the node as the queue now has it.
func (s *Server) setNode(w http.ResponseWriter, r *http.Request) {
	var set struct {
		State  string `json:"state"`
		Reason string `json:"reason"`
	}
	if !decodeBody(w, r, &set) {
		return
	}
	id := pathParam(r, "node")
	if set.Reason == "" && set.State != job.NodeOK {
		set.Reason = "by " + principal(r).Subject
	}
	if err := s.cfg.Queue.SetNode(r.Context(), id, set.State, set.Reason); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.cfg.Logger.Info("node state changed", "node", id, "state", set.State, "reason", set.Reason, "by", principal(r).Subject)
	nodes, err := s.cfg.Queue.Nodes(r.Context())
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	for _, n := range nodes {
		if n.ID == id {
			writeJSON(w, http.StatusOK, n)
			return
		}
	}
	writeJSON(w, http.StatusOK, job.Node{ID: id, State: job.NodeOK})
}

// warmNode asks a node's agent to fetch models into its cache ahead of demand.
func (s *Server) warmNode(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Models []string `json:"models"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	id := pathParam(r, "node")
	if err := s.cfg.Queue.WarmNode(r.Context(), id, body.Models); err != nil {
		s.internalError(w, r, err)
		return
	}
	s.cfg.Logger.Info("node asked to warm models", "node", id, "models", body.Models, "by", principal(r).Subject)
	writeJSON(w, http.StatusAccepted, map[string]any{"node": id, "models": body.Models})
}

// agentCache records an agent's report of its node cache and answers the models to warm.
func (s *Server) agentCache(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Stats map[string]job.CacheStats `json:"stats"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	warm, err := s.cfg.Queue.ReportCache(r.Context(), principal(r).Subject, body.Stats)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	if warm == nil {
		warm = []string{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"warm": warm})
}
