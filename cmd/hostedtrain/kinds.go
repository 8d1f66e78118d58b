package main

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/spf13/cobra"
)

// The GEPA and eval commands: a job file (`submit`), or the flags people know from
// `prime gepa run` and `prime eval run` (`run`).

func newGEPACmd() *cobra.Command {
	c := &cobra.Command{Use: "gepa", Short: "Prompt optimization with GEPA (no gradient training)"}
	c.AddCommand(newFileSubmitCmd("gepa", "Submit a GEPA job file (the GEPA configuration format of Prime Intellect's docs)"), newGEPARunCmd())
	return c
}

func newEvalCmd() *cobra.Command {
	c := &cobra.Command{Use: "eval", Short: "Evaluate a model on an environment"}
	c.AddCommand(newFileSubmitCmd("eval", "Submit an eval job file"), newEvalRunCmd())
	return c
}

func newEvalRunCmd() *cobra.Command {
	var o submitOptions
	var model, args string
	var n, r int
	var save bool
	c := &cobra.Command{
		Use:     "run ENV -m MODEL [-n N] [-r R]",
		Short:   "Evaluate MODEL on environment ENV, as `prime eval run` does",
		Example: "  hostedtrain eval run my-env -m Qwen/Qwen3-4B-Instruct-2507 -n 100 -r 5",
		Args:    needArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			job := map[string]any{"kind": "eval", "env_id": pos[0], "model": model}
			if cmd.Flags().Changed("num-examples") {
				job["num_examples"] = n
			}
			if cmd.Flags().Changed("rollouts-per-example") {
				job["rollouts_per_example"] = r
			}
			if save {
				job["save_results"] = true
			}
			return submitFlags(cmd, "eval", job, args, o)
		},
	}
	c.Flags().StringVarP(&model, "model", "m", "", "the model to evaluate (required)")
	c.Flags().IntVarP(&n, "num-examples", "n", 5, "examples to evaluate; -1 for all")
	c.Flags().IntVarP(&r, "rollouts-per-example", "r", 3, "rollouts per example")
	c.Flags().StringVarP(&args, "env-args", "a", "", `environment arguments as JSON, e.g. '{"system_prompt": "..."}'`)
	c.Flags().BoolVarP(&save, "save-results", "s", false, "keep every rollout")
	_ = c.MarkFlagRequired("model")
	o.register(c)
	return c
}

func newGEPARunCmd() *cobra.Command {
	var o submitOptions
	var model, reflection, args, columns string
	var maxCalls, numTrain, numVal, minibatch int
	var perfect float64
	c := &cobra.Command{
		Use:     "run ENV -m MODEL",
		Short:   "Optimize ENV's system prompt with GEPA, as `prime gepa run` does",
		Example: "  hostedtrain gepa run wordle -m google/gemini-3-flash-preview -M google/gemini-3-exp-ultra-preview -B 1000",
		Args:    needArgs(1),
		RunE: func(cmd *cobra.Command, pos []string) error {
			job := map[string]any{"kind": "gepa", "env_id": pos[0], "model": model}
			f := cmd.Flags()
			set := func(flag, key string, v any) {
				if f.Changed(flag) {
					job[key] = v
				}
			}
			set("reflection-model", "reflection_model", reflection)
			set("max-calls", "max_calls", maxCalls)
			set("num-train", "num_train", numTrain)
			set("num-val", "num_val", numVal)
			set("minibatch-size", "minibatch_size", minibatch)
			set("perfect-score", "perfect_score", perfect)
			if columns != "" {
				job["state_columns"] = strings.Split(columns, ",")
			}
			return submitFlags(cmd, "gepa", job, args, o)
		},
	}
	c.Flags().StringVarP(&model, "model", "m", "", "model for rollouts (required)")
	c.Flags().StringVarP(&reflection, "reflection-model", "M", "", "teacher model for prompt refinement (default: --model)")
	c.Flags().IntVarP(&maxCalls, "max-calls", "B", 500, "evaluation budget")
	c.Flags().IntVarP(&numTrain, "num-train", "n", 100, "training examples")
	c.Flags().IntVarP(&numVal, "num-val", "N", 50, "validation examples")
	c.Flags().IntVar(&minibatch, "minibatch-size", 3, "examples per reflection")
	c.Flags().Float64Var(&perfect, "perfect-score", 0, "max reward (skip examples that reach it)")
	c.Flags().StringVar(&columns, "state-columns", "", "extra state fields for reflection, comma-separated")
	c.Flags().StringVarP(&args, "env-args", "a", "", "environment arguments as JSON")
	_ = c.MarkFlagRequired("model")
	o.register(c)
	return c
}

// submitFlags submits a job built from flags as JSON.
func submitFlags(cmd *cobra.Command, kind string, job map[string]any, envArgs string, o submitOptions) error {
	if err := checkOutput(o.output); err != nil {
		return err
	}
	if envArgs != "" {
		var a map[string]any
		if err := json.Unmarshal([]byte(envArgs), &a); err != nil {
			return fmt.Errorf("-a: environment arguments must be a JSON object: %w", err)
		}
		job["args"] = a
	}
	secrets := map[string]string{}
	if err := jobspec.ApplyEnvFlags(secrets, o.env); err != nil {
		return err
	}
	b := &jobspec.JobBody{ContentType: "application/json"}
	if len(secrets) > 0 {
		job["secrets"] = secrets
		for k := range secrets {
			b.SecretNames = append(b.SecretNames, k)
		}
	}
	var err error
	if b.Data, err = json.Marshal(job); err != nil {
		return err
	}
	return submit(cmd, kind, kind+" run", b, o)
}
