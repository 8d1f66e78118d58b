package api

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/wire"
	"github.com/hostedtrain/hostedtrain/openapi"
	"github.com/hostedtrain/hostedtrain/queue"
)

// Deployments (/v1/deployments, and Prime's /api/v1/rft/adapters): a committed checkpoint of
// a job deployed for inference. The queue keeps the adapters and their servers
// (queue.Deployments); the API checks the checkpoint (committed, with weights), files it,
// submits a model server (a serve job) when the organization has none with room for it, and
// answers the agents that serve.

// Deployments is what the API needs of the queue's deployments; queue.Client implements it.
type Deployments interface {
	PutAdapter(ctx context.Context, s queue.AdapterSpec) (*job.Adapter, bool, error)
	GetAdapter(ctx context.Context, org, id string) (*job.Adapter, error)
	ListAdapters(ctx context.Context, org string, offset, limit int) ([]job.Adapter, int, error)
	Deploy(ctx context.Context, org, id string, newServer func(context.Context, *job.Adapter) (string, error)) (*job.Adapter, error)
	Unload(ctx context.Context, org, id string, idle bool) (*job.Adapter, error)
	Serving(ctx context.Context, jobID, token string, loaded []string, failed map[string]string) ([]job.Served, error)
	WithLatencies(ctx context.Context, as []job.Adapter) error
	InferenceUsage(ctx context.Context, org string) (requests, prompt, completion int64, err error)
	ForgetJob(ctx context.Context, org, jobID string) (int, error)
}

// deploymentOf is an adapter as /v1/deployments answers it.
func deploymentOf(a *job.Adapter) wire.Deployment {
	return wire.Deployment{ID: a.ID, Model: a.ModelID(), Job: a.Job, JobName: a.Name, Step: a.Step, BaseModel: a.Base,
		Kind: a.Kind, Status: a.Status, DeploymentStatus: a.Deployment, Server: a.Server, Node: a.Node, Error: a.Error,
		Idle: a.Idle, CreatedAt: a.CreatedAt, UpdatedAt: a.UpdatedAt, DeployedAt: a.DeployedAt, LastUsedAt: a.UsedAt,
		Requests: a.Requests, Failures: a.Failures, PromptTokens: a.PromptTokens, CompletionTokens: a.CompletionTokens,
		LatencyP50Ms: a.LatencyP50Ms, LatencyP99Ms: a.LatencyP99Ms}
}

// deploymentProblem answers a failed deployment call.
func (s *Server) deploymentProblem(r *http.Request, id string, err error) *Problem {
	var limit *job.LimitError
	switch {
	case errors.Is(err, job.ErrNotFound):
		return newProblem(http.StatusNotFound, "deployment-not-found", "no deployment "+id+" in your organization")
	case errors.As(err, &limit):
		return newProblem(http.StatusTooManyRequests, "limit-"+limit.Limit, fmt.Sprintf(
			"organization %s has %d adapters, its limit: the limit is the operator's (queue.Config.MaxAdapters)", limit.Org, limit.Current))
	}
	return s.failure(r, err)
}

// deployStep is a deploy's choice of step: a step, "best" or "latest".
type deployStep struct {
	step int
	how  string // "", "best" or "latest"
}

func (d *deployStep) UnmarshalJSON(b []byte) error {
	if err := json.Unmarshal(b, &d.step); err == nil {
		return nil
	}
	return json.Unmarshal(b, &d.how)
}

// Redeploy deploys again an adapter of org unloaded for being idle, when a request through the
// gateway asks for it (gateway.Config.Wake): as a deploy by the organization would, a server
// made for it charged to the organization.
func (s *Server) Redeploy(ctx context.Context, org, id, _ string) error {
	r, err := http.NewRequestWithContext(context.WithValue(ctx, principalKey, auth.Principal{Org: org, Subject: "gateway"}), http.MethodPost, "/", nil)
	if err != nil {
		return err
	}
	if _, prob := s.deploy(r, id); prob != nil {
		return errors.New(prob.Detail)
	}
	return nil
}

// createDeployment is POST /v1/deployments.
func (s *Server) createDeployment(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Job  string      `json:"job"`
		Step *deployStep `json:"step"`
	}
	if !decodeBody(w, r, &body) {
		return
	}
	step := deployStep{how: "latest"}
	if body.Step != nil {
		step = *body.Step
	}
	a, prob := s.deployCheckpoint(r, body.Job, step)
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	writeJSON(w, http.StatusOK, deploymentOf(a))
}

