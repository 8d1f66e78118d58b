package sandbox

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Every sandboxed job's processes run in a control group of the job's own, which the agent makes
// before the job's first process and removes, with whatever is still in it, when the job ends:
//
//   - memory: the job's share of the node's memory, with no swap (its /tmp and /dev/shm, both
//     in memory, count against it). A job past it is killed by the kernel, alone, and its
//     failure says so (the group's OOM-kill count);
//   - CPU: a weight by its share, so that under contention each job gets its share, and a
//     ceiling of every core but one, so the agent always has one;
//   - tasks (processes and threads): a share of the node's pid_max;
//   - I/O: a weight by its share, where the node's I/O scheduler honours one.
//
// cgroup v2 is used where the node has it (current GPU images mount only v2); where a
// controller is on a v1 hierarchy instead (this project's CI machine: memory, cpu, pids, blkio
// and freezer on v1, an empty v2), that controller's v1 group is used. The groups live under
// hostedtrain/<agent> at each hierarchy's root, <agent> named after the agent's work folder, so
// an agent that starts kills and removes every group a previous agent of the same folder left:
// a crashed agent's jobs do not run on unseen (and unbilled) beside the next ones.

// cgroupV1Controllers are the v1 controllers a job's group uses where v2 lacks them.
var cgroupV1Controllers = []string{"memory", "cpu", "pids", "blkio", "freezer"}

// cgroupTree is the agent's parent group in each hierarchy it uses.
type cgroupTree struct {
	// v2 is the agent's parent group on the unified hierarchy ("" where there is none); v2ctl
	// are the controllers enabled for its children.
	v2    string
	v2ctl map[string]bool
	// v1 maps a v1 controller to the agent's parent group in its hierarchy, for the
	// controllers v2 does not give.
	v1 map[string]string
}

// cgroupRoots finds the mounted hierarchies: the unified one, and each v1 controller's.
func cgroupRoots() (v2 string, v1 map[string]string, err error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", nil, err
	}
	defer f.Close()
	v1 = map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// 36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
		pre, post, ok := strings.Cut(sc.Text(), " - ")
		if !ok {
			continue
		}
		fields, rest := strings.Fields(pre), strings.Fields(post)
		if len(fields) < 5 || len(rest) < 3 || fields[3] != "/" {
			continue // a bind of a sub-tree, not the hierarchy's root
		}
		switch rest[0] {
		case "cgroup2":
			if v2 == "" {
				v2 = fields[4]
			}
		case "cgroup":
			for _, opt := range strings.Split(rest[2], ",") {
				if slices.Contains(cgroupV1Controllers, opt) && v1[opt] == "" {
					v1[opt] = fields[4]
				}
			}
		}
	}
	return v2, v1, sc.Err()
}

// agentGroupName names an agent's parent group after its work folder: stable across the
// agent's restarts on a node, distinct for agents side by side (the tests, hostedtrain dev).
func agentGroupName(workDir string) string {
	sum := sha256.Sum256([]byte(workDir))
	return "a-" + hex.EncodeToString(sum[:6])
}

// openCgroups makes the agent's parent groups and removes what a previous agent of the same
// work folder left in them (killing its processes). It fails where the node has no memory or
// pids controller: a job's limits are then not the kernel's to keep.
func openCgroups(workDir string) (*cgroupTree, error) {
	v2root, v1roots, err := cgroupRoots()
	if err != nil {
		return nil, fmt.Errorf("read the node's cgroup hierarchies: %w", err)
	}
	name := agentGroupName(workDir)
	t := &cgroupTree{v2ctl: map[string]bool{}, v1: map[string]string{}}
	if v2root != "" {
		t.v2 = filepath.Join(v2root, "hostedtrain", name)
		if err := os.MkdirAll(t.v2, 0o755); err != nil {
			return nil, fmt.Errorf("make the agent's cgroup: %w", err)
		}
		// Controllers pass down level by level: enable each the root offers, in the two levels
		// above the jobs' groups.
		avail := strings.Fields(readTrim(filepath.Join(v2root, "cgroup.controllers")))
		for _, dir := range []string{v2root, filepath.Dir(t.v2), t.v2} {
			for _, c := range []string{"memory", "cpu", "pids", "io"} {
				if slices.Contains(avail, c) {
					// The root's may be on already (systemd's); a failure leaves it off below.
					_ = os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0)
				}
			}
		}
		for _, c := range strings.Fields(readTrim(filepath.Join(t.v2, "cgroup.subtree_control"))) {
			t.v2ctl[c] = true
		}
	}
	for _, c := range cgroupV1Controllers {
		root, ok := v1roots[c]
		if !ok || t.v2ctl[map[string]string{"blkio": "io"}[c]] || t.v2ctl[c] {
			continue
		}
		if c == "freezer" && t.v2 != "" {
			continue // v2's cgroup.kill ends a group
		}
		dir := filepath.Join(root, "hostedtrain", name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("make the agent's %s cgroup: %w", c, err)
		}
		t.v1[c] = dir
	}
	if !t.has("memory") || !t.has("pids") {
		return nil, errors.New("the sandbox needs the memory and pids cgroup controllers (cgroup v2, or v1 mounted at /sys/fs/cgroup/<controller>) to bound each job")
	}
	if t.v2 == "" && t.v1["freezer"] == "" {
		return nil, errors.New("the sandbox needs cgroup v2 or the v1 freezer controller to end a job's processes together")
	}
	if err := t.clean(); err != nil {
		return nil, err
	}
	return t, nil
}

