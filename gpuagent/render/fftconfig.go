package render

import (
	"bytes"
	"fmt"

	"github.com/pelletier/go-toml/v2"

	"github.com/hostedtrain/hostedtrain/internal/jobspec"
	"github.com/hostedtrain/hostedtrain/internal/upstream"
)

// fftConfig is the rl.toml of a full fine-tune: the job's own prime-rl config with what the
// agent decides laid over it — every port in the job's block (the inference server and its
// backend, vLLM's data-parallel RPC, the orchestrator's client of it, the environment servers,
// the rollout transport and the weight broadcast), the checkpoint interval, and W&B off without
// its key. The output folder and run name are the pipeline's flags, as for an rl job. It
// returns the file, the number of environment servers and whether the weight broadcast binds a
// port.
func (r rlRun) fftConfig() ([]byte, int, bool, error) {
	s := r.spec
	cfg, _ := wholeNumber(jobspec.Clone(s.PrimeRL)).(map[string]any)
	if cfg == nil {
		return nil, 0, false, fmt.Errorf("render: the full fine-tune has no prime-rl config")
	}
	if s.Checkpoints != nil {
		table(cfg, "ckpt")["interval"] = s.Checkpoints.Interval
	}
	notes := rlNotesFor(s, r.secrets)
	if !hasSecret(r.secrets, "WANDB_API_KEY") {
		for _, m := range []any{cfg["monitors"], jobspec.Dig(cfg, "trainer", "monitors"), jobspec.Dig(cfg, "orchestrator", "monitors")} {
			if m, ok := m.(map[string]any); ok {
				delete(m, "wandb")
			}
		}
	}
	inf := table(cfg, "inference")
	table(inf, "server")["port"] = r.ports.Inference()
	inf["backend_port"] = r.ports.Backend()
	table(inf, "vllm")["data_parallel_rpc_port"] = r.ports.DPRPC()
	orch := table(cfg, "orchestrator")
	table(table(orch, "model"), "client")["base_url"] = fmt.Sprintf("http://localhost:%d/v1", r.ports.Inference())
	orch["env_server_base_port"] = r.ports.EnvServerBase()
	// Sub-configs' transports (which submit found equal) move up to the shared block, where
	// the port is set once.
	for _, sub := range []string{"trainer", "orchestrator"} {
		if t, ok := jobspec.Dig(cfg, sub, "rollout_transport").(map[string]any); ok {
			if cfg["rollout_transport"] == nil {
				cfg["rollout_transport"] = t
			}
			delete(cfg[sub].(map[string]any), "rollout_transport")
		}
	}
	rt := table(cfg, "rollout_transport")
	if rt["type"] == nil {
		rt["type"] = "zmq" // prime-rl's default, on the job's port
	}
	if rt["type"] == "zmq" {
		rt["port"] = r.ports.ZMQ()
	}
	// The weight broadcast: prime-rl's own choice (the filesystem with LoRA, else NCCL) unless
	// the config makes one; a broadcast over the network rendezvouses on the job's port.
	wb := table(cfg, "weight_broadcast")
	if wb["type"] == nil {
		wb["type"] = "nccl"
		if _, lora := jobspec.Dig(cfg, "trainer", "model", "lora").(map[string]any); lora {
			wb["type"] = "filesystem"
		}
	}
	broadcasts := wb["type"] != "filesystem"
	if broadcasts {
		wb["port"] = r.ports.NCCL()
	}
	// vLLM's context: the run's sequence length unless the config sets it, so that no
	// completion outgrows what the trainer keeps.
	if v := table(table(cfg, "inference"), "vllm"); v["max_model_len"] == nil && s.SeqLen > 0 { // 0: stored before submit read it
		v["max_model_len"] = s.SeqLen
	}
	// Where each seat of an environment runs its program: the job's own sandbox (verifiers'
	// subprocess runtime; its default is Prime's remote sandboxes), unless the source says
	// (submit allows only subprocess), and the harness it runs: upstream's for the taskset,
	// else the null harness, unless the source names one (verifiers' own fallback is its bash
	// coding agent). The seats are the taskset's env's (upstream.Taskset); a source that
	// names its own env (env.id) says its own.
	for _, group := range []string{"train", "eval"} {
		for _, src := range sliceAt(orch, group, "source") {
			m, _ := src.(map[string]any)
			if m == nil {
				continue
			}
			env := table(m, "env")
			id, _ := jobspec.Dig(env, "taskset", "id").(string)
			if env["id"] != nil || id == "" {
				continue
			}
			ts, _ := upstream.LookupTaskset(id)
			for _, seat := range ts.Seats() {
				a := table(env, seat)
				if a["runtime"] == nil {
					a["runtime"] = map[string]any{"type": "subprocess"}
				}
				if a["harness"] == nil {
					a["harness"] = map[string]any{"id": ts.SeatHarness(seat)}
				}
			}
		}
	}
	servers := len(sliceAt(orch, "train", "source")) + len(sliceAt(orch, "eval", "source"))
	if err := upstream.CheckEnvServers(servers); err != nil {
		return nil, 0, false, err
	}

	var buf bytes.Buffer
	fmt.Fprintf(&buf, "# The job's own prime-rl config (a full fine-tune), as hostedtrain runs it for job %s on prime-rl %s:\n",
		r.jobID, upstream.Pinned().Short().PrimeRL)
	fmt.Fprintf(&buf, "# its ports are in the job's block (%d-%d), its checkpoints every %d steps.\n",
		r.ports.Base, r.ports.Base+upstream.PortBlockSize-1, s.Checkpoints.Interval)
	for _, n := range notes {
		fmt.Fprintf(&buf, "# %s.\n", n)
	}
	enc := toml.NewEncoder(&buf)
	enc.SetIndentTables(false)
	if err := enc.Encode(cfg); err != nil {
		return nil, 0, false, fmt.Errorf("render rl.toml: %w", err)
	}
	return buf.Bytes(), servers, broadcasts, nil
}

// rlNotesFor are an fft job's notes: W&B without its key (prime-rl has every other key the
// job wrote).
func rlNotesFor(s jobspec.Spec, secrets []string) []string {
	if s.Wandb != nil && !hasSecret(secrets, "WANDB_API_KEY") {
		return []string{"W&B is off: the job has no WANDB_API_KEY among its secrets"}
	}
	return nil
}

func hasSecret(secrets []string, name string) bool {
	for _, s := range secrets {
		if s == name {
			return true
		}
	}
	return false
}

// table is the table at key of m, made if missing.
func table(m map[string]any, key string) map[string]any {
	t, ok := m[key].(map[string]any)
	if !ok {
		t = map[string]any{}
		m[key] = t
	}
	return t
}

func sliceAt(m map[string]any, path ...string) []any {
	l, _ := jobspec.Dig(m, path...).([]any)
	return l
}
