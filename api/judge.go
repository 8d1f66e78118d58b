package api

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The service's judge: jobs graded by a judge they hold no key for (jobspec.OperatorJudgeURL)
// call POST /v1/judge/chat/completions with a token of their own (handed out with the claim),
// and the API forwards the call to the operator's OpenAI-compatible endpoint with the
// operator's key — which never reaches a job — and counts the job's tokens against its
// organization. A token works while its job is live.

// Judge is the operator's judge endpoint: an OpenAI-compatible base URL and its key.
type Judge struct {
	BaseURL string
	Key     string
	// Timeout bounds one call (default 2 minutes).
	Timeout time.Duration
}

// judgeTokenTTL bounds a judge token past its claim: the job must also be live. It is signed
// with the API's token keys (every instance checks it; it outlives a key's rotation while the
// key is kept).
const judgeTokenTTL = 30 * 24 * time.Hour

// judgeAccess is what a claim hands the agent of a job graded by the service's judge.
func (s *Server) judgeAccess(r *http.Request, j *job.Job) *job.JudgeAccess {
	if s.cfg.Judge == nil || !j.Config.UsesOperatorJudge() {
		return nil
	}
	payload := j.ID + "\n" + strconv.FormatInt(time.Now().Add(judgeTokenTTL).Unix(), 10)
	token := base64.RawURLEncoding.EncodeToString([]byte(payload)) + "." + s.cfg.Verifier.Sign("judge", payload)
	return &job.JudgeAccess{URL: publicBase(r) + "/v1/judge", Token: token}
}

// openJudgeToken is the job a judge token was made for.
func (s *Server) openJudgeToken(token string, now time.Time) (string, error) {
	p64, sig, ok := strings.Cut(token, ".")
	if !ok {
		return "", errBadToken
	}
	payload, err := base64.RawURLEncoding.DecodeString(p64)
	if err != nil || !s.cfg.Verifier.CheckSigned("judge", string(payload), sig) {
		return "", errBadToken
	}
	id, exp, ok := strings.Cut(string(payload), "\n")
	until, err := strconv.ParseInt(exp, 10, 64)
	if !ok || err != nil || now.Unix() > until {
		return "", errBadToken
	}
	return id, nil
}

// publicBase is the API's own address as the request reached it.
func publicBase(r *http.Request) string {
	scheme := "http"
	if r.TLS != nil || r.Header.Get("X-Forwarded-Proto") == "https" {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// judgeChat is POST /v1/judge/chat/completions: a live job's judge call, forwarded to the
// operator's endpoint with its key; the answer as the endpoint gave it, its tokens counted.
func (s *Server) judgeChat(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Judge == nil {
		writeProblem(w, r, newProblem(http.StatusNotFound, "no-judge", "this service has no judge endpoint: a job's judges are called with its own keys"))
		return
	}
	id, err := s.openJudgeToken(strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer "), time.Now())
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusUnauthorized, "unauthorized", "a judge call needs its job's judge token (HOSTEDTRAIN_JUDGE_KEY) as its bearer"))
		return
	}
	j, err := s.cfg.Queue.Get(r.Context(), id)
	switch {
	case errors.Is(err, job.ErrNotFound):
		writeProblem(w, r, newProblem(http.StatusUnauthorized, "unauthorized", "the judge token's job is gone"))
		return
	case err != nil:
		s.internalError(w, r, err)
		return
	case j.Status.Terminal():
		writeProblem(w, r, newProblem(http.StatusForbidden, "job-ended", "job "+id+" has ended: its judge token no longer works"))
		return
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, s.cfg.MaxBodyBytes+1))
	if err != nil || int64(len(body)) > s.cfg.MaxBodyBytes {
		writeProblem(w, r, newProblem(http.StatusRequestEntityTooLarge, "too-large", "a judge call is at most "+strconv.FormatInt(s.cfg.MaxBodyBytes, 10)+" bytes"))
		return
	}
	ctx := r.Context()
	timeout := s.cfg.Judge.Timeout
	if timeout <= 0 {
		timeout = 2 * time.Minute
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, strings.TrimSuffix(s.cfg.Judge.BaseURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.cfg.Judge.Key)
	resp, err := (&http.Client{Timeout: timeout}).Do(req)
	if err != nil {
		s.cfg.Logger.Warn("judge endpoint", "job", id, "err", err)
		p := newProblem(http.StatusBadGateway, "judge-unavailable", "the judge endpoint did not answer; try again")
		writeProblem(w, r, p)
		return
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		writeProblem(w, r, newProblem(http.StatusBadGateway, "judge-unavailable", "the judge endpoint's answer broke off; try again"))
		return
	}
	var usage struct {
		Usage struct {
			Prompt     int64 `json:"prompt_tokens"`
			Completion int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if resp.StatusCode < 300 && json.Unmarshal(answer, &usage) == nil && usage.Usage.Prompt+usage.Usage.Completion > 0 {
		if err := s.cfg.Queue.AddJudgeUsage(ctx, j.Org, j.ID, usage.Usage.Prompt, usage.Usage.Completion); err != nil {
			s.cfg.Logger.Warn("count judge tokens", "job", id, "err", err)
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(resp.StatusCode)
	_, _ = w.Write(answer)
}

// judgeTokens are a job's judge tokens for its usage (nil for none).
func (s *Server) judgeTokens(r *http.Request, j *job.Job) (*struct{ in, out int64 }, error) {
	if !j.Config.UsesOperatorJudge() {
		return nil, nil
	}
	in, out, err := s.cfg.Queue.JudgeUsage(r.Context(), j.Org, j.ID)
	if err != nil || in+out == 0 {
		return nil, err
	}
	return &struct{ in, out int64 }{in, out}, nil
}
