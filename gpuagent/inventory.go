package gpuagent

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"

	"github.com/hostedtrain/hostedtrain/internal/job"
)

// Device is one GPU of the node.
type Device struct {
	// Index is the device's CUDA index, what CUDA_VISIBLE_DEVICES names.
	Index int    `json:"index"`
	UUID  string `json:"uuid,omitempty"`
	// Model is the family jobs ask for ("H100"); Name is what the driver calls it.
	Model     string `json:"model"`
	Name      string `json:"name,omitempty"`
	MemoryMiB int    `json:"memory_mib,omitempty"`
}

// nvidiaSMIQuery is the inventory query: one CSV line a GPU.
var nvidiaSMIQuery = []string{"--query-gpu=index,uuid,name,memory.total", "--format=csv,noheader,nounits"}

// Discover lists the node's GPUs with nvidia-smi (the binary named, or "nvidia-smi" on PATH).
func Discover(ctx context.Context, nvidiaSMI string) ([]Device, error) {
	if nvidiaSMI == "" {
		nvidiaSMI = "nvidia-smi"
	}
	cmd := exec.CommandContext(ctx, nvidiaSMI, nvidiaSMIQuery...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("gpu inventory: %s: %w: %s", nvidiaSMI, err, strings.TrimSpace(stderr.String()))
	}
	return parseNvidiaSMI(out)
}

// parseNvidiaSMI reads `nvidia-smi --query-gpu=index,uuid,name,memory.total
// --format=csv,noheader,nounits`.
func parseNvidiaSMI(out []byte) ([]Device, error) {
	r := csv.NewReader(bytes.NewReader(out))
	r.TrimLeadingSpace = true
	rows, err := r.ReadAll()
	if err != nil {
		return nil, fmt.Errorf("gpu inventory: nvidia-smi output: %w", err)
	}
	var devs []Device
	for _, row := range rows {
		if len(row) != 4 {
			return nil, fmt.Errorf("gpu inventory: nvidia-smi line %q: want index, uuid, name, memory", strings.Join(row, ","))
		}
		idx, err := strconv.Atoi(strings.TrimSpace(row[0]))
		if err != nil {
			return nil, fmt.Errorf("gpu inventory: index %q: %w", row[0], err)
		}
		mem, _ := strconv.Atoi(strings.TrimSpace(row[3])) // "[N/A]" on some boards: unknown
		name := strings.TrimSpace(row[2])
		devs = append(devs, Device{Index: idx, UUID: strings.TrimSpace(row[1]), Name: name, Model: ModelOf(name), MemoryMiB: mem})
	}
	if len(devs) == 0 {
		return nil, fmt.Errorf("gpu inventory: nvidia-smi lists no GPU")
	}
	sort.Slice(devs, func(i, j int) bool { return devs[i].Index < devs[j].Index })
	return devs, nil
}

// ModelOf turns a driver's product name into the family jobs ask for:
// "NVIDIA H100 80GB HBM3" → "H100", "NVIDIA A100-SXM4-80GB" → "A100",
// "NVIDIA GeForce RTX 4090" → "RTX4090", "Tesla T4" → "T4".
func ModelOf(name string) string {
	fields := strings.Fields(strings.ToUpper(name))
	for len(fields) > 0 && (fields[0] == "NVIDIA" || fields[0] == "TESLA" || fields[0] == "GEFORCE" || fields[0] == "QUADRO") {
		fields = fields[1:]
	}
	if len(fields) == 0 {
		return "UNKNOWN"
	}
	m, _, _ := strings.Cut(fields[0], "-")
	if (m == "RTX" || m == "GTX") && len(fields) > 1 {
		m += fields[1]
	}
	return m
}

// DevicesFromSpec makes an inventory from --gpus (MODEL:COUNT,...) for a node without
// nvidia-smi: indices count up from 0 in the order given.
func DevicesFromSpec(gpus []job.GPU) []Device {
	var devs []Device
	for _, g := range gpus {
		for range g.Count {
			devs = append(devs, Device{Index: len(devs), Model: strings.ToUpper(g.Model)})
		}
	}
	return devs
}

// pool hands the node's GPUs to jobs, each device to one job at a time.
type pool struct {
	mu      sync.Mutex
	devices []Device
	holder  map[int]string // device index → job id
}

func newPool(devs []Device) *pool {
	return &pool{devices: devs, holder: map[int]string{}}
}

// free says what is free, by model, in the claim's terms.
func (p *pool) free() []job.GPU {
	p.mu.Lock()
	defer p.mu.Unlock()
	counts := map[string]int{}
	var models []string
	for _, d := range p.devices {
		if _, busy := p.holder[d.Index]; busy {
			continue
		}
		if counts[d.Model] == 0 {
			models = append(models, d.Model)
		}
		counts[d.Model]++
	}
	out := make([]job.GPU, 0, len(models))
	for _, m := range models {
		out = append(out, job.GPU{Model: m, Count: counts[m]})
	}
	return out
}

// take gives jobID n free devices of model, lowest indices first.
func (p *pool) take(model string, n int, jobID string) ([]Device, bool) {
	if n == 0 {
		return nil, true
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var got []Device
	for _, d := range p.devices {
		if _, busy := p.holder[d.Index]; !busy && strings.EqualFold(d.Model, model) {
			got = append(got, d)
			if len(got) == n {
				break
			}
		}
	}
	if len(got) < n {
		return nil, false
	}
	for _, d := range got {
		p.holder[d.Index] = jobID
	}
	return got, true
}

// give returns jobID's devices.
func (p *pool) give(jobID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for idx, holder := range p.holder {
		if holder == jobID {
			delete(p.holder, idx)
		}
	}
}

// counts says how many devices of each model are free and busy.
func (p *pool) counts() (free, busy map[string]int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	free, busy = map[string]int{}, map[string]int{}
	for _, d := range p.devices {
		if _, b := p.holder[d.Index]; b {
			busy[d.Model]++
		} else {
			free[d.Model]++
		}
	}
	return free, busy
}

// visibleDevices is CUDA_VISIBLE_DEVICES for a job's devices.
func visibleDevices(devs []Device) string {
	idx := make([]string, len(devs))
	for i, d := range devs {
		idx[i] = strconv.Itoa(d.Index)
	}
	return strings.Join(idx, ",")
}
