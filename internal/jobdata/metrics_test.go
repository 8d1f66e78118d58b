package jobdata

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Python's json writes NaN and Infinity, which are not JSON, and a number can overflow a
// double: the step is kept, each such value is null and named under NonFiniteKey, and the
// strings that merely contain the words are left alone.
func TestParseLineKeepsStepsWithNonFiniteValues(t *testing.T) {
	t.Parallel()
	row, err := ParseLine([]byte(`{"step": 7, "time": 1.5, "loss/mean": NaN, "entropy/all/mean": Infinity, "kl": -Infinity,` +
		` "big": 1e400, "note": "NaN, Infinity", "nested": {"a": NaN}, "ok": 0.25}`))
	if err != nil {
		t.Fatal(err)
	}
	if row.Step() != 7 {
		t.Errorf("step %d", row.Step())
	}
	for _, k := range []string{"loss/mean", "entropy/all/mean", "kl", "big"} {
		if string(row[k]) != "null" {
			t.Errorf("%s = %s, want null", k, row[k])
		}
		if _, ok := row.Float(k); ok {
			t.Errorf("%s reads as a number", k)
		}
	}
	if v, ok := row.Float("ok"); !ok || v != 0.25 {
		t.Errorf("ok = %v %v", v, ok)
	}
	if string(row["note"]) != `"NaN, Infinity"` {
		t.Errorf("a string was changed: %s", row["note"])
	}
	var notes map[string]string
	if err := json.Unmarshal(row[NonFiniteKey], &notes); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"loss/mean": "NaN", "entropy/all/mean": "Infinity", "kl": "-Infinity", "big": "1e400", "nested": "NaN"}
	for k, v := range want {
		if notes[k] != v {
			t.Errorf("note for %s = %q, want %q (all: %v)", k, notes[k], v, notes)
		}
	}
	if _, err := ParseLine([]byte(`{"time": 1}`)); err == nil {
		t.Error("a row without a step was taken")
	}
	if _, err := ParseLine([]byte(`{"step": 1, "x": "` + strings.Repeat("y", MaxLineBytes) + `"}`)); !errors.Is(err, ErrLineTooLong) {
		t.Errorf("an over-long line: %v", err)
	}
}

// trainerRows and orchestratorRow are rows as prime-rl writes them for a step (the upstream
// kit's traces/metrics-keys.json): five from the trainer, one from the orchestrator.
func trainerRows(step int, loss float64) []Row {
	mk := func(kv ...any) Row {
		r := Row{"step": raw(step), "time": raw(1000 + float64(step))}
		for i := 0; i+1 < len(kv); i += 2 {
			r[kv[i].(string)] = raw(kv[i+1])
		}
		return r
	}
	return []Row{
		mk("perf/throughput", 5000.0, "perf/mfu", 30.0),
		mk("optim/lr", 1e-4, "optim/grad_norm", 0.3),
		mk("loss/mean", loss, "entropy/all/mean", 1.1, "mismatch_kl/all/mean", 0.002),
		mk("time/step", 2.5, "time/save_ckpt", 0.0, "time/forward_backward", 1.5),
		mk("system/ckpt_disk_free_gib", 500.0),
	}
}

func orchestratorRow(step int, reward float64, keys int) Row {
	r := Row{"step": raw(step), "time": raw(999 + float64(step)), "train/agg/all/agent/reward/mean": raw(reward),
		"time/step": raw(9.5), "time/save_ckpt": raw(0.1), "progress/tokens": raw(1000)}
	for i := len(r); i < keys; i++ {
		r[fmt.Sprintf("train/agg/all/agent/timing/k%03d/mean", i)] = raw(float64(i))
	}
	return r
}

func raw(v any) json.RawMessage {
	b, _ := json.Marshal(v)
	return b
}

// A step's six rows (and an evaluation's) merge into one that keeps every key; the key both
// processes write keeps the trainer's value and the orchestrator's under orchestrator/.
func TestMergeKeepsEveryKeyOfAStep(t *testing.T) {
	t.Parallel()
	rows := append([]Row{orchestratorRow(3, 0.6, 450)}, trainerRows(3, 0.04)...)
	rows = append(rows, Row{"step": raw(3), "time": raw(2000.0), "eval/gsm8k/all/agent/reward/mean": raw(0.5)})
	m := Merge(rows)
	want := 450 + 9 + 2 + 1 // the orchestrator's, the trainer's other nine, two orchestrator/ copies, the eval's
	if len(m) != want {
		t.Errorf("%d keys, want %d", len(m), want)
	}
	if v, _ := m.Float("time/step"); v != 2.5 {
		t.Errorf("time/step = %v, want the trainer's 2.5", v)
	}
	if v, _ := m.Float("orchestrator/time/step"); v != 9.5 {
		t.Errorf("orchestrator/time/step = %v, want 9.5", v)
	}
	if m.Time() != 2000 {
		t.Errorf("time %v, want the newest row's", m.Time())
	}
	for _, k := range []string{"loss/mean", "train/agg/all/agent/reward/mean", "eval/gsm8k/all/agent/reward/mean", "system/ckpt_disk_free_gib"} {
		if _, ok := m[k]; !ok {
			t.Errorf("%s is missing", k)
		}
	}
}

// The summary a heartbeat carries stays small however wide the rows are, and its step is the
// trainer's: the orchestrator's rows run two steps ahead.
func TestSummaryIsBoundedAndFollowsTheTrainer(t *testing.T) {
	t.Parallel()
	var s Summary
	s.Add(orchestratorRow(1, 0.2, 450))
	s.Add(orchestratorRow(2, 0.3, 450))
	s.Add(orchestratorRow(3, 0.35, 450))
	for _, r := range trainerRows(1, 0.05) {
		s.Add(r)
	}
	if s.Step != 1 {
		t.Errorf("step %d, want the trainer's 1", s.Step)
	}
	if len(s.Values) > len(Headline) {
		t.Errorf("%d values for %d series", len(s.Values), len(Headline))
	}
	if s.Series["reward"] != "train/agg/all/agent/reward/mean" || s.Values["train/agg/all/agent/reward/mean"] != 0.35 {
		t.Errorf("reward: %v %v", s.Series, s.Values)
	}
	if s.Values["loss/mean"] != 0.05 || s.Series["loss"] != "loss/mean" {
		t.Errorf("loss: %v", s.Values)
	}
	// A multi-agent environment names its role instead of `agent`.
	var m Summary
	m.Add(Row{"step": raw(4), "train/agg/all/player/reward/mean": raw(0.7)})
	if m.Series["reward"] != "train/agg/all/player/reward/mean" || m.Step != 4 {
		t.Errorf("multi-agent reward: %v step %d", m.Series, m.Step)
	}
}

// The trainer's value of a key both write keeps the plain name, whatever order the rows come
// in and even when, for a while, both wrote the same value.
func TestMergeKeepsTheTrainersValueUnderThePlainName(t *testing.T) {
	t.Parallel()
	orch := func(v float64) Row {
		return Row{"step": raw(3), "train/agg/all/agent/reward/mean": raw(0.5), "time/step": raw(v)}
	}
	trainer := Row{"step": raw(3), "loss/mean": raw(0.1), "time/step": raw(2.0)}
	m := Merge([]Row{orch(2.0), trainer, orch(9.0)})
	if v, _ := m.Float("time/step"); v != 2.0 {
		t.Errorf("time/step = %v, want the trainer's 2", v)
	}
	if v, _ := m.Float("orchestrator/time/step"); v != 9.0 {
		t.Errorf("orchestrator/time/step = %v, want 9", v)
	}
}
