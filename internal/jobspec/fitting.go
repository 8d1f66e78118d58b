package jobspec

import (
	"github.com/hostedtrain/hostedtrain/internal/fit"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// Layout is how an rl job's model is laid out on gpus GPUs: the split and tensor parallelism
// that fit (fit.RL), for its lengths and LoRA. known is false for a model of no known size
// (laid out as prime-rl would, unchecked).
func (s Spec) Layout(gpus int) (fit.Layout, bool, error) {
	tp := 0
	if s.Parallelism != nil {
		tp = s.Parallelism.TensorParallelSize
	}
	return fit.RL(fit.Run{Model: s.Model, GPUs: gpus, TP: tp, ContextLen: s.ContextLen(), SeqLen: max(s.SeqLen, MinSeqLen), LoRA: s.LoRA != nil})
}

// fitRL checks that an rl job's model fits its GPUs (weights and a sequence of vLLM's
// max_model_len on each inference card, the trainer's memory on each trainer card). A job
// that did not say how many GPUs gets the fewest of its default, 4 and 8 that fit; one that
// said gets a refusal that says what would fit. A model of no known size is run unchecked,
// with a warning.
func (n *normalizer) fitRL(in input, s *Spec) {
	tp := 0
	if s.Parallelism != nil {
		tp = s.Parallelism.TensorParallelSize
	}
	if _, err := upstream.SplitGPUs(s.Resources.GPUs, tp); s.Model == "" || err != nil {
		return // refused already for what prime-rl cannot split
	}
	_, known, err := s.Layout(s.Resources.GPUs)
	if !known {
		n.warn(ptrOr(in.ModelName != "" && in.Model == "", "/model_name", "/model"),
			"hostedtrain does not know %s's size (it is not in the model table, nor is a size in its name), so whether it fits %d GPUs is not checked before the run",
			s.Model, s.Resources.GPUs)
		return
	}
	if err != nil && in.NumGPUs == 0 {
		for _, g := range []int{4, upstream.GPUsPerNode} {
			if g > s.Resources.GPUs {
				if _, _, e := s.Layout(g); e == nil {
					n.warn(ptrOr(in.ModelName != "" && in.Model == "", "/model_name", "/model"),
						"%s does not fit the %d GPUs a job of it takes by default (%v); it takes %d: set num_gpus to choose", s.Model, s.Resources.GPUs, err, g)
					s.Resources.GPUs, err = g, nil
					break
				}
			}
		}
	}
	if err != nil {
		ptr := "/num_gpus"
		switch {
		case in.NumGPUs == 0:
			ptr = ptrOr(in.ModelName != "" && in.Model == "", "/model_name", "/model")
		case in.TensorParallelSize > 0:
			ptr = "/tensor_parallel_size"
		}
		n.fail(ptr, "%v", err)
	}
}

// serveGPUs are the GPUs a GEPA or eval job serves its open-weight model on: the job's
// tensor_parallel_size (or num_gpus), else the fewest that hold the model and a sequence of
// contextLen (fit.Serve).
func (n *normalizer) serveGPUs(in input, model string, contextLen int) int {
	asked := max(in.TensorParallelSize, in.NumGPUs)
	tp, known, err := fit.Serve(model, contextLen)
	switch {
	case err != nil:
		n.fail("/model", "%v", err)
		return 1
	case asked > 0 && known && asked < tp:
		n.fail(ptrOr(in.TensorParallelSize > 0, "/tensor_parallel_size", "/num_gpus"),
			"%s needs %d GPUs (tensor parallelism %d) to hold its weights and a %d-token sequence; it was given %d", model, tp, tp, contextLen, asked)
	case asked > upstream.GPUsPerNode:
		n.fail(ptrOr(in.TensorParallelSize > 0, "/tensor_parallel_size", "/num_gpus"), "a job runs on one node of at most %d GPUs", upstream.GPUsPerNode)
	case asked&(asked-1) != 0:
		n.fail(ptrOr(in.TensorParallelSize > 0, "/tensor_parallel_size", "/num_gpus"),
			"the model is served with tensor parallelism over every GPU of the job, which must divide its attention heads: use 1, 2, 4 or 8, not %d", asked)
	case asked > 0:
		return asked
	case !known:
		n.warn("/model", "hostedtrain does not know %s's size, so it is served on one GPU unchecked; set tensor_parallel_size for a larger model", model)
	}
	return tp
}
