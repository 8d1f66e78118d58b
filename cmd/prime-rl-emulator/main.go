// Command prime-rl-emulator is an EMULATED prime-rl and verifiers: it does no GPU work and
// trains no model, but it takes the command lines the GPU agent runs and behaves as the
// pinned upstream programs do as far as the agent can see — built from the facts in the
// upstream conformance kit's traces, not from hostedtrain's own expectations:
//
//	rl @ rl.toml --output-dir DIR --run.name NAME [--resume | --resume.step N]
//	    refuses a config prime-rl refuses (with --emulate.check, by running upstream's own
//	    config code; else by the field names it knows); binds the ports the config names
//	    (prime-rl's fixed defaults when it names none); writes DIR/NAME/metrics.jsonl with the
//	    trainer's five rows and the orchestrator's row a step (hundreds of keys, the
//	    orchestrator up to two steps ahead), loguru logs under logs/attempt_N/ (colour codes
//	    on), env server logs under envs/train/, and checkpoints/step_N/{trainer,orchestrator}
//	    with the trainer's .metadata written last; exits 1 on SIGTERM without writing a
//	    checkpoint; refuses a used run folder without resume and an incomplete resume step.
//	gepa CONFIG.toml                    verifiers' GEPA: its TOML loader, its model calls,
//	                                    its outputs (results.jsonl, metadata.json, ...)
//	eval ENV -m MODEL -n N -r R -b URL -k VAR [-s] [-o DIR] [-a JSON] [-S JSON]
//	                                    verifiers' eval: calls the model at URL with the key
//	                                    in $VAR (Prime's inference when none is given)
//	serve MODEL --host H --port P       vLLM's OpenAI-compatible server (/health, /v1/models,
//	                                    /v1/chat/completions), keyed by $VLLM_API_KEY
//	env install ID                      `prime env install`: into the Python VIRTUAL_ENV names
//	versions                            the upstream versions it stands in for, as JSON
//
// It is for the local stack (`hostedtrain dev`) and the tests, says it is emulated on its
// first line of output and in every log, and is never the default on a GPU node. Flags under
// --emulate.* set its pace and faults.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// banner opens the output and every log, so nobody mistakes this for a real run.
const banner = "EMULATED prime-rl: hostedtrain's stand-in for prime-rl and verifiers; no GPU work is done and no model is trained"

func main() {
	// An emulated run is short and its heap small; it collects garbage a quarter as often as
	// Go's default (unless GOGC says otherwise), which was a tenth of its CPU in a chaos run.
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	// rl installs its SIGTERM handler once it has started (as prime-rl's launcher does);
	// until then a SIGTERM ends the process the default way.
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := dispatch(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, out io.Writer) int {
	sub := func(a ...string) bool {
		if len(args) < len(a) {
			return false
		}
		for i := range a {
			if args[i] != a[i] {
				return false
			}
		}
		return true
	}
	switch {
	case sub("gepa"):
		return runGEPA(ctx, args[1:], out)
	case sub("eval"):
		return runEval(ctx, args[1:], out)
	case sub("serve"):
		return runServe(ctx, args[1:], out)
	case sub("env", "install"):
		return runInstall(ctx, args[2:], out)
	case sub("versions"):
		v := upstream.Pinned()
		_ = json.NewEncoder(out).Encode(v)
		return 0
	case sub("rl"):
		return runRL(ctx, args[1:], out)
	}
	return runRL(ctx, args, out)
}

// fail prints an error the way the program it stands in for would end, and returns status.
func fail(out io.Writer, status int, format string, args ...any) int {
	fmt.Fprintf(out, format+"\n", args...)
	return status
}
