package gpuagent

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/hostedtrain/hostedtrain/gpuagent/render"
	"github.com/hostedtrain/hostedtrain/gpuagent/sandbox"
	"github.com/hostedtrain/hostedtrain/internal/jobdata"
	"github.com/hostedtrain/hostedtrain/internal/jobspec"
)

// installEnvironments installs the job's Hub environments into prime-rl's Python, where its
// processes import them: the prime CLI installs into the workspace interpreter it finds
// through VIRTUAL_ENV. A failure is the job's failure, with the installer's last lines. In a
// sandbox, with the node's cache, an install the cache holds for the job's organization is laid
// over the job's view of the Python instead (cached true), and a new one is kept there (bytes:
// what it installed).
func (r *jobRun) installEnvironments(ctx context.Context) (cached bool, bytes int64, err error) {
	tmpl := r.deps.cfg.Pipeline.Install
	ids := jobspec.HubEnvironments(r.claim.Job.Config)
	if len(tmpl) == 0 || len(ids) == 0 {
		return false, 0, nil
	}
	venv := filepath.Join(r.deps.cfg.Pipeline.PrimeRL, ".venv")
	own := filepath.Join(r.dir, "venv")
	if r.box != nil {
		// The node's prime-rl is read-only in the sandbox: the job installs into its own view
		// of the Python environment, seen in its place — an overlay on its own disk (nothing
		// copied), or where it has none, a copy of hard links to the node's files.
		// A checkout without one gets an empty one: the job's view is seen in its place.
		err := os.MkdirAll(venv, 0o755)
		if err == nil {
			cached, err = r.cachedInstall(ids, venv, own)
		}
		if err == nil && !cached && r.disk != nil {
			err = r.disk.Overlay(own, venv)
		} else if err == nil && !cached {
			err = sandbox.LinkTree(venv, own)
		}
		if err != nil {
			return false, 0, &startError{fmt.Errorf("prime-rl's Python for the job's environments: %v", err)}
		}
		if err := r.box.Bind(own, venv, r.disk != nil); err != nil {
			return false, 0, err
		}
		if cached {
			return true, 0, nil
		}
	}
	env := append(r.baseEnv(), "VIRTUAL_ENV="+venv, "UV_PROJECT_ENVIRONMENT="+venv)
	logPath := filepath.Join(r.dir, "install.log")
	for _, id := range ids {
		r.note("installing environment into prime-rl's Python", "env", id, "python", venv)
		argv := render.Expand(tmpl, map[string]string{"env_id": id, "prime_rl": r.deps.cfg.Pipeline.PrimeRL}, nil)
		start := fileSize(logPath)
		if err := runCommand(ctx, r.box, argv, r.dir, env, logPath); err != nil {
			return false, 0, fmt.Errorf("install environment %s: %w%s", id, err, lastLines(logPath, 8))
		}
		// The prime CLI exits 0 when an environment resolved but its install failed, and says
		// so in its summary (commands/env.py: "Failed to install N environment(s)").
		if installFailed(logPath, start) {
			return false, 0, fmt.Errorf("install environment %s: the installer reports it failed%s", id, lastLines(logPath, 8))
		}
	}
	if r.box != nil {
		bytes = r.keepInstall(ids, venv, own)
	}
	return false, bytes, nil
}

// installFailed reports whether the installer's output from offset on says an install failed.
func installFailed(logPath string, offset int64) bool {
	data, err := os.ReadFile(logPath)
	if err != nil || int64(len(data)) < offset {
		return false
	}
	out := jobdata.StripANSI(string(data[offset:]))
	return strings.Contains(out, "Failed to install ") || strings.Contains(out, "✗ Installation failed")
}

func fileSize(path string) int64 {
	fi, err := os.Stat(path)
	if err != nil {
		return 0
	}
	return fi.Size()
}

// lastLines is the end of a log, for an error message: "\n" and its last n non-empty lines.
func lastLines(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var keep []string
	for _, l := range bytes.Split(data, []byte{'\n'}) {
		if s := strings.TrimSpace(jobdata.StripANSI(string(l))); s != "" {
			keep = append(keep, s)
		}
	}
	if len(keep) > n {
		keep = keep[len(keep)-n:]
	}
	if len(keep) == 0 {
		return ""
	}
	return ":\n" + strings.Join(keep, "\n")
}
