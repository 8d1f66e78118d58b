// Command prime-rl-emulator is an EMULATED prime-rl: it does no GPU work, but it takes prime-rl's
// command line (`rl @ rl.toml --output-dir DIR --run.name NAME [--resume] [--max-steps N]`) and
// writes what prime-rl writes, where prime-rl writes it:
//
//	DIR/NAME/metrics.jsonl                          one JSON object a step
//	DIR/NAME/logs/attempt_N/{trainer,orchestrator,inference}.log, envs/<env>.log
//	DIR/NAME/logs/latest -> attempt_N
//	DIR/NAME/checkpoints/step_N/{trainer,orchestrator}/...
//
// It is for the local stack (`hostedtrain dev`) and the tests, and says it is emulated on its
// first line of output and in every log. Flags under --emulate.* set its pace and faults.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	cfg, err := parseArgs(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "prime-rl-emulator:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	code := run(ctx, cfg, os.Stdout)
	os.Exit(code)
}
