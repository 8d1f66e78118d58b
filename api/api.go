// Package api is the service's HTTP API as one http.Handler. The same handler serves
// `hostedtrain dev`, the tests, and AWS Lambda (functions/api converts the events at the edge).
//
// Every request passes, in order: route lookup in the OpenAPI document, authentication and the
// operation's scope, a body size limit, the content type, and kin-openapi's request validation;
// only then does the operation's handler run. Errors are problem+json.
package api

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/getkin/kin-openapi/routers"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/grant"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/openapi"
	"github.com/hostedtrain/hostedtrain/queue"
)

// Queue is what the API needs of the job store; queue.Client implements it.
type Queue interface {
	Ping(ctx context.Context) error
	Submit(ctx context.Context, sub job.Submission, idempotencyKey, fingerprint string) (*job.Job, bool, error)
	RunsAhead(ctx context.Context, org string, spec jobspec.Spec) (job.Position, error)
	Position(ctx context.Context, id string) (job.Position, bool, error)
	Get(ctx context.Context, id string) (*job.Job, error)
	List(ctx context.Context, org string, f job.ListFilter, cursor string, limit int) ([]*job.Job, string, error)
	Events(ctx context.Context, id string, after int64, limit int) ([]job.Event, error)
	Cancel(ctx context.Context, id string) (*job.Job, error)
	Restart(ctx context.Context, id string) (*job.Job, error)
	BeginDelete(ctx context.Context, id string) error
	AddJudgeUsage(ctx context.Context, org, id string, in, out int64) error
	JudgeUsage(ctx context.Context, org, id string) (in, out int64, err error)
	StopThenDelete(ctx context.Context, id string) (done bool, err error)
	OpenStream(ctx context.Context, org, stream string, max int, lease time.Duration) (bool, error)
	RenewStream(ctx context.Context, org, stream string, lease time.Duration) (bool, error)
	CloseStream(ctx context.Context, org, stream string) error
	Delete(ctx context.Context, id string) error
	IdleCapacity(ctx context.Context, model string, counts []int) ([]int, error)
	SealedSecrets(ctx context.Context, id string) (string, error)
	Claim(ctx context.Context, req job.ClaimRequest) (*job.Claim, error)
	AbandonClaim(ctx context.Context, agent, claimID string) (string, error)
	Heartbeat(ctx context.Context, id string, hb job.Heartbeat) (job.HeartbeatReply, error)
	Complete(ctx context.Context, id string, o job.Outcome) (job.Status, error)
	Fail(ctx context.Context, id string, o job.Outcome) (job.Status, error)
	Release(ctx context.Context, id string, o job.Outcome) (job.Status, error)
	GetOrg(ctx context.Context, org string) (job.OrgStatus, error)
	UsageBy(ctx context.Context, org string, live []*job.Job, price func(model string) float64) (users, tokens []job.UsageShare, err error)
	StoredBytes(ctx context.Context, org string, ids []string) (map[string]int64, error)
	RevokeToken(ctx context.Context, jti string, until time.Time) error
	TokenRevoked(ctx context.Context, jti string) (bool, error)
	SetOrg(ctx context.Context, org string, s job.OrgSettings) error
	Nodes(ctx context.Context) ([]job.Node, error)
	SetBudget(ctx context.Context, id string, gpuMs int64) error
	SetNode(ctx context.Context, id, state, reason string) error
	WarmNode(ctx context.Context, node string, models []string) error
	ReportCache(ctx context.Context, node string, stats map[string]job.CacheStats) ([]string, error)
	HeartbeatInterval() time.Duration
}

// RetryAfterSeconds is the Retry-After of a 503: about how long a Redis failover takes to be
// noticed and a client's pool to reconnect.
const RetryAfterSeconds = 5

// Config wires a Server.
type Config struct {
	Queue Queue
	// Deployments are the adapters deployed for inference; nil: the Queue's, when it has them
	// (queue.Client does), else those endpoints answer 503.
	Deployments Deployments
	Verifier    *auth.Verifier
	// Secrets seals job secrets at rest and opens them for the agent that claims the job.
	Secrets *seal.Keyring
	// Store is the object storage agents write jobs' metrics, checkpoints and artifacts to;
	// nil answers those endpoints with 503.
	Store blob.Store
	// Webhooks keeps webhook endpoints and their deliveries; nil answers those endpoints
	// with 503.
	Webhooks Webhooks
	// Storage hands the agent that claims a job credentials limited to the job's data (and
	// fresh ones on a heartbeat that asks); nil hands none, and agents use their own.
	Storage grant.Granter
	// DownloadKey signs the download links the API serves itself (where the store cannot
	// presign); empty makes a random one (links then work only with this process).
	DownloadKey []byte
	// StreamLimit ends event and log streams after this long (0: when the job ends): under
	// Lambda a response is buffered, so a stream must end for the client to see it.
	StreamLimit time.Duration
	// RevocationCheck is how often an open stream looks whether its token was revoked
	// (default 5 s); a stream also ends when its token expires.
	RevocationCheck time.Duration
	// MaxStreams bounds the event and log streams one organization holds open at once, over
	// every API process (default DefaultMaxStreams; negative: no bound): each holds a
	// connection (under Lambda an invocation) and polls Redis while it lasts.
	MaxStreams int
	// LogRecheck bounds how long a log follower goes without reading storage when the agent
	// says it wrote nothing new (the heartbeat's log_bytes): default 15 s.
	LogRecheck time.Duration
	Logger     *slog.Logger
	// MaxBodyBytes bounds request bodies (default 1 MiB); larger ones get 413.
	MaxBodyBytes int64
	// Ready, if set, must return nil before /healthz answers 200 (the local stack uses it to
	// wait for its agents).
	Ready func() error
	// Models, if set, are the only models training jobs may name (ParseModels); nil offers
	// every model prime-rl can render.
	Models []Model
	// Judge, if set, is the operator's judge endpoint: a job graded by a judge it has no key
	// for is graded through it (POST /v1/judge/chat/completions), billed to its organization;
	// nil refuses such a job at submit, naming the key.
	Judge *Judge
}

