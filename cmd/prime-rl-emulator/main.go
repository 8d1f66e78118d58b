// Command prime-rl-emulator is an EMULATED prime-rl and `prime` CLI: it does no GPU work and
// calls no model, but it takes the command lines the agent runs and writes what the real
// programs write, where they write it:
//
//	rl @ rl.toml --output-dir DIR --run.name NAME [--resume] [--max-steps N]
//	    DIR/NAME/metrics.jsonl                          one JSON object a step
//	    DIR/NAME/logs/attempt_N/{trainer,orchestrator,inference}.log, envs/<env>.log
//	    DIR/NAME/logs/latest -> attempt_N
//	    DIR/NAME/checkpoints/step_N/{trainer,orchestrator}/...
//	gepa run gepa.toml
//	    environments/<env>/outputs/gepa/{system_prompt.txt,pareto_frontier.jsonl,metadata.json}
//	eval run ENV -m MODEL -n N -r R [-a JSON] [-S JSON] [-s]
//	    outputs/evals/<env>--<model>/<run>/{results.jsonl,metadata.json}
//	env install OWNER/NAME[@VERSION]
//
// ("rl" may be left out: `prime-rl-emulator @ rl.toml ...` is the rl command.) It is for the
// local stack (`hostedtrain dev`) and the tests, and says it is emulated on its first line of
// output and in every log. Flags under --emulate.* set its pace and faults.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	code := dispatch(ctx, os.Args[1:], os.Stdout)
	stop()
	os.Exit(code)
}

func dispatch(ctx context.Context, args []string, out io.Writer) int {
	sub := func(a, b string) bool { return len(args) >= 2 && args[0] == a && args[1] == b }
	switch {
	case sub("gepa", "run"):
		return runGEPA(ctx, args[2:], out)
	case sub("eval", "run"):
		return runEval(ctx, args[2:], out)
	case sub("env", "install"):
		return runInstall(ctx, args[2:], out)
	case len(args) >= 1 && args[0] == "rl":
		args = args[1:]
	}
	cfg, err := parseArgs(args)
	if err != nil {
		fmt.Fprintln(os.Stderr, "prime-rl-emulator:", err)
		return 2
	}
	return run(ctx, cfg, out)
}