// deployCheckpoint files a committed checkpoint of the caller's job as an adapter and deploys
// it.
func (s *Server) deployCheckpoint(r *http.Request, jobID string, want deployStep) (*job.Adapter, *Problem) {
	j, prob := s.ownedJob(r, jobID)
	if prob != nil {
		return nil, prob
	}
	if !jobspec.RunsPrimeRL(j.Config.Kind) {
		return nil, newProblem(http.StatusConflict, "not-deployable", fmt.Sprintf(
			"job %s is a %s job: only rl and fft jobs write weights to deploy", j.ID, j.Config.Kind))
	}
	list, prob := s.jobCheckpoints(r, j)
	if prob != nil {
		return nil, prob
	}
	var committed []int
	chosen := -1
	for _, c := range list.Items {
		if c.Status != "committed" {
			continue
		}
		committed = append(committed, c.Step)
		switch {
		case want.how == "best" && c.Best, want.how == "latest" && c.Step > chosen, want.how == "" && c.Step == want.step:
			chosen = c.Step
		}
	}
	if chosen < 0 {
		what := fmt.Sprintf("step %d is not a committed checkpoint", want.step)
		switch want.how {
		case "best":
			what = "it has no best checkpoint yet (no committed step with its best metric)"
		case "latest":
			what = "it has no committed checkpoint"
		}
		steps := "none"
		if len(committed) > 0 {
			steps = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(committed)), ", "), "[]")
		}
		return nil, newProblem(http.StatusConflict, "checkpoint-not-committed", fmt.Sprintf(
			"job %s cannot be deployed: %s (committed: %s; deleted, expired and unfinished checkpoints cannot be deployed)",
			j.ID, what, steps))
	}
	kind := job.AdapterFull
	if j.Config.LoRA != nil {
		kind = job.AdapterLoRA
	}
	if files, err := s.weightFiles(r, j.ID, chosen); err != nil {
		return nil, s.failure(r, err)
	} else if len(files) == 0 {
		return nil, newProblem(http.StatusConflict, "no-weights", fmt.Sprintf(
			"the checkpoint of step %d of job %s holds no weights to serve (prime-rl broadcast none for it)", chosen, j.ID))
	}
	org := principal(r).Org
	a, _, err := s.cfg.Deployments.PutAdapter(r.Context(), queue.AdapterSpec{Org: org, Job: j.ID, Step: chosen,
		Base: j.Config.Model, Kind: kind, Name: j.Config.Name})
	if err != nil {
		return nil, s.deploymentProblem(r, "", err)
	}
	return s.deploy(r, a.ID)
}

// deploy deploys adapter id of the caller, submitting a model server when there is none with
// room for it.
func (s *Server) deploy(r *http.Request, id string) (*job.Adapter, *Problem) {
	var serverProb *Problem
	a, err := s.cfg.Deployments.Deploy(r.Context(), principal(r).Org, id, func(ctx context.Context, a *job.Adapter) (string, error) {
		j, prob := s.submitServer(r, a)
		if prob != nil {
			serverProb = prob
			return "", errors.New(prob.Detail)
		}
		return j, nil
	})
	if serverProb != nil {
		return nil, serverProb
	}
	if err != nil {
		return nil, s.deploymentProblem(r, id, err)
	}
	return a, nil
}

// servePriority is a model server's place in its organization's queue: the top (a job's
// priority is -100..100).
const servePriority = 100

// submitServer submits a model server for adapter a: its base model on the GPUs serving it
// takes (internal/fit), of the GPU kind its job trained on.
func (s *Server) submitServer(r *http.Request, a *job.Adapter) (string, *Problem) {
	trained, err := s.cfg.Queue.Get(r.Context(), a.Job)
	gpuType := "H100"
	maxRank := 0
	if err == nil {
		gpuType = cmp.Or(trained.Config.Resources.GPUType, gpuType)
		if trained.Config.LoRA != nil {
			maxRank = trained.Config.LoRA.Rank
		}
	}
	tp, _, err := fit.Serve(a.Base, 0)
	if err != nil {
		return "", newProblem(http.StatusUnprocessableEntity, "does-not-fit", err.Error())
	}
	// A model server answers people waiting on it: first in its organization's queue.
	spec := jobspec.Spec{Kind: jobspec.KindServe, Name: "serve " + a.Base, Model: a.Base, Env: []jobspec.Env{}, Priority: servePriority,
		Resources: jobspec.Resources{GPUs: max(tp, 1), GPUType: gpuType},
		Serve:     &jobspec.ServeSpec{MaxLoRARank: max(maxRank, 16)}}
	if a.Kind == job.AdapterFull {
		spec.Serve = &jobspec.ServeSpec{Adapter: a.ID}
		spec.Name = "serve " + a.ModelID()
	}
	id, err := job.NewID()
	if err != nil {
		return "", s.failure(r, err)
	}
	p := principal(r)
	j, _, err := s.cfg.Queue.Submit(r.Context(), job.Submission{ID: id, Org: p.Org, Spec: spec, CreatedBy: p.Subject,
		TokenID: p.TokenID, PricePerGPUHour: s.price(a.Base)}, "", "")
	var limit *job.LimitError
	if errors.As(err, &limit) {
		return "", limitProblem(limit)
	}
	if err != nil {
		return "", s.failure(r, err)
	}
	return j.ID, nil
}

