package sandbox

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/net/netutil"
	"golang.org/x/sys/unix"
)

// Config is the sandbox an operator asks for (Flags). The sandbox runs every process of a job
// (environment installs, the preflight, the pipeline, the inference server) in bubblewrap (bwrap,
// Debian's package bubblewrap), as an unprivileged user of the job's slot, with:
//
//   - a clean environment: a fixed PATH, HOME in the job's folder, the job's proxy, the
//     job's own variables and secrets; nothing of the agent's (its token, storage keys);
//   - its own user, PID, IPC, UTS and cgroup namespaces: no other process in /proc;
//   - the system folders (/usr, /bin, /lib*, /etc, /opt) read-only, the agent's own
//     configuration (Hide) hidden, the job's folder read-only with its outputs, home and tmp
//     writable, and nothing else of the node: no other job's folder, no /root, no /home;
//   - only the job's own GPUs' device files, with the NVIDIA control devices, so isolation
//     holds even if CUDA_VISIBLE_DEVICES were wrong;
//   - a network namespace of the job's own with only a loopback: the job's processes talk to
//     each other on it, the node's and the agent's ports and the cloud metadata address are
//     not there, and the way out is the agent's egress proxy, which refuses our own network
//     (webhook.Guard's ranges: loopback, private, link-local, metadata).
//
// Storage credentials never enter it: the agent uploads. The agent must run as root: it makes
// the network namespaces, gives each slot its own user id and chowns the writable folders.
//
// Check fills in its defaults; Open readies it for an agent.
type Config struct {
	// Bwrap is the bubblewrap binary (default: bwrap on PATH).
	Bwrap string
	// UIDBase is the first slot's user and group id (default 61000): slot n runs as
	// UIDBase+n. The ids need not exist in /etc/passwd.
	UIDBase int
	// ReadOnly are more host paths the job sees read-only at the same place (a Python
	// outside /usr, a conformance kit).
	ReadOnly []string
	// Path are folders put first on the job's PATH.
	Path []string
	// Hide are folders under the system folders the job must not see (default
	// /etc/hostedtrain, where infra/gpu-node keeps the agent's token).
	Hide []string
	// DevDir is where the GPU device files are (default /dev; tests point it elsewhere).
	DevDir string
	// ProxyPort is the egress proxy's port inside the job's network namespace (default 3128).
	ProxyPort int
	// Allow are host:port addresses jobs may reach though the egress proxy would refuse them
	// (an operator's inference endpoint in its own network). A loopback one is forwarded
	// into the job's network at the same address, where the job's clients (which never proxy
	// loopback) find it.
	Allow []string
	// TmpSize bounds the job's /tmp, a tmpfs in the node's memory (default 1 GiB; the job's
	// big temporary files go to TMPDIR, in its folder). ShmSize bounds its /dev/shm (default
	// 16 GiB: NCCL and PyTorch's data loaders use it).
	TmpSize, ShmSize int64
	// MaxProcs bounds the tasks (processes and threads) of one job slot's user (default 16384;
	// RLIMIT_NPROC, which counts per user: each slot has its own).
	MaxProcs int
	// Prlimit is util-linux's prlimit, which sets MaxProcs (default: prlimit on PATH).
	Prlimit string
	// Setpriv is util-linux's setpriv, which makes the job's processes the slot's user
	// (default: setpriv on PATH).
	Setpriv string
	// MaxFiles bounds each job process's open files (RLIMIT_NOFILE; default 65536, at most the
	// agent's own hard limit).
	MaxFiles int
	// ProxyConns bounds the connections one job holds open to its egress proxy, idle ones
	// included: each is a descriptor of the agent's (two while it tunnels). Default: what the
	// agent's descriptors allow for every slot after 4,096 kept for itself, at most 512.
	ProxyConns int
	// NodeMemory is the memory jobs' limits are cut from (default: the node's, less what the
	// node and the agent keep); tests make it small.
	NodeMemory int64
	// DiskQuota is the size of each job's file system (disk.go): 0 for the job's share of the
	// work disk, negative for none (the job's folder is then on the work disk itself, where a
	// job can fill it).
	DiskQuota int64

	// checked is set once Check has filled in the defaults.
	checked bool
}

