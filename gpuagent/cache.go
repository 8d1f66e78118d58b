package gpuagent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/hostedtrain/hostedtrain/gpuagent/nodecache"
	"github.com/hostedtrain/hostedtrain/internal/job"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// The node's caches for a job (gpuagent/nodecache): its model's weights put in its Hugging Face
// cache, its environments' install laid over its copy of prime-rl's Python, vLLM's compile
// cache seeded, and after the run what it compiled kept for the next job of its organization.

// maxHeldReported bounds what a claim says the node holds.
const maxHeldReported = 256

// hubCache is the job's own Hugging Face hub cache (HF_HUB_CACHE): writable, in its home,
// where the agent links the node's cached weights.
func (r *jobRun) hubCache() string {
	return filepath.Join(r.dir, "home", ".cache", "huggingface", "hub")
}

// compileCache is the job's vLLM cache (VLLM_CACHE_ROOT), torch.compile's among it.
func (r *jobRun) compileCache() string { return filepath.Join(r.dir, "home", ".cache", "vllm") }

// cacheEnv are the variables that point the job's processes at its caches.
func (r *jobRun) cacheEnv() []string {
	if r.deps.cfg.Cache == nil {
		return nil
	}
	return []string{"HF_HUB_CACHE=" + r.hubCache(), "VLLM_CACHE_ROOT=" + r.compileCache()}
}

// runsModel says whether the job runs its model on the node's GPUs (its weights are needed here).
func runsModel(s jobspec.Spec) bool {
	needs := jobspec.CacheNeeds("", s)
	return len(needs) > 0 && strings.HasPrefix(needs[0], jobspec.NeedModel)
}

// keepHeld holds a cache entry for the job until it ends.
func (r *jobRun) keepHeld(release func()) {
	if release != nil {
		r.cacheHeld = append(r.cacheHeld, release)
	}
}

// releaseCache lets go of the cache entries the job held.
func (r *jobRun) releaseCache() {
	for _, f := range r.cacheHeld {
		f()
	}
	r.cacheHeld = nil
}

// fetchModel puts the job's model's weights on the node: from the node's cache, or fetched
// into it (verified) when it has them not, and linked into the job's own hub cache, so the
// pipeline finds them there and downloads nothing. A model the cache cannot have (no hub, a
// gated or unknown model) is left to the pipeline, which fetches its own as without a cache.
func (r *jobRun) fetchModel(ctx context.Context) error {
	c := r.deps.cfg.Cache
	spec := r.claim.Job.Config
	if c == nil || !runsModel(spec) {
		return nil
	}
	began := time.Now()
	m, release, fetched, err := c.Model(ctx, spec.Model, "")
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		r.note("the model's weights are not in the node's cache; the pipeline fetches its own", "model", spec.Model, "why", err.Error())
		return nil
	}
	r.keepHeld(release)
	if err := linkSnapshot(m, r.hubCache()); err != nil {
		return &startError{fmt.Errorf("link the cached weights of %s: %v", spec.Model, err)}
	}
	if r.box != nil {
		if err := r.box.BindReadOnly(c.HubDir()); err != nil {
			return err
		}
	}
	r.phases.markFrom(job.PhaseWeights, fetched == 0, fetched)
	r.deps.tel.cacheLookups.WithLabelValues(nodecache.KindModel, hitOrMiss(fetched == 0)).Inc()
	if fetched == 0 {
		r.note("model weights: from the node's cache", "model", spec.Model, "commit", m.Commit, "bytes", m.Size)
	} else {
		r.note("model weights: fetched into the node's cache and verified", "model", spec.Model, "commit", m.Commit,
			"bytes", fetched, "took", time.Since(began).Round(time.Millisecond))
	}
	return nil
}

func hitOrMiss(hit bool) string {
	if hit {
		return "hit"
	}
	return "miss"
}