func (c *Config) validate() error {
	if c.Queue == nil || c.Verifier == nil || c.Secrets == nil {
		return errors.New("api: Config needs Queue, Verifier and Secrets")
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 1 << 20
	}
	if c.RevocationCheck <= 0 {
		c.RevocationCheck = 5 * time.Second
	}
	c.MaxStreams = cmp.Or(c.MaxStreams, DefaultMaxStreams)
	if c.LogRecheck <= 0 {
		c.LogRecheck = 15 * time.Second
	}
	return nil
}

// Server is the API.
type Server struct {
	cfg         Config
	spec        *openapi.Spec
	hints       hints
	handlers    map[string]http.HandlerFunc // by operationId
	routes      map[string]*routers.Route   // by operationId
	downloadKey []byte
	budgets     sync.Map // org → monthlyBudget, read within monthlyBudgetTTL (budget.go)
}

// New builds the API. It fails if the OpenAPI document and the handlers disagree on which
// operations exist.
func New(cfg Config) (*Server, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	spec, err := openapi.Load()
	if err != nil {
		return nil, err
	}
	if cfg.Deployments == nil {
		cfg.Deployments, _ = cfg.Queue.(Deployments)
	}
	s := &Server{cfg: cfg, spec: spec, hints: hints{kinds: spec.KindSchemas()}, downloadKey: cfg.DownloadKey}
	if len(s.downloadKey) == 0 {
		s.downloadKey = make([]byte, 32)
		if _, err := rand.Read(s.downloadKey); err != nil {
			return nil, err
		}
	}
	s.handlers = map[string]http.HandlerFunc{
		"health":                   s.health,
		"openapiDocument":          s.openapiDocument,
		"submitJob":                s.submitJob,
		"previewJob":               s.previewJob,
		"listJobs":                 s.listJobs,
		"getJob":                   s.getJob,
		"cancelJob":                s.cancelJob,
		"deleteJob":                s.deleteJob,
		"forkJob":                  s.forkJob,
		"restartJob":               s.restartJob,
		"listJobEvents":            s.listJobEvents,
		"agentAbandonClaim":        s.agentAbandonClaim,
		"createWebhook":            s.createWebhook,
		"listWebhooks":             s.listWebhooks,
		"getWebhook":               s.getWebhook,
		"updateWebhook":            s.updateWebhook,
		"deleteWebhook":            s.deleteWebhook,
		"testWebhook":              s.testWebhook,
		"listWebhookDeliveries":    s.listWebhookDeliveries,
		"redeliverWebhookDelivery": s.redeliverWebhookDelivery,
		"getJobLogs":               s.getJobLogs,
		"getJobProgress":           s.getJobProgress,
		"getJobSamples":            s.getJobSamples,
		"getJobDistributions":      s.getJobDistributions,
		"getUsage":                 s.getUsage,
		"getJobUsage":              s.getJobUsage,
		"primeRunUsage":            s.primeRunUsage,
		"download":                 s.download,
		"judgeChat":                s.judgeChat,
		"getJobMetrics":            s.getJobMetrics,
		"listJobCheckpoints":       s.listJobCheckpoints,
		"pinCheckpoint":            s.pinCheckpoint,
		"unpinCheckpoint":          s.pinCheckpoint,
		"listJobArtifacts":         s.listJobArtifacts,
		"agentClaim":               s.agentClaim,
		"agentHeartbeat":           s.agentHeartbeat,
		"agentComplete":            s.agentComplete,
		"agentFail":                s.agentFail,
		"agentRelease":             s.agentRelease,
		"getOrg":                   s.getOrg,
		"setOrg":                   s.setOrg,
		"listNodes":                s.listNodes,
		"setNode":                  s.setNode,
		"warmNode":                 s.warmNode,
		"agentCache":               s.agentCache,
		"setJobBudget":             s.setBudget,
		"revokeToken":              s.revokeToken,
		"primeListRuns":            s.primeListRuns,
		"primeCreateRun":           s.primeCreateRun,
		"primeGetRun":              s.primeGetRun,
		"primeStopRun":             s.primeStopRun,
		"primeDeleteRun":           s.primeDeleteRun,
		"primeCreateTrainingRun":   s.primeCreateTrainingRun,
		"primeDeleteTrainingRun":   s.primeDeleteRun,
		"primeTrainingGPUTypes":    s.primeTrainingGPUTypes,
		"primeTrainingFFTModels":   s.primeTrainingFFTModels,
		"primeRestartRun":          s.primeRestartRun,
		"primeRunLogs":             s.primeRunLogs,
		"primeRunEnvServers":       s.primeRunEnvServers,
		"primeRunEnvServerLogs":    s.primeRunEnvServerLogs,
		"primeRunMetrics":          s.primeRunMetrics,
		"primeRunCheckpoints":      s.primeRunCheckpoints,
		"primeRunProgress":         s.primeRunProgress,
		"primeRunSamples":          s.primeRunSamples,
		"primeRunDistributions":    s.primeRunDistributions,
		"primeListModels":          s.primeListModels,
		"listModels":               s.listModels,
		"listGPUs":                 s.listGPUs,
		"createDeployment":         s.createDeployment,
		"listDeployments":          s.listDeployments,
		"getDeployment":            s.getDeployment,
		"deleteDeployment":         s.deleteDeployment,
		"agentServing":             s.agentServing,
		"primeDeployableModels":    s.primeDeployableModels,
		"primeListAdapters":        s.primeListAdapters,
		"primeGetAdapter":          s.primeGetAdapter,
		"primeDeployAdapter":       s.primeDeployAdapter,
		"primeUnloadAdapter":       s.primeUnloadAdapter,
		"primeDeployCheckpoint":    s.primeDeployCheckpoint,
	}
	s.routes = operationRoutes(spec)
	seen := map[string]bool{}
	for path, item := range spec.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			if s.handlers[op.OperationID] == nil {
				return nil, fmt.Errorf("api: %s %s (%s) has no handler", method, path, op.OperationID)
			}
			// A Prime call acts as its caller on /v1 operations (asV1): the caller must be known.
			if strings.HasPrefix(path, primePrefix) && openapi.Scope(op) == "" {
				return nil, fmt.Errorf("api: %s %s (%s) is on the Prime surface but demands no scope", method, path, op.OperationID)
			}
			seen[op.OperationID] = true
		}
	}
	for id := range s.handlers {
		if !seen[id] {
			return nil, fmt.Errorf("api: handler %s is not in openapi.yaml", id)
		}
	}
	return s, nil
}

