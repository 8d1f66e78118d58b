// Package fit decides whether a model fits the GPUs a job is given, and how to lay it out:
// how many of a node's GPUs serve the policy with vLLM, with what tensor parallelism, and how
// many train it. It is hostedtrain's estimate, made before a node is claimed, of what vLLM
// checks when it starts (the weights and one sequence of max_model_len in the KV cache
// within gpu_memory_utilization of each card) and of what prime-rl's FSDP trainer holds (bf16
// weights for LoRA; weights, gradients and Adam states for full fine-tuning), so that a run
// that cannot start is refused at submit with what would fit, not on a node after a claim.
//
// The figures are conservative estimates, not measurements; docs/design.md says how they
// are made.
package fit

import (
	"fmt"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

const gib = 1 << 30

// Card is an H100's memory as CUDA reports it (81,559 MiB), and Usable the share of it a
// process may plan for: vLLM's gpu_memory_utilization default (0.9), which the trainer is
// held to as well.
const (
	Card   = 81559 << 20
	Usable = 0.9
)

// Reserves a GPU keeps beside the weights and cache: vLLM's activations and CUDA graphs; the
// trainer's CUDA context and allocator slack (a sequence's logits and activations are counted
// by its length, trainBytes).
const (
	inferReserve   = 4 * gib
	trainerReserve = 8 * gib
	// logitsPerToken: a token's bf16 logits over a vocabulary of about 150,000, and their
	// gradient.
	logitsPerToken = 150_000 * 2 * 2
	logitsChunk    = 8192
)

// Bytes a parameter takes in the trainer, sharded over its GPUs: bf16 weights with LoRA
// (the adapters are small); with full fine-tuning also fp32 gradients and Adam's two fp32
// moments, and a margin.
const (
	loraBytesPerParam = 2
	fullBytesPerParam = 16
)

// Run is what a layout is checked for.
type Run struct {
	Model string
	// GPUs on the node; TP the tensor parallelism the job asks for (0: chosen here).
	GPUs, TP int
	// ContextLen is vLLM's max_model_len (the longest sequence served); SeqLen the
	// trainer's.
	ContextLen, SeqLen int
	LoRA               bool
}

// Layout is a node's GPUs laid out for an rl run.
type Layout struct {
	upstream.Split
	// InferGiB and TrainGiB are the estimated memory of one inference and one trainer GPU.
	InferGiB, TrainGiB float64
	// Estimated: the model is not in the table, so only its weights (from its name) are
	// counted.
	Estimated bool
}

// inferBytes is one inference GPU of a replica of tensor parallelism tp holding a model and
// one sequence of contextLen in its KV cache.
func inferBytes(a Arch, tp, contextLen int) float64 {
	kv := a.kvBytes() * float64(contextLen)
	shards := float64(tp)
	if a.KVHeads > 0 && tp > a.KVHeads {
		shards = float64(a.KVHeads) // KV heads are replicated beyond their count
	}
	if a.KVBytesPerToken > 0 {
		shards = 1 // a latent cache is not split by heads
	}
	return a.serveBytes()/float64(tp) + kv/shards + inferReserve
}

// trainBytes is one of n trainer GPUs.
func trainBytes(a Arch, n, seqLen int, lora bool) float64 {
	per := float64(fullBytesPerParam)
	if lora {
		per = loraBytesPerParam
	}
	// A micro-batch of one sequence: its logits, computed in chunks of at most logitsChunk
	// tokens, and its checkpointed activations, about a KV cache's worth a token.
	return a.ParamsB*1e9*per/float64(n) + trainerReserve + float64(min(seqLen, logitsChunk))*logitsPerToken + float64(seqLen)*a.kvBytes()
}

func fits(b float64) bool { return b <= Usable*Card }

// RL lays out an rl run on its GPUs: the smallest tensor parallelism (or the job's) whose
// replica fits a card, and the split of the node — as even as fits — whose trainer GPUs hold
// the trainer. A run that fits no layout gets an error that says what would fit. A model the
// table does not have and whose name gives no size is laid out as prime-rl would (an even
// split), unchecked; known says which.
func RL(r Run) (l Layout, known bool, err error) {
	a, known := Lookup(r.Model)
	if !known {
		s, err := upstream.SplitGPUs(r.GPUs, r.TP)
		return Layout{Split: s}, false, err
	}
	if _, err := upstream.SplitGPUs(r.GPUs, r.TP); err != nil {
		return Layout{}, true, err
	}
	ctx := r.ContextLen
	if !a.Known() {
		ctx = 0 // an estimate from the name: the KV cache is not known
	}
	if a.Context > 0 && ctx > a.Context {
		return Layout{}, true, fmt.Errorf("%s takes sequences of at most %d tokens (its max_position_embeddings); the run needs %d: lower seq_len or max_tokens",
			r.Model, a.Context, ctx)
	}
	tps := []int{1, 2, 4, 8}
	if r.TP > 0 {
		tps = []int{r.TP}
	}
	for _, tp := range tps {
		if tp >= r.GPUs {
			break
		}
		ib := inferBytes(a, tp, ctx)
		if !fits(ib) {
			continue
		}
		even := max(r.GPUs/2/tp*tp, tp)
		// As even as fits: the even split, then more GPUs to the trainer, then fewer.
		for _, infer := range splitsFrom(even, tp, r.GPUs) {
			tb := trainBytes(a, r.GPUs-infer, r.SeqLen, r.LoRA)
			if fits(tb) {
				return Layout{Split: upstream.Split{Inference: infer, Trainer: r.GPUs - infer, TensorParallel: tp},
					InferGiB: ib / gib, TrainGiB: tb / gib, Estimated: !a.Known()}, true, nil
			}
		}
	}
	return Layout{}, true, refusal(a, r)
}

// splitsFrom are the inference GPU counts to try: even first, then fewer (more for the
// trainer) down to one replica, then more.
func splitsFrom(even, tp, gpus int) []int {
	var out []int
	for i := even; i >= tp; i -= tp {
		out = append(out, i)
	}
	for i := even + tp; i < gpus; i += tp {
		out = append(out, i)
	}
	return out
}

// refusal says why no layout of r fits, and what would.
func refusal(a Arch, r Run) error {
	usable := Usable * Card / gib
	weights := a.serveBytes() / gib
	var why []string
	minTP := 0
	for _, tp := range []int{1, 2, 4, 8} {
		if fits(inferBytes(a, tp, ctxOf(a, r))) {
			minTP = tp
			break
		}
	}
	minTrain := trainersFor(a, r.SeqLen, r.LoRA)
	switch {
	case minTP == 0:
		why = append(why, fmt.Sprintf("one vLLM replica needs more than 8 GPUs (%.0f GiB of weights%s, %.0f GiB usable a card)", weights, kvNote(a, r), usable))
	default:
		why = append(why, fmt.Sprintf("a vLLM replica needs %d GPU(s) (tensor_parallel_size %d: %.0f GiB of weights%s)", minTP, minTP, weights, kvNote(a, r)))
	}
	mode := "full fine-tuning"
	if r.LoRA {
		mode = "LoRA"
	}
	if minTrain == 0 {
		why = append(why, fmt.Sprintf("the trainer needs more than a node's GPUs for %s", mode))
	} else {
		why = append(why, fmt.Sprintf("the trainer needs %d GPU(s) for %s", minTrain, mode))
	}
	need := minTP + minTrain
	var fix []string
	switch {
	case minTP > 0 && minTrain > 0 && need <= upstream.GPUsPerNode && need > r.GPUs:
		fix = append(fix, fmt.Sprintf("num_gpus = %d", need))
	case minTP > 0 && minTrain > 0 && need <= upstream.GPUsPerNode && r.TP > 0 && r.TP != minTP:
		fix = append(fix, fmt.Sprintf("tensor_parallel_size = %d", minTP))
	}
	if !r.LoRA {
		if n := trainersFor(a, r.SeqLen, true); n > 0 && minTP > 0 && minTP+n <= upstream.GPUsPerNode {
			fix = append(fix, "LoRA (use_lora = true)")
		}
	}
	if len(fix) == 0 {
		fix = append(fix, "a smaller model")
	}
	return fmt.Errorf("%s does not fit %d H100s for an rl run: %s; try %s", r.Model, r.GPUs, strings.Join(why, ", and "), strings.Join(fix, " or "))
}

// trainersFor is the fewest trainer GPUs of a node that hold the trainer (0: none do).
func trainersFor(a Arch, seqLen int, lora bool) int {
	for n := 1; n <= upstream.GPUsPerNode; n++ {
		if fits(trainBytes(a, n, seqLen, lora)) {
			return n
		}
	}
	return 0
}

func ctxOf(a Arch, r Run) int {
	if !a.Known() {
		return 0
	}
	return r.ContextLen
}

func kvNote(a Arch, r Run) string {
	if c := ctxOf(a, r); c > 0 {
		return fmt.Sprintf(" and %.1f GiB of KV cache for a %d-token sequence", a.kvBytes()*float64(c)/gib, c)
	}
	return ""
}

// Serve is the tensor parallelism (and so the GPUs) that serves a model for a GEPA or eval
// job: the smallest power of two whose replica holds the weights and one sequence of
// contextLen. known is false for a model the table does not size (one GPU, unchecked).
func Serve(model string, contextLen int) (tp int, known bool, err error) {
	a, known := Lookup(model)
	if !known {
		return 1, false, nil
	}
	if !a.Known() {
		contextLen = 0
	}
	if a.Context > 0 && contextLen > a.Context {
		return 0, true, fmt.Errorf("%s takes sequences of at most %d tokens (its max_position_embeddings); the job's need %d: lower max_tokens or max_turns",
			model, a.Context, contextLen)
	}
	for _, tp := range []int{1, 2, 4, 8} {
		if fits(inferBytes(a, tp, contextLen)) {
			return tp, true, nil
		}
	}
	return 0, true, fmt.Errorf("%s does not fit one node's 8 H100s for serving: %.0f GiB of weights%s; choose a smaller model",
		model, a.serveBytes()/gib, kvNote(a, Run{ContextLen: contextLen}))
}

// Replica is the estimated memory of each GPU of a vLLM replica of model at tensor
// parallelism tp holding one sequence of contextLen: weights and KV cache (and vLLM's
// reserve). known is false for a model the table does not have.
func Replica(model string, tp, contextLen int) (bytes float64, known bool) {
	a, ok := Lookup(model)
	if !ok || !a.Known() {
		return 0, false
	}
	return inferBytes(a, max(tp, 1), contextLen), true
}

// Check says whether a layout a job chose itself (a full fine-tune's deployment) fits: each
// inference card holds its replica's share and a sequence of contextLen, each trainer card
// its share of the trainer. nil for a model of no known size.
func Check(model string, l upstream.Split, contextLen, seqLen int, lora bool) error {
	a, ok := Lookup(model)
	if !ok {
		return nil
	}
	if !a.Known() {
		contextLen = 0
	}
	tp := max(l.TensorParallel, 1)
	if b := inferBytes(a, tp, contextLen); !fits(b) {
		return fmt.Errorf("a vLLM replica of %s at tensor_parallel_size %d needs about %.0f GiB a card (%.0f GiB of weights%s), past the %.0f GiB usable: raise tensor_parallel_size or lower max_model_len",
			model, tp, b/gib, a.serveBytes()/gib, kvNote(a, Run{ContextLen: contextLen}), Usable*Card/gib)
	}
	if l.Trainer > 0 {
		if b := trainBytes(a, l.Trainer, seqLen, lora); !fits(b) {
			mode := "full fine-tuning"
			if lora {
				mode = "LoRA"
			}
			need := trainersFor(a, seqLen, lora)
			hint := "more trainer GPUs"
			if need > 0 {
				hint = fmt.Sprintf("num_train_gpus = %d", need)
			}
			return fmt.Errorf("the trainer of %s for %s on %d GPU(s) needs about %.0f GiB a card, past the %.0f GiB usable: try %s", model, mode, l.Trainer, b/gib, Usable*Card/gib, hint)
		}
	}
	return nil
}

// Weights is the size of a model's weights as a node downloads and vLLM loads them: the
// table's, its base model's, or an estimate from the size in its name (bf16). ok is false when
// none says.
func Weights(model string) (bytes float64, ok bool) {
	a, ok := Lookup(model)
	if !ok {
		return 0, false
	}
	return a.serveBytes(), true
}
