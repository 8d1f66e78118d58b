package gpuagent

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
)

func row(step int, kv ...any) jobdata.Row {
	r := jobdata.Row{"step": json.RawMessage(strconv.Itoa(step))}
	for i := 0; i+1 < len(kv); i += 2 {
		r[kv[i].(string)] = json.RawMessage(strconv.FormatFloat(kv[i+1].(float64), 'g', -1, 64))
	}
	return r
}

// The watch on a run: steady steps never stall; a gap of stall_factor median steps does, once,
// naming the trainer's step; entropy falling below a tenth of its first steps' raises one alert.
func TestWatchdog(t *testing.T) {
	t0 := time.Date(2026, 11, 26, 0, 0, 0, 0, time.UTC)
	w := newWatchdog(5, time.Second, t0)
	now := t0
	var alerts []job.Alert
	for step := 1; step <= 10; step++ {
		now = now.Add(10 * time.Second)
		entropy := 0.8
		if step >= 8 {
			entropy = 0.05
		}
		alerts = append(alerts, w.rows([]jobdata.Row{row(step, "loss/mean", 0.1, "entropy/all/mean", entropy),
			row(step+2, "train/agg/all/agent/reward/min", 0.0, "train/agg/all/agent/reward/max", 1.0)}, now)...)
		if _, stalled := w.stall(now.Add(9 * time.Second)); stalled {
			t.Fatalf("a steady run stalled at step %d", step)
		}
	}
	if len(alerts) != 1 || alerts[0].Type != job.EventAlert || !strings.Contains(alerts[0].Detail, "entropy collapse") ||
		!strings.Contains(alerts[0].Detail, "step 8") {
		t.Fatalf("alerts %+v; want one entropy collapse at step 8", alerts)
	}
	if _, stalled := w.stall(now.Add(49 * time.Second)); stalled {
		t.Fatal("stalled before 5 median steps")
	}
	a, stalled := w.stall(now.Add(51 * time.Second))
	if !stalled || a.Type != job.EventStalled || !strings.Contains(a.Detail, "after step 10") {
		t.Fatalf("after 51 s: %+v %v; want a stall after step 10", a, stalled)
	}
	if _, again := w.stall(now.Add(90 * time.Second)); again {
		t.Error("one stall raised twice")
	}
	w.rows([]jobdata.Row{row(11, "loss/mean", 0.1)}, now.Add(100*time.Second))
	if _, again := w.stall(now.Add(110 * time.Second)); again {
		t.Error("stalled again right after a new step")
	}
}