// operationRoutes are the contract's operations by operationId, as the router finds them.
func operationRoutes(spec *openapi.Spec) map[string]*routers.Route {
	out := map[string]*routers.Route{}
	for path, item := range spec.Doc.Paths.Map() {
		for method, op := range item.Operations() {
			out[op.OperationID] = &routers.Route{Spec: spec.Doc, Path: path, PathItem: item, Method: method, Operation: op}
		}
	}
	return out
}

func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	if s.cfg.Ready != nil {
		if err := s.cfg.Ready(); err != nil {
			writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "not-ready", err.Error()))
			return
		}
	}
	if err := s.cfg.Queue.Ping(r.Context()); err != nil {
		s.cfg.Logger.Error("health: redis", "err", err)
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "not-ready", "the job store does not answer"))
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ok"})
}

func (s *Server) openapiDocument(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/yaml")
	_, _ = w.Write(openapi.YAML())
}

// internalError logs err and answers without detail; it is for failures of our own
// dependencies, never for anything a caller did.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	writeProblem(w, r, s.failure(r, err))
}

// failure logs err and says how to answer it: Redis out of reach (or failing over, or full)
// is 503 with Retry-After, since the request changed nothing and may be sent again, and so is
// object storage out of reach, under its own name; a caller
// that went away mid-request (an agent that stopped heartbeating a finished job, say) is not
// our failure and reads no answer; anything else is 500.
func (s *Server) failure(r *http.Request, err error) *Problem {
	switch {
	case r.Context().Err() != nil:
		s.cfg.Logger.Info("request abandoned by the caller", "method", r.Method, "path", r.URL.Path, "err", err)
		return unavailable()
	case errors.Is(err, queue.ErrUnavailable):
		s.cfg.Logger.Warn("job store unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		return unavailable()
	case outOfReach(err):
		// Not Redis (that is marked above): object storage, the other service a request reads.
		s.cfg.Logger.Warn("object storage unavailable", "method", r.Method, "path", r.URL.Path, "err", err)
		p := newProblem(http.StatusServiceUnavailable, "storage-unavailable", fmt.Sprintf(
			"object storage is unavailable for a moment; nothing was changed; try again in %d seconds", RetryAfterSeconds))
		p.retryAfter = RetryAfterSeconds
		return p
	}
	s.cfg.Logger.Error("request failed", "method", r.Method, "path", r.URL.Path, "err", err)
	return newProblem(http.StatusInternalServerError, "internal", "an internal error occurred; it has been logged")
}

// outOfReach reports whether err is a network failure: a connection refused, reset or timed
// out, a name that did not resolve.
func outOfReach(err error) bool {
	var netErr net.Error
	return errors.As(err, &netErr) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, io.ErrUnexpectedEOF)
}
