package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/spf13/cobra"
)

// initTemplate is what `train init` writes: a commented job that both hostedtrain and the real
// prime CLI accept (TestTrainInitWritesWhatBothAccept checks it with check.py prime-train).
//
//go:embed testdata/init-template.toml
var initTemplate []byte

func newInitCmd() *cobra.Command {
	var force bool
	c := &cobra.Command{
		Use:   "init [PATH]",
		Short: "Write a commented template job file (default rl.toml), as `prime train init` does",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := "rl.toml"
			if len(args) == 1 {
				path = args[0]
			}
			if _, err := os.Stat(path); err == nil && !force {
				return fmt.Errorf("%s already exists; --force overwrites it", path)
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			if err := os.WriteFile(path, initTemplate, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %s\nrun it with: hostedtrain train %s\n", path, path)
			return nil
		},
	}
	c.Flags().BoolVarP(&force, "force", "f", false, "overwrite an existing file")
	return c
}

func newModelsCmd() *cobra.Command {
	var output string
	c := &cobra.Command{
		Use:   "models",
		Short: "The models training jobs may name, the GPUs each takes and its price",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return fetchAndPrint(cmd, output, func(ctx context.Context, api *client.Client) (*client.ModelList, error) {
				return api.Models(ctx)
			}, renderModels)
		},
	}
	outputFlag(c, &output)
	return c
}
