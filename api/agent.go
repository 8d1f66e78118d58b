package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/queue"
)

func (s *Server) agentClaim(w http.ResponseWriter, r *http.Request) {
	var body job.ClaimBody
	if !decodeBody(w, r, &body) {
		return
	}
	cl, err := s.cfg.Queue.Claim(r.Context(), body.Request(principal(r).Subject))
	if err != nil {
		if r.Context().Err() != nil {
			return // the agent went away while waiting
		}
		s.internalError(w, r, err)
		return
	}
	if cl == nil {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if cl.SealedSecrets != "" {
		if err := s.openSecrets(cl); err != nil {
			// The job cannot run without them, and never will under this key ring: fail it
			// with the reason rather than let every agent trip on it.
			s.cfg.Logger.Error("claim: secrets do not open", "job", cl.Job.ID, "err", err)
			_, ferr := s.cfg.Queue.Fail(r.Context(), cl.Job.ID, job.Outcome{Token: cl.Lease.Token,
				Reason: "the job's secrets cannot be decrypted: the key that sealed them is no longer configured; submit the job again"})
			if ferr != nil {
				s.cfg.Logger.Error("claim: fail job", "job", cl.Job.ID, "err", ferr)
			}
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	if s.cfg.Storage != nil {
		if cl.Storage, err = s.cfg.Storage.Grant(r.Context(), cl.Job.ID, grantReads(cl.Job)...); err != nil {
			// Without storage the run would be lost: hand the job back, unharmed, for the
			// next claim, and tell the agent to try again later.
			s.cfg.Logger.Error("claim: storage grant", "job", cl.Job.ID, "err", err)
			if _, rerr := s.cfg.Queue.Release(r.Context(), cl.Job.ID, job.Outcome{Token: cl.Lease.Token,
				Reason: "the service could not issue storage credentials"}); rerr != nil {
				s.cfg.Logger.Error("claim: release job", "job", cl.Job.ID, "err", rerr)
			}
			w.Header().Set("Retry-After", "5")
			writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "storage-unavailable",
				"object storage credentials could not be issued for the job; it is queued again"))
			return
		}
	}
	cl.HeartbeatIntervalSeconds = s.cfg.Queue.HeartbeatInterval().Seconds()
	cl.Judge = s.judgeAccess(r, cl.Job)
	writeJSON(w, http.StatusOK, cl)
}

type abandonReply struct {
	JobID string `json:"job_id,omitempty"`
}

// agentAbandonClaim takes back a claim the agent gave up waiting for.
func (s *Server) agentAbandonClaim(w http.ResponseWriter, r *http.Request) {
	id, err := s.cfg.Queue.AbandonClaim(r.Context(), principal(r).Subject, pathParam(r, "claim_id"))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, abandonReply{JobID: id})
}

func (s *Server) agentHeartbeat(w http.ResponseWriter, r *http.Request) {
	var hb job.Heartbeat
	if !decodeBody(w, r, &hb) {
		return
	}
	id := pathParam(r, "id")
	rep, err := s.cfg.Queue.Heartbeat(r.Context(), id, hb)
	if s.agentError(w, r, err) {
		return
	}
	// Fresh credentials only for the lease holder of a job that goes on: the heartbeat just
	// proved the lease current. A failure is not the agent's: it asks again next time.
	if hb.StorageRefresh && s.cfg.Storage != nil && rep.Action == job.Continue {
		var reads []string
		if j, gerr := s.cfg.Queue.Get(r.Context(), id); gerr == nil {
			reads = grantReads(j)
		}
		if rep.Storage, err = s.cfg.Storage.Grant(r.Context(), id, reads...); err != nil {
			s.cfg.Logger.Error("heartbeat: storage grant", "job", id, "err", err)
		}
	}
	writeJSON(w, http.StatusOK, rep)
}

func (s *Server) agentComplete(w http.ResponseWriter, r *http.Request) {
	s.agentFinish(w, r, s.cfg.Queue.Complete)
}

func (s *Server) agentFail(w http.ResponseWriter, r *http.Request) {
	s.agentFinish(w, r, s.cfg.Queue.Fail)
}

func (s *Server) agentRelease(w http.ResponseWriter, r *http.Request) {
	s.agentFinish(w, r, s.cfg.Queue.Release)
}

type finishReply struct {
	Status job.Status `json:"status"`
}

func (s *Server) agentFinish(w http.ResponseWriter, r *http.Request,
	finish func(context.Context, string, job.Outcome) (job.Status, error)) {
	var o job.Outcome
	if !decodeBody(w, r, &o) {
		return
	}
	st, err := finish(r.Context(), pathParam(r, "id"), o)
	if s.agentError(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, finishReply{Status: st})
}

// agentError answers a failed agent write; it reports whether there was one.
func (s *Server) agentError(w http.ResponseWriter, r *http.Request, err error) bool {
	var step *queue.StepError
	switch {
	case err == nil:
		return false
	case errors.As(err, &step):
		// Nothing of the report was recorded and the lease was not renewed: an honest agent
		// never reports a step past its job's max_steps.
		msg := step.Error()
		p := newProblem(http.StatusUnprocessableEntity, "invalid-checkpoints", "the report's checkpoint steps are refused: "+msg)
		p.Errors = []FieldError{{Pointer: "/checkpoints/" + strconv.Itoa(step.Index), Message: step.Why}}
		writeProblem(w, r, p)
	case errors.Is(err, job.ErrLeaseLost):
		writeProblem(w, r, newProblem(http.StatusConflict, "lease-lost",
			"this lease is no longer current (it expired, or the job was claimed again or ended); stop the pipeline"))
	case errors.Is(err, job.ErrNotFound):
		writeProblem(w, r, newProblem(http.StatusNotFound, "job-not-found", "no such job"))
	default:
		s.internalError(w, r, err)
	}
	return true
}

// decodeBody decodes a JSON body that validation has already checked against the schema.
func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	if err := json.NewDecoder(r.Body).Decode(v); err != nil {
		writeProblem(w, r, newProblem(http.StatusBadRequest, "malformed-body", err.Error()))
		return false
	}
	return true
}

// openSecrets decrypts a claimed job's secrets for the agent that now holds its lease.
func (s *Server) openSecrets(cl *job.Claim) error {
	plain, err := s.cfg.Secrets.Open(cl.SealedSecrets, cl.Job.ID)
	if err != nil {
		return err
	}
	return json.Unmarshal(plain, &cl.Secrets)
}

// grantReads are the prefixes of other jobs a job's storage grant may read: the checkpoint a
// warm start restores (on every grant of the job: a restore may outlast the first).
func grantReads(j *job.Job) []string {
	if ws := j.Config.WarmStart; ws != nil {
		return []string{jobdata.CheckpointPrefix(ws.Job, ws.Step)}
	}
	return nil
}