// DefaultUIDBase is the first slot's user id: far above the ids Debian hands out.
const DefaultUIDBase = 61000

// agentFiles are the open files the agent keeps for itself (uploads, the API, log files), out of
// reach of its jobs' proxies; maxSlots bounds the jobs one node runs at once, for dividing the
// rest (an 8-GPU node with 8 jobs without GPUs beside).
const (
	agentFiles = 4096
	maxSlots   = 16
)

// Sandbox is the sandbox of one agent on its node, open: its control groups, its job slots
// and the node's share a job's limits are cut from. Its jobs each get a Box, and a Disk.
type Sandbox struct {
	cfg     Config
	workDir string

	mu    sync.Mutex
	slots map[int]bool
	// cgroups are the agent's parent control groups and share what a job's limits are cut
	// from.
	cgroups *cgroupTree
	share   nodeShare
}

// Open readies the sandbox c for an agent whose work folder (absolute, free of links) is
// workDir, with gpus GPUs and room for cpuJobs jobs without GPUs: its control groups, cleaned of
// what an earlier agent of the same folder left running (a crashed agent's sandboxes are killed
// here, before any claim), and the node's share a job's limits are cut from. It keeps a copy of
// c, checked first where Check has not been called on it.
func Open(c Config, workDir string, gpus, cpuJobs int) (*Sandbox, error) {
	if !c.checked {
		if err := c.Check(); err != nil {
			return nil, err
		}
	}
	t, err := openCgroups(workDir)
	if err != nil {
		return nil, fmt.Errorf("the sandbox: %w", err)
	}
	s := &Sandbox{cfg: c, workDir: workDir, cgroups: t, share: readNodeShare(gpus, cpuJobs, c.NodeMemory)}
	cleanDisks(workDir)
	return s, nil
}

// Reclaim ends what an agent of workDir left on the node when it died (SIGKILL, a crash): every
// process of its jobs (their control groups, killed whole), their file systems' mounts and
// images. An agent does it when it starts, before it claims anything; an operator or a test can
// do it without starting one.
func Reclaim(workDir string) error {
	wd, err := filepath.Abs(workDir)
	if err == nil {
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		return err
	}
	t, err := openCgroups(wd)
	if err != nil {
		return err
	}
	t.close()
	cleanDisks(wd)
	return nil
}

// Running lists the processes still running in the jobs' control groups of an agent of
// workDir: none once the agent has ended, however it ended, or its next start has reclaimed
// what it left.
func Running(workDir string) ([]int, error) {
	wd, err := filepath.Abs(workDir)
	if err == nil {
		wd, err = filepath.EvalSymlinks(wd)
	}
	if err != nil {
		return nil, err
	}
	v2, v1, err := cgroupRoots()
	if err != nil {
		return nil, err
	}
	name := agentGroupName(wd)
	roots := []string{}
	if v2 != "" {
		roots = append(roots, filepath.Join(v2, "hostedtrain", name))
	}
	for _, c := range cgroupV1Controllers {
		if r := v1[c]; r != "" {
			roots = append(roots, filepath.Join(r, "hostedtrain", name))
		}
	}
	seen := map[int]bool{}
	var pids []int
	for _, root := range roots {
		groups, _ := filepath.Glob(filepath.Join(root, "*", "cgroup.procs"))
		for _, g := range groups {
			for _, f := range strings.Fields(readTrim(g)) {
				if pid, err := strconv.Atoi(f); err == nil && !seen[pid] {
					seen[pid] = true
					pids = append(pids, pid)
				}
			}
		}
	}
	return pids, nil
}

// Close removes the agent's control groups once its jobs have ended (their boxes closed).
func (s *Sandbox) Close() {
	if s.cgroups != nil {
		s.cgroups.close()
	}
}

