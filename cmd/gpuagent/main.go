// Command gpuagent runs on a GPU node: it claims jobs from the hostedtrain API with an agent
// token and runs their pipeline (real prime-rl by default), writing metrics, logs and
// checkpoints to object storage.
//
//	HOSTEDTRAIN_AGENT_TOKEN=... gpuagent --api https://api.example --gpus H100:8 --store-dir /data/objects
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "gpuagent:", err)
		os.Exit(1)
	}
}

func run() error {
	def := gpuagent.DefaultPipeline()
	apiURL := flag.String("api", os.Getenv("HOSTEDTRAIN_URL"), "the hostedtrain API")
	gpus := flag.String("gpus", "", "GPUs this node offers, MODEL:COUNT[,MODEL:COUNT]")
	workDir := flag.String("work-dir", "/var/lib/hostedtrain/work", "per-job working folders")
	storeDir := flag.String("store-dir", "", "object storage as a local folder")
	rlCmd := flag.String("rl-command", strings.Join(def.RL, " "), "the rl pipeline command ({config} {output_dir} {run_name})")
	installCmd := flag.String("install-command", strings.Join(def.Install, " "), "installs one environment ({env_id}); empty skips")
	emulated := flag.Bool("emulated", false, "the rl command is prime-rl-emulator (shown to users)")
	stopGrace := flag.Duration("stop-grace", 120*time.Second, "time a stopped pipeline gets to exit before SIGKILL")
	flag.Parse()

	token := os.Getenv("HOSTEDTRAIN_AGENT_TOKEN")
	if *apiURL == "" || token == "" {
		return errors.New("set --api (or HOSTEDTRAIN_URL) and HOSTEDTRAIN_AGENT_TOKEN")
	}
	if *storeDir == "" {
		return errors.New("set --store-dir")
	}
	if *gpus == "" {
		return errors.New("set --gpus, e.g. H100:8")
	}
	inv, err := job.ParseGPUs(*gpus)
	if err != nil {
		return err
	}
	store, err := blob.NewDir(*storeDir)
	if err != nil {
		return err
	}
	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	name := "prime-rl"
	if *emulated {
		name = "prime-rl-emulator"
	}
	a, err := gpuagent.New(gpuagent.Config{
		API:     client.New(*apiURL, token),
		Store:   store,
		WorkDir: *workDir,
		GPUs:    inv,
		Pipeline: gpuagent.Pipeline{
			Name: name, Emulated: *emulated, RL: strings.Fields(*rlCmd), Install: strings.Fields(*installCmd),
		},
		StopGrace: *stopGrace,
		Logger:    logger,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	logger.Info("agent started", "api", *apiURL, "gpus", *gpus)
	return a.Run(ctx)
}
