package gpuagent

import (
	"sync"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// phaseClock times a run's start-up, stretch by stretch (job.Phase*): each mark ends the
// stretch since the one before. What it has timed goes with the next heartbeat (the job's
// progress) and to the agent's Prometheus histogram of phases.
type phaseClock struct {
	mu     sync.Mutex
	last   time.Time
	phases []job.Phase
	done   map[string]bool
	report func([]job.Phase)
	tel    *telemetry
}

func newPhaseClock(start time.Time, tel *telemetry) *phaseClock {
	return &phaseClock{last: start, done: map[string]bool{}, tel: tel}
}

// mark ends the stretch called name now; a name marked before is not marked again, and a mark
// of nil does nothing.
func (c *phaseClock) mark(name string) { c.markFrom(name, false, 0) }

// has says whether the stretch called name has been marked.
func (c *phaseClock) has(name string) bool {
	if c == nil {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.done[name]
}

// markFrom ends the stretch called name now, saying whether the node's cache served it and
// what it fetched or installed.
func (c *phaseClock) markFrom(name string, cached bool, bytes int64) {
	if c == nil {
		return
	}
	c.mu.Lock()
	if c.done[name] {
		c.mu.Unlock()
		return
	}
	now := time.Now()
	d := now.Sub(c.last)
	c.last = now
	c.done[name] = true
	c.phases = append(c.phases, job.Phase{Name: name, Seconds: float64(d.Microseconds()) / 1e6, Cached: cached, Bytes: bytes})
	list := append([]job.Phase(nil), c.phases...)
	report := c.report
	c.mu.Unlock()
	if c.tel != nil {
		c.tel.phaseSeconds.WithLabelValues(name).Observe(d.Seconds())
	}
	if report != nil {
		report(list)
	}
}
