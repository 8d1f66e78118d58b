package gpuagent

import (
	"context"
	"io/fs"
	"path"
	"path/filepath"
	"sort"

	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/nolink"
)

// artifactNames are the outputs GEPA and evals write (verifiers' save_gepa_results and
// save_outputs at the pinned commit): the optimized prompt (system_prompt.txt), the Pareto
// frontier, every candidate (GEPA's results.jsonl), the run's metadata, and an eval's scored
// rollouts (results.jsonl). best_prompt.txt is what older versions called the prompt.
var artifactNames = map[string]bool{
	"system_prompt.txt": true, "best_prompt.txt": true, "pareto_frontier.jsonl": true,
	"metadata.json": true, "results.jsonl": true,
}

// findArtifacts finds the outputs under root and names each: by its file name, or by its
// path under root where two share a name.
func findArtifacts(root string) map[string]string {
	var found []string
	_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if d.IsDir() && p != root && (d.Name() == ".venv" || d.Name() == "node_modules") {
			return fs.SkipDir
		}
		if !d.IsDir() && d.Type().IsRegular() && artifactNames[d.Name()] {
			found = append(found, p)
		}
		return nil
	})
	sort.Strings(found)
	count := map[string]int{}
	for _, p := range found {
		count[filepath.Base(p)]++
	}
	out := map[string]string{}
	for _, p := range found {
		name := filepath.Base(p)
		if count[name] > 1 {
			rel, _ := filepath.Rel(root, p)
			name = filepath.ToSlash(rel)
		}
		out[name] = p
	}
	return out
}

// uploadArtifacts stores the pipeline's outputs (found under root) as jobs/{id}/artifacts/.
func (r *jobRun) uploadArtifacts(ctx context.Context, root string) {
	found := findArtifacts(root)
	if len(found) == 0 {
		r.note("the pipeline wrote none of the expected outputs (system_prompt.txt, best_prompt.txt, pareto_frontier.jsonl, metadata.json, results.jsonl)")
		return
	}
	for name, p := range found {
		err := retry(ctx, func() error {
			f, err := nolink.Open(p)
			if err != nil {
				return err
			}
			defer f.Close()
			return r.store.Put(ctx, path.Join(jobdata.ArtifactPrefix(r.claim.Job.ID), name), f)
		})
		if err != nil {
			r.deps.tel.objectWrites.WithLabelValues("artifacts", "error").Inc()
			r.log.Warn("artifact not stored", "name", name, "err", err)
			continue
		}
		r.deps.tel.objectWrites.WithLabelValues("artifacts", "ok").Inc()
		r.note("artifact stored", "name", name)
	}
}