// linkSnapshot lays a cached model out in a job's hub cache as huggingface_hub does (its
// revision's ref, its snapshot's files) with each file a link to the node cache's blob.
func linkSnapshot(m *nodecache.ModelFiles, hub string) error {
	repo := filepath.Join(hub, "models--"+strings.ReplaceAll(m.Model, "/", "--"))
	snap := filepath.Join(repo, "snapshots", m.Commit)
	err := filepath.WalkDir(m.Snapshot, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		rel, _ := filepath.Rel(m.Snapshot, p)
		blob, err := filepath.EvalSymlinks(p)
		if err != nil {
			return err
		}
		to := filepath.Join(snap, rel)
		if err := os.MkdirAll(filepath.Dir(to), 0o755); err != nil {
			return err
		}
		_ = os.Remove(to)
		return os.Symlink(blob, to)
	})
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(repo, "refs"), 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(repo, "refs", m.Revision), []byte(m.Commit), 0o644)
}

// installKey is the node cache's key of the job's environments' install: its organization's,
// with the node's upstream and installer as the pin.
func (r *jobRun) installKey(ids []string) (string, bool) {
	pin := r.deps.cfg.Versions.String() + " " + strings.Join(r.deps.cfg.Pipeline.Install, " ")
	return nodecache.InstallKey(r.claim.Job.Org, ids, pin)
}

// cachedInstall lays a cached install of the job's environments over its copy of prime-rl's
// Python (own, a link copy or an overlay of venv, made by the caller): true when the cache had
// it, and nothing is to be installed.
func (r *jobRun) cachedInstall(ids []string, venv, own string) (bool, error) {
	c := r.deps.cfg.Cache
	if c == nil {
		return false, nil
	}
	key, _ := r.installKey(ids)
	l, release, ok := c.Layer(nodecache.KindEnv, key)
	r.deps.tel.cacheLookups.WithLabelValues(nodecache.KindEnv, hitOrMiss(ok)).Inc()
	if !ok {
		return false, nil
	}
	r.keepHeld(release)
	var err error
	if r.disk != nil {
		// The install is the overlay's lower layer, above prime-rl's Python; what it removed is
		// removed in the job's view (whiteouts in the job's upper layer).
		if err = r.disk.Overlay(own, l.Dir, venv); err == nil {
			err = nodecache.RemovePaths(own, l.Removed)
		}
	} else {
		err = nodecache.LinkLayer(l, own)
	}
	if err != nil {
		return false, &startError{fmt.Errorf("the cached install of %s: %v", strings.Join(ids, ", "), err)}
	}
	r.note("environments: their install from the node's cache", "envs", strings.Join(ids, ", "))
	return true, nil
}

// keepInstall keeps what the installer changed in the job's copy of prime-rl's Python as the
// cache's install of the job's environments. The installer has ended, and nothing of the job has
// run yet: what is kept is the installer's work alone.
func (r *jobRun) keepInstall(ids []string, venv, own string) int64 {
	c := r.deps.cfg.Cache
	if c == nil {
		return 0
	}
	var cp nodecache.Capture
	var err error
	if r.disk != nil {
		cp, err = nodecache.CaptureUpper(venv, r.disk.Upper(own))
	} else {
		cp, err = nodecache.CaptureLinked(venv, own)
	}
	key, lasting := r.installKey(ids)
	held := []string{jobspec.EnvSetNeed(r.claim.Job.Org, ids)} // the set, as the job needs it
	var n int64
	if err == nil {
		n, err = c.PutLayer(nodecache.KindEnv, key, held, lasting, cp)
	}
	if err != nil {
		r.warn(fmt.Sprintf("the install of %s is not kept in the node's cache: %v", strings.Join(ids, ", "), err))
		return 0
	}
	r.note("environments: their install kept in the node's cache", "envs", strings.Join(ids, ", "), "bytes", n)
	return n
}

// compileKey is the node cache's key of the job's compile cache.
func (r *jobRun) compileKey() string {
	gpu := "cpu"
	if len(r.devices) > 0 {
		gpu = r.devices[0].Model
	}
	return nodecache.CompileKey(r.claim.Job.Org, r.claim.Job.Config.Model, gpu, len(r.devices))
}

