package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/gpuagent"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/blob"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/httpserver"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/lifecycle"
	"github.com/hostedtrain/hostedtrain/internal/mountns"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
	"github.com/hostedtrain/hostedtrain/internal/webhook"
	"github.com/hostedtrain/hostedtrain/queue"
	"github.com/hostedtrain/hostedtrain/webhooks"
)

type devOptions struct {
	addr     string
	dataDir  string
	agents   int
	emulator string
	stepTime time.Duration
	// emulateCheck is the command the emulator checks configs with, as upstream would.
	emulateCheck string
	// models is the operator's list of models (a TOML file), or "".
	models string
	// judgeURL and judgeKeyEnv are the operator's judge endpoint and the variable of this
	// environment that holds its key.
	judgeURL, judgeKeyEnv string
	// portRange is where the agents' jobs get their ports, split evenly among the agents.
	portRange string
	leaseTTL  time.Duration
	heartbeat time.Duration
	gpus      string
	queue     queue.Config
	// drainTimeout bounds a stop, from the signal to the exit, whatever state Redis is in.
	drainTimeout time.Duration

	sandbox sandbox.Flags

	allowLoopbackWebhooks bool
	webhookSchedule       string
}

func newDevCmd() *cobra.Command {
	var o devOptions
	c := &cobra.Command{
		Use:   "dev",
		Short: "Run the whole service on this machine: Redis, the API, the reaper and emulated GPU agents",
		Long: `dev starts a private redis-server (AOF on, files under --data), the API on --addr, the
reaper, the webhook dispatcher, and --agents GPU agents that run the EMULATED prime-rl (no GPU
needed), with object storage in --data/objects. Webhooks may reach receivers on this machine
unless --allow-loopback-webhooks=false. It writes an admin token to --data/admin.token. GET /healthz answers
200 once everything is up. If redis-server dies it is started again on the same port and AOF
(its pid is in --data/redis.pid). One dev at a time may use a --data folder (--data/dev.lock).
Ctrl-C or SIGTERM stops every process it started, within --drain-timeout; a second one stops
them at once.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// The agents' jobs mount their file systems where only this process and its
			// children see them, and they go with it however it ends.
			mountns.Private()
			return runDev(cmd.Context(), o, cmd.OutOrStdout())
		},
	}
	f := c.Flags()
	f.StringVar(&o.addr, "addr", "127.0.0.1:8080", "where the API listens (port 0 picks a free one; see --data/api.url)")
	f.StringVar(&o.dataDir, "data", ".hostedtrain/dev", "folder for Redis data, objects, keys and logs")
	f.IntVar(&o.agents, "agents", 1, "emulated GPU agents to run")
	f.StringVar(&o.emulator, "emulator", "", "the prime-rl-emulator binary (default: beside this one, then PATH)")
	f.DurationVar(&o.stepTime, "step-time", 250*time.Millisecond, "emulated time of one training step")
	f.StringVar(&o.portRange, "port-range", fmt.Sprintf("%d-%d", gpuagent.DefaultPortRange[0], gpuagent.DefaultPortRange[1]),
		"where the agents' jobs get their blocks of 64 ports (every port prime-rl binds), split among the agents; give each of several dev stacks on one machine its own")
	f.StringVar(&o.judgeURL, "judge-base-url", "", "an OpenAI-compatible judge endpoint: jobs graded by a judge they hold no key for are graded through it (POST /v1/judge/chat/completions)")
	f.StringVar(&o.judgeKeyEnv, "judge-key-env", "HOSTEDTRAIN_JUDGE_KEY", "the variable of this environment that holds --judge-base-url's key")
	f.StringVar(&o.models, "models", "", "a TOML file of [[model]] tables (name, gpus, price_per_gpu_hour): the only models training jobs may name")
	f.StringVar(&o.emulateCheck, "emulate-check", "", "the command the emulator checks each config with, as upstream would (the conformance kit: \"python3 ../shared/upstream/check.py\")")
	sf := flag.NewFlagSet("sandbox", flag.ContinueOnError)
	o.sandbox.Register(sf)
	f.AddGoFlagSet(sf)
	f.DurationVar(&o.leaseTTL, "lease-ttl", 15*time.Second, "how long a lease lives without a heartbeat")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "how often agents heartbeat")
	f.StringVar(&o.gpus, "gpus", "H100:8", "GPUs each emulated agent reports, MODEL:COUNT")
	f.IntVar(&o.queue.MaxRunning, "max-running", 0, "per-organization running limit (0: none)")
	f.IntVar(&o.queue.MaxQueued, "max-queued", queue.DefaultMaxQueued, "per-organization queued limit, restarts included")
	f.DurationVar(&o.queue.Retention, "job-retention", queue.DefaultRetention,
		"how long a job that ended stays in Redis before it is archived to --data/objects (still readable by id, no longer listed)")
	f.IntVar(&o.queue.MaxEnded, "max-ended", queue.DefaultMaxEnded, "jobs that ended an organization keeps in Redis within the retention; its oldest past this are archived early")
	f.DurationVar(&o.queue.RetryBackoff, "retry-backoff", 2*time.Second, "wait before a job whose lease lapsed or that met a platform fault is retried (doubles each time)")
	f.DurationVar(&o.queue.RetryElsewhereFor, "retry-elsewhere-for", 30*time.Second,
		"how long a retried job passes over the agent it failed on (so another takes it if there is one)")
	f.IntVar(&o.queue.QuarantineAfter, "quarantine-after", 1, "failed health checks of one agent's node within an hour that quarantine it (the agent's own check: the GPU driver, the kernel's log; never a job's output; -1: never); `hostedtrain admin nodes uncordon` puts it back")
	f.DurationVar(&o.queue.StopGrace, "stop-grace", 30*time.Second, "how long a stopped job's agent has to confirm")
	f.BoolVar(&o.allowLoopbackWebhooks, "allow-loopback-webhooks", true,
		"let webhooks reach receivers on this machine (127.0.0.1, ::1); false refuses them as production does")
	f.StringVar(&o.webhookSchedule, "webhook-schedule", webhooks.FormatSchedule(webhooks.DefaultSchedule), "waits between a webhook delivery's retries")
	f.DurationVar(&o.drainTimeout, "drain-timeout", 20*time.Second,
		"how long a stop (Ctrl-C, SIGTERM) may take: agents hand their jobs back, then the API and Redis stop; what has not stopped by then is killed")
	return c
}

func findEmulator(flag string) (string, error) {
	if flag != "" {
		return filepath.Abs(flag)
	}
	if self, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(self), "prime-rl-emulator")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	if p, err := exec.LookPath("prime-rl-emulator"); err == nil {
		return p, nil
	}
	return "", errors.New("prime-rl-emulator not found beside hostedtrain or on PATH: run `make build`, or pass --emulator")
}

func runDev(ctx context.Context, o devOptions, out io.Writer) error {
	gpus, err := job.ParseGPUs(o.gpus)
	if err != nil {
		return err
	}
	ports, err := gpuagent.ParsePortRange(o.portRange)
	if err != nil {
		return err
	}
	share := (ports[1] - ports[0] + 1) / max(o.agents, 1)
	if share < upstream.PortBlockSize {
		return fmt.Errorf("--port-range %s leaves each of %d agents fewer than %d ports", o.portRange, o.agents, upstream.PortBlockSize)
	}
	if o.drainTimeout < time.Second {
		return fmt.Errorf("--drain-timeout %s: give it at least 1s", o.drainTimeout)
	}
	emulator, err := findEmulator(o.emulator)
	if err != nil {
		return err
	}
	data, err := filepath.Abs(o.dataDir)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(data, 0o755); err != nil {
		return err
	}
	// Before anything else in the folder is touched: its api.url, its Redis and its AOF may be
	// another stack's.
	lock, err := lockData(data)
	if err != nil {
		return err
	}
	defer lock.Close()
	logf, err := os.OpenFile(filepath.Join(data, "hostedtrain.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	logger := slog.New(slog.NewJSONHandler(logf, nil))

	keys, err := devKeys(data)
	if err != nil {
		return err
	}
	secrets, err := seal.LoadOrCreateFile(filepath.Join(data, "secrets.key"))
	if err != nil {
		return err
	}
	// api.url appears once the stack is ready; scripts wait for it.
	urlPath := filepath.Join(data, "api.url")
	_ = os.Remove(urlPath)
	defer os.Remove(urlPath)

	// Listen first: a busy port should fail before anything starts.
	ln, err := net.Listen("tcp", o.addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w (pass --addr)", o.addr, err)
	}
	defer ln.Close()
	baseURL := "http://" + ln.Addr().String()

	// Redis stops last, and gets a share of the drain timeout of its own: a hung server is
	// killed when its share is up.
	redisStop := min(o.drainTimeout/4, 5*time.Second)
	rs, err := redisproc.Supervise(ctx, redisproc.SuperviseOptions{
		Options: redisproc.Options{Dir: filepath.Join(data, "redis"), AppendOnly: true, StopTimeout: redisStop},
		PIDFile: filepath.Join(data, "redis.pid"),
		Logger:  logger.With("part", "redis"),
	})
	if err != nil {
		return err
	}
	defer func() {
		rs.Stop()
		logger.Info("stopped")
	}()
	// The rest stops in the reverse of the order it starts, within what is left.
	stops := &lifecycle.Group{Logger: logger}
	defer func() { stops.Stop(time.Now().Add(o.drainTimeout - redisStop)) }()

	rdb := redis.NewClient(&redis.Options{Addr: rs.Addr})
	store, err := blob.NewDir(filepath.Join(data, "objects"))
	if err != nil {
		return err
	}
	qc := o.queue
	qc.LeaseTTL, qc.HeartbeatInterval, qc.Store = o.leaseTTL, o.heartbeat, store
	q := queue.New(rdb, qc)
	stops.OnStop("redis client", func(context.Context) { q.Close(); rdb.Close() })

	schedule, err := webhooks.ParseSchedule(o.webhookSchedule)
	if err != nil {
		return fmt.Errorf("--webhook-schedule: %w", err)
	}
	hooks, err := webhooks.New(rdb, webhooks.Config{
		Prefix: qc.Prefix, Secrets: secrets, Jobs: q, Hooks: q, Schedule: schedule,
		Guard:  &webhook.Guard{AllowLoopback: o.allowLoopbackWebhooks},
		Logger: logger.With("part", "webhooks"),
	})
	if err != nil {
		return err
	}
	var ready atomic.Bool
	var judge *api.Judge
	if o.judgeURL != "" {
		key := os.Getenv(o.judgeKeyEnv)
		if key == "" {
			return fmt.Errorf("--judge-base-url needs its key in $%s (--judge-key-env)", o.judgeKeyEnv)
		}
		judge = &api.Judge{BaseURL: o.judgeURL, Key: key}
	}
	var models []api.Model
	if o.models != "" {
		data, err := os.ReadFile(o.models)
		if err != nil {
			return fmt.Errorf("--models: %w", err)
		}
		if models, err = api.ParseModels(data); err != nil {
			return fmt.Errorf("--models %s: %w", o.models, err)
		}
	}
	handler, err := api.New(api.Config{
		Queue: q, Verifier: auth.NewVerifier(keys, nil), Secrets: secrets, Store: store, Webhooks: hooks, Logger: logger.With("part", "api"),
		Models: models,
		Judge:  judge,
		Ready: func() error {
			if !ready.Load() {
				return errors.New("the local stack is still starting")
			}
			return nil
		},
	})
	if err != nil {
		return err
	}
	// The inference gateway shares the API's origin: PRIME_INFERENCE_URL=<url>/api/v1, and
	// the agents' tunnels at /v1/agent/tunnel.
	gw := gateway.New(gateway.Config{
		Verifier: auth.NewVerifier(keys, nil), Revoked: q.TokenRevoked, Deployments: q,
		Wake:   handler.Redeploy,
		Spent:  gateway.BudgetSpent(q.GetOrg),
		Logger: logger.With("part", "gateway"),
	})
	stops.OnStop("gateway tunnels", func(context.Context) { gw.Close() })
	srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if gw.Handles(r.URL.Path) {
			gw.ServeHTTP(w, r)
			return
		}
		handler.ServeHTTP(w, r)
	}))
	srvDone := make(chan error, 1)
	go func() { srvDone <- srv.Serve(ln) }()
	stops.OnStop("API server", func(ctx context.Context) {
		if srv.Shutdown(ctx) != nil {
			_ = srv.Close()
		}
	})

	stops.Go(ctx, "reaper", queue.NewReaper(q, time.Second, logger.With("part", "reaper")))
	stops.Go(ctx, "webhook dispatcher", hooks.Dispatcher(200*time.Millisecond))

	// Agents stop first (their pipelines with them), before the API and Redis go; they drain
	// side by side.
	var agents []lifecycle.Service
	emulateFlags := []string{"--emulate.step-time", o.stepTime.String()}
	if o.emulateCheck != "" {
		emulateFlags = append(emulateFlags, "--emulate.check", o.emulateCheck)
	}
	for i := 1; i <= o.agents; i++ {
		name := fmt.Sprintf("dev-agent-%d", i)
		tok, err := keys.Issue(auth.TokenRequest{Subject: name, Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: 365 * 24 * time.Hour}, time.Now())
		if err != nil {
			return err
		}
		a, err := gpuagent.New(gpuagent.Config{
			API:          client.New(baseURL, tok),
			GatewayURL:   baseURL,
			GatewayToken: tok,
			ServingEvery: 500 * time.Millisecond,
			Store:        store,
			WorkDir:      filepath.Join(data, "agents", name),
			Devices:      gpuagent.DevicesFromSpec(gpus),
			Pipeline:     render.EmulatedPipeline(emulator, filepath.Join(data, "prime-rl"), emulateFlags...),
			// The agents of one process take separate ranges of ports (a node has one agent).
			PortRange:     [2]int{ports[0] + (i-1)*share, ports[0] + i*share - 1},
			StopGrace:     min(10*time.Second, o.drainTimeout/4),
			DrainTimeout:  o.drainTimeout,
			PollInterval:  250 * time.Millisecond,
			FlushInterval: time.Second,
			Sandbox:       sandboxFor(o.sandbox, i),
			Logger:        logger.With("part", "agent", "agent", name),
		})
		if err != nil {
			return err
		}
		agents = append(agents, a)
	}
	stops.Go(ctx, "agents", lifecycle.Func(func(ctx context.Context) error {
		var wg sync.WaitGroup
		for _, a := range agents {
			wg.Go(func() {
				if err := a.Run(ctx); err != nil {
					logger.Error("an agent could not run", "err", err)
				}
			})
		}
		wg.Wait()
		return nil
	}))

	admin, err := keys.Issue(auth.TokenRequest{Subject: "dev-admin", Org: "dev", Scopes: []string{auth.ScopeAdmin}, TTL: 30 * 24 * time.Hour}, time.Now())
	if err != nil {
		return err
	}
	tokenPath := filepath.Join(data, "admin.token")
	if err := os.WriteFile(tokenPath, []byte(admin+"\n"), 0o600); err != nil {
		return err
	}
	ready.Store(true)
	webhookNote := "public internet only (loopback refused, as in production)"
	if o.allowLoopbackWebhooks {
		webhookNote = "may reach receivers on this machine (loopback allowed; --allow-loopback-webhooks=false refuses them as production does)"
	}
	// The banner comes before the url file: whoever waits for the file finds the banner too.
	fmt.Fprintf(out, "hostedtrain dev is up\n  API          %s (health: %s/healthz)\n  admin token  %s\n  url file     %s\n  redis        %s (data in %s; restarted if it dies; pid in %s)\n  agents       %d emulated (prime-rl-emulator: no GPU work is done)\n  webhooks     %s\n  logs         %s\nCtrl-C stops everything (within %s; a second Ctrl-C at once).\n",
		baseURL, baseURL, tokenPath, urlPath, rs.Addr, rs.Dir, filepath.Join(data, "redis.pid"), o.agents, webhookNote, logf.Name(), o.drainTimeout)
	if err := writeFileAtomic(urlPath, []byte(baseURL+"\n")); err != nil {
		return err
	}

	select {
	case <-ctx.Done():
		exitOnSecondSignal(out, rs)
		fmt.Fprintln(out, "hostedtrain dev: stopping")
		logger.Info("stopping", "drain_timeout", o.drainTimeout.String())
		return nil
	case err := <-srvDone:
		return fmt.Errorf("API server: %w", err)
	}
}

// exitOnSecondSignal makes a second Ctrl-C or SIGTERM during the stop exit at once: Redis
// is killed (it may be hung) and the pipelines die with this process. It listens from the
// moment it returns.
func exitOnSecondSignal(out io.Writer, rs *redisproc.Supervisor) {
	again := make(chan os.Signal, 1)
	signal.Notify(again, os.Interrupt, syscall.SIGTERM)
	go func() {
		<-again
		fmt.Fprintln(out, "hostedtrain dev: second signal: stopping at once")
		_ = syscall.Kill(-rs.PID(), syscall.SIGKILL)
		os.Exit(1)
	}()
}

// lockData takes --data for this process: two stacks on one folder would run two
// redis-servers on one AOF and overwrite each other's api.url. The lock is the kernel's
// (flock), so it is let go however the process ends; the file holds the owner's pid for the
// error the next one gets.
func lockData(data string) (*os.File, error) {
	f, err := os.OpenFile(filepath.Join(data, "dev.lock"), os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		b, _ := io.ReadAll(io.LimitReader(f, 64))
		f.Close()
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
		}
		owner := strings.TrimSpace(string(b))
		if _, err := strconv.Atoi(owner); err != nil {
			owner = "unknown"
		}
		return nil, fmt.Errorf("another hostedtrain dev (pid %s) is using --data %s: stop it, or give this one another --data", owner, data)
	}
	if err := f.Truncate(0); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.WriteAt([]byte(strconv.Itoa(mountns.PID())+"\n"), 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// devKeys loads the stack's signing keys, making them on first start.
func devKeys(data string) (*auth.KeySet, error) {
	path := filepath.Join(data, keysFile)
	ks, err := auth.LoadKeySetFile(path)
	if err == nil {
		return ks, nil
	}
	if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	if ks, err = auth.NewKeySet(); err != nil {
		return nil, err
	}
	return ks, ks.SaveFile(path)
}

// sandboxFor is agent i's sandbox (1-based): the agents of one dev stack give their job slots
// users of their own.
func sandboxFor(f sandbox.Flags, i int) *sandbox.Config {
	sb := f.Config()
	if sb != nil {
		sb.UIDBase += (i - 1) * 64
	}
	return sb
}
