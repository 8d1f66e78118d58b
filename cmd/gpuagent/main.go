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
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/nodecache"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/httpserver"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/mountns"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

func main() {
	var err error
	switch {
	case len(os.Args) > 1 && os.Args[1] == "render":
		err = renderJob(os.Args[2:], os.Stdout)
	case len(os.Args) > 1 && os.Args[1] == "versions":
		err = versions(os.Args[2:], os.Stdout)
	default:
		err = run()
	}
	if err != nil {
		// The library's errors already name it.
		fmt.Fprintln(os.Stderr, "gpuagent:", strings.TrimPrefix(err.Error(), "gpuagent: "))
		os.Exit(1)
	}
}

func run() error {
	// Jobs' file systems are mounted where only the agent and its jobs see them, and go with
	// them however the agent ends.
	mountns.Private()
	def := render.DefaultPipeline()
	apiURL := flag.String("api", os.Getenv("HOSTEDTRAIN_URL"), "the hostedtrain API")
	gatewayURL := flag.String("gateway", os.Getenv("HOSTEDTRAIN_GATEWAY_URL"), "the inference gateway the agent keeps a tunnel to, for the deployments it serves; empty: none")
	servingEvery := flag.Duration("serving-every", gpuagent.DefaultServingEvery, "how often a serve job reports what its model server holds")
	gpus := flag.String("gpus", "", "GPUs this node offers, MODEL:COUNT[,MODEL:COUNT], for a node without nvidia-smi; empty asks nvidia-smi")
	nvidiaSMI := flag.String("nvidia-smi", "nvidia-smi", "the nvidia-smi binary the inventory comes from")
	workDir := flag.String("work-dir", "/var/lib/hostedtrain/work", "per-job working folders")
	store := flag.String("store", os.Getenv("HOSTEDTRAIN_STORE"), "the agent's own object storage, s3://BUCKET[/PREFIX][?endpoint=URL&region=R] or a local folder; empty where the service grants job-scoped credentials with each claim (AWS deployments)")
	storeDir := flag.String("store-dir", "", "object storage as a local folder (same as --store FOLDER)")
	pf := pipelineFlags(flag.CommandLine, def)
	allowUnpinned := flag.Bool("allow-unpinned", false, "run pipelines even when the installed prime-rl, verifiers or prime CLI is not the pinned version")
	portRange := flag.String("port-range", fmt.Sprintf("%d-%d", gpuagent.DefaultPortRange[0], gpuagent.DefaultPortRange[1]), "where jobs get their blocks of ports")
	serveTimeout := flag.Duration("serve-timeout", gpuagent.DefaultServeTimeout, "how long a GEPA or eval job's inference server may take to answer")
	stopGrace := flag.Duration("stop-grace", gpuagent.DefaultStopGrace, "time a stopped pipeline gets to exit before SIGKILL")
	drainTimeout := flag.Duration("drain-timeout", gpuagent.DefaultDrainTimeout, "time a drain gets, after the pipelines exit, to commit checkpoints and hand jobs back")
	claimWait := flag.Duration("claim-wait", job.DefaultClaimWait, "how long one claim waits for work")
	maxCPUJobs := flag.Int("max-cpu-jobs", gpuagent.DefaultMaxCPUJobs, "jobs that need no GPU (evals, GEPA against API models) run at once")
	pollInterval := flag.Duration("poll-interval", gpuagent.DefaultPollInterval, "how often metrics.jsonl and the checkpoint folders are looked at")
	flushInterval := flag.Duration("flush-interval", gpuagent.DefaultFlushInterval, "how often metrics and log chunks are written to storage")
	healthQuery := flag.String("health-query", "", "the command that asks the GPU driver how the GPUs are, one CSV line a GPU: index, PCI bus, uncorrectable ECC errors "+
		"(default: --nvidia-smi "+strings.Join(gpuagent.HealthQuery, " ")+" where the GPUs come from nvidia-smi; none with --gpus)")
	kernelLog := flag.String("kernel-log", "/dev/kmsg", "the kernel's log, where the node's check looks for the GPU driver's hardware Xid reports (empty: not read)")
	healthInterval := flag.Duration("health-interval", gpuagent.DefaultHealthInterval, "how often the node checks itself before a claim when nothing made it look sooner")
	cacheDir := flag.String("cache-dir", "", "the node's caches that outlive jobs: model weights, environment installs, compile caches (default: cache beside --work-dir; \"none\": no cache)")
	modelHub := flag.String("model-hub", envOr("HF_ENDPOINT", "https://huggingface.co"), "the Hugging Face-compatible hub (or mirror) the node cache fetches model weights from; empty: weights are not cached, each pipeline fetches its own")
	hubTokenFile := flag.String("hub-token-file", "", "a file with the operator's token for --model-hub (only what it can read is cached)")
	modelCache := flag.Int64("model-cache-gb", nodecache.DefaultModelCap>>30, "the weights cache's size cap, GiB (least recently used evicted past it)")
	envCache := flag.Int64("env-cache-gb", nodecache.DefaultEnvCap>>30, "the environment installs cache's size cap, GiB")
	compileCache := flag.Int64("compile-cache-gb", nodecache.DefaultCompileCap>>30, "the compile caches' size cap, GiB")
	var sf sandbox.Flags
	sf.Register(flag.CommandLine)
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
	pipeline, err := pf.pipeline()
	if err != nil {
		return err
	}
	installed, err := readVersions(ctx, pipeline)
	if err != nil {
		return err
	}
	// A claim's long poll must end, answered, within the client's timeout.
	if *claimWait+10*time.Second > client.DefaultTimeout {
		return fmt.Errorf("--claim-wait %s: a claim must end well within the API client's timeout (%s); use %s or less",
			*claimWait, client.DefaultTimeout, client.DefaultTimeout-10*time.Second)
	}
	pr, err := gpuagent.ParsePortRange(*portRange)
	if err != nil {
		return err
	}
	ep, err := pf.inferenceEndpoint()
	if err != nil {
		return err
	}
	cache, err := openCache(*cacheDir, *workDir, *modelHub, *hubTokenFile, *modelCache, *envCache, *compileCache)
	if err != nil {
		return err
	}
	if cache != nil {
		defer cache.Close()
	}
	a, err := gpuagent.New(gpuagent.Config{
		Cache:         cache,
		Versions:      installed,
		AllowUnpinned: *allowUnpinned,
		Endpoint:      ep,
		PortRange:     pr,
		ServeTimeout:  *serveTimeout,
		API:           client.New(*apiURL, token),
		GatewayURL:    *gatewayURL,
		GatewayToken:  token,
		ServingEvery:  *servingEvery,
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
		Sandbox:       sf.Config(),
		Logger:        logger,
		// The node's own check (health.go): the driver's answers and the kernel's log.
		HealthQuery:    healthCommand(*healthQuery, *gpus, *nvidiaSMI),
		KernelLog:      *kernelLog,
		HealthInterval: *healthInterval,
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
		srv := httpserver.New(mux)
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
	logger.Info("agent started", "api", *apiURL, "gpus", describe(devices), "pipeline", pipeline.Name, "emulated", pipeline.Emulated,
		"upstream", installed.String(), "pinned", upstream.CheckPinned(installed) == nil)
	err = a.Run(ctx)
	logger.Info("agent stopped")
	return err
}

// openCache opens the node's caches (nil for --cache-dir none).
func openCache(dir, workDir, hubURL, tokenFile string, modelGB, envGB, compileGB int64) (*nodecache.Cache, error) {
	if dir == "none" {
		return nil, nil
	}
	if dir == "" {
		dir = filepath.Join(filepath.Dir(filepath.Clean(workDir)), "cache")
	}
	cfg := nodecache.Config{Dir: dir, ModelCap: modelGB << 30, EnvCap: envGB << 30, CompileCap: compileGB << 30}
	if hubURL != "" {
		cfg.Hub = &nodecache.Hub{URL: hubURL}
		if tokenFile != "" {
			tok, err := os.ReadFile(tokenFile)
			if err != nil {
				return nil, fmt.Errorf("--hub-token-file: %w", err)
			}
			cfg.Hub.Token = strings.TrimSpace(string(tok))
		}
	}
	c, err := nodecache.Open(cfg)
	if err != nil {
		return nil, fmt.Errorf("--cache-dir: %w", err)
	}
	return c, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// healthCommand is the GPU health query: the operator's, else nvidia-smi's where it listed the
// GPUs (none for a node of --gpus: nothing would answer).
func healthCommand(flagValue, gpus, nvidiaSMI string) []string {
	if flagValue != "" {
		return strings.Fields(flagValue)
	}
	if gpus != "" {
		return nil
	}
	return append([]string{nvidiaSMI}, gpuagent.HealthQuery...)
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
