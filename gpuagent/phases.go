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
func (c *phaseClock) mark(name string) {
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
	c.phases = append(c.phases, job.Phase{Name: name, Seconds: float64(d.Microseconds()) / 1e6})
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
