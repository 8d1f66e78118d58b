package gpuagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// The agent's check of its own node: the only evidence that counts against a node (node health,
// quarantine). It reads what no job can write — the GPU driver's answers, the kernel's log, the
// agent's own state — never a job's output: a job that prints "Xid 79" makes the agent look,
// nothing more. It runs when the agent starts, after a failure whose logs name the node's
// hardware or network or whose process could not start, after the agent lost a lease, and every
// HealthInterval before a claim.

// HealthQuery is the default GPU health query: nvidia-smi's one line a GPU with its index, PCI
// bus and uncorrectable ECC errors since the driver loaded.
var HealthQuery = []string{"--query-gpu=index,pci.bus_id,ecc.errors.uncorrected.volatile.total", "--format=csv,noheader,nounits"}

// hardwareXids are the NVIDIA driver's Xid codes that say the GPU or its links failed (NVIDIA's
// "Xid Errors" table: double-bit ECC, row remapping, NVLink, fallen off the bus, GSP and
// contained/uncontained ECC errors). Others (13, 31, 43, 45, ...) are most often a program's own
// fault — an illegal address, a kernel killed — and say nothing of the node.
var hardwareXids = []int{48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 121, 140, 149, 154}

// xidLine is the driver's Xid report in the kernel's log: NVRM: Xid (PCI:0000:3b:00): 79, ...
var xidLine = regexp.MustCompile(`NVRM: Xid \(PCI:([0-9A-Fa-f:.]+)\): (\d+)`)

// nodeChecker checks the node; one check at a time.
type nodeChecker struct {
	query     []string // the GPU query (nvidia-smi and HealthQuery); nil: none
	kernelLog string   // /dev/kmsg; "": not read
	workDir   string
	devices   []Device

	mu sync.Mutex
	// seq is the sequence number of the next kernel record not yet read (-1: none read yet).
	seq int64
	// last is the newest check's result; due says the next claim must check first.
	last job.NodeCheck
	due  bool
	at   time.Time
}

func newNodeChecker(cfg *Config) *nodeChecker {
	return &nodeChecker{query: cfg.HealthQuery, kernelLog: cfg.KernelLog, workDir: cfg.WorkDir, devices: cfg.Devices, seq: -1, due: true}
}

// check looks at the node now.
func (c *nodeChecker) check(ctx context.Context) job.NodeCheck {
	c.mu.Lock()
	defer c.mu.Unlock()
	var ev []string
	failed := false
	add := func(bad bool, line string) {
		failed = failed || bad
		ev = append(ev, line)
	}
	if len(c.query) > 0 {
		bad, lines := c.queryGPUs(ctx)
		for _, l := range lines {
			add(bad, l)
		}
	}
	if c.kernelLog != "" {
		bad, lines := c.readKernelLog()
		for _, l := range lines {
			add(bad, l)
		}
	}
	for _, l := range c.probeAgent() {
		add(true, l)
	}
	if !failed && len(ev) == 0 {
		ev = append(ev, "agent: nothing wrong found (its open files and work disk)")
	}
	if len(ev) > 16 {
		ev = append(ev[:15], fmt.Sprintf("... and %d more", len(ev)-15))
	}
	c.last, c.due, c.at = job.NodeCheck{Failed: failed, Evidence: ev}, false, time.Now()
	return c.last
}

