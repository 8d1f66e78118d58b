package api

import (
	"bytes"
	"net/http"
	"net/http/httptest"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/openapi"
)

// Admission checks job files offline exactly as a submit does — the body limit, the content
// type, the OpenAPI schema (TOML or JSON), normalization and the rules — without Redis, a
// network or a token. `gpuagent render` uses it, so what it renders is the job the service
// would queue.
type Admission struct {
	s *Server
}

// NewAdmission loads the contract.
func NewAdmission() (*Admission, error) {
	spec, err := openapi.Load()
	if err != nil {
		return nil, err
	}
	return &Admission{s: &Server{cfg: Config{MaxBodyBytes: 1 << 20}, spec: spec, hints: hints{kinds: spec.KindSchemas()}}}, nil
}

// Admitted is a job file that passed: its normalized job, its secrets and its warnings.
type Admitted struct {
	Spec     jobspec.Spec
	Secrets  map[string]string
	Warnings []FieldError
}

// Admit checks body (contentType application/toml or application/json) as a job of kind
// ("" takes the file's own kind, else rl). A refused file is the problem a submit answers.
func (a *Admission) Admit(kind, contentType string, body []byte) (*Admitted, *Problem) {
	url := "/v1/jobs/preview"
	if kind != "" {
		url += "?kind=" + kind
	}
	r := httptest.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	r.Header.Set("Content-Type", contentType)
	route, params, err := a.s.spec.Router.FindRoute(r)
	if err != nil {
		return nil, newProblem(http.StatusBadRequest, "invalid-job", err.Error())
	}
	r, prob := a.s.validate(r, route, params)
	if prob != nil {
		return nil, prob
	}
	ad, prob := admit(jobFileOf(r), a.s.normalizeOptions())
	if prob != nil {
		return nil, prob
	}
	return &Admitted{Spec: ad.spec, Secrets: ad.secrets, Warnings: ad.warnings}, nil
}