// Limits are the limits a job with gpus GPUs runs under on this node.
func (s *Sandbox) Limits(gpus int) Limits { return s.share.limits(gpus, s.cfg.MaxProcs) }

// systemDirs are the host folders every job sees read-only.
var systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt"}

// nvidiaControl are the device files every CUDA process opens besides its GPUs'.
var nvidiaControl = []string{"nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset", "nvidia-caps"}

// Check fills in c's defaults and checks that the node and the agent have what the sandbox
// needs: bubblewrap, util-linux's setpriv and prlimit (and mkfs.ext4 and mount where jobs get a
// file system of their own), a seccomp filter for this machine, and root. It also makes the
// files the agent's own parent left open close-on-exec.
func (c *Config) Check() error {
	if c.Bwrap == "" {
		c.Bwrap = "bwrap"
	}
	path, err := exec.LookPath(c.Bwrap)
	if err != nil {
		return fmt.Errorf("the sandbox needs bubblewrap (apt-get install bubblewrap): %w", err)
	}
	c.Bwrap = path
	if c.Setpriv == "" {
		c.Setpriv = "setpriv"
	}
	if c.Setpriv, err = exec.LookPath(c.Setpriv); err != nil {
		return fmt.Errorf("the sandbox needs util-linux's setpriv: %w", err)
	}
	if c.Prlimit == "" {
		c.Prlimit = "prlimit"
	}
	if c.Prlimit, err = exec.LookPath(c.Prlimit); err != nil {
		return fmt.Errorf("the sandbox needs util-linux's prlimit: %w", err)
	}
	if c.DiskQuota >= 0 {
		for _, tool := range []string{"mkfs.ext4", "mount"} {
			if _, err := exec.LookPath(tool); err != nil {
				return fmt.Errorf("the sandbox gives each job a file system of its own and needs %s (Debian's e2fsprogs, util-linux): %w", tool, err)
			}
		}
	}
	if c.TmpSize == 0 {
		c.TmpSize = 1 << 30
	}
	if c.ShmSize == 0 {
		c.ShmSize = 16 << 30
	}
	if c.MaxProcs == 0 {
		c.MaxProcs = 16384
	}
	var nofile unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &nofile); err != nil {
		return fmt.Errorf("the sandbox: read the agent's open-files limit: %w", err)
	}
	c.MaxFiles = int(min(uint64(cmp.Or(c.MaxFiles, 65536)), nofile.Max))
	if c.ProxyConns == 0 {
		c.ProxyConns = int(min(512, max(16, (int64(nofile.Cur)-agentFiles)/2/maxSlots)))
	}
	if _, err := seccompFilter(runtime.GOARCH); err != nil {
		return fmt.Errorf("the sandbox: %w", err)
	}
	// Whatever the agent's own parent left open (not close-on-exec) would reach every job.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return fmt.Errorf("mark inherited files close-on-exec: %w", err)
	}
	if c.UIDBase == 0 {
		c.UIDBase = DefaultUIDBase
	}
	if c.Hide == nil {
		c.Hide = []string{"/etc/hostedtrain"}
	}
	if c.DevDir == "" {
		c.DevDir = "/dev"
	}
	if c.ProxyPort == 0 {
		c.ProxyPort = 3128
	}
	if os.Geteuid() != 0 {
		return errors.New("the sandbox needs the agent to run as root (it gives each job slot its own user and network); " +
			"run it as root, or turn the sandbox off with --unsafe-no-sandbox")
	}
	c.checked = true
	return nil
}

// take gives a job the lowest free slot.
func (s *Sandbox) take() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.slots == nil {
		s.slots = map[int]bool{}
	}
	n := 0
	for s.slots[n] {
		n++
	}
	s.slots[n] = true
	return n
}

func (s *Sandbox) give(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.slots, n)
}

