package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A job's limits are its share of the node: by GPUs, with a small fixed share for jobs without
// GPUs; the shares of a full node never add up to more than the node; tasks are a share of
// pid_max, so two jobs can never take every PID of the node (red team, issue 29: 16,384 tasks a
// slot against a pid_max of 32,768).
func TestJobLimitsAreTheJobsShareOfTheNode(t *testing.T) {
	t.Parallel()
	n := nodeShare{memory: 64 << 30, cpus: 16, pidMax: 32768, gpus: 8, cpuJob: 2}
	var sum float64
	var mem int64
	tasks := 0
	for _, g := range []int{4, 2, 1, 1, 0, 0} { // a full node: 8 GPUs and both CPU slots
		l := n.limits(g, 16384)
		sum += l.CPUShare
		mem += l.Memory
		tasks += l.Tasks
		if l.CPUMax != 15 {
			t.Errorf("%d GPUs: a ceiling of %v cores, want every core but one", g, l.CPUMax)
		}
	}
	if sum > 1.0001 || mem > n.memory {
		t.Errorf("a full node's jobs take %.3f of it and %d bytes of %d", sum, mem, n.memory)
	}
	if tasks > n.pidMax {
		t.Errorf("a full node's jobs may have %d tasks, pid_max is %d", tasks, n.pidMax)
	}
	if l := n.limits(8, 16384); l.Memory < n.memory*3/4 {
		t.Errorf("a job on all 8 GPUs gets %d of %d bytes", l.Memory, n.memory)
	}
	big := nodeShare{memory: 1 << 40, cpus: 192, pidMax: 4194304, gpus: 8, cpuJob: 2}
	if l := big.limits(1, 16384); l.Tasks != 16384 {
		t.Errorf("with a large pid_max, a job gets %d tasks, want the cap 16384", l.Tasks)
	}
}

// BenchmarkAJobsShareOfTheNode makes and removes what each sandboxed job gets of the node (issue
// 29): its control group with its limits and its file system (a sparse image of its share of the
// work disk, made and loop-mounted) — the per-job cost the sandbox's bounds add
// (docs/performance.md).
func BenchmarkAJobsShareOfTheNode(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root, as the agent does")
	}
	work := b.TempDir()
	sb, err := Open(Config{}, work, 8, 2)
	if err != nil {
		b.Fatal(err)
	}
	defer sb.Close()
	for i := 0; b.Loop(); i++ {
		dir := filepath.Join(work, "jobs", strconv.Itoa(i))
		d, err := sb.OpenDisk(dir, 1)
		if err != nil {
			b.Fatal(err)
		}
		g, err := sb.cgroups.newGroup(strconv.Itoa(i), sb.Limits(1))
		if err != nil {
			b.Fatal(err)
		}
		if err := g.remove(); err != nil {
			b.Fatal(err)
		}
		d.Close()
		_ = os.Remove(dir)
	}
}
