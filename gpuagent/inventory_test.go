package gpuagent

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// What nvidia-smi prints on an 8×H100 node for the agent's query.
const h100Node = `0, GPU-4b3c8a1e-0c2f-8d1e-7a6b-1f2e3d4c5b6a, NVIDIA H100 80GB HBM3, 81559
1, GPU-5c4d9b2f-1d30-9e2f-8b7c-2031e4d5c6b7, NVIDIA H100 80GB HBM3, 81559
2, GPU-6d5eac30-2e41-af30-9c8d-3142f5e6d7c8, NVIDIA H100 80GB HBM3, 81559
3, GPU-7e6fbd41-3f52-b041-ad9e-4253a6f7e8d9, NVIDIA H100 80GB HBM3, 81559
4, GPU-8f70ce52-4063-c152-beaf-5364b708f9ea, NVIDIA H100 80GB HBM3, 81559
5, GPU-9081df63-5174-d263-cfb0-6475c8190afb, NVIDIA H100 80GB HBM3, 81559
6, GPU-a192e074-6285-e374-d0c1-7586d92a1b0c, NVIDIA H100 80GB HBM3, 81559
7, GPU-b2a3f185-7396-f485-e1d2-8697ea3b2c1d, NVIDIA H100 80GB HBM3, 81559
`

func TestParseNvidiaSMI(t *testing.T) {
	t.Parallel()
	devs, err := parseNvidiaSMI([]byte(h100Node))
	if err != nil {
		t.Fatal(err)
	}
	if len(devs) != 8 || devs[7].Index != 7 || devs[0].UUID != "GPU-4b3c8a1e-0c2f-8d1e-7a6b-1f2e3d4c5b6a" ||
		devs[0].Model != "H100" || devs[0].MemoryMiB != 81559 || devs[0].Name != "NVIDIA H100 80GB HBM3" {
		t.Errorf("got %+v", devs)
	}
	// Boards that do not report memory say [N/A]; lines may come in any order.
	devs, err = parseNvidiaSMI([]byte("1, GPU-b, NVIDIA A100-SXM4-80GB, [N/A]\n0, GPU-a, NVIDIA A100-SXM4-80GB, 81920\n"))
	if err != nil || devs[0].Index != 0 || devs[1].MemoryMiB != 0 || devs[1].Model != "A100" {
		t.Errorf("got %+v %v", devs, err)
	}
	for _, bad := range []string{"", "0, GPU-a, H100\n", "x, GPU-a, NVIDIA H100, 1\n"} {
		if _, err := parseNvidiaSMI([]byte(bad)); err == nil {
			t.Errorf("parseNvidiaSMI(%q) accepted", bad)
		}
	}
}

func TestModelOf(t *testing.T) {
	t.Parallel()
	for name, want := range map[string]string{
		"NVIDIA H100 80GB HBM3": "H100", "NVIDIA H100 NVL": "H100", "NVIDIA H200": "H200",
		"NVIDIA A100-SXM4-80GB": "A100", "NVIDIA A10G": "A10G", "Tesla T4": "T4", "NVIDIA L40S": "L40S",
		"NVIDIA GeForce RTX 4090": "RTX4090", "NVIDIA B200": "B200", "NVIDIA GH200 480GB": "GH200",
	} {
		if got := ModelOf(name); got != want {
			t.Errorf("ModelOf(%q) = %q, want %q", name, got, want)
		}
	}
}

// Discover runs nvidia-smi; here a script that prints what nvidia-smi prints on such a node
// stands in for the driver this machine does not have.
func TestDiscoverRunsNvidiaSMI(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "nvidia-smi")
	script := "#!/bin/sh\n[ \"$1 $2\" = \"--query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits\" ] || { echo \"unexpected arguments: $*\" >&2; exit 2; }\ncat <<'EOF'\n" + h100Node + "EOF\n"
	if err := os.WriteFile(fake, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	devs, err := Discover(context.Background(), fake)
	if err != nil || len(devs) != 8 {
		t.Fatalf("got %d devices, %v", len(devs), err)
	}
	_, err = Discover(context.Background(), filepath.Join(dir, "missing"))
	if err == nil || !strings.Contains(err.Error(), "gpu inventory") {
		t.Errorf("a node without nvidia-smi: %v", err)
	}
}

func TestPoolGivesEachDeviceToOneJob(t *testing.T) {
	t.Parallel()
	p := newPool(append(DevicesFromSpec([]job.GPU{{Model: "H100", Count: 4}}), Device{Index: 4, Model: "A100"}))
	a, ok := p.take("H100", 2, "a")
	if !ok || visibleDevices(a) != "0,1" {
		t.Fatalf("take: %v %v", a, ok)
	}
	b, ok := p.take("h100", 2, "b")
	if !ok || visibleDevices(b) != "2,3" {
		t.Fatalf("take: %v %v", b, ok)
	}
	if _, ok := p.take("H100", 1, "c"); ok {
		t.Error("took a busy device")
	}
	if free := p.free(); len(free) != 1 || free[0] != (job.GPU{Model: "A100", Count: 1}) {
		t.Errorf("free %v", free)
	}
	p.give("a")
	if free := p.free(); len(free) != 2 || free[0] != (job.GPU{Model: "H100", Count: 2}) {
		t.Errorf("free after give %v", free)
	}
	if none, ok := p.take("H100", 0, "cpu"); !ok || none != nil {
		t.Errorf("a job that needs no GPU: %v %v", none, ok)
	}
}
