package gpuagent_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/queue"
)

// A job with a budget, through the agent: at 100 % it is stopped — its newest whole checkpoint
// committed — STOPPED for its budget. A restart is refused until the budget is raised; raised,
// the job resumes from that checkpoint. (The budget is set once the run steps, a few
// GPU-seconds past what it used by then, so that neither a slow start on a loaded machine nor
// a slow run spends the test's time; TestABudgetOnTheQueuesClock checks the 50/80/100 marks.)
func TestABudgetStopsTheJobAndARaiseLetsItGoOn(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{})
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms")
	j := b.submit(t, "max_gpu_hours = 1\n"+withSteps(100000))
	if j.BudgetGPUSeconds != 3600 {
		t.Fatalf("budget %v GPU-seconds, want 3600", j.BudgetGPUSeconds)
	}
	running := b.waitWithin(t, 3*time.Minute, j.ID, "a checkpoint", func(x *job.Job) bool { return x.Status == job.Running && x.Progress.CheckpointStep >= 2 })
	budget := (running.GPUSeconds + 4) / 3600
	if _, err := b.user.SetBudget(context.Background(), j.ID, budget, 0); err != nil {
		t.Fatal(err)
	}
	done := b.waitWithin(t, 3*time.Minute, j.ID, "stopped", terminal)
	if done.Status != job.Stopped || !strings.Contains(b.lastDetail(t, j.ID), "budget is spent") {
		t.Fatalf("got %s (%q); want STOPPED for its budget", done.Status, b.lastDetail(t, j.ID))
	}
	if done.Progress.CheckpointStep < running.Progress.CheckpointStep || done.GPUSeconds < done.BudgetGPUSeconds {
		t.Errorf("stopped with checkpoint %d, %.1f of %.1f GPU-seconds; want a checkpoint kept, the budget used",
			done.Progress.CheckpointStep, done.GPUSeconds, done.BudgetGPUSeconds)
	}
	var marks []string
	for _, e := range b.allEvents(t, j.ID) {
		if e.Type == job.EventBudget {
			marks = append(marks, strings.SplitN(e.Detail, " ", 2)[0])
		}
	}
	if len(marks) == 0 || marks[len(marks)-1] != "100" {
		t.Errorf("budget events at %v %%; want them to end at 100", marks)
	}
	_, err := b.user.RestartJob(context.Background(), j.ID)
	var he *client.Error
	if !errors.As(err, &he) || he.Status != 409 || !strings.Contains(err.Error(), "raise it first") {
		t.Fatalf("restart with the budget spent: %v; want 409 saying to raise it", err)
	}
	if raised, err := b.user.SetBudget(context.Background(), j.ID, 1, 0); err != nil || raised.BudgetGPUSeconds != 3600 {
		t.Fatalf("raise: %+v %v", raised, err)
	}
	if _, err := b.user.RestartJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	again := b.waitWithin(t, 3*time.Minute, j.ID, "running again past its checkpoint", func(x *job.Job) bool {
		return x.Status == job.Running && x.Progress.Step > done.Progress.CheckpointStep
	})
	if again.ResumeStep != done.Progress.CheckpointStep {
		t.Errorf("resumed from %d; want step %d", again.ResumeStep, done.Progress.CheckpointStep)
	}
	if _, err := b.user.CancelJob(context.Background(), j.ID); err != nil {
		t.Fatal(err)
	}
	b.waitWithin(t, 3*time.Minute, j.ID, "stopped", terminal)
}

