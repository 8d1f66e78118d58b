package upstream

import "fmt"

// The ports prime-rl's processes bind on a node, and the config keys that move them
// (packages/prime-rl-configs: inference.py, shared.py, rl.py, orchestrator.py; the launcher
// in src/prime_rl/entrypoints/rl.py). Left at their defaults, two runs on one node collide.
const (
	DefaultInferencePort = 8000  // inference.server.port: the router the orchestrator calls
	DefaultBackendPort   = 8100  // inference.backend_port: the vLLM engine behind the router
	DefaultDPRPCPort     = 13345 // inference.vllm.data_parallel_rpc_port
	DefaultNCCLPort      = 29501 // weight_broadcast.port when its type is nccl
	DefaultZMQPort       = 5555  // rollout_transport.port; the ready socket is port+1
	DefaultEnvServerPort = 5000  // orchestrator.env_server_base_port: source i listens on base+i
)

// PortBlockSize is how many consecutive ports a job takes on a node: the fixed ones below and
// one env server for each of up to MaxEnvServers environment sources (train, then eval).
const (
	PortBlockSize = 64
	MaxEnvServers = PortBlockSize - portEnvServers
)

// Offsets in a job's block.
const (
	portInference = iota
	portBackend
	portDPRPC
	portNCCL
	portZMQ
	portZMQReady
	portEnvServers
)

// Ports is a job's block of ports, starting at Base. The zero value is prime-rl's defaults,
// which a run uses when the agent gives it no block.
type Ports struct{ Base int }

func (p Ports) at(offset, def int) int {
	if p.Base == 0 {
		return def
	}
	return p.Base + offset
}

// Inference is the inference router's port (inference.server.port), and so the port of the
// orchestrator's client base URL.
func (p Ports) Inference() int { return p.at(portInference, DefaultInferencePort) }

// Backend is the vLLM engine's port behind the router (inference.backend_port).
func (p Ports) Backend() int { return p.at(portBackend, DefaultBackendPort) }

// DPRPC is vLLM's data-parallel RPC port (inference.vllm.data_parallel_rpc_port).
func (p Ports) DPRPC() int { return p.at(portDPRPC, DefaultDPRPCPort) }

// NCCL is the weight broadcast's rendezvous port (weight_broadcast.port, type nccl).
func (p Ports) NCCL() int { return p.at(portNCCL, DefaultNCCLPort) }

// ZMQ is the rollout transport's port (rollout_transport.port); ZMQ+1 is taken too.
func (p Ports) ZMQ() int { return p.at(portZMQ, DefaultZMQPort) }

// EnvServerBase is orchestrator.env_server_base_port: environment source i (train sources,
// then eval sources) listens on EnvServerBase()+i.
func (p Ports) EnvServerBase() int { return p.at(portEnvServers, DefaultEnvServerPort) }

// All lists every port a run with envServers environment sources binds (the NCCL one when
// nccl is set), for the agent to check they are free and the emulator to bind.
func (p Ports) All(envServers int, nccl bool) []int {
	out := []int{p.Inference(), p.Backend(), p.DPRPC(), p.ZMQ(), p.ZMQ() + 1}
	if nccl {
		out = append(out, p.NCCL())
	}
	for i := range envServers {
		out = append(out, p.EnvServerBase()+i)
	}
	return out
}

// CheckEnvServers refuses more environment sources than a block has ports for.
func CheckEnvServers(n int) error {
	if n > MaxEnvServers {
		return fmt.Errorf("%d environments (train and eval together) is more than the %d a run can serve", n, MaxEnvServers)
	}
	return nil
}