// Box is one job's sandbox: its slot's user, its control group, its network namespace and
// egress proxy, and the job's folder. The job's processes start in it (Command, Start).
type Box struct {
	sb      *Sandbox
	slot    int
	uid     int
	dir     string
	devices []int     // the CUDA indexes of the job's GPUs
	group   *jobGroup // the job's control group: its limits, and what ends it whole
	limits  Limits
	ns      *netns
	proxy   *egressProxy
	// forwards are listeners in the job's network for the allowed loopback addresses.
	forwards []net.Listener
	// sysfs is a sysfs mounted from the job's network namespace, shown as its /sys ("": the
	// node's).
	sysfs string
	// binds are more read-write binds, a job's own view of prime-rl's Python environment
	// among them.
	binds []bindMount
	// owned is set once the writable folders were given to the slot's user, before the job's
	// first process: after that the job could swap a folder for a link while a walk runs.
	owned bool
}

// WritableDirs are the job folder's parts its processes may write. The agent makes them in
// every job's folder, sandboxed or not.
var WritableDirs = []string{"outputs", "home", "tmp"}

// OpenBox makes the sandbox of a job whose folder is dir and whose GPUs have the CUDA indexes
// gpus: a slot, the writable folders (to be owned by the slot's user), a control group with the
// job's limits, a network namespace and the egress proxy in it. logf gets what the job's notes
// should say (a refusal of the egress proxy, once a host).
func (s *Sandbox) OpenBox(dir string, gpus []int, logf func(string)) (*Box, error) {
	slot := s.take()
	b := &Box{sb: s, slot: slot, uid: s.cfg.UIDBase + slot, dir: dir, devices: gpus}
	for _, d := range WritableDirs {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			b.Close()
			return nil, err
		}
	}
	if s.cgroups == nil {
		b.Close()
		return nil, errors.New("the sandbox was not opened (sandbox.Open)")
	}
	b.limits = s.Limits(len(gpus))
	g, err := s.cgroups.newGroup(filepath.Base(dir), b.limits)
	if err != nil {
		b.Close()
		return nil, err
	}
	b.group = g
	ns, err := newNetns()
	if err != nil {
		b.Close()
		return nil, err
	}
	b.ns = ns
	var ln net.Listener
	err = ns.do(func() (err error) {
		ln, err = net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(s.cfg.ProxyPort))
		return err
	})
	if err != nil {
		b.Close()
		return nil, fmt.Errorf("the job's egress proxy: %w", err)
	}
	b.proxy = startEgressProxy(netutil.LimitListener(ln, s.cfg.ProxyConns), s.cfg.Allow, logf)
	if b.sysfs, err = b.mountSysfs(); err != nil {
		b.Close()
		return nil, err
	}
	for _, addr := range s.cfg.Allow {
		if ap, err := netip.ParseAddrPort(addr); err != nil || !ap.Addr().IsLoopback() {
			continue
		}
		var fl net.Listener
		if err := ns.do(func() (err error) { fl, err = net.Listen("tcp", addr); return err }); err != nil {
			b.Close()
			return nil, fmt.Errorf("forward %s into the job's network: %w", addr, err)
		}
		b.forwards = append(b.forwards, fl)
		go forward(fl, addr)
	}
	return b, nil
}

// mountSysfs mounts, from a thread in the job's network namespace, a sysfs the job sees as its
// /sys: the node's hardware as /sys shows it, but only the job's own network interfaces. It
// lies beside the job's folder, in the agent's mount namespace.
func (b *Box) mountSysfs() (string, error) {
	dir := filepath.Join(filepath.Dir(filepath.Dir(b.dir)), "sysfs", filepath.Base(b.dir))
	unmount(dir)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	err := b.ns.do(func() error {
		return unix.Mount("sysfs", dir, "sysfs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "")
	})
	if err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("the job's /sys: %w", err)
	}
	return dir, nil
}

