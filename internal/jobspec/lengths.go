package jobspec

import (
	"fmt"

	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// DefaultMaxTokens is the per-turn completion budget of an environment when neither the job
// nor upstream's example for its taskset gives one: the prime CLI's template's max_tokens.
// Without one, a completion could run to the model's whole context while training keeps
// seq_len.
const DefaultMaxTokens = 2048

// PromptRoom is the room a sequence keeps for the prompt beside its completions.
const PromptRoom = 1024

// envBudget is what one environment's sample takes: its turns, each turn's completion
// budget, and so its whole length (turns × budget + the prompt's room).
type envBudget struct {
	turns, perTurn int
	turnsFrom      string
	// floor is the whole sample upstream's example budgets where it bounds no turn (an agent
	// taskset: its example's seq_len, no per-turn limit).
	floor int
}

func (b envBudget) tokens() int { return max(b.turns*b.perTurn+PromptRoom, b.floor) }

// budget is an environment's sample budget: per turn, the environment's max_tokens, else the
// job's, else its taskset's upstream example's, else DefaultMaxTokens; turns, the
// environment's max_turns, else the taskset's own (its args' max_turns, else its default),
// else as many as upstream's example budgets for it (its sequence less the prompt's room,
// over its per-turn budget), else one.
func budget(e Env, job *Sampling) envBudget {
	b := envBudget{turns: 1, turnsFrom: "one turn"}
	ts, known := upstream.LookupTaskset(e.ID)
	switch {
	case e.Sampling != nil && e.Sampling.MaxTokens > 0:
		b.perTurn = e.Sampling.MaxTokens
	case job != nil && job.MaxTokens > 0:
		b.perTurn = job.MaxTokens
	case known && ts.ExampleMaxTokens > 0:
		b.perTurn = ts.ExampleMaxTokens
	default:
		b.perTurn = DefaultMaxTokens
	}
	argTurns, _ := e.Args["max_turns"].(float64)
	switch {
	case e.MaxTurns > 0:
		b.turns, b.turnsFrom = e.MaxTurns, "its max_turns"
	case argTurns >= 1:
		b.turns, b.turnsFrom = int(argTurns), "its taskset's max_turns"
	case known && ts.MaxTurns() > 0:
		b.turns, b.turnsFrom = ts.MaxTurns(), "its taskset's default max_turns"
	case known && ts.ExampleSeqLen > MinSeqLen && ts.ExampleMaxTokens > 0:
		b.turns = max(1, (ts.ExampleSeqLen-PromptRoom)/ts.ExampleMaxTokens)
		b.turnsFrom = fmt.Sprintf("upstream's example for %s budgets %d", ts.ID, b.turns)
	case known && ts.ExampleSeqLen > 0 && ts.ExampleMaxTokens == 0:
		b.floor = ts.ExampleSeqLen
		b.turnsFrom = fmt.Sprintf("upstream's example for %s gives a sample %d tokens", ts.ID, ts.ExampleSeqLen)
	}
	return b
}

// lengths sets each environment's per-turn budget where the job gives none, and the run's
// sequence length from its environments' samples when the job does not set one; a seq_len
// the job sets that would cut a whole sample gets a warning naming the sample's length.
func (n *normalizer) lengths(seqLen int, s *Spec) {
	s.SeqLen = seqLen
	need, worst := 0, ""
	for i := range s.Env {
		e := &s.Env[i]
		b := budget(*e, s.Sampling)
		if (e.Sampling == nil || e.Sampling.MaxTokens == 0) && (s.Sampling == nil || s.Sampling.MaxTokens == 0) {
			// Written into the environment, so the limit reaches vLLM and the spec shows it.
			if e.Sampling == nil {
				e.Sampling = &Sampling{}
			}
			e.Sampling.MaxTokens = b.perTurn
		}
		if b.tokens() > need {
			need = b.tokens()
			worst = fmt.Sprintf("%s: %d turn(s) (%s) × %d tokens + %d for the prompt = %d", e.ID, b.turns, b.turnsFrom, b.perTurn, PromptRoom, need)
		}
	}
	switch {
	case s.SeqLen == 0:
		s.SeqLen = roundLen(max(need, MinSeqLen), s.Model)
	case s.SeqLen < need:
		n.warn("/seq_len", "seq_len (%d) is shorter than a whole sample of %s: longer samples are truncated for training (vLLM still serves them whole); set seq_len = %d",
			s.SeqLen, worst, roundLen(need, s.Model))
	}
}

// roundLen rounds a sequence length up to a power of two, but not past the model's own
// context when the length itself fits it.
func roundLen(n int, model string) int {
	p := powerOfTwoAtLeast(n)
	if a, ok := fit.Lookup(model); ok && a.Context > 0 && n <= a.Context && p > a.Context {
		return a.Context
	}
	return p
}

// evalLengths sets each eval environment's per-turn budget where the job gives none.
func evalLengths(ev *OnlineEval) {
	for i := range ev.Env {
		e := &ev.Env[i]
		if (e.Sampling == nil || e.Sampling.MaxTokens == 0) && (ev.Sampling == nil || ev.Sampling.MaxTokens == 0) {
			if e.Sampling == nil {
				e.Sampling = &Sampling{}
			}
			e.Sampling.MaxTokens = budget(*e, ev.Sampling).perTurn
		}
	}
}

// defaultMaxTokens gives a GEPA or eval job's sampling a completion limit when it has none: the
// largest per-turn budget of its environments (budget). Without one, a completion could run
// to the served model's whole context.
func defaultMaxTokens(sp **Sampling, envs []Env) {
	if *sp != nil && (*sp).MaxTokens > 0 {
		return
	}
	n := 0
	for _, e := range envs {
		n = max(n, budget(e, nil).perTurn)
	}
	if n == 0 {
		return
	}
	if *sp == nil {
		*sp = &Sampling{}
	}
	(*sp).MaxTokens = n
}

// ContextLen is the longest sequence the run's inference server must hold: the trainer's
// sequence length, or a longer whole sample (train or eval: vLLM serves it whole where the
// trainer truncates it). It is vLLM's max_model_len.
func (s Spec) ContextLen() int {
	n := max(s.SeqLen, MinSeqLen) // a job stored before seq_len was set at submit: prime-rl's default
	for _, e := range s.Env {
		n = max(n, budget(e, s.Sampling).tokens()) // a whole sample, however long the trainer's sequence
	}
	if s.Eval != nil {
		for _, e := range s.Eval.Env {
			n = max(n, budget(e, s.Eval.Sampling).tokens())
		}
	}
	return n
}

func powerOfTwoAtLeast(n int) int {
	p := 1
	for p < n {
		p *= 2
	}
	return p
}
