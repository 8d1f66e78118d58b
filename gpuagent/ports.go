package gpuagent

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"

	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// DefaultPortRange is where the agent gives jobs their blocks of ports: away from the fixed
// ports prime-rl binds by default (5000+, 5555, 8000, 8100, 13345, 29501) and below the
// kernel's ephemeral range (32768+), so no default or outgoing connection lands in a block.
var DefaultPortRange = [2]int{20000, 29999}

// portAllocator hands each job on the node a block of consecutive ports
// (upstream.PortBlockSize) that no other job of this agent holds and no process is bound to
// when it is handed out; the job's configs name them in every port setting prime-rl has.
type portAllocator struct {
	first, last int

	mu     sync.Mutex
	holder map[int]string // block base → job id
}

func newPortAllocator(r [2]int) *portAllocator {
	if r[0] == 0 && r[1] == 0 {
		r = DefaultPortRange
	}
	return &portAllocator{first: r[0], last: r[1], holder: map[int]string{}}
}

// take gives jobID the lowest block that is free.
func (p *portAllocator) take(jobID string) (upstream.Ports, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for base := p.first; base+upstream.PortBlockSize-1 <= p.last; base += upstream.PortBlockSize {
		if _, held := p.holder[base]; held {
			continue
		}
		if bound := firstBound(base, upstream.PortBlockSize); bound != 0 {
			continue // another process has a port of it
		}
		p.holder[base] = jobID
		return upstream.Ports{Base: base}, nil
	}
	return upstream.Ports{}, fmt.Errorf("no free block of %d ports in %d-%d", upstream.PortBlockSize, p.first, p.last)
}

// give returns jobID's block.
func (p *portAllocator) give(jobID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for base, j := range p.holder {
		if j == jobID {
			delete(p.holder, base)
		}
	}
}

// firstBound is the first of n ports from base that something is bound to (on any
// address), or 0.
func firstBound(base, n int) int {
	for port := base; port < base+n; port++ {
		if !portFree(port) {
			return port
		}
	}
	return 0
}

func portFree(port int) bool {
	ln, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// ParsePortRange reads LOW-HIGH (a --port-range flag): within 1024-65535, room for one job's
// block at least.
func ParsePortRange(s string) ([2]int, error) {
	a, b, ok := strings.Cut(s, "-")
	lo, err1 := strconv.Atoi(a)
	hi, err2 := strconv.Atoi(b)
	if !ok || err1 != nil || err2 != nil || lo < 1024 || hi > 65535 || hi-lo+1 < upstream.PortBlockSize {
		return [2]int{}, fmt.Errorf("--port-range %q: want LOW-HIGH within 1024-65535, at least %d ports (one job's block)", s, upstream.PortBlockSize)
	}
	return [2]int{lo, hi}, nil
}
