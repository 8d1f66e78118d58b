// Command gpuagent runs on a GPU node: it claims jobs from the hostedtrain API with an agent
// token and runs their pipelines (real prime-rl and the prime CLI by default) on the node's
// GPUs, writing metrics, logs, checkpoints and artifacts to object storage.
//
//	HOSTEDTRAIN_AGENT_TOKEN=... gpuagent --api https://api.example --store s3://bucket/prefix
//
// The GPUs come from nvidia-smi unless --gpus names them. SIGTERM drains the agent: it claims
// nothing more, stops its pipelines (SIGTERM, --stop-grace, SIGKILL), commits the checkpoints
// they completed and hands the jobs back to run elsewhere; a second SIGTERM exits at once.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
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
	gpus := flag.String("gpus", "", "GPUs this node offers, MODEL:COUNT[,MODEL:COUNT], for a node without nvidia-smi; empty asks nvidia-smi")
	nvidiaSMI := flag.String("nvidia-smi", "nvidia-smi", "the nvidia-smi binary the inventory comes from")
	workDir := flag.String("work-dir", "/var/lib/hostedtrain/work", "per-job working folders")
	store := flag.String("store", os.Getenv("HOSTEDTRAIN_STORE"), "the agent's own object storage, s3://BUCKET[/PREFIX][?endpoint=URL&region=R] or a local folder; empty where the service grants job-scoped credentials with each claim (AWS deployments)")
	storeDir := flag.String("store-dir", "", "object storage as a local folder (same as --store FOLDER)")
	rlCmd := flag.String("rl-command", strings.Join(def.RL, " "), "the rl pipeline ({config} {output_dir} {run_name})")
	gepaCmd := flag.String("gepa-command", strings.Join(def.GEPA, " "), "the GEPA pipeline ({config} {output_dir})")
	evalCmd := flag.String("eval-command", strings.Join(def.Eval, " "), "the eval pipeline ({env_id} {model} {num_examples} {rollouts_per_example} {eval_flags})")
	installCmd := flag.String("install-command", strings.Join(def.Install, " "), "installs one environment ({env_id}); empty skips")
	emulated := flag.Bool("emulated", false, "run every kind with prime-rl-emulator (no GPU work; shown to users as emulated)")
	emulator := flag.String("emulator", "", "the prime-rl-emulator binary for --emulated (default: beside gpuagent, else on PATH)")
	emulateFlags := flag.String("emulate-flags", "", "extra flags for the emulator, e.g. \"--emulate.step-time 50ms\"")
	stopGrace := flag.Duration("stop-grace", 120*time.Second, "time a stopped pipeline gets to exit before SIGKILL")
	drainTimeout := flag.Duration("drain-timeout", 5*time.Minute, "time a drain gets, after the pipelines exit, to commit checkpoints and hand jobs back")
	claimWait := flag.Duration("claim-wait", 20*time.Second, "how long one claim waits for work")
	maxCPUJobs := flag.Int("max-cpu-jobs", 2, "jobs that need no GPU (evals, GEPA against API models) run at once")
	pollInterval := flag.Duration("poll-interval", time.Second, "how often metrics.jsonl and the checkpoint folders are looked at")
	flushInterval := flag.Duration("flush-interval", 10*time.Second, "how often metrics and log chunks are written to storage")
	metricsAddr := flag.String("metrics-addr", "127.0.0.1:9400", "where /metrics (Prometheus) and /healthz are served; empty: nowhere")
	flag.Parse()

	logger := slog.New(slog.NewJSONHandler(os.Stderr, nil))
	token := os.Getenv("HOSTEDTRAIN_AGENT_TOKEN")
	if *apiURL == "" || token == "" {
		return errors.New("set --api (or HOSTEDTRAIN_URL) and HOSTEDTRAIN_AGENT_TOKEN")
	}
	if *store == "" {
		*store = *storeDir
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	var st blob.Store
	if *store != "" {
		var err error
		if st, err = openStore(ctx, *store); err != nil {
			return err
		}
	}
	devices, err := inventory(ctx, *gpus, *nvidiaSMI)
	if err != nil {
		return err
	}
	pipeline := gpuagent.Pipeline{
		Name: "prime-rl", RL: gpuagent.ParseCommand(*rlCmd), GEPA: gpuagent.ParseCommand(*gepaCmd),
		Eval: gpuagent.ParseCommand(*evalCmd), Install: gpuagent.ParseCommand(*installCmd),
	}
	if *emulated {
		bin, err := findEmulator(*emulator)
		if err != nil {
			return err
		}
		pipeline = gpuagent.EmulatedPipeline(bin, gpuagent.ParseCommand(*emulateFlags)...)
	}
	a, err := gpuagent.New(gpuagent.Config{
		API:           client.New(*apiURL, token),
		Store:         st,
		WorkDir:       *workDir,
		Devices:       devices,
		Pipeline:      pipeline,
		MaxCPUJobs:    *maxCPUJobs,
		ClaimWait:     *claimWait,
		StopGrace:     *stopGrace,
		DrainTimeout:  *drainTimeout,
		PollInterval:  *pollInterval,
		FlushInterval: *flushInterval,
		Logger:        logger,
	})
	if err != nil {
		return err
	}
	if *metricsAddr != "" {
		ln, err := net.Listen("tcp", *metricsAddr)
		if err != nil {
			return fmt.Errorf("--metrics-addr: %w", err)
		}
		mux := http.NewServeMux()
		mux.Handle("/metrics", a.Handler())
		mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprintln(w, "ok") })
		srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
		go func() { _ = srv.Serve(ln) }()
		defer srv.Close()
		logger.Info("serving metrics", "addr", ln.Addr().String())
	}
	// A second signal during a drain exits at once; the pipelines die with the agent.
	go func() {
		<-ctx.Done()
		again := make(chan os.Signal, 1)
		signal.Notify(again, syscall.SIGTERM, os.Interrupt)
		<-again
		logger.Warn("second signal: exiting without finishing the drain")
		os.Exit(1)
	}()
	logger.Info("agent started", "api", *apiURL, "gpus", describe(devices), "pipeline", pipeline.Name, "emulated", pipeline.Emulated)
	err = a.Run(ctx)
	logger.Info("agent stopped")
	return err
}

