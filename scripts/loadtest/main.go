// Command loadtest is `make load`: N job submissions over HTTP at concurrency C against the
// real API (on its own redis-server, with AGENTS emulated agents claiming and completing the
// jobs as they come), then the same requests against the floor: a minimal net/http handler
// that only writes one Redis key. It prints latency percentiles, errors and throughput of
// both, measured in the same run on the same machine.
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math"
	"net"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hostedtrain/hostedtrain/api"
	"github.com/hostedtrain/hostedtrain/internal/auth"
	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/httpserver"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/redisproc"
	"github.com/hostedtrain/hostedtrain/internal/seal"
	"github.com/hostedtrain/hostedtrain/queue"
)

const jobBody = `{"model":"Qwen/Qwen3-4B-Instruct-2507","env":[{"id":"primeintellect/alphabet-sort"}],"max_steps":10,"batch_size":16,"rollouts_per_example":4}`

func main() {
	n := flag.Int("n", 10000, "submissions")
	c := flag.Int("c", 64, "concurrent clients")
	agents := flag.Int("agents", 200, "emulated agents claiming")
	cpuProfile := flag.String("cpuprofile", "", "write the process's CPU profile (API, agents and load together) here")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			log.Fatal(err)
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			log.Fatal(err)
		}
		defer pprof.StopCPUProfile()
	}
	if err := run(*n, *c, *agents); err != nil {
		fmt.Fprintln(os.Stderr, "loadtest:", err)
		os.Exit(1)
	}
}

func run(n, c, agents int) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dir, err := os.MkdirTemp("", "hostedtrain-load")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	srv, err := redisproc.Start(ctx, redisproc.Options{Dir: dir, AppendOnly: true})
	if err != nil {
		return err
	}
	defer srv.Stop()
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr, PoolSize: 256})
	defer rdb.Close()

	keys, err := auth.NewKeySet()
	if err != nil {
		return err
	}
	sk, err := seal.NewKey("k1")
	if err != nil {
		return err
	}
	secrets, err := seal.Parse(sk)
	if err != nil {
		return err
	}
	// One organization submits everything: the queued limit would measure the 429s, not the API.
	q := queue.New(rdb, queue.Config{MaxClaimWait: 2 * time.Second, MaxQueued: math.MaxInt32})
	defer q.Close()
	h, err := api.New(api.Config{Queue: q, Verifier: auth.NewVerifier(keys, nil), Secrets: secrets,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	apiURL, stopAPI, err := serve(h)
	if err != nil {
		return err
	}
	defer stopAPI()

	// The agents claim with long polls and complete each job at once.
	var completed atomic.Int64
	var agentErrs atomic.Int64
	var wg sync.WaitGroup
	agentCtx, stopAgents := context.WithCancel(ctx)
	defer stopAgents()
	for i := range agents {
		tok, err := keys.Issue(auth.TokenRequest{Subject: fmt.Sprintf("load-agent-%d", i), Org: "agents", Scopes: []string{auth.ScopeAgent}, TTL: time.Hour}, time.Now())
		if err != nil {
			return err
		}
		ac := client.New(apiURL, tok)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for agentCtx.Err() == nil {
				cl, err := ac.Claim(agentCtx, job.ClaimRequest{GPUs: []job.GPU{{Model: "H100", Count: 8}}, Wait: 2 * time.Second})
				if err != nil {
					if agentCtx.Err() == nil {
						agentErrs.Add(1)
						time.Sleep(100 * time.Millisecond)
					}
					continue
				}
				if cl == nil {
					continue
				}
				if err := ac.Complete(agentCtx, cl.Job.ID, job.Outcome{Token: cl.Lease.Token}); err != nil {
					agentErrs.Add(1)
					continue
				}
				completed.Add(1)
			}
		}()
	}
	tok, err := keys.Issue(auth.TokenRequest{Org: "load", Scopes: []string{auth.ScopeJobsWrite}, TTL: time.Hour}, time.Now())
	if err != nil {
		return err
	}
	full := load(apiURL+"/v1/jobs", "Bearer "+tok, n, c, http.StatusCreated)
	deadline := time.Now().Add(2 * time.Minute)
	for completed.Load() < int64(full.ok) && time.Now().Before(deadline) {
		time.Sleep(50 * time.Millisecond)
	}
	drained := time.Since(full.began)
	stopAgents()
	wg.Wait()

	// The floor: net/http and one Redis write per request, on the same server.
	var seq atomic.Int64
	floorURL, stopFloor, err := serve(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		if err == nil {
			err = rdb.Set(r.Context(), "floor:"+strconv.FormatInt(seq.Add(1), 10), b, 0).Err()
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
	}))
	if err != nil {
		return err
	}
	defer stopFloor()
	floor := load(floorURL+"/jobs", "", n, c, http.StatusCreated)

	fmt.Printf("load: %d submissions over HTTP at concurrency %d; %d emulated agents claiming (%s)\n", n, c, agents, time.Now().UTC().Format("2006-01-02"))
	fmt.Printf("%-34s %9s %9s %9s %7s %12s\n", "", "p50", "p99", "max", "errors", "throughput")
	for _, r := range []struct {
		name string
		res  result
	}{{"hostedtrain POST /v1/jobs", full}, {"floor (net/http + one Redis SET)", floor}} {
		fmt.Printf("%-34s %9s %9s %9s %7d %9.0f/s\n", r.name, r.res.pct(50), r.res.pct(99), r.res.pct(100), r.res.errs, r.res.throughput())
	}
	fmt.Printf("agents: %d jobs claimed and completed (%d agent errors); all submitted jobs done %.1f s after the first submission\n",
		completed.Load(), agentErrs.Load(), drained.Seconds())
	if full.errs > 0 || floor.errs > 0 || completed.Load() != int64(full.ok) {
		return errors.New("errors or jobs left undone")
	}
	return nil
}