// forward carries each connection accepted in the job's network to addr on the node.
func forward(ln net.Listener, addr string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func() {
			defer c.Close()
			up, err := net.DialTimeout("tcp", addr, 10*time.Second)
			if err != nil {
				return
			}
			defer up.Close()
			done := make(chan struct{}, 2)
			go func() { _, _ = io.Copy(up, c); done <- struct{}{} }()
			go func() { _, _ = io.Copy(c, up); done <- struct{}{} }()
			<-done
		}()
	}
}

// Close ends whatever the job left running (its group's processes), then frees its network,
// proxy and slot.
func (b *Box) Close() {
	if b.group != nil {
		if err := b.group.remove(); err != nil && b.proxy != nil && b.proxy.logf != nil {
			b.proxy.logf(err.Error())
		}
	}
	for _, l := range b.forwards {
		l.Close()
	}
	if b.sysfs != "" {
		unmount(b.sysfs)
		_ = os.Remove(b.sysfs)
	}
	if b.proxy != nil {
		b.proxy.close()
	}
	if b.ns != nil {
		b.ns.close()
	}
	b.sb.give(b.slot)
}

// bindMount is a folder of the node's shown read-write in the sandbox.
type bindMount struct {
	host, inside string
	// readOnly: the job reads it and cannot write it (a node cache), and it is not the slot
	// user's.
	readOnly bool
	// dirsOnly: only its folders become the slot user's, its files stay whose they are (an
	// overlay's: giving them away would copy each up).
	dirsOnly bool
}

// Limits are the limits the job runs under: its share of the node.
func (b *Box) Limits() Limits { return b.limits }

// OOMKills is how many of the job's processes the kernel killed for its memory limit (its
// control group's count).
func (b *Box) OOMKills() int {
	if b.group == nil {
		return 0
	}
	return b.group.oomKills()
}

// TasksRefused is how many times the job's control group refused it a new process or thread
// (its tasks limit).
func (b *Box) TasksRefused() int {
	if b.group == nil {
		return 0
	}
	return b.group.tasksRefused()
}

// Bind makes host read-write at inside for the job's processes, owned by the slot's user (only
// its folders where dirsOnly: an overlay's files stay whose they are). Only before the job's
// first process.
func (b *Box) Bind(host, inside string, dirsOnly bool) error {
	if b.owned {
		return errors.New("sandbox: a folder can be bound only before the job's first process")
	}
	b.binds = append(b.binds, bindMount{host: host, inside: inside, dirsOnly: dirsOnly})
	return nil
}

// BindReadOnly lets the job's processes read host at the same path, and not write it (the
// node's caches: root's files, shared by jobs). Only before the job's first process.
func (b *Box) BindReadOnly(host string) error {
	if b.owned {
		return errors.New("sandbox: a folder can be bound only before the job's first process")
	}
	for _, bd := range b.binds {
		if bd.readOnly && bd.host == host {
			return nil
		}
	}
	b.binds = append(b.binds, bindMount{host: host, inside: host, readOnly: true})
	return nil
}

// env is the whole environment of a process in the sandbox: nothing of the agent's. The
// fixed variables come last, so that they win over any of the job's with the same name
// (exec.Cmd keeps the last of duplicates); the service refuses such names at submit anyway.
func (b *Box) env(jobEnv []string) []string {
	path := strings.Join(append(slices.Clone(b.sb.cfg.Path), "/usr/local/sbin", "/usr/local/bin", "/usr/sbin", "/usr/bin", "/sbin", "/bin"), ":")
	proxy := "http://127.0.0.1:" + strconv.Itoa(b.sb.cfg.ProxyPort)
	return append(slices.Clone(jobEnv),
		"PATH="+path, "HOME="+filepath.Join(b.dir, "home"), "TMPDIR="+filepath.Join(b.dir, "tmp"), "LANG=C.UTF-8", "USER=job",
		"HTTP_PROXY="+proxy, "HTTPS_PROXY="+proxy, "ALL_PROXY="+proxy,
		"http_proxy="+proxy, "https_proxy="+proxy, "all_proxy="+proxy,
		"NO_PROXY=localhost,127.0.0.1,::1", "no_proxy=localhost,127.0.0.1,::1",
		"LD_PRELOAD=", "LD_LIBRARY_PATH=", "PYTHONPATH=", "PYTHONHOME=",
	)
}

