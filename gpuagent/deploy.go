package gpuagent

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/gateway"
	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/wire"
)

// A serve job (made by a deploy) runs a model server: vLLM on the job's GPUs in its sandbox,
// with the LoRA adapters the service names loaded and unloaded at run time (or one full
// fine-tune's weights). Every ServingEvery the agent tells the service, under the job's lease,
// what the server holds and hears what it is to hold; each new adapter's weights are fetched,
// checked against the checkpoint's sha256 and loaded. Users reach the server through the
// gateway: the agent's tunnel (gateway.Tunnel) hands each request for this job to its server.

// servingAPI is the agent's API where it can serve deployments (client.Client can).
type servingAPI interface {
	Serving(ctx context.Context, id, token string, loaded []string, failed map[string]string) ([]wire.ServedAdapter, error)
}

// DefaultServingEvery is how often a serve job's agent reports what its server holds.
const DefaultServingEvery = 2 * time.Second

// localServer is a serve job's model server, where the agent's tunnel hands its requests.
type localServer struct {
	port   int
	key    string
	client *http.Client
}

// superviseServe runs a serve job: its model server, then the loop that keeps the adapters
// it holds what the service says, until the job is stopped, its lease lost or the agent drains.
func (r *jobRun) superviseServe(drain, ctx context.Context, p *prepared) ran {
	cfg := r.deps.cfg
	api, ok := cfg.API.(servingAPI)
	if !ok {
		return ran{err: errors.New("this agent's API client cannot serve deployments")}
	}
	waiting, endWait := until(ctx, drain.Done(), r.lease.stopped, r.lease.lost, r.lease.released)
	defer endWait()
	token := r.claim.Lease.Token
	sv := r.claim.Job.Config.Serve
	loaded := map[string]string{} // adapter id -> the model id it is loaded under
	failed := map[string]string{}
	if sv != nil && sv.Adapter != "" {
		// A full fine-tune's weights are the server's model: fetched before it starts.
		wanted, err := api.Serving(waiting, r.claim.Job.ID, token, nil, nil)
		if err != nil {
			return r.servingEnded(drain, err)
		}
		for _, a := range wanted {
			if a.ID == sv.Adapter {
				if err := r.fetchWeights(waiting, a); err != nil {
					return ran{err: fmt.Errorf("fetch the weights of %s: %w", a.Model, err)}
				}
				loaded[a.ID] = a.Model
			}
		}
		if len(loaded) == 0 {
			return ran{err: fmt.Errorf("the service no longer wants adapter %s served", sv.Adapter)}
		}
	}
	server, err := r.startServerEnv(ctx, p.rendered.Serve, p.key, cfg.ServeTimeout, waiting.Done(), render.ServeEnv)
	if err != nil {
		return ran{err: err, cause: r.causeOf(drain)}
	}
	r.phases.mark(job.PhaseInference)
	if len(loaded) > 0 {
		r.phases.mark(job.PhaseFirstModel) // a full fine-tune's server serves its model once healthy
	}
	defer func() {
		r.note("stopping the model server")
		server.terminate(cfg.StopGrace)
	}()
	// Users' requests reuse their connections to the server (dialled inside the job's network).
	client := jobClient(r.box, 0)
	if t, ok := client.Transport.(*http.Transport); ok {
		t.DisableKeepAlives, t.MaxIdleConnsPerHost = false, 256
	}
	local := &localServer{port: p.rendered.Serve.Port, key: p.key, client: client}
	r.deps.serving(r.claim.Job.ID, local)
	defer r.deps.serving(r.claim.Job.ID, nil)
	r.deps.tel.pipelineStarted(time.Now())
	r.lease.setRunning()
	r.note("serving", "model", p.rendered.Serve.Model, "port", local.port)

	tick := time.NewTicker(cmp.Or(cfg.ServingEvery, DefaultServingEvery))
	defer tick.Stop()
	for {
		wanted, err := api.Serving(waiting, r.claim.Job.ID, token, slices.Collect(maps.Keys(loaded)), failed)
		if err != nil && (errors.Is(err, job.ErrLeaseLost) || waiting.Err() != nil) {
			return r.servingEnded(drain, err)
		}
		if err == nil {
			clear(failed)
			r.syncAdapters(waiting, local, wanted, loaded, failed, sv != nil && sv.Adapter != "")
		}
		select {
		case <-tick.C:
		case <-waiting.Done():
			return r.servingEnded(drain, waiting.Err())
		case <-server.done:
			return ran{started: true, code: server.exitCode(), exit: server.describeExit()}
		}
	}
}

// servingEnded is how a serve job's loop ended: stopped, drained, or its lease lost.
func (r *jobRun) servingEnded(drain context.Context, err error) ran {
	select {
	case <-r.lease.lost:
		return ran{started: true, cause: causeLost}
	default:
	}
	if errors.Is(err, job.ErrLeaseLost) {
		return ran{started: true, cause: causeLost}
	}
	if c := r.causeOf(drain); c != causeNone {
		return ran{started: true, cause: c}
	}
	return ran{started: true, cause: causeStop}
}