func serve(h http.Handler) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	s := httpserver.New(h)
	go func() { _ = s.Serve(ln) }()
	return "http://" + ln.Addr().String(), func() { _ = s.Close() }, nil
}

type result struct {
	lat      []time.Duration
	ok, errs int
	began    time.Time
	took     time.Duration
}

func (r result) pct(p int) time.Duration {
	if len(r.lat) == 0 {
		return 0
	}
	i := (len(r.lat) - 1) * p / 100
	return r.lat[i].Round(10 * time.Microsecond)
}

func (r result) throughput() float64 { return float64(r.ok) / r.took.Seconds() }

// load sends n POSTs of jobBody to url from c clients and measures each.
func load(url, authz string, n, c, want int) result {
	tr := &http.Transport{MaxIdleConnsPerHost: c, MaxConnsPerHost: c}
	hc := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	defer tr.CloseIdleConnections()
	var next atomic.Int64
	var mu sync.Mutex
	res := result{began: time.Now()}
	var wg sync.WaitGroup
	for range c {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var lat []time.Duration
			ok, errs := 0, 0
			for next.Add(1) <= int64(n) {
				req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader([]byte(jobBody)))
				req.Header.Set("Content-Type", "application/json")
				if authz != "" {
					req.Header.Set("Authorization", authz)
				}
				t0 := time.Now()
				resp, err := hc.Do(req)
				var body []byte
				if err == nil {
					body, _ = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				lat = append(lat, time.Since(t0))
				if err != nil || resp.StatusCode != want {
					if errs == 0 {
						fmt.Fprintf(os.Stderr, "loadtest: %s: %v %s\n", url, err, body)
					}
					errs++
					continue
				}
				ok++
			}
			mu.Lock()
			res.lat = append(res.lat, lat...)
			res.ok += ok
			res.errs += errs
			mu.Unlock()
		}()
	}
	wg.Wait()
	res.took = time.Since(res.began)
	slices.Sort(res.lat)
	return res
}
