package failure

import (
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The lines are the messages the real tools print (PyTorch 2.x, vLLM, NCCL, the prime CLI,
// prime-rl's launcher), as they reach the job's logs.
func TestClassify(t *testing.T) {
	launcher := Line{"pipeline", "14:03:09   ERROR Trainer failed with exit code 1"}
	cases := []struct {
		name  string
		in    Input
		class job.FailureClass
		fault job.Fault
		retry bool
		quote string
	}{
		{"torch OOM", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"trainer.log", "14:03:07    INFO Step 3 | 2.1s"},
			{"trainer.log", "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity of 79.10 GiB of which 1.03 GiB is free."},
			{"trainer.log", "[rank0]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1970, remote process exited or there was a network error"},
			launcher}}, job.FailCUDAOOM, job.FaultUser, false, "CUDA out of memory"},
		{"vLLM cache", Input{Stage: StageServe, Lines: []Line{
			{"inference", "ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when initializing the engine."}}},
			job.FailCUDAOOM, job.FaultUser, false, "cache blocks"},
		{"NCCL", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"trainer.log", "[rank1]:[E ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=42, OpType=ALLREDUCE) ran for 600000 milliseconds before timing out."},
			launcher}}, job.FailNCCLNetwork, job.FaultPlatform, true, "Watchdog"},
		{"ECC", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"trainer.log", "RuntimeError: CUDA error: uncorrectable ECC error encountered"}, launcher}},
			job.FailGPUHardware, job.FaultPlatform, true, "ECC"},
		{"disk full", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"orchestrator.log", "OSError: [Errno 28] No space left on device: 'outputs/run/checkpoints/step_4/orchestrator/progress.pt.tmp'"}}},
			job.FailStorage, job.FaultPlatform, true, "No space left"},
		{"config", Input{Stage: StagePreflight, Lines: []Line{
			{"preflight", "Config file error"}, {"preflight", "1 validation error for RLConfig"}, {"preflight", "trainer.optim.lr: Extra inputs are not permitted"}}},
			job.FailConfigRefused, job.FaultUser, false, "Extra inputs"},
		{"preflight without a known message", Input{Stage: StagePreflight, Reason: "the config check exited 2"},
			job.FailConfigRefused, job.FaultUser, false, "exited 2"},
		{"hub 404", Input{Stage: StageInstall, Lines: []Line{
			{"install", "✗ Failed to resolve acme/wordle-broken: 404 Not Found"}, {"install", "Error: Unable to resolve installable environments"}}},
			job.FailEnvInstall, job.FaultUser, false, "404"},
		{"index down", Input{Stage: StageInstall, Lines: []Line{
			{"install", "error: Failed to fetch: `https://hub.primeintellect.ai/acme/wordle`"}, {"install", "  Caused by: Temporary failure in name resolution"}}},
			job.FailEnvInstall, job.FaultPlatform, true, "name resolution"},
		{"reward function", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"envs/train/wordle.log", "Traceback (most recent call last):"},
			{"envs/train/wordle.log", `  File "/env/wordle.py", line 88, in score`},
			{"envs/train/wordle.log", "ZeroDivisionError: division by zero"}, launcher}},
			job.FailUserCode, job.FaultUser, false, "in score"},
		{"time limit", Input{Stage: StageTimeLimit, Reason: "the time limit of 1h was reached"},
			job.FailTimeLimit, job.FaultUser, false, "1h"},
		{"storage", Input{Stage: StageStorage, Reason: "the job's storage refused 5 writes in a row: AccessDenied"},
			job.FailStorage, job.FaultPlatform, true, "AccessDenied"},
		{"illegal memory access is a guess", Input{Stage: StagePipeline, ExitCode: 1, Lines: []Line{
			{"trainer.log", "RuntimeError: CUDA error: an illegal memory access was encountered"}, launcher}},
			job.FailUnknown, job.FaultUnknown, false, "illegal memory access"},
		{"killed", Input{Stage: StagePipeline, ExitCode: -1, Reason: "pipeline exited with signal killed"},
			job.FailUnknown, job.FaultPlatform, false, "signal killed"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Classify(c.in)
			if a.Class != c.class || a.Fault != c.fault || a.Retryable() != c.retry {
				t.Errorf("got %s / %s (%.2f, retry %v); want %s / %s (retry %v)", a.Class, a.Fault, a.Confidence, a.Retryable(), c.class, c.fault, c.retry)
			}
			if a.Summary == "" || a.Confidence <= 0 || a.Confidence > 1 {
				t.Errorf("summary %q, confidence %v", a.Summary, a.Confidence)
			}
			if !strings.Contains(strings.Join(a.Evidence, "\n"), c.quote) {
				t.Errorf("evidence %q lacks %q", a.Evidence, c.quote)
			}
			if len(a.Evidence) > MaxEvidence {
				t.Errorf("%d lines of evidence", len(a.Evidence))
			}
		})
	}
}

func TestEvidenceIsBounded(t *testing.T) {
	var lines []Line
	for range 50 {
		lines = append(lines, Line{"trainer.log", "torch.OutOfMemoryError: CUDA out of memory. " + strings.Repeat("é", 400)})
	}
	a := Classify(Input{Stage: StagePipeline, ExitCode: 1, Lines: lines})
	if len(a.Evidence) != MaxEvidence {
		t.Fatalf("%d lines", len(a.Evidence))
	}
	for _, e := range a.Evidence {
		if len(e) > maxLine+3 || !strings.HasSuffix(e, "...") || !utf8Valid(e) {
			t.Errorf("line of %d bytes: %.40q", len(e), e)
		}
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "?") == s }