// An organization's monthly budget, through the agent: spent, its running job is stopped with
// its newest checkpoint committed (STOPPED for the organization's budget), and its next job is
// held, saying why; raised by an operator, that job runs. (The budget is set once the run
// steps, a little past what the month spent by then; a short claim quantum makes heartbeats
// charge at once.)
func TestAnOrganizationsMonthlyBudgetStopsItsJobsAndHoldsTheNext(t *testing.T) {
	t.Parallel()
	b := setup(t, queue.Config{ClaimQuantum: time.Second})
	admin := client.New(b.stack.URL, b.stack.Token("ops", auth.ScopeAdmin))
	b.startAgent(t, "agent-a", "--emulate.step-time", "10ms")
	j := b.submit(t, withSteps(100000))
	running := b.waitWithin(t, 3*time.Minute, j.ID, "a checkpoint", func(x *job.Job) bool { return x.Status == job.Running && x.Progress.CheckpointStep >= 2 })
	org, err := admin.GetOrg(context.Background(), "acme")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := admin.SetOrg(context.Background(), "acme", job.OrgSettings{MonthlyGPUHours: org.MonthGPUHours + 4.0/3600}); err != nil {
		t.Fatal(err)
	}
	var done *job.Job
	deadline := time.Now().Add(3 * time.Minute)
	for done = b.waitWithin(t, time.Minute, j.ID, "anything", func(*job.Job) bool { return true }); !done.Status.Terminal(); done, _ = b.user.GetJob(context.Background(), j.ID) {
		if time.Now().After(deadline) {
			st, _ := admin.GetOrg(context.Background(), "acme")
			var evs []string
			for _, e := range b.allEvents(t, j.ID) {
				evs = append(evs, e.Type+" "+e.Detail)
			}
			t.Fatalf("not stopped after 3 min: %s, %.1f GPU-seconds, org %+v, events:\n%s", done.Status, done.GPUSeconds, st, strings.Join(evs, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
	if done.Status != job.Stopped || !strings.Contains(b.lastDetail(t, j.ID), "organization's monthly budget is spent") {
		t.Fatalf("got %s (%q); want STOPPED for the organization's budget", done.Status, b.lastDetail(t, j.ID))
	}
	if done.Progress.CheckpointStep < running.Progress.CheckpointStep {
		t.Errorf("stopped with checkpoint %d; want at least %d kept", done.Progress.CheckpointStep, running.Progress.CheckpointStep)
	}
	var marks []string
	for _, e := range b.allEvents(t, j.ID) {
		if e.Type == job.EventBudget && strings.Contains(e.Detail, "organization's monthly budget") {
			marks = append(marks, strings.SplitN(e.Detail, " ", 2)[0])
		}
	}
	if len(marks) == 0 || marks[len(marks)-1] != "100" {
		t.Errorf("organization budget events at %v %%; want them to end at 100", marks)
	}
	if st, err := admin.GetOrg(context.Background(), "acme"); err != nil || !st.BudgetHeld {
		t.Fatalf("the organization after its budget: %+v %v", st, err)
	}
	next := b.submit(t, withSteps(5))
	held := b.waitWithin(t, time.Minute, next.ID, "a queue reason", func(x *job.Job) bool { return x.QueueReason != "" })
	if held.Status != job.Queued || !strings.Contains(held.QueueReason, "monthly budget is spent") {
		t.Fatalf("the next job: %s, %q; want it held for the budget", held.Status, held.QueueReason)
	}
	if _, err := admin.SetOrg(context.Background(), "acme", job.OrgSettings{MonthlyGPUHours: 100}); err != nil {
		t.Fatal(err)
	}
	if got := b.waitWithin(t, 3*time.Minute, next.ID, "ended", terminal); got.Status != job.Completed {
		t.Errorf("after the raise the next job %s", got.Status)
	}
}

// allEvents reads every event of a job, page after page.
func (b bundle) allEvents(t *testing.T, id string) []job.Event {
	t.Helper()
	var all []job.Event
	for {
		after := int64(0)
		if len(all) > 0 {
			after = all[len(all)-1].Seq
		}
		evs, err := b.user.Events(context.Background(), id, after)
		if err != nil {
			t.Fatal(err)
		}
		if len(evs) == 0 {
			return all
		}
		all = append(all, evs...)
	}
}

// lastDetail is the detail of the job's newest job.stopped or job.failed event.
func (b bundle) lastDetail(t *testing.T, id string) string {
	t.Helper()
	evs := b.allEvents(t, id)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Type == job.EventStopped || evs[i].Type == job.EventFailed {
			return evs[i].Detail
		}
	}
	return ""
}
