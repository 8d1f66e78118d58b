package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/httpserver"
	"github.com/hostedtrain/hostedtrain/queue"
)

// newGatewayCmd is `hostedtrain gateway`: the inference gateway as a service of its own (on AWS
// a container service behind a load balancer: a Lambda cannot hold agents' tunnels). It reads
// the same settings as the API's functions: HOSTEDTRAIN_REDIS_URL (and _CLUSTER, _AUTH,
// _PREFIX) and HOSTEDTRAIN_JWT_KEYS.
func newGatewayCmd() *cobra.Command {
	var addr, apiURL, advertise string
	var rate float64
	c := &cobra.Command{
		Use:   "gateway",
		Short: "Run the inference gateway: users' OpenAI-compatible requests in, agents' tunnels in (HOSTEDTRAIN_REDIS_URL, HOSTEDTRAIN_JWT_KEYS)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger := slog.New(slog.NewJSONHandler(os.Stderr, nil)).With("part", "gateway")
			opts, err := redis.ParseURL(os.Getenv("HOSTEDTRAIN_REDIS_URL"))
			if err != nil {
				return fmt.Errorf("HOSTEDTRAIN_REDIS_URL: %w", err)
			}
			if a := os.Getenv("HOSTEDTRAIN_REDIS_AUTH"); a != "" {
				opts.Password = a
			}
			var rdb redis.UniversalClient = redis.NewClient(opts)
			if strings.EqualFold(os.Getenv("HOSTEDTRAIN_REDIS_CLUSTER"), "true") {
				rdb = redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{opts.Addr}, Password: opts.Password, TLSConfig: opts.TLSConfig})
			}
			defer rdb.Close()
			keys, err := auth.ParseKeySet(os.Getenv("HOSTEDTRAIN_JWT_KEYS"))
			if err != nil {
				return fmt.Errorf("HOSTEDTRAIN_JWT_KEYS: %w", err)
			}
			q := queue.New(rdb, queue.Config{Prefix: os.Getenv("HOSTEDTRAIN_REDIS_PREFIX")})
			defer q.Close()
			cfg := gateway.Config{Verifier: auth.NewVerifier(keys, nil), Revoked: q.TokenRevoked, Deployments: q,
				RatePerOrg: rate, Logger: logger, Spent: gateway.BudgetSpent(q.GetOrg)}
			if apiURL != "" {
				cfg.Wake = wakeThrough(strings.TrimRight(apiURL, "/"))
			}
			if advertise == "auto" {
				if advertise, err = ownURL(addr); err != nil {
					return fmt.Errorf("--advertise auto: %w", err)
				}
			}
			if advertise != "" {
				logger.Info("gateway filed for the others as", "url", advertise)
				cfg.Routes = &gateway.Routes{Redis: rdb, Prefix: os.Getenv("HOSTEDTRAIN_REDIS_PREFIX"), Advertise: strings.TrimRight(advertise, "/")}
			}
			gw := gateway.New(cfg)
			defer gw.Close()
			srv := httpserver.New(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/healthz" {
					if err := rdb.Ping(r.Context()).Err(); err != nil {
						http.Error(w, "redis: "+err.Error(), http.StatusServiceUnavailable)
						return
					}
					fmt.Fprintf(w, "ok, %d tunnels\n", gw.Tunnels())
					return
				}
				gw.ServeHTTP(w, r)
			}))
			srv.Addr = addr
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			done := make(chan error, 1)
			go func() { done <- srv.ListenAndServe() }()
			logger.Info("gateway listening", "addr", addr)
			select {
			case err := <-done:
				return err
			case <-ctx.Done():
			}
			shut, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			gw.Close() // tunnels first: agents dial again, to this gateway's successor
			if err := srv.Shutdown(shut); err != nil && !errors.Is(err, http.ErrServerClosed) {
				return srv.Close()
			}
			return nil
		},
	}
	c.Flags().StringVar(&addr, "addr", ":8080", "where the gateway listens")
	c.Flags().StringVar(&apiURL, "api", os.Getenv("HOSTEDTRAIN_URL"), "the API, for deploying again adapters unloaded for being idle (empty: such requests are refused)")
	c.Flags().StringVar(&advertise, "advertise", os.Getenv("HOSTEDTRAIN_GATEWAY_ADVERTISE"), "with several gateways: the URL the others reach this one at (http://IP:PORT, or auto: this host's first private address and --addr's port); each hands a request to the one holding the node's tunnel. Empty: one gateway")
	c.Flags().Float64Var(&rate, "rate", gateway.DefaultRatePerOrg, "requests per second one organization may make through this gateway")
	return c
}

// ownURL is http://<this host's first non-loopback IPv4>:<addr's port>: a task's own address
// in its VPC (Fargate gives each task one).
func ownURL(addr string) (string, error) {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", err
	}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if ip, ok := a.(*net.IPNet); ok && !ip.IP.IsLoopback() && ip.IP.To4() != nil {
			return "http://" + net.JoinHostPort(ip.IP.String(), port), nil
		}
	}
	return "", errors.New("no non-loopback IPv4 address")
}

// wakeThrough deploys an idle adapter again through the API, as the caller (its token): the
// Prime surface's deploy of an adapter.
func wakeThrough(api string) func(ctx context.Context, org, id, token string) error {
	return func(ctx context.Context, _, id, token string) error {
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, api+"/api/v1/rft/adapters/"+id+"/deploy", nil)
		if err != nil {
			return err
		}
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("the API answered %s", resp.Status)
		}
		return nil
	}
}
