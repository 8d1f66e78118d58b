package upstream

import "fmt"

// GPUsPerNode is prime-rl's deployment.gpus_per_node default; a single-node run may not use
// more (SingleNodeDeploymentConfig.validate_gpu_count).
const GPUsPerNode = 8

// Split is how an rl run's GPUs on one node are divided: inference (vLLM) takes the first
// Inference GPUs, the trainer the next Trainer (prime-rl's launcher sets each process's
// CUDA_VISIBLE_DEVICES that way).
type Split struct {
	Inference, Trainer int
	// TensorParallel is inference.vllm.tensor_parallel_size; the launcher fills data
	// parallelism with the rest (Inference / TensorParallel replicas).
	TensorParallel int
}

// SplitGPUs divides gpus between inference and the trainer for a run whose inference uses
// tensor parallelism tp (0 or 1: none). Inference gets half, rounded down to a multiple of tp
// and at least tp; the trainer the rest, at least one. prime-rl runs inference and the
// trainer on separate GPUs, so a run needs two at least; what cannot be split is an error
// that says what would work.
func SplitGPUs(gpus, tp int) (Split, error) {
	if tp < 1 {
		tp = 1
	}
	switch {
	case gpus < 2:
		return Split{}, fmt.Errorf("an rl run needs at least 2 GPUs on its node: prime-rl runs vLLM (inference) and the trainer on GPUs of their own; ask for num_gpus = 2 or more")
	case gpus > GPUsPerNode:
		return Split{}, fmt.Errorf("an rl run uses one node of at most %d GPUs (prime-rl runs across nodes only under SLURM); ask for num_gpus = %d or fewer", GPUsPerNode, GPUsPerNode)
	case tp > gpus-1 && tp+1 > GPUsPerNode:
		return Split{}, fmt.Errorf("tensor_parallel_size %d leaves no GPU for the trainer on a node of %d: inference takes a multiple of tensor_parallel_size and the trainer at least one; use tensor_parallel_size ≤ %d",
			tp, GPUsPerNode, min(gpus, GPUsPerNode)-1)
	case tp > gpus-1:
		return Split{}, fmt.Errorf("tensor_parallel_size %d leaves no GPU for the trainer out of %d: inference takes a multiple of tensor_parallel_size and the trainer at least one; use num_gpus = %d or tensor_parallel_size ≤ %d",
			tp, gpus, tp+1, gpus-1)
	}
	infer := max(gpus/2/tp*tp, tp)
	return Split{Inference: infer, Trainer: gpus - infer, TensorParallel: tp}, nil
}