// syncAdapters loads what is wanted and not loaded, unloads what is loaded and not wanted. A
// full fine-tune's server holds its one model and loads nothing.
func (r *jobRun) syncAdapters(ctx context.Context, s *localServer, wanted []wire.ServedAdapter, loaded, failed map[string]string, full bool) {
	if full {
		return
	}
	want := map[string]bool{}
	for _, a := range wanted {
		want[a.ID] = true
		if _, ok := loaded[a.ID]; ok {
			continue
		}
		began := time.Now()
		if err := r.fetchWeights(ctx, a); err != nil {
			failed[a.ID] = fmt.Sprintf("fetch its weights: %v", err)
			r.warn(fmt.Sprintf("adapter %s: %s", a.Model, failed[a.ID]))
			continue
		}
		if err := s.call(ctx, "/v1/load_lora_adapter", map[string]string{"lora_name": a.Model, "lora_path": render.WeightsDir(r.dir, a.ID)}); err != nil {
			failed[a.ID] = fmt.Sprintf("load it: %v", err)
			r.warn(fmt.Sprintf("adapter %s: %s", a.Model, failed[a.ID]))
			continue
		}
		loaded[a.ID] = a.Model
		r.phases.mark(job.PhaseFirstModel)
		r.note("adapter loaded", "model", a.Model, "step", a.Step, "took", time.Since(began).Round(time.Millisecond))
	}
	for id, model := range loaded {
		if want[id] {
			continue
		}
		if err := s.call(ctx, "/v1/unload_lora_adapter", map[string]string{"lora_name": model}); err != nil && !strings.Contains(err.Error(), "cannot be found") {
			r.warn(fmt.Sprintf("adapter %s: unload it: %v", model, err))
			continue
		}
		delete(loaded, id)
		_ = os.RemoveAll(render.WeightsDir(r.dir, id))
		r.note("adapter unloaded", "model", model)
	}
}

// call posts a JSON body to the job's server, with its key.
func (s *localServer) call(ctx context.Context, path string, body any) error {
	b, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://127.0.0.1:%d%s", s.port, path), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Authorization", "Bearer "+s.key)
	resp, err := s.client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		var e struct{ Message string }
		if json.Unmarshal(msg, &e) == nil && e.Message != "" {
			return fmt.Errorf("%s: %s", resp.Status, e.Message)
		}
		return fmt.Errorf("%s: %s", resp.Status, strings.TrimSpace(string(msg)))
	}
	return nil
}

// fetchWeights downloads an adapter's weights into its folder under the job's, each file
// checked against the checkpoint's sha256 and size before it is kept; a file that does not
// match is removed and the adapter refused.
func (r *jobRun) fetchWeights(ctx context.Context, a wire.ServedAdapter) error {
	dir := render.WeightsDir(r.dir, a.ID)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if len(a.Files) == 0 {
		return errors.New("its checkpoint lists no weights")
	}
	for _, f := range a.Files {
		rel := strings.TrimPrefix(f.Path, jobdata.WeightsDir)
		dst := filepath.Join(dir, filepath.FromSlash(rel))
		if !strings.HasPrefix(dst, dir+string(filepath.Separator)) {
			return fmt.Errorf("a weights file outside its folder: %q", f.Path)
		}
		if err := download(ctx, f, dst); err != nil {
			_ = os.RemoveAll(dir)
			return fmt.Errorf("%s: %w", rel, err)
		}
	}
	return nil
}

// download fetches one file to dst through a temporary file, kept only when its size and
// sha256 are the manifest's.
func download(ctx context.Context, f wire.DownloadFile, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.URL, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("download answered %s", resp.Status)
	}
	tmp, err := os.CreateTemp(filepath.Dir(dst), ".part-*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(tmp, h), resp.Body)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if sum := hex.EncodeToString(h.Sum(nil)); n != f.Bytes || (f.SHA256 != "" && sum != f.SHA256) {
		return fmt.Errorf("%d bytes, sha256 %s; the checkpoint says %d bytes, %s", n, sum, f.Bytes, f.SHA256)
	}
	// Readable by the server (the job's own user in the sandbox), written by the agent alone.
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dst)
}

// tunnelHandler hands each request that comes through the gateway's tunnel to the model
// server of the serve job it names; an unknown job is a 404.
func (a *Agent) tunnelHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(gateway.ServerHeader)
		a.mu.Lock()
		s := a.servers[id]
		a.mu.Unlock()
		if s == nil {
			http.Error(w, `{"error":{"message":"no such model server on this node","type":"server_error","code":"server_gone"}}`, http.StatusNotFound)
			return
		}
		// The body is read whole first: a server stops reading a request's body once its
		// answer starts.
		body, err := io.ReadAll(io.LimitReader(r.Body, 64<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req, err := http.NewRequestWithContext(r.Context(), r.Method, fmt.Sprintf("http://127.0.0.1:%d%s", s.port, r.URL.Path), bytes.NewReader(body))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		req.Header.Set("Content-Type", r.Header.Get("Content-Type"))
		req.Header.Set("Authorization", "Bearer "+s.key)
		resp, err := s.client.Do(req)
		if err != nil {
			http.Error(w, `{"error":{"message":"the model server did not answer","type":"server_error","code":"server_unreachable"}}`, http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		for _, h := range []string{"Content-Type", "Cache-Control"} {
			if v := resp.Header.Get(h); v != "" {
				w.Header().Set(h, v)
			}
		}
		w.WriteHeader(resp.StatusCode)
		rc := http.NewResponseController(w)
		buf := make([]byte, 32<<10)
		for {
			n, err := resp.Body.Read(buf)
			if n > 0 {
				if _, werr := w.Write(buf[:n]); werr != nil {
					return
				}
				_ = rc.Flush()
			}
			if err != nil {
				return
			}
		}
	})
}