// args are bwrap's arguments before the command. Bubblewrap runs as root (it mounts what the
// agent can read, whatever the slot's user could reach on the host) and keeps only the
// capabilities setpriv needs to become the slot's user, which then drops them all.
func (b *Box) args(argv []string) []string {
	args := []string{
		"--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
		"--hostname", "job", "--die-with-parent",
		"--cap-drop", "ALL", "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP",
	}
	for _, d := range systemDirs {
		args = append(args, "--ro-bind-try", d, d)
	}
	for _, h := range b.sb.cfg.Hide {
		if fi, err := os.Stat(h); err == nil && fi.IsDir() {
			args = append(args, "--tmpfs", h)
		}
	}
	// /sys read-only: CUDA and NVML read the GPUs' PCI details there (Flatpak's GPU access
	// does the same). It is a sysfs of the job's own network (sysfs shows the network of whoever
	// mounted it): the node's interfaces are not in it.
	sys := "/sys"
	if b.sysfs != "" {
		sys = b.sysfs
	}
	args = append(args, "--proc", "/proc", "--dev", "/dev", "--ro-bind-try", sys, "/sys")
	// /sys/fs/cgroup would show the node's cgroups, with other jobs' host PIDs.
	if _, err := os.Stat("/sys/fs/cgroup"); err == nil {
		args = append(args, "--tmpfs", "/sys/fs/cgroup")
	}
	args = append(args, "--perms", "1777", "--size", strconv.FormatInt(b.sb.cfg.ShmSize, 10), "--tmpfs", "/dev/shm")
	for _, idx := range b.devices {
		name := "nvidia" + strconv.Itoa(idx)
		args = append(args, "--dev-bind-try", filepath.Join(b.sb.cfg.DevDir, name), "/dev/"+name)
	}
	for _, name := range nvidiaControl {
		args = append(args, "--dev-bind-try", filepath.Join(b.sb.cfg.DevDir, name), "/dev/"+name)
	}
	// /tmp is the sandbox's own (the job's big temporary files go to TMPDIR, in its folder);
	// it comes before the binds below, which may lie under it.
	args = append(args, "--perms", "1777", "--size", strconv.FormatInt(b.sb.cfg.TmpSize, 10), "--tmpfs", "/tmp")
	for _, p := range b.sb.cfg.ReadOnly {
		args = append(args, b.reachable(p)...)
		args = append(args, "--ro-bind-try", p, p)
	}
	// The job's folder: what the agent wrote (configs, logs) read-only; its outputs, home
	// and tmp writable. The folder is root's, so the job cannot swap these for links.
	args = append(args, b.reachable(b.dir)...)
	args = append(args, "--ro-bind", b.dir, b.dir)
	for _, d := range WritableDirs {
		args = append(args, "--bind", filepath.Join(b.dir, d), filepath.Join(b.dir, d))
	}
	for _, bd := range b.binds {
		if bd.readOnly {
			args = append(args, b.reachable(bd.inside)...)
			args = append(args, "--ro-bind", bd.host, bd.inside)
			continue
		}
		args = append(args, "--bind", bd.host, bd.inside)
	}
	args = append(args, "--chdir", b.dir, "--")
	uid := strconv.Itoa(b.uid)
	nproc := strconv.Itoa(b.limits.Tasks)
	nofile := strconv.Itoa(b.sb.cfg.MaxFiles)
	args = append(args, b.sb.cfg.Prlimit, "--nproc="+nproc+":"+nproc, "--nofile="+nofile+":"+nofile, "--",
		b.sb.cfg.Setpriv, "--reuid="+uid, "--regid="+uid, "--clear-groups",
		"--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--")
	return append(args, argv...)
}

