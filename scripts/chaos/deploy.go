package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hostedtrain/hostedtrain/internal/client"
	"github.com/hostedtrain/hostedtrain/internal/job"
)

// deployments is the chaos run's inference load: three deployments streamed from while agents
// are killed and the API (with its gateway) and Redis restarted. A stream may break — its node
// killed mid-way, the gateway restarted — but must end: with [DONE], an error event, or an
// error status; none may hang. At the end every deployment must come back (DEPLOYED, and a
// stream from it ending with [DONE]).
type deployments struct {
	user             *client.Client
	token, url       string
	models           []string
	ids              []string
	ok, broken, hung atomic.Int64
	statuses         sync.Map // status code -> count, of the refused
	http             *http.Client
}

// streamTimeout is what a stream may take before it counts as hung: far above a stream's ~1.5 s
// and the gateway's bounded wait for a model being deployed again (10 s).
const streamTimeout = 40 * time.Second

func newDeployments(user *client.Client, token, url string) *deployments {
	return &deployments{user: user, token: token, url: url, http: &http.Client{Timeout: streamTimeout}}
}

// run waits for three jobs to complete, deploys their newest checkpoints, then streams from
// them until ctx ends.
func (d *deployments) run(ctx context.Context) {
	deployed := map[string]bool{}
	for len(d.ids) < 3 && ctx.Err() == nil {
		done, _, err := d.user.ListJobs(ctx, job.ListFilter{Statuses: []job.Status{job.Completed}}, "", 10)
		for _, j := range done {
			if err != nil || len(d.ids) == 3 || deployed[j.ID] {
				continue
			}
			dep, err := d.user.Deploy(ctx, j.ID, "latest")
			if err != nil {
				continue // its checkpoints may be on their way; the next look tries again
			}
			deployed[j.ID] = true
			d.ids = append(d.ids, dep.ID)
			d.models = append(d.models, dep.Model)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("chaos: %d deployments streamed from under fire\n", len(d.ids))
	var wg sync.WaitGroup
	for _, m := range d.models {
		wg.Go(func() {
			for ctx.Err() == nil {
				switch err := d.stream(context.WithoutCancel(ctx), m); {
				case err == nil:
					d.ok.Add(1)
				case errors.Is(err, errHung):
					d.hung.Add(1)
					fmt.Println("chaos: a stream hung:", m, err)
				default:
					d.broken.Add(1)
					time.Sleep(200 * time.Millisecond) // the node is coming back
				}
			}
		})
	}
	wg.Wait()
}

var errHung = errors.New("no end within the stream timeout")

// stream makes one streamed chat request: nil if it ended with [DONE].
func (d *deployments) stream(ctx context.Context, model string) error {
	body, _ := json.Marshal(map[string]any{"model": model, "stream": true, "messages": []map[string]string{{"role": "user", "content": "hello"}}})
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, d.url+"/api/v1/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+d.token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := d.http.Do(req)
	if err != nil {
		if strings.Contains(err.Error(), "Client.Timeout") {
			return errHung
		}
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		n, _ := d.statuses.LoadOrStore(resp.StatusCode, new(atomic.Int64))
		n.(*atomic.Int64).Add(1)
		return fmt.Errorf("%s", resp.Status)
	}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "data: [DONE]" {
			return nil
		}
		if strings.Contains(line, `"error"`) {
			return errors.New("an error event: " + line)
		}
	}
	if err := sc.Err(); err != nil && strings.Contains(err.Error(), "Client.Timeout") {
		return errHung
	}
	return fmt.Errorf("the stream ended without [DONE] or an error event (%v)", sc.Err())
}

// verdict: no stream hung, and every deployment came back — DEPLOYED, a stream from it ending
// with [DONE] — within two minutes of the chaos' end.
func (d *deployments) verdict(ctx context.Context) error {
	back := 0
	deadline := time.Now().Add(2 * time.Minute)
	for i, id := range d.ids {
		for time.Now().Before(deadline) {
			dep, err := d.user.Deployment(ctx, id)
			if err == nil && dep.DeploymentStatus == job.Deployed && d.stream(ctx, d.models[i]) == nil {
				back++
				break
			}
			time.Sleep(500 * time.Millisecond)
		}
	}
	var refused []string
	d.statuses.Range(func(k, v any) bool {
		refused = append(refused, fmt.Sprintf("%d×%d", v.(*atomic.Int64).Load(), k))
		return true
	})
	fmt.Printf("chaos: deployments=%d streams ok=%d broken=%d (ended by an error event, a cut or a status: %s) hung=%d back=%d/%d\n",
		len(d.ids), d.ok.Load(), d.broken.Load(), strings.Join(refused, " "), d.hung.Load(), back, len(d.ids))
	switch {
	case len(d.ids) < 3:
		return fmt.Errorf("only %d deployments were made", len(d.ids))
	case d.hung.Load() > 0:
		return fmt.Errorf("%d streams hung", d.hung.Load())
	case back < len(d.ids):
		return fmt.Errorf("%d of %d deployments did not come back", len(d.ids)-back, len(d.ids))
	case d.ok.Load() == 0:
		return errors.New("no stream ended well: the inference load did not run")
	}
	return nil
}