// seedCompile gives the job the compile cache its organization's last run of the same model on
// the same GPUs left: linked in, read-only, so vLLM and torch.compile load instead of compiling.
func (r *jobRun) seedCompile() error {
	c := r.deps.cfg.Cache
	if c == nil || !runsModel(r.claim.Job.Config) {
		return nil
	}
	l, release, ok := c.Layer(nodecache.KindCompile, r.compileKey())
	r.deps.tel.cacheLookups.WithLabelValues(nodecache.KindCompile, hitOrMiss(ok)).Inc()
	if !ok {
		return nil
	}
	r.keepHeld(release)
	if err := os.MkdirAll(r.compileCache(), 0o755); err != nil {
		return err
	}
	if err := nodecache.LinkLayer(l, r.compileCache()); err != nil {
		return &startError{fmt.Errorf("the cached compile cache: %v", err)}
	}
	r.note("compile cache: from the node's cache", "key", r.compileKey())
	return nil
}

// keepCompile keeps what vLLM and torch.compile wrote in the job's compile cache for the next
// run of its organization's model on the same GPUs: after a run that served its model (its
// processes have ended).
func (r *jobRun) keepCompile() {
	c := r.deps.cfg.Cache
	if c == nil || !runsModel(r.claim.Job.Config) || !r.phases.has(job.PhaseInference) && !r.phases.has(job.PhaseFirstStep) {
		return
	}
	cp, err := nodecache.OwnFiles(r.compileCache())
	if err != nil || len(cp.Files) == 0 {
		return
	}
	cfg := r.claim.Job.Config
	held := []string{jobspec.CompileNeed(r.claim.Job.Org, cfg.Model, cfg.Resources.GPUType, cfg.Resources.GPUs)} // as the job's needs name it
	if n, err := c.PutLayer(nodecache.KindCompile, r.compileKey(), held, true, cp); err != nil {
		r.warn(fmt.Sprintf("the compile cache is not kept in the node's cache: %v", err))
	} else {
		r.note("compile cache: kept in the node's cache", "key", r.compileKey(), "bytes", n)
	}
}

// held is what the node's cache holds, for a claim: of the next few jobs in fair order the
// queue gives the one whose model and environments are here.
func (a *Agent) held() []string {
	if a.cfg.Cache == nil || a.heldRefused.Load() {
		return nil
	}
	return a.cfg.Cache.Held(maxHeldReported)
}

// refusedHeld says whether a claim was refused for what it said the node holds: a 4xx naming
// the request's held (an older API's contract knows fewer kinds of cache entry).
func refusedHeld(err error) bool {
	return errors.Is(err, job.ErrRefused) && strings.Contains(err.Error(), "/held")
}

// CacheReporter is the API's side of the node cache: the agent reports its counts (shown
// with the fleet's nodes) and takes the models an operator asked it to warm.
type CacheReporter interface {
	ReportCache(ctx context.Context, stats map[string]job.CacheStats) ([]string, error)
}

// CacheReportEvery is how often the agent reports its cache and looks for models to warm.
var CacheReportEvery = 15 * time.Second

// cacheReports reports the node cache now and every CacheReportEvery, and fetches the models
// it is asked to warm, one at a time, until ctx ends.
func (a *Agent) cacheReports(ctx context.Context) {
	api, ok := a.cfg.API.(CacheReporter)
	if !ok {
		return
	}
	t := time.NewTicker(CacheReportEvery)
	defer t.Stop()
	for {
		stats := map[string]job.CacheStats{}
		for kind, s := range a.cfg.Cache.Stats() {
			stats[kind] = job.CacheStats{Hits: s.Hits, Misses: s.Misses, Refetched: s.Refetched, BytesFetched: s.BytesFetched, Bytes: s.Bytes, Entries: s.Entries}
		}
		warm, err := api.ReportCache(ctx, stats)
		if err != nil && ctx.Err() == nil {
			a.cfg.Logger.Warn("node cache report failed", "err", err)
		}
		for _, model := range warm {
			began := time.Now()
			_, release, fetched, err := a.cfg.Cache.Model(ctx, model, "")
			if err != nil {
				a.cfg.Logger.Warn("warming the node cache: model not fetched", "model", model, "err", err)
				continue
			}
			release()
			a.cfg.Logger.Info("node cache warmed", "model", model, "bytes_fetched", fetched, "took", time.Since(began).Round(time.Millisecond))
		}
		if len(warm) > 0 {
			continue // report what the warming did at once
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