// has reports whether jobs' groups get controller c (from v2 or v1).
func (t *cgroupTree) has(c string) bool {
	if c == "io" {
		return t.v2ctl["io"] || t.v1["blkio"] != ""
	}
	return t.v2ctl[c] || t.v1[c] != ""
}

// clean kills and removes every job group under the agent's: left by an agent that died.
func (t *cgroupTree) clean() error {
	names := map[string]bool{}
	for _, dir := range t.dirs() {
		entries, err := os.ReadDir(dir)
		if err != nil {
			return fmt.Errorf("read the agent's cgroup: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				names[e.Name()] = true
			}
		}
	}
	var errs []error
	for name := range names {
		g := t.group(name)
		if err := g.remove(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// close removes the agent's parent groups once its jobs' are gone (an agent that stopped).
func (t *cgroupTree) close() {
	if t.clean() != nil {
		return
	}
	for _, d := range t.dirs() {
		_ = os.Remove(d)
		_ = os.Remove(filepath.Dir(d)) // hostedtrain/, where no other agent's is left
	}
}

// dirs are the agent's parent groups, one per hierarchy.
func (t *cgroupTree) dirs() []string {
	var dirs []string
	if t.v2 != "" {
		dirs = append(dirs, t.v2)
	}
	for _, c := range cgroupV1Controllers {
		if d := t.v1[c]; d != "" {
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Limits are what one job's control group is given: its share of the node.
type Limits struct {
	Memory   int64   // bytes, swap none
	CPUShare float64 // the job's share of the node, for its CPU and I/O weights
	CPUMax   float64 // cores at most
	Tasks    int     // processes and threads at most
}

// jobGroup is one job's control group, in each hierarchy the agent uses.
type jobGroup struct {
	t    *cgroupTree
	name string
	v2fd *os.File // the v2 group, for starting processes straight into it (clone3)
}

func (t *cgroupTree) group(name string) *jobGroup { return &jobGroup{t: t, name: name} }

func (g *jobGroup) v2dir() string {
	if g.t.v2 == "" {
		return ""
	}
	return filepath.Join(g.t.v2, g.name)
}

func (g *jobGroup) v1dir(c string) string {
	if g.t.v1[c] == "" {
		return ""
	}
	return filepath.Join(g.t.v1[c], g.name)
}

// newGroup makes a job's group with its limits.
func (t *cgroupTree) newGroup(name string, lim Limits) (*jobGroup, error) {
	g := t.group(name)
	_ = g.remove() // a group of the same name left behind is the same job's earlier attempt
	for _, d := range g.dirsAll() {
		if err := os.Mkdir(d, 0o755); err != nil {
			_ = g.remove()
			return nil, fmt.Errorf("make the job's cgroup: %w", err)
		}
	}
	if err := g.limit(lim); err != nil {
		_ = g.remove()
		return nil, fmt.Errorf("set the job's limits: %w", err)
	}
	if d := g.v2dir(); d != "" {
		f, err := os.Open(d)
		if err != nil {
			_ = g.remove()
			return nil, err
		}
		g.v2fd = f
	}
	return g, nil
}

// dirsAll are the job's group in every hierarchy.
func (g *jobGroup) dirsAll() []string {
	var dirs []string
	for _, d := range g.t.dirs() {
		dirs = append(dirs, filepath.Join(d, g.name))
	}
	return dirs
}

// limit writes the job's limits to the controllers the node has.
func (g *jobGroup) limit(lim Limits) error {
	weight := func(lo, hi int) string {
		return strconv.Itoa(min(hi, max(lo, int(lim.CPUShare*float64(hi)/4))))
	}
	period := 100000
	quota := strconv.Itoa(int(lim.CPUMax * float64(period)))
	var errs []error
	set := func(dir, file, value string, required bool) {
		if dir == "" {
			return
		}
		path := filepath.Join(dir, file)
		if _, err := os.Stat(path); err != nil && !required {
			return // a file this kernel (or its configuration) does not have
		}
		if err := os.WriteFile(path, []byte(value), 0); err != nil && required {
			errs = append(errs, fmt.Errorf("%s = %s: %w", file, value, err))
		}
	}
	mem := strconv.FormatInt(lim.Memory, 10)
	tasks := strconv.Itoa(lim.Tasks)
	if d := g.v2dir(); d != "" {
		ctl := g.t.v2ctl
		if ctl["memory"] {
			set(d, "memory.max", mem, true)
			set(d, "memory.swap.max", "0", false)
			set(d, "memory.oom.group", "1", false) // a job past its memory ends whole
		}
		if ctl["pids"] {
			set(d, "pids.max", tasks, true)
		}
		if ctl["cpu"] {
			set(d, "cpu.weight", weight(1, 10000), false)
			set(d, "cpu.max", quota+" "+strconv.Itoa(period), false)
		}
		if ctl["io"] {
			set(d, "io.weight", "default "+weight(1, 10000), false)
		}
	}
	if d := g.v1dir("memory"); d != "" {
		set(d, "memory.limit_in_bytes", mem, true)
		set(d, "memory.memsw.limit_in_bytes", mem, false)
		set(d, "memory.swappiness", "0", false)
	}
	set(g.v1dir("pids"), "pids.max", tasks, true)
	if d := g.v1dir("cpu"); d != "" {
		set(d, "cpu.shares", weight(2, 262144), false)
		set(d, "cpu.cfs_period_us", strconv.Itoa(period), false)
		set(d, "cpu.cfs_quota_us", quota, false)
	}
	if d := g.v1dir("blkio"); d != "" {
		// Honoured by the BFQ scheduler only; a node's NVMe disks often have none.
		set(d, "blkio.bfq.weight", weight(1, 1000), false)
		set(d, "blkio.weight", weight(10, 1000), false)
	}
	return errors.Join(errs...)
}

// startIn prepares cmd to start in the job's group: straight into the v2 group (clone3), and
// into the v1 groups by way of the calling thread, which must be locked to its goroutine and
// stay so until the returned func (called right after cmd.Start) has put it back where it was.
func (g *jobGroup) startIn(attr *syscall.SysProcAttr) (back func(), err error) {
	if g.v2fd != nil {
		attr.UseCgroupFD, attr.CgroupFD = true, int(g.v2fd.Fd())
	}
	if len(g.t.v1) == 0 {
		return func() {}, nil
	}
	tid := strconv.Itoa(unix.Gettid())
	was, err := threadV1Groups()
	if err != nil {
		return nil, err
	}
	back = func() {
		for _, dir := range was {
			_ = os.WriteFile(filepath.Join(dir, "tasks"), []byte(tid), 0)
		}
	}
	for _, c := range cgroupV1Controllers {
		if d := g.v1dir(c); d != "" {
			if err := os.WriteFile(filepath.Join(d, "tasks"), []byte(tid), 0); err != nil {
				back()
				return nil, fmt.Errorf("enter the job's %s cgroup: %w", c, err)
			}
		}
	}
	return back, nil
}

// threadV1Groups are the v1 groups the calling thread is in, by controller, as paths.
func threadV1Groups() (map[string]string, error) {
	_, roots, err := cgroupRoots()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// 4:memory:/process_api/42aed
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			if root, ok := roots[c]; ok && slices.Contains(cgroupV1Controllers, c) {
				out[c] = filepath.Join(root, parts[2])
			}
		}
	}
	return out, nil
}

// oomKills is how many of the job's processes the kernel killed for its memory limit.
func (g *jobGroup) oomKills() int {
	var text string
	if d := g.v2dir(); d != "" && g.t.v2ctl["memory"] {
		text = readTrim(filepath.Join(d, "memory.events"))
	} else if d := g.v1dir("memory"); d != "" {
		text = readTrim(filepath.Join(d, "memory.oom_control"))
	}
	for _, line := range strings.Split(text, "\n") {
		if n, ok := strings.CutPrefix(line, "oom_kill "); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			return v
		}
	}
	return 0
}

// tasksRefused is how many times the job's group refused a new task (its tasks limit).
func (g *jobGroup) tasksRefused() int {
	d := g.v1dir("pids")
	if v := g.v2dir(); v != "" && g.t.v2ctl["pids"] {
		d = v
	}
	if d == "" {
		return 0
	}
	n, _ := strconv.Atoi(strings.TrimPrefix(readTrim(filepath.Join(d, "pids.events")), "max "))
	return n
}

// procs are the processes in the job's group.
func (g *jobGroup) procs() []int {
	var dirs []string
	if d := g.v2dir(); d != "" {
		dirs = append(dirs, d)
	}
	for _, c := range []string{"freezer", "pids", "memory"} {
		if d := g.v1dir(c); d != "" {
			dirs = append(dirs, d)
		}
	}
	seen := map[int]bool{}
	var pids []int
	for _, d := range dirs {
		for _, f := range strings.Fields(readTrim(filepath.Join(d, "cgroup.procs"))) {
			if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
				seen[pid] = true
				pids = append(pids, pid)
			}
		}
	}
	return pids
}

// kill ends every process of the job's group and waits, up to a few seconds, until none is
// left: v2's cgroup.kill, or on v1 the group frozen (so nothing forks meanwhile), each process
// sent SIGKILL, and the group thawed for the kills to land.
func (g *jobGroup) kill() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		pids := g.procs()
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the job's cgroup %s still holds %d processes after they were killed", g.name, len(pids))
		}
		if d := g.v2dir(); d != "" {
			if err := os.WriteFile(filepath.Join(d, "cgroup.kill"), []byte("1"), 0); err != nil && !errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("kill the job's cgroup: %w", err)
			}
		}
		if f := g.v1dir("freezer"); f != "" {
			state := filepath.Join(f, "freezer.state")
			_ = os.WriteFile(state, []byte("FROZEN"), 0)
			for i := 0; i < 200 && readTrim(state) == "FREEZING"; i++ {
				time.Sleep(time.Millisecond)
			}
			for _, pid := range g.procs() {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			_ = os.WriteFile(state, []byte("THAWED"), 0)
		} else {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// remove kills what is left in the job's group and removes it from every hierarchy.
func (g *jobGroup) remove() error {
	if g.v2fd != nil {
		g.v2fd.Close()
		g.v2fd = nil
	}
	err := g.kill()
	for _, d := range g.dirsAll() {
		// A group whose last process has just died may still be busy for a moment.
		for i := 0; ; i++ {
			rerr := os.Remove(d)
			if rerr == nil || errors.Is(rerr, fs.ErrNotExist) {
				break
			}
			if i >= 500 {
				err = errors.Join(err, fmt.Errorf("remove the job's cgroup: %w", rerr))
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	return err
}

func readTrim(path string) string {
	b, _ := os.ReadFile(path)
	return strings.TrimSpace(string(b))
}

// nodeShare is the node's capacity a job's limits are cut from.
type nodeShare struct {
	memory int64 // bytes for jobs: the node's, less what the node and the agent keep
	cpus   int   // the node's
	pidMax int   // the kernel's pid_max
	gpus   int   // the agent's GPUs
	cpuJob int   // how many jobs without GPUs may run at once
}

// cpuJobShare is the share of the node one job without GPUs (an eval or GEPA against a model
// API) gets: such jobs need little.
const cpuJobShare = 1.0 / 16

// readNodeShare reads the node's memory, cores and pid_max.
func readNodeShare(gpus, cpuJobs int, memory int64) nodeShare {
	n := nodeShare{cpus: runtime.NumCPU(), gpus: gpus, cpuJob: cpuJobs, memory: memory, pidMax: 32768}
	if v, err := strconv.Atoi(readTrim("/proc/sys/kernel/pid_max")); err == nil && v > 0 {
		n.pidMax = v
	}
	if n.memory == 0 {
		var si unix.Sysinfo_t
		if unix.Sysinfo(&si) == nil {
			total := int64(si.Totalram) * int64(si.Unit)
			// The node and the agent keep 5 %, at least 1 GiB (at most half a small machine).
			n.memory = total - min(total/2, max(1<<30, total/20))
		}
	}
	return n
}

// limits are a job's with gpus GPUs (0: a job without GPUs).
func (n nodeShare) limits(gpus, maxTasks int) Limits {
	share := cpuJobShare
	if n.cpuJob == 0 && n.gpus == 0 {
		share = 1
	}
	if gpus > 0 && n.gpus > 0 {
		rest := max(0.25, 1-cpuJobShare*float64(n.cpuJob))
		share = rest * float64(gpus) / float64(n.gpus)
	}
	slots := max(1, n.gpus+n.cpuJob)
	return Limits{
		Memory:   max(256<<20, int64(float64(n.memory)*share)),
		CPUShare: share,
		CPUMax:   float64(max(1, n.cpus-1)),
		// Half the kernel's PIDs for the jobs, shared by the slots: two jobs cannot take every
		// PID of the node (its pid_max is 32,768 on some images).
		Tasks: min(maxTasks, max(64, n.pidMax/2/slots)),
	}
}
