package api

import (
	"net/http"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/blob"
)

// What agents wrote to object storage for a job: metrics, checkpoints, artifacts. The API
// reads it with the same layout (package blob) the agents write it with.

type metricsPage struct {
	Items       []blob.MetricsRow `json:"items"`
	NextMinStep *int              `json:"next_min_step,omitempty"`
}

// storeReady answers 503 when the service runs without object storage configured.
func (s *Server) storeReady(w http.ResponseWriter, r *http.Request) bool {
	if s.cfg.Store == nil {
		writeProblem(w, r, newProblem(http.StatusServiceUnavailable, "no-object-storage",
			"this deployment has no object storage configured, so job metrics, checkpoints and artifacts cannot be read"))
		return false
	}
	return true
}

func (s *Server) getJobMetrics(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok || !s.storeReady(w, r) {
		return
	}
	q := blob.MetricsQuery{
		MinStep: intQuery(r, "min_step", 0),
		MaxStep: intQuery(r, "max_step", 0),
		Limit:   intQuery(r, "limit", 1000),
	}
	for _, n := range strings.Split(r.URL.Query().Get("names"), ",") {
		if n = strings.TrimSpace(n); n != "" {
			q.Names = append(q.Names, n)
		}
	}
	rows, more, err := blob.ReadMetrics(r.Context(), s.cfg.Store, j.ID, q)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	page := metricsPage{Items: rows}
	if page.Items == nil {
		page.Items = []blob.MetricsRow{}
	}
	if more {
		next := rows[len(rows)-1].Step() + 1
		page.NextMinStep = &next
	}
	writeJSON(w, http.StatusOK, page)
}

type checkpointItem struct {
	Step   int        `json:"step"`
	Status string     `json:"status"`
	Bytes  int64      `json:"bytes"`
	Files  int        `json:"files"`
	Time   *time.Time `json:"time,omitempty"`
}

func (s *Server) listJobCheckpoints(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok || !s.storeReady(w, r) {
		return
	}
	cps, err := blob.ListCheckpoints(r.Context(), s.cfg.Store, j.ID)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	items := make([]checkpointItem, 0, len(cps))
	for _, c := range cps {
		it := checkpointItem{Step: c.Step, Status: "uploading", Bytes: c.Bytes, Files: c.Files}
		if c.Committed {
			it.Status = "committed"
		}
		if !c.Time.IsZero() {
			t := c.Time.UTC()
			it.Time = &t
		}
		items = append(items, it)
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}

type artifactItem struct {
	Name  string     `json:"name"`
	Bytes int64      `json:"bytes"`
	Time  *time.Time `json:"time,omitempty"`
}

func (s *Server) listJobArtifacts(w http.ResponseWriter, r *http.Request) {
	j, ok := s.ownJob(w, r)
	if !ok || !s.storeReady(w, r) {
		return
	}
	prefix := blob.ArtifactPrefix(j.ID)
	objs, err := s.cfg.Store.List(r.Context(), prefix)
	if err != nil {
		s.internalError(w, r, err)
		return
	}
	items := make([]artifactItem, 0, len(objs))
	for _, o := range objs {
		t := o.Modified.UTC()
		items = append(items, artifactItem{Name: strings.TrimPrefix(o.Key, prefix), Bytes: o.Size, Time: &t})
	}
	writeJSON(w, http.StatusOK, map[string]any{"items": items})
}
