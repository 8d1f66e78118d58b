package gpuagent_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// eventOf waits for an event of the type whose detail holds want, and returns it.
func (b bundle) eventOf(t *testing.T, id, typ, want string) job.Event {
	t.Helper()
	var found job.Event
	b.waitWithin(t, 3*time.Minute, id, typ+" "+want, func(*job.Job) bool {
		for _, e := range b.allEvents(t, id) {
			if e.Type == typ && strings.Contains(e.Detail, want) {
				found = e
				return true
			}
		}
		return false
	})
	return found
}

// A run that stops stepping while its processes live on (a hung collective) raises job.stalled
// once it has gone its stall_factor times its median step time without a step; it goes on
// RUNNING (the default on_stall is alert) until the user acts.
func TestAStalledRunRaisesJobStalled(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "20ms", "--emulate.stall-at-step", "4")
	cfg.StallFloor = time.Second
	b.run(t, cfg)
	j := b.submit(t, withSteps(40))
	ev := b.eventOf(t, j.ID, job.EventStalled, "no new step for")
	if !strings.Contains(ev.Detail, "after step 4") || ev.Status != job.Running {
		t.Errorf("stalled event %+v; want it at step 4, the job RUNNING", ev)
	}
	if got, _ := b.user.GetJob(context.Background(), j.ID); got.Status != job.Running {
		t.Errorf("a stall with on_stall = alert ended the run: %s", got.Status)
	}
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	if done := b.waitWithin(t, 3*time.Minute, j.ID, "stopped", terminal); done.Status != job.Stopped {
		t.Errorf("after the stop: %s", done.Status)
	}
}

// With on_stall = "restart" the stalled run is read as a platform fault: retried, an attempt
// spent, from its newest checkpoint on another node — which finishes it.
func TestAStalledRunRestartsWhenItsJobAsks(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{RetryBackoff: 50 * time.Millisecond})
	cfg := b.agentConfig(t, "agent-a", "--emulate.step-time", "20ms", "--emulate.stall-at-step", "5")
	// A floor well above a step, so that a machine slow to read the steps (a loaded one) does
	// not see a stall before the run stops.
	cfg.StallFloor = 3 * time.Second
	b.run(t, cfg)
	j := b.submit(t, "on_stall = \"restart\"\n"+withSteps(12))
	// The watch names the newest step it had read: step 5's row, or step 4's where the stall
	// came before the agent read step 5's.
	if ev := b.eventOf(t, j.ID, job.EventStalled, "no new step for"); !strings.Contains(ev.Detail, "after step 5") && !strings.Contains(ev.Detail, "after step 4") {
		t.Errorf("stalled event %q; want it after step 5 (or 4)", ev.Detail)
	}
	ev := b.eventOf(t, j.ID, job.EventRetrying, "stalled")
	if !strings.Contains(ev.Detail, "on another node, from the checkpoint of step 4") {
		t.Errorf("retrying event %q; want it on another node from step 4", ev.Detail)
	}
	queued, err := b.user.GetJob(context.Background(), j.ID)
	if err != nil {
		t.Fatal(err)
	}
	if a := queued.FailureAnalysis; a == nil || a.Class != job.FailStalled || !a.Retried || len(a.Evidence) != 1 ||
		!strings.Contains(a.Evidence[0], "no new step") {
		t.Errorf("analysis %+v; want stalled, retried, with the alert as evidence", a)
	}
	b.startAgent(t, "agent-b", "--emulate.step-time", "10ms")
	done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal)
	if done.Status != job.Completed || done.Attempt != 2 || done.Runtime == nil || done.Runtime.AgentID != "agent-b" {
		t.Errorf("got %s at attempt %d on %+v; want COMPLETED at attempt 2 on agent-b", done.Status, done.Attempt, done.Runtime)
	}
}

// A run whose rollouts all get the same reward raises job.alert: the policy learns nothing.
func TestAFlatRewardRaisesAnAlert(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms", "--emulate.flat-reward-from-step", "3")
	j := b.submit(t, withSteps(12))
	ev := b.eventOf(t, j.ID, job.EventAlert, "reward spread at zero")
	if !strings.Contains(ev.Detail, "steps 3-7") {
		t.Errorf("alert %q; want it for steps 3-7", ev.Detail)
	}
	if done := b.waitWithin(t, 3*time.Minute, j.ID, "ended", terminal); done.Status != job.Completed {
		t.Errorf("an alert ended the run: %s", done.Status)
	}
}