func openStore(ctx context.Context, s string) (blob.Store, error) {
	if strings.HasPrefix(s, "s3://") {
		cfg, err := blob.ParseS3URL(s)
		if err != nil {
			return nil, err
		}
		return blob.NewS3(ctx, cfg)
	}
	return blob.NewDir(s)
}

func inventory(ctx context.Context, gpus, nvidiaSMI string) ([]gpuagent.Device, error) {
	if gpus != "" {
		inv, err := job.ParseGPUs(gpus)
		if err != nil {
			return nil, fmt.Errorf("--gpus: %w", err)
		}
		return gpuagent.DevicesFromSpec(inv), nil
	}
	devs, err := gpuagent.Discover(ctx, nvidiaSMI)
	if err != nil {
		return nil, fmt.Errorf("%w (on a node without NVIDIA GPUs, name what it offers with --gpus)", err)
	}
	return devs, nil
}

func describe(devs []gpuagent.Device) string {
	parts := make([]string, len(devs))
	for i, d := range devs {
		parts[i] = fmt.Sprintf("%d:%s", d.Index, d.Model)
		if d.UUID != "" {
			parts[i] += "(" + d.UUID + ")"
		}
	}
	return strings.Join(parts, " ")
}

func findEmulator(flagValue string) (string, error) {
	if flagValue != "" {
		return flagValue, nil
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "prime-rl-emulator")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("prime-rl-emulator")
	if err != nil {
		return "", errors.New("--emulated: prime-rl-emulator is neither beside gpuagent nor on PATH; set --emulator")
	}
	return p, nil
}