// own gives the writable folders to the slot's user: the agent writes into them (configs,
// restored checkpoints) before a process starts. Hard links are left alone: a job's copy of
// prime-rl's Python links the node's files, which stay the node's.
func (b *Box) own() error {
	if b.owned {
		return nil
	}
	b.owned = true
	roots := []bindMount{}
	for _, d := range WritableDirs {
		roots = append(roots, bindMount{host: filepath.Join(b.dir, d)})
	}
	for _, bd := range b.binds {
		if !bd.readOnly {
			roots = append(roots, bd)
		}
	}
	for _, root := range roots {
		err := filepath.WalkDir(root.host, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if root.dirsOnly && !d.IsDir() {
				return nil
			}
			if !d.IsDir() && d.Type().IsRegular() {
				if fi, err := d.Info(); err == nil {
					if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Nlink > 1 {
						return nil
					}
				}
			}
			return os.Lchown(p, b.uid, b.uid)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// Command makes the exec.Cmd that runs argv in the sandbox with the job's env (its own
// variables and secrets: the sandbox adds its fixed ones, never the agent's). The first one
// gives the writable folders to the slot's user. Start starts it.
func (b *Box) Command(argv, jobEnv []string) (*exec.Cmd, error) {
	if err := b.own(); err != nil {
		return nil, fmt.Errorf("sandbox: give the job's folders to its user: %w", err)
	}
	filter, err := seccompFile()
	if err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	// bubblewrap reads its options from fd 3 (the seccomp filter is fd 4), not its command line:
	// it is PID 1 of the job's namespace, and /proc/1/cmdline, which any process of the job may
	// read, would show every path of the node it binds. Only the command is left there.
	all := append([]string{"--seccomp", "4"}, b.args(argv)...)
	sep := slices.Index(all, "--")
	opts, err := argsFile(all[:sep])
	if err != nil {
		filter.Close()
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	cmd := exec.Command(b.sb.cfg.Bwrap, append([]string{"--args", "3"}, all[sep:]...)...)
	cmd.ExtraFiles = []*os.File{opts, filter}
	cmd.Dir = "/"
	cmd.Env = b.env(jobEnv)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	return cmd, nil
}

// Start starts cmd, which Command made, in the box: from a thread of its own inside the job's
// network namespace, which the process inherits, and straight into the job's control group. The
// thread stays until the process has ended (the process's Pdeathsig follows the thread that
// forked it): it waits for the process there and hands what cmd.Wait returned to ended. Start
// returns once the process has started, or with why it could not.
func (b *Box) Start(cmd *exec.Cmd, ended func(error)) error {
	started := make(chan error, 1)
	go func() {
		err := b.ns.do(func() error {
			back, err := func() {}, error(nil)
			if b.group != nil {
				// The calling thread is locked (ns.do): it takes the process into the job's
				// control group and comes back out.
				back, err = b.group.startIn(cmd.SysProcAttr)
			}
			if err == nil {
				err = cmd.Start()
				back()
			}
			for _, f := range cmd.ExtraFiles {
				f.Close() // the child has its own copies
			}
			started <- err
			if err == nil {
				ended(cmd.Wait())
			}
			return nil
		})
		if err != nil {
			started <- err
		}
	}()
	return <-started
}

// Signal sends sig to every process in the process group of cmd (which Start started) but its
// leader, bubblewrap's monitor: ended by SIGTERM, the monitor would take the sandbox down with it
// at once, before the job could finish a checkpoint. Bubblewrap's init inside ignores the signal
// (PID 1 of a namespace gets only what it handles); the job's own processes get it.
func Signal(cmd *exec.Cmd, sig syscall.Signal) {
	pgid := cmd.Process.Pid
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == pgid {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid {
			_ = syscall.Kill(pid, sig)
		}
	}
}

// DialContext connects to addr from a thread inside the job's network namespace: its own
// loopback is there, the node's is not. addr should be a literal address: the dial then makes
// its socket on that thread, never on one of the resolver's.
func (b *Box) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := b.ns.do(func() (err error) {
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// argsFile is a file holding args NUL-separated, read from its start: bubblewrap's --args.
func argsFile(args []string) (*os.File, error) {
	fd, err := unix.MemfdCreate("bwrap-args", unix.MFD_CLOEXEC)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "bwrap-args")
	var b strings.Builder
	for _, a := range args {
		b.WriteString(a)
		b.WriteByte(0)
	}
	if _, err := f.WriteString(b.String()); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(0, 0); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// LinkTree makes dst a copy of the tree at src whose files are hard links to src's (a copy
// when they are on different file systems): a job's own prime-rl Python environment, where its
// environment installs go, without copying gigabytes. The slot's user can replace any file in
// its copy but write into none of the node's: they are not its files.
func LinkTree(src, dst string) error {
	return filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(target, to)
		case d.Type().IsRegular():
			return LinkOrCopy(p, to)
		}
		return nil
	})
}

// LinkOrCopy makes dst a hard link of src, or a copy where they are on different file systems.
func LinkOrCopy(src, dst string) error {
	if err := os.Link(src, dst); err == nil || !errors.Is(err, syscall.EXDEV) {
		return err
	}
	return copyFile(src, dst)
}

func copyFile(src, dst string) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	fi, err := in.Stat()
	if err != nil {
		return err
	}
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_EXCL|os.O_WRONLY, fi.Mode().Perm())
	if err != nil {
		return err
	}
	if _, err := out.ReadFrom(in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// reachable are the arguments that make the folders above path, where bwrap makes them for a
// bind, ones the slot's user can pass through (bwrap would copy the host's modes).
func (b *Box) reachable(path string) []string {
	var args []string
	for _, a := range ancestors(path) {
		if !InSystemDirs(a) {
			args = append(args, "--perms", "0755", "--dir", a)
		}
	}
	return args
}

// ancestors are the folders above path, outermost first, "/" left out.
func ancestors(path string) []string {
	var out []string
	for d := filepath.Dir(path); d != "/" && d != "."; d = filepath.Dir(d) {
		out = append([]string{d}, out...)
	}
	return out
}

// InSystemDirs reports whether path lies in the system folders every job sees read-only (/usr,
// /bin, /lib*, /etc, /opt): a program there needs no ReadOnly of its own.
func InSystemDirs(path string) bool {
	for _, d := range systemDirs {
		if path == d || strings.HasPrefix(path, d+"/") {
			return true
		}
	}
	return false
}

// Flags are the sandbox's command-line flags, shared by gpuagent and hostedtrain dev.
type Flags struct {
	unsafeOff bool
	readOnly  stringList
	path      stringList
	uidBase   int
	allow     stringList
}

// Register adds the flags to fs.
func (f *Flags) Register(fs *flag.FlagSet) {
	fs.BoolVar(&f.unsafeOff, "unsafe-no-sandbox", false, "UNSAFE: run jobs without the sandbox, as this process's user with its environment's "+
		"neighbours in reach (only for a machine that runs nobody else's code)")
	fs.Var(&f.readOnly, "sandbox-ro", "a host folder jobs see read-only at the same place (a Python outside /usr, a conformance kit; repeatable)")
	fs.Var(&f.path, "sandbox-path", "a folder put first on the jobs' PATH (repeatable)")
	fs.Var(&f.allow, "sandbox-allow", "a HOST:PORT jobs may reach though it is in a private or loopback range (repeatable; --inference-endpoint's is added)")
	fs.IntVar(&f.uidBase, "sandbox-uid-base", DefaultUIDBase, "the first job slot's user id: slot n runs as this plus n")
}

// Config is the sandbox the flags ask for: nil with --unsafe-no-sandbox.
func (f *Flags) Config() *Config {
	if f.unsafeOff {
		return nil
	}
	return &Config{ReadOnly: f.readOnly, Path: f.path, UIDBase: f.uidBase, Allow: f.allow}
}

type stringList []string

func (l *stringList) String() string     { return strings.Join(*l, ",") }
func (l *stringList) Set(s string) error { *l = append(*l, s); return nil }
