package gpuagent

import (
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// telemetry is the agent's Prometheus metrics.
type telemetry struct {
	reg *prometheus.Registry

	jobsRunning    *prometheus.GaugeVec
	jobsEnded      *prometheus.CounterVec
	claims         *prometheus.CounterVec
	heartbeatFails prometheus.Counter
	uploads        *prometheus.CounterVec
	uploadBytes    prometheus.Counter
	uploadSeconds  prometheus.Histogram
	restoreSeconds prometheus.Histogram
	objectWrites   *prometheus.CounterVec
	idleGap        prometheus.Histogram
	phaseSeconds   *prometheus.HistogramVec
	cacheLookups   *prometheus.CounterVec
	gpus           *prometheus.GaugeVec

	// idleSince is when the last pipeline on the node exited with none left running; the
	// next start observes the gap. Zero while a pipeline runs (or before the first).
	mu        sync.Mutex
	pipelines int
	idleSince time.Time
}

func newTelemetry() *telemetry {
	t := &telemetry{reg: prometheus.NewRegistry()}
	t.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	f := func(c prometheus.Collector) { t.reg.MustRegister(c) }
	t.jobsRunning = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hostedtrain_agent_jobs_running", Help: "Jobs this agent holds, by kind.",
	}, []string{"kind"})
	t.jobsEnded = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostedtrain_agent_jobs_ended_total", Help: "Jobs this agent let go, by how: completed, failed, stopped, released (drain), lost (lease).",
	}, []string{"outcome"})
	t.phaseSeconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "hostedtrain_agent_phase_seconds", Help: "A run's start-up, by phase: claim, storage, sandbox, restore, weights, install, preflight, inference, start, first_step, first_model.",
		Buckets: prometheus.ExponentialBuckets(0.005, 2, 18),
	}, []string{"phase"})
	t.cacheLookups = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostedtrain_agent_cache_lookups_total", Help: "Lookups in the node's cache for jobs, by kind (model, env, compile) and result (hit, miss).",
	}, []string{"kind", "result"})
	t.claims = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostedtrain_agent_claims_total", Help: "Claims made, by result: job, empty, error.",
	}, []string{"result"})
	t.heartbeatFails = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hostedtrain_agent_heartbeat_failures_total", Help: "Heartbeats that did not reach the API (retried).",
	})
	t.uploads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostedtrain_agent_checkpoint_uploads_total", Help: "Checkpoint uploads, by result: committed, retried.",
	}, []string{"result"})
	t.uploadBytes = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hostedtrain_agent_checkpoint_upload_bytes_total", Help: "Bytes of committed checkpoints uploaded.",
	})
	t.uploadSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "hostedtrain_agent_checkpoint_upload_seconds", Help: "Time to upload and commit one checkpoint.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
	t.restoreSeconds = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "hostedtrain_agent_checkpoint_restore_seconds", Help: "Time to download and verify the checkpoint a resumed job starts from.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 16),
	})
	t.objectWrites = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hostedtrain_agent_object_writes_total", Help: "Metrics, log and artifact writes to object storage, by stream and result.",
	}, []string{"stream", "result"})
	t.idleGap = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "hostedtrain_agent_idle_gap_seconds",
		Help:    "Time from the last pipeline on the node exiting to the next one starting, when the node had work waiting.",
		Buckets: []float64{0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60},
	})
	t.gpus = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hostedtrain_agent_gpus", Help: "The node's GPUs by model and state (free, busy).",
	}, []string{"model", "state"})
	for _, c := range []prometheus.Collector{t.jobsRunning, t.jobsEnded, t.claims, t.heartbeatFails, t.uploads,
		t.uploadBytes, t.uploadSeconds, t.restoreSeconds, t.objectWrites, t.idleGap, t.gpus, t.phaseSeconds, t.cacheLookups} {
		f(c)
	}
	return t
}

// pipelineStarted records a pipeline start, and the idle gap before it when the node was
// idle.
func (t *telemetry) pipelineStarted(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.pipelines == 0 && !t.idleSince.IsZero() {
		gap := now.Sub(t.idleSince)
		t.idleGap.Observe(gap.Seconds())
	}
	t.pipelines++
	t.idleSince = time.Time{}
}

// pipelineExited records a pipeline's exit.
func (t *telemetry) pipelineExited(now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pipelines--
	if t.pipelines == 0 {
		t.idleSince = now
	}
}

// nodeIdle says the node has no work waiting: the next gap would measure the queue, not us.
func (t *telemetry) nodeIdle() {
	t.mu.Lock()
	t.idleSince = time.Time{}
	t.mu.Unlock()
}

func (t *telemetry) setGPUs(p *pool) {
	free, busy := p.counts()
	for m, n := range free {
		t.gpus.WithLabelValues(m, "free").Set(float64(n))
		t.gpus.WithLabelValues(m, "busy").Set(float64(busy[m]))
	}
	for m, n := range busy {
		t.gpus.WithLabelValues(m, "busy").Set(float64(n))
		t.gpus.WithLabelValues(m, "free").Set(float64(free[m]))
	}
}

// Handler serves the agent's metrics in Prometheus's text format.
func (a *Agent) Handler() http.Handler {
	return promhttp.HandlerFor(a.tel.reg, promhttp.HandlerOpts{Registry: a.tel.reg})
}

// Gatherer is the agent's metrics registry (for tests and benchmarks).
func (a *Agent) Gatherer() prometheus.Gatherer { return a.tel.reg }
