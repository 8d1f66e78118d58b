package gpuagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// The node's check reads the kernel's own records only (red team, issue 29): an Xid line a
// program wrote to the log (facility user), or an Xid the NVIDIA table names a program's fault
// (13: a graphics exception), says nothing of the node; the driver's hardware Xid (79: fallen
// off the bus) fails the check. A second check reads only what came since.
func TestTheNodeCheckReadsTheKernelsHardwareXidsOnly(t *testing.T) {
	t.Parallel()
	log := filepath.Join(t.TempDir(), "kmsg")
	records := "" +
		"12,100,1000,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=1, GPU has fallen off the bus.\n" + // user facility: a program's
		"3,101,1001,-;NVRM: Xid (PCI:0000:3b:00): 13, pid=2, Graphics Exception\n" + // a program's fault
		"6,102,1002,-;eth0: link up\n"
	if err := os.WriteFile(log, []byte(records), 0o644); err != nil {
		t.Fatal(err)
	}
	c := &nodeChecker{kernelLog: log, seq: -1}
	if chk := c.check(context.Background()); chk.Failed {
		t.Fatalf("a check failed on records no driver fault wrote: %+v", chk)
	}
	f, err := os.OpenFile(log, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = f.WriteString("3,103,1003,-;NVRM: Xid (PCI:0000:3b:00): 79, pid=3, GPU has fallen off the bus.\n SUBSYSTEM=pci\n")
	f.Close()
	chk := c.check(context.Background())
	if !chk.Failed || !strings.Contains(strings.Join(chk.Evidence, " "), "fallen off the bus") {
		t.Fatalf("the driver's Xid 79: %+v; want a failed check quoting it", chk)
	}
	if chk := c.check(context.Background()); chk.Failed {
		t.Fatalf("a third check read the old record again: %+v", chk)
	}
}

// The driver's answer: a GPU missing from it, or with uncorrectable ECC errors, fails the
// check; so does a query that fails (nvidia-smi exits non-zero when a GPU is lost).
func TestTheNodeCheckAsksTheDriver(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	answer := filepath.Join(dir, "answer")
	c := &nodeChecker{query: []string{"cat", answer}, devices: []Device{{Index: 0}, {Index: 1}}, seq: -1}
	for _, tc := range []struct {
		answer string
		failed bool
		says   string
	}{
		{"0, 00000000:3B:00.0, 0\n1, 00000000:5E:00.0, [N/A]\n", false, "all 2 GPUs answer"},
		{"0, 00000000:3B:00.0, 0\n1, 00000000:5E:00.0, 3\n", true, "GPU 1 (00000000:5E:00.0) has 3 uncorrectable ECC errors"},
		{"0, 00000000:3B:00.0, 0\n", true, "GPU 1 is not in the driver's answer"},
	} {
		if err := os.WriteFile(answer, []byte(tc.answer), 0o644); err != nil {
			t.Fatal(err)
		}
		chk := c.check(context.Background())
		if chk.Failed != tc.failed || !strings.Contains(strings.Join(chk.Evidence, " "), tc.says) {
			t.Errorf("answer %q: %+v; want failed=%v saying %q", tc.answer, chk, tc.failed, tc.says)
		}
	}
	c.query = []string{"sh", "-c", "echo 'Unable to determine the device handle for GPU0000:3B:00.0: GPU is lost.' >&2; exit 15"}
	if chk := c.check(context.Background()); !chk.Failed || !strings.Contains(strings.Join(chk.Evidence, " "), "GPU is lost") {
		t.Errorf("a failing query: %+v", chk)
	}
}