// queryGPUs asks the driver about every GPU of the agent's. A query that fails (nvidia-smi
// answers "GPU is lost" and exits non-zero), a GPU missing from its answer, or a GPU with
// uncorrectable ECC errors fails the check.
func (c *nodeChecker) queryGPUs(ctx context.Context) (bad bool, lines []string) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.query[0], c.query[1:]...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		msg := strings.TrimSpace(stderr.String() + " " + string(out))
		if i := strings.LastIndex(msg, "\n"); i >= 0 {
			msg = msg[i+1:]
		}
		return true, []string{fmt.Sprintf("driver: %s failed (%v): %s", c.query[0], err, cut(msg, 300))}
	}
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	r.FieldsPerRecord = -1
	rows, err := r.ReadAll()
	if err != nil {
		return true, []string{"driver: the GPU query's answer does not read: " + err.Error()}
	}
	seen := map[int]bool{}
	for _, row := range rows {
		if len(row) < 3 {
			continue
		}
		idx, err := strconv.Atoi(strings.TrimSpace(row[0]))
		if err != nil {
			continue
		}
		seen[idx] = true
		if n, err := strconv.Atoi(strings.TrimSpace(row[2])); err == nil && n > 0 && c.ours(idx) {
			bad = true
			lines = append(lines, fmt.Sprintf("driver: GPU %d (%s) has %d uncorrectable ECC errors since the driver loaded", idx, strings.TrimSpace(row[1]), n))
		}
	}
	for _, d := range c.devices {
		if !seen[d.Index] {
			bad = true
			lines = append(lines, fmt.Sprintf("driver: GPU %d is not in the driver's answer (lost, or fallen off the bus)", d.Index))
		}
	}
	if !bad {
		lines = append(lines, fmt.Sprintf("driver: all %d GPUs answer, none with uncorrectable ECC errors", len(c.devices)))
	}
	return bad, lines
}

func (c *nodeChecker) ours(idx int) bool {
	return slices.ContainsFunc(c.devices, func(d Device) bool { return d.Index == idx })
}

// readKernelLog reads the kernel's records since the last check (at the first, those of the
// last hour) and finds the driver's hardware Xid reports among them. Only the kernel's own
// records count: /dev/kmsg marks each with its facility, and a record written from user space
// never has the kernel's (0).
func (c *nodeChecker) readKernelLog() (bad bool, lines []string) {
	// A raw descriptor: Go's poller would wait on /dev/kmsg for the next record, forever.
	fd, err := unix.Open(c.kernelLog, unix.O_RDONLY|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, []string{"kernel: log not read: " + err.Error()}
	}
	defer unix.Close(fd)
	f := rawReader(fd)
	var since int64 // µs since boot: the first check reads the last hour
	if c.seq < 0 {
		var ts unix.Timespec
		if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) == nil {
			since = ts.Nano()/1000 - int64(time.Hour/time.Microsecond)
		}
	}
	// /dev/kmsg gives a record a read (a 16 KiB buffer takes any); a file (a test's) many: one a
	// line, in both, and lines starting with a space continue the record before.
	br := bufio.NewReaderSize(f, 16<<10)
	found := 0
	for {
		rec, err := br.ReadBytes('\n')
		if errors.Is(err, unix.EPIPE) {
			continue // records overwritten while we read: go on with the next
		}
		if len(rec) > 0 && rec[0] != ' ' {
			if pri, seq, ts, msg, ok := parseKmsg(rec); ok && seq >= c.seq && ts >= since {
				c.seq = seq + 1
				if m := xidLine.FindStringSubmatch(msg); m != nil && pri>>3 == 0 { // the kernel's own
					if code, _ := strconv.Atoi(m[2]); slices.Contains(hardwareXids, code) {
						bad = true
						found++
						if found <= 5 {
							lines = append(lines, "kernel: "+cut(strings.TrimSpace(msg), 300))
						}
					}
				}
			}
		}
		if err != nil {
			if !errors.Is(err, unix.EAGAIN) && !errors.Is(err, io.EOF) {
				lines = append(lines, "kernel: log read stopped: "+err.Error())
			}
			break
		}
	}
	if c.seq < 0 {
		c.seq = 0
	}
	if found > 5 {
		lines = append(lines, fmt.Sprintf("kernel: %d more hardware Xid reports", found-5))
	}
	return bad, lines
}

// rawReader reads a descriptor with read(2) itself: EAGAIN (nothing more to read) is returned,
// not waited out.
type rawReader int

func (r rawReader) Read(p []byte) (int, error) {
	n, err := unix.Read(int(r), p)
	if err != nil {
		return 0, err
	}
	if n == 0 {
		return 0, io.EOF
	}
	return n, nil
}