// weightFiles are the files of a committed checkpoint's weights (jobdata.WeightsDir), with
// download links where r reached the API.
func (s *Server) weightFiles(r *http.Request, jobID string, step int) ([]wire.DownloadFile, error) {
	all, err := s.checkpointDownloads(r, jobID, step, time.Now().Add(downloadTTL))
	if err != nil {
		return nil, err
	}
	weights := slices.DeleteFunc(all, func(f wire.DownloadFile) bool { return !strings.HasPrefix(f.Path, jobdata.WeightsDir) })
	if weights == nil {
		weights = []wire.DownloadFile{}
	}
	return weights, nil
}

func (s *Server) listDeployments(w http.ResponseWriter, r *http.Request) {
	page, total, prob := s.adapterPage(r, intQuery(r, "offset", 0), intQuery(r, "limit", 100))
	if prob != nil {
		writeProblem(w, r, prob)
		return
	}
	items := make([]wire.Deployment, 0, len(page))
	for i := range page {
		items = append(items, deploymentOf(&page[i]))
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items, "total": total})
}

func (s *Server) adapterPage(r *http.Request, offset, limit int) ([]job.Adapter, int, *Problem) {
	page, total, err := s.cfg.Deployments.ListAdapters(r.Context(), principal(r).Org, offset, limit)
	if err == nil {
		err = s.cfg.Deployments.WithLatencies(r.Context(), page)
	}
	if err != nil {
		return nil, 0, s.failure(r, err)
	}
	return page, total, nil
}

func (s *Server) getDeployment(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "deployment_id")
	a, err := s.cfg.Deployments.GetAdapter(r.Context(), principal(r).Org, id)
	if err == nil {
		one := []job.Adapter{*a}
		err = s.cfg.Deployments.WithLatencies(r.Context(), one)
		a = &one[0]
	}
	if err != nil {
		writeProblem(w, r, s.deploymentProblem(r, id, err))
		return
	}
	writeJSON(w, http.StatusOK, deploymentOf(a))
}

func (s *Server) deleteDeployment(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "deployment_id")
	a, err := s.cfg.Deployments.Unload(r.Context(), principal(r).Org, id, false)
	if err != nil {
		writeProblem(w, r, s.deploymentProblem(r, id, err))
		return
	}
	writeJSON(w, http.StatusOK, deploymentOf(a))
}

// agentServing is POST /v1/agent/jobs/{id}/serving: a model server's agent says what it holds
// and hears what to hold, each adapter with its weights' files and links.
func (s *Server) agentServing(w http.ResponseWriter, r *http.Request) {
	var rep struct {
		Token  string   `json:"token"`
		Loaded []string `json:"loaded"`
		Failed []struct {
			ID    string `json:"id"`
			Error string `json:"error"`
		} `json:"failed"`
	}
	if !decodeBody(w, r, &rep) {
		return
	}
	failed := map[string]string{}
	for _, f := range rep.Failed {
		failed[f.ID] = f.Error
	}
	id := pathParam(r, "id")
	wanted, err := s.cfg.Deployments.Serving(r.Context(), id, rep.Token, rep.Loaded, failed)
	if s.agentError(w, r, err) {
		return
	}
	out := make([]wire.ServedAdapter, 0, len(wanted))
	for _, a := range wanted {
		// The weights' files and links only for what the server does not hold yet: the agent
		// asks every few seconds.
		files := []wire.DownloadFile{}
		if !slices.Contains(rep.Loaded, a.ID) {
			if files, err = s.weightFiles(r, a.Job, a.Step); err != nil {
				writeProblem(w, r, s.failure(r, err))
				return
			}
		}
		out = append(out, wire.ServedAdapter{ID: a.ID, Model: a.Base + ":" + a.ID, Job: a.Job, Step: a.Step, Kind: a.Kind, Files: files})
	}
	writeJSON(w, http.StatusOK, map[string]any{"adapters": out})
}

// The Prime surface's deployments (prime_cli/api/deployments.py): adapters with Prime's field
// names, deployed and unloaded through the same functions as /v1/deployments.

