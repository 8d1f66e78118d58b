package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"

	"github.com/hostedtrain/hostedtrain/internal/webhook"
)

// Webhooks is what the API needs of the webhook service (package webhooks).
type Webhooks interface {
	Create(ctx context.Context, org, url string, events []string, description string) (*webhook.Endpoint, error)
	Get(ctx context.Context, org, id string) (*webhook.Endpoint, error)
	List(ctx context.Context, org string) ([]*webhook.Endpoint, error)
	Update(ctx context.Context, org, id string, p webhook.Patch) (*webhook.Endpoint, error)
	Delete(ctx context.Context, org, id string) error
	Test(ctx context.Context, org, id string) (*webhook.Delivery, error)
	Deliveries(ctx context.Context, org, id, cursor string, limit int) ([]*webhook.Delivery, string, error)
	Redeliver(ctx context.Context, org, id, deliveryID string) (*webhook.Delivery, error)
}

// webhooksReady answers 503 when the deployment runs without webhooks.
func (s *Server) webhooksReady(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Webhooks == nil {
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "no-webhooks", "this deployment has no webhook service configured"))
		return false
	}
	return true
}

// webhookError answers a failed webhook call; it reports whether there was one.
func (s *Server) webhookError(w http.ResponseWriter, r *http.Request, err error) bool {
	var inv *webhook.InvalidError
	var limit *webhook.LimitError
	switch {
	case err == nil:
		return false
	case errors.Is(err, webhook.ErrNotFound):
		writeProblem(w, r, newProblem(http.StatusNotFound, "webhook-not-found", "no such webhook endpoint or delivery"))
	case errors.As(err, &limit) && limit.Limit == webhook.LimitTests:
		p := newProblem(http.StatusTooManyRequests, "limit-"+limit.Limit, limit.Error())
		p.retryAfter = limit.RetryAfterSeconds()
		writeProblem(w, r, p)
	case errors.As(err, &limit):
		// Waiting does not help, so not 429: the organization's set of endpoints is full.
		writeProblem(w, r, newProblem(http.StatusConflict, "limit-"+limit.Limit, limit.Error()))
	case errors.As(err, &inv):
		p := invalidBody([]FieldError{{Pointer: inv.Field, Message: inv.Msg}})
		if inv.Field == "cursor" {
			p = newProblem(http.StatusBadRequest, "invalid-parameter", inv.Msg)
			p.Errors = []FieldError{{Parameter: "cursor", Message: inv.Msg}}
		}
		writeProblem(w, r, p)
	default:
		s.internalError(w, r, err)
	}
	return true
}

type webhookCreate struct {
	URL         string   `json:"url"`
	Events      []string `json:"events"`
	Description string   `json:"description"`
}

func (s *Server) createWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	var req webhookCreate
	if !decodeBody(w, r, &req) {
		return
	}
	ep, err := s.cfg.Webhooks.Create(r.Context(), principal(r).Org, req.URL, req.Events, req.Description)
	if s.webhookError(w, r, err) {
		return
	}
	w.Header().Set("Cache-Control", "no-store") // it holds the secret
	writeJSON(w, http.StatusCreated, ep)
}

func (s *Server) listWebhooks(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	eps, err := s.cfg.Webhooks.List(r.Context(), principal(r).Org)
	if s.webhookError(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": eps})
}

func (s *Server) getWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	ep, err := s.cfg.Webhooks.Get(r.Context(), principal(r).Org, pathParam(r, "webhook_id"))
	if s.webhookError(w, r, err) {
		return
	}
	writeJSON(w, http.StatusOK, ep)
}

type webhookPatch struct {
	URL          *string         `json:"url"`
	Events       json.RawMessage `json:"events"`
	Enabled      *bool           `json:"enabled"`
	Description  *string         `json:"description"`
	RotateSecret bool            `json:"rotate_secret"`
}

func (s *Server) updateWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	var req webhookPatch
	if !decodeBody(w, r, &req) {
		return
	}
	p := webhook.Patch{URL: req.URL, Enabled: req.Enabled, Description: req.Description, RotateSecret: req.RotateSecret}
	if len(req.Events) > 0 {
		if err := json.Unmarshal(req.Events, &p.Events); err != nil {
			writeProblem(w, r, newProblem(http.StatusBadRequest, "malformed-body", err.Error()))
			return
		}
	}
	ep, err := s.cfg.Webhooks.Update(r.Context(), principal(r).Org, pathParam(r, "webhook_id"), p)
	if s.webhookError(w, r, err) {
		return
	}
	if ep.Secret != "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	writeJSON(w, http.StatusOK, ep)
}

func (s *Server) deleteWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	if s.webhookError(w, r, s.cfg.Webhooks.Delete(r.Context(), principal(r).Org, pathParam(r, "webhook_id"))) {
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) testWebhook(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	d, err := s.cfg.Webhooks.Test(r.Context(), principal(r).Org, pathParam(r, "webhook_id"))
	if s.webhookError(w, r, err) {
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}

func (s *Server) listWebhookDeliveries(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	ds, next, err := s.cfg.Webhooks.Deliveries(r.Context(), principal(r).Org, pathParam(r, "webhook_id"),
		r.URL.Query().Get("cursor"), intQuery(r, "limit", 20))
	if s.webhookError(w, r, err) {
		return
	}
	if ds == nil {
		ds = []*webhook.Delivery{}
	}
	page := map[string]any{"items": ds}
	if next != "" {
		page["next_cursor"] = next
	}
	writeJSON(w, http.StatusOK, page)
}

func (s *Server) redeliverWebhookDelivery(w http.ResponseWriter, r *http.Request) {
	if !s.webhooksReady(w, r) {
		return
	}
	d, err := s.cfg.Webhooks.Redeliver(r.Context(), principal(r).Org, pathParam(r, "webhook_id"), pathParam(r, "delivery_id"))
	if s.webhookError(w, r, err) {
		return
	}
	writeJSON(w, http.StatusAccepted, d)
}