// parseKmsg reads one /dev/kmsg record: "pri,seq,ts_usec,flags;message\n" (continuation lines
// after it are dropped).
func parseKmsg(rec []byte) (pri int, seq, ts int64, msg string, ok bool) {
	head, body, found := bytes.Cut(rec, []byte{';'})
	if !found {
		return 0, 0, 0, "", false
	}
	fields := strings.Split(string(head), ",")
	if len(fields) < 3 {
		return 0, 0, 0, "", false
	}
	p, err1 := strconv.Atoi(fields[0])
	s, err2 := strconv.ParseInt(fields[1], 10, 64)
	t, err3 := strconv.ParseInt(fields[2], 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return 0, 0, 0, "", false
	}
	line, _, _ := bytes.Cut(body, []byte{'\n'})
	return p, s, t, string(line), true
}

// probeAgent is what fails in the agent itself: out of open files (nothing more could start),
// or its work disk nearly full (no job could be given a folder).
func (c *nodeChecker) probeAgent() []string {
	var bad []string
	var lim unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &lim) == nil {
		if entries, err := os.ReadDir("/proc/self/fd"); err == nil && uint64(len(entries)) > lim.Cur*9/10 {
			bad = append(bad, fmt.Sprintf("agent: %d of its %d open files in use", len(entries), lim.Cur))
		}
	}
	var st unix.Statfs_t
	if c.workDir != "" && unix.Statfs(c.workDir, &st) == nil {
		if free := int64(st.Bavail) * st.Bsize; free < 1<<30 {
			bad = append(bad, fmt.Sprintf("agent: its work disk has %d MiB free", free>>20))
		}
	}
	return bad
}

// suspect says the next claim must check the node first (a lease lost).
func (c *nodeChecker) suspect() {
	c.mu.Lock()
	c.due = true
	c.mu.Unlock()
}

// beforeClaim is the check a claim carries: a new one when due (or every interval), else the
// last; nil when the node is healthy.
func (c *nodeChecker) beforeClaim(ctx context.Context, interval time.Duration) *job.NodeCheck {
	c.mu.Lock()
	due := c.due || time.Since(c.at) >= interval || c.last.Failed
	c.mu.Unlock()
	chk := c.last
	if due {
		chk = c.check(ctx)
	}
	if !chk.Failed {
		return nil
	}
	return &chk
}

// suspicious says whether a failure's reading makes the agent check its node: the logs named
// its hardware or network, a process could not start, or a pipeline died of a signal it did not
// send itself.
func suspicious(a *job.FailureAnalysis) bool {
	switch a.Class {
	case job.FailGPUHardware, job.FailNCCLNetwork, job.FailNodeError:
		return true
	}
	return a.Fault == job.FaultPlatform && a.Class == job.FailUnknown
}

// judge folds the node's check into a failure's reading: a failed check is the node's fault,
// retried elsewhere and held against the node; a passing one leaves a GPU fault that only the
// job's own output named unconfirmed: not retried, not held against anyone's node.
func judge(a *job.FailureAnalysis, chk job.NodeCheck) {
	a.NodeCheck = &chk
	if chk.Failed {
		if a.Class != job.FailNCCLNetwork && a.Class != job.FailNodeError {
			a.Class = job.FailGPUHardware
		}
		a.Fault, a.Confidence = job.FaultPlatform, max(a.Confidence, 0.95)
		a.Summary = "the node's own check found it faulty (" + chk.Evidence[0] + "): retried on another node, and the node is taken out of rotation"
		return
	}
	if a.Class == job.FailGPUHardware {
		a.Fault, a.Confidence = job.FaultUnknown, 0.4
		a.Summary = "the job's logs name a GPU fault, but the node's own check of its GPUs found none (the driver answers, the kernel logged no hardware error): " +
			"not retried, and not held against the node; the job's own code may have failed"
	}
}

func cut(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}
