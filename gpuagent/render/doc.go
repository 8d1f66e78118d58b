// Package render lays out a claimed job for the pipeline that runs it: from the admitted job,
// its GPUs, its port block and the step it resumes from, the files upstream reads (prime-rl's
// rl.toml, verifiers' GEPA config and endpoint registry) and the commands to run (preflight,
// environment check, model server, pipeline), and what upstream will really do with them
// (Resolved). It is pure: no I/O, no clock, no process — so `gpuagent render`, a claim and the
// conformance suite (TestConformance, against the pinned upstream's own code) run the very same
// function. The pipeline's commands come from the pinned runtime's description
// (internal/upstream/runtime.toml).
//
// It owns the shapes of upstream's files and the pipeline templates. It may import the job
// contract (internal/jobspec), what is known of upstream (internal/upstream) and the fit
// estimate (internal/fit); it must not import the agent (gpuagent) or the sandbox: they call
// it, never the other way round.
package render