// v1Scope checks that the caller holds the scope of the /v1 operation opID, which a Prime call
// without a /v1 request of its own stands for.
func (s *Server) v1Scope(r *http.Request, opID string) *Problem {
	if scope := openapi.Scope(s.routes[opID].Operation); scope != "" {
		return scopeProblem(principal(r), scope)
	}
	return nil
}

// primeAdapter is an adapter as the prime CLI's Adapter model reads it.
func primeAdapter(a *job.Adapter, user string) map[string]any {
	out := map[string]any{"id": a.ID, "displayName": a.Name, "userId": user, "teamId": nil, "rftRunId": a.Job,
		"baseModel": a.Base, "step": a.Step, "status": a.Status, "deploymentStatus": a.Deployment,
		"deployedAt": nil, "deploymentError": nil, "createdAt": a.CreatedAt, "updatedAt": a.UpdatedAt}
	if a.DeployedAt != nil && a.Deployment == job.Deployed {
		out["deployedAt"] = *a.DeployedAt
	}
	if a.Error != "" {
		out["deploymentError"] = a.Error
	}
	return out
}

func (s *Server) primeAdapterAnswer(w http.ResponseWriter, r *http.Request, a *job.Adapter, prob *Problem) {
	if prob != nil {
		primeFail(w, prob)
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"adapter": primeAdapter(a, principal(r).Subject)})
}

func (s *Server) primeDeployableModels(w http.ResponseWriter, r *http.Request) {
	if prob := s.v1Scope(r, "listModels"); prob != nil {
		primeFail(w, prob)
		return
	}
	models := []string{}
	for _, m := range s.models() {
		if _, known := fit.Lookup(m.Name); known && !slices.Contains(models, m.Name) {
			models = append(models, m.Name)
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"models": models})
}

func (s *Server) primeListAdapters(w http.ResponseWriter, r *http.Request) {
	offset, limit := intQuery(r, "offset", 0), intQuery(r, "limit", 100)
	if prob := s.v1Scope(r, "listDeployments"); prob != nil {
		primeFail(w, prob)
		return
	}
	page, total, prob := s.adapterPage(r, offset, limit)
	if prob != nil {
		primeFail(w, prob)
		return
	}
	out := make([]map[string]any, 0, len(page))
	for i := range page {
		out = append(out, primeAdapter(&page[i], principal(r).Subject))
	}
	writeJSON(w, http.StatusOK, map[string]any{"adapters": out, "total": total})
}

func (s *Server) primeGetAdapter(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "adapterId")
	if prob := s.v1Scope(r, "getDeployment"); prob != nil {
		primeFail(w, prob)
		return
	}
	a, err := s.cfg.Deployments.GetAdapter(r.Context(), principal(r).Org, id)
	if err != nil {
		primeFail(w, s.deploymentProblem(r, id, err))
		return
	}
	s.primeAdapterAnswer(w, r, a, nil)
}

func (s *Server) primeDeployAdapter(w http.ResponseWriter, r *http.Request) {
	if prob := s.v1Scope(r, "createDeployment"); prob != nil {
		primeFail(w, prob)
		return
	}
	a, prob := s.deploy(r, pathParam(r, "adapterId"))
	s.primeAdapterAnswer(w, r, a, prob)
}

func (s *Server) primeUnloadAdapter(w http.ResponseWriter, r *http.Request) {
	id := pathParam(r, "adapterId")
	if prob := s.v1Scope(r, "deleteDeployment"); prob != nil {
		primeFail(w, prob)
		return
	}
	a, err := s.cfg.Deployments.Unload(r.Context(), principal(r).Org, id, false)
	if err != nil {
		primeFail(w, s.deploymentProblem(r, id, err))
		return
	}
	s.primeAdapterAnswer(w, r, a, nil)
}

// primeDeployCheckpoint deploys a checkpoint by the id `prime train checkpoints` lists:
// "<run id>-step-<N>".
func (s *Server) primeDeployCheckpoint(w http.ResponseWriter, r *http.Request) {
	cp := pathParam(r, "checkpointId")
	i := strings.LastIndex(cp, "-step-")
	step, err := strconv.Atoi(cp[i+len("-step-"):])
	if i <= 0 || err != nil {
		primeFail(w, newProblem(http.StatusNotFound, "checkpoint-not-found", "no checkpoint "+cp))
		return
	}
	runID := cp[:i]
	body, _ := json.Marshal(map[string]any{"job": runID, "step": step})
	if _, prob := s.asV1(r, "createDeployment", "", nil, body); prob != nil {
		primeFail(w, prob)
		return
	}
	a, prob := s.deployCheckpoint(r, runID, deployStep{step: step})
	s.primeAdapterAnswer(w, r, a, prob)
}
