package api

import (
	"context"
	"net/url"

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
	return &Admission{s: &Server{cfg: Config{MaxBodyBytes: 1 << 20}, spec: spec, hints: hints{kinds: spec.KindSchemas()},
		routes: operationRoutes(spec)}}, nil
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
	var q url.Values
	if kind != "" {
		q = url.Values{"kind": {kind}}
	}
	r, prob := a.s.validateFor(context.Background(), "previewJob", "", q, contentType, body)
	if prob != nil {
		return nil, prob
	}
	ad, prob := admit(jobFileOf(r), a.s.normalizeOptions())
	if prob != nil {
		return nil, prob
	}
	return &Admitted{Spec: ad.spec, Secrets: ad.secrets, Warnings: ad.warnings}, nil
}
