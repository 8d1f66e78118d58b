package gateway_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/internal/auth"
)

// BenchmarkInference is make bench-inference (docs/performance.md): on one machine, a real
// redis-server, the emulated vLLM (cmd/prime-rl-emulator serve, LoRA at run time) and one
// gateway process with one agent's tunnel.
//
//   - added latency: streamed chat completions at 200 concurrent streams, each timed from the
//     request to the stream's end, straight to the emulated server and through the gateway and
//     the tunnel (the same requests, one after the other); the figure is the difference of
//     the percentiles. Twice: paced as a model emits tokens (12 events 20 ms apart), and
//     flooded (no pause between events: the machine's cores are the limit);
//   - 1,000 concurrent streams through the gateway, each 20 tokens 50 ms apart: how many end
//     with [DONE] (none may be dropped).
func BenchmarkInference(b *testing.B) {
	for range b.N {
		s := newStack(b, gateway.Config{RatePerOrg: 1e9, Burst: 1 << 30})
		adapters, _ := s.deploy(10)
		s.tunnel()
		model := adapters[0].ModelID()
		token := s.tokenFor("acme", auth.ScopeJobsRead)
		direct := func() (*http.Request, error) {
			return streamRequest(s.vllm+"/v1/chat/completions", "vk", model)
		}
		through := func() (*http.Request, error) {
			return streamRequest(s.url+"/api/v1/chat/completions", token, model)
		}
		const conc, each = 200, 10
		client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1000, MaxConnsPerHost: 2000}}
		warm := func(mk func() (*http.Request, error)) { _, _ = runStreams(client, mk, 50, 2) }
		warm(direct)
		warm(through)
		d, derr := runStreams(client, direct, conc, each)
		g, gerr := runStreams(client, through, conc, each)
		if derr != nil || gerr != nil {
			b.Fatalf("direct: %v; through the gateway: %v", derr, gerr)
		}
		p := func(xs []time.Duration, q float64) time.Duration { return xs[int(q*float64(len(xs)-1))] }
		b.ReportMetric(float64((p(g, 0.5)-p(d, 0.5)).Microseconds())/1000, "flood-added-p50-ms")
		b.ReportMetric(float64((p(g, 0.99)-p(d, 0.99)).Microseconds())/1000, "flood-added-p99-ms")

		// Paced as a model emits tokens (20 ms apart): the same 200 concurrent streams.
		paced := newStack(b, gateway.Config{RatePerOrg: 1e9, Burst: 1 << 30}, "--emulate.token-time", "20ms")
		pa, _ := paced.deploy(10)
		paced.tunnel()
		pm, pt := pa[0].ModelID(), paced.tokenFor("acme", auth.ScopeJobsRead)
		pdirect := func() (*http.Request, error) { return streamRequest(paced.vllm+"/v1/chat/completions", "vk", pm) }
		pthrough := func() (*http.Request, error) { return streamRequest(paced.url+"/api/v1/chat/completions", pt, pm) }
		warm(pdirect)
		warm(pthrough)
		pd, pdf, derr := runStreamsTimed(client, pdirect, conc, 5)
		pg, pgf, gerr := runStreamsTimed(client, pthrough, conc, 5)
		if derr != nil || gerr != nil {
			b.Fatalf("paced direct: %v; through the gateway: %v", derr, gerr)
		}
		b.ReportMetric(float64(p(pd, 0.5).Microseconds())/1000, "paced-direct-p50-ms")
		b.ReportMetric(float64(p(pd, 0.99).Microseconds())/1000, "paced-direct-p99-ms")
		b.ReportMetric(float64(p(pg, 0.5).Microseconds())/1000, "paced-gateway-p50-ms")
		b.ReportMetric(float64(p(pg, 0.99).Microseconds())/1000, "paced-gateway-p99-ms")
		b.ReportMetric(float64((p(pg, 0.5)-p(pd, 0.5)).Microseconds())/1000, "paced-added-p50-ms")
		b.ReportMetric(float64((p(pg, 0.99)-p(pd, 0.99)).Microseconds())/1000, "paced-added-p99-ms")
		b.ReportMetric(float64((p(pgf, 0.5)-p(pdf, 0.5)).Microseconds())/1000, "paced-added-first-token-p50-ms")
		b.ReportMetric(float64((p(pgf, 0.99)-p(pdf, 0.99)).Microseconds())/1000, "paced-added-first-token-p99-ms")

		// 1,000 slow streams at once.
		slow := newStack(b, gateway.Config{RatePerOrg: 1e9, Burst: 1 << 30}, "--emulate.token-time", "50ms")
		sa, _ := slow.deploy(10)
		slow.tunnel()
		sm, st := sa[0].ModelID(), slow.tokenFor("acme", auth.ScopeJobsRead)
		var ok, dropped atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range 1000 {
			wg.Go(func() {
				req, _ := streamRequest(slow.url+"/api/v1/chat/completions", st, sm)
				if _, err := stream(client, req); err != nil {
					dropped.Add(1)
					return
				}
				ok.Add(1)
			})
		}
		wg.Wait()
		b.ReportMetric(float64(ok.Load()), "streams-done")
		b.ReportMetric(float64(dropped.Load()), "streams-dropped")
		b.ReportMetric(time.Since(start).Seconds(), "1000-streams-s")
		if dropped.Load() != 0 {
			b.Errorf("%d of 1000 concurrent streams dropped", dropped.Load())
		}
	}
}

func streamRequest(url, token, model string) (*http.Request, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true,
		"messages": []map[string]string{{"role": "user", "content": "one two three four five six seven eight nine ten"}}})
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// stream sends one streamed request and reads it to its end: an error unless it ends with
// [DONE]. It returns the stream's whole time.
func stream(c *http.Client, req *http.Request) (time.Duration, error) {
	d, _, err := streamTimed(c, req)
	return d, err
}

// streamTimed is stream, with the time to the first event (the first token's wait).
func streamTimed(c *http.Client, req *http.Request) (time.Duration, time.Duration, error) {
	began := time.Now()
	var first time.Duration
	resp, err := c.Do(req)
	if err != nil {
		return 0, 0, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return 0, 0, fmt.Errorf("%s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	done := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if first == 0 && strings.HasPrefix(line, "data: ") {
			first = time.Since(began)
		}
		if line == "data: [DONE]" {
			done = true
		}
	}
	if !done {
		return 0, 0, fmt.Errorf("the stream ended without [DONE] (%v)", sc.Err())
	}
	return time.Since(began), first, nil
}

// runStreams sends conc × each streamed requests, conc at a time, and returns their durations sorted.
func runStreams(c *http.Client, mk func() (*http.Request, error), conc, each int) ([]time.Duration, error) {
	all, _, err := runStreamsTimed(c, mk, conc, each)
	return all, err
}

// runStreamsTimed is runStreams with the times to first event, sorted.
func runStreamsTimed(c *http.Client, mk func() (*http.Request, error), conc, each int) ([]time.Duration, []time.Duration, error) {
	var mu sync.Mutex
	var all, firsts []time.Duration
	var first error
	var wg sync.WaitGroup
	for range conc {
		wg.Go(func() {
			for range each {
				req, err := mk()
				var d, f time.Duration
				if err == nil {
					d, f, err = streamTimed(c, req)
				}
				mu.Lock()
				if err != nil && first == nil {
					first = err
				}
				all, firsts = append(all, d), append(firsts, f)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	slices.Sort(all)
	slices.Sort(firsts)
	return all, firsts, first
}
