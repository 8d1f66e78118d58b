#!/usr/bin/env bash
# The GPU check, for a machine with NVIDIA GPUs; CI never needs one. It runs a local API
# (`hostedtrain dev`, no agents of its own) and the real agent on this machine's GPUs, and:
#
# 1. torch: a small PyTorch training program (examples/gpu/train_torch.py, which writes
#    prime-rl's layout) as the agent's rl command: GPU inventory from nvidia-smi, metrics,
#    loguru logs, whole checkpoints and the agent's upload figures on a real GPU. Needs python3
#    with torch.
# 2. prime-rl: the real thing — prime-rl's reverse-text (examples/gpu/reverse-text.toml, from
#    configs/basic/reverse-text at the pin) on 2 GPUs through the agent's default pipeline: the
#    pinned prime-rl at $PRIME_RL (default /opt/prime-rl, installed as infra/gpu-node's
#    cloud-init does), its preflight, vLLM and trainer, resume-ready checkpoints. Needs 2 GPUs
#    and that checkout; skipped, saying why, without them.
#
# Prints what it measured and exits 0 only if every part it ran COMPLETED.
#   scripts/gpu-check.sh            both parts
#   scripts/gpu-check.sh torch      the first alone
#   scripts/gpu-check.sh prime-rl   the second alone
set -euo pipefail
cd "$(dirname "$0")/.."
parts=${1:-all}
PRIME_RL=${PRIME_RL:-/opt/prime-rl}

echo "== nvidia-smi inventory"
nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits
ngpus=$(nvidia-smi --query-gpu=index --format=csv,noheader | wc -l)
model=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n1 | grep -oE '[A-Z]+[0-9]{2,4}' | head -n1)

make build >/dev/null
data=$(mktemp -d "${TMPDIR:-/tmp}/hostedtrain-gpu.XXXXXX")
pids=()
cleanup() { for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

bin/hostedtrain dev --addr 127.0.0.1:0 --data "$data" --agents 0 >"$data/dev.out" 2>&1 &
pids+=($!)
for _ in $(seq 1 300); do [ -s "$data/api.url" ] && break; sleep 0.1; done
export HOSTEDTRAIN_URL; HOSTEDTRAIN_URL=$(cat "$data/api.url")
export HOSTEDTRAIN_TOKEN; HOSTEDTRAIN_TOKEN=$(cat "$data/admin.token")
agent_token=$(bin/hostedtrain admin token --data "$data" --org agents --scopes agent --subject gpu-check)

# agent NAME ARGS...: starts the real agent (its log in $data/NAME.log, metrics on :9400).
agent() {
  local name=$1; shift
  HOSTEDTRAIN_AGENT_TOKEN=$agent_token bin/gpuagent --api "$HOSTEDTRAIN_URL" --store "$data/objects" \
    --work-dir "$data/work-$name" --poll-interval 200ms --flush-interval 1s --metrics-addr 127.0.0.1:9400 \
    "$@" 2>"$data/$name.log" &
  agent_pid=$!
  pids+=("$agent_pid")
}

# follow JOB.toml: submits it, waits for its end, prints what the API says; returns 0 if COMPLETED.
follow() {
  local out job id status
  out=$(bin/hostedtrain train submit "$1" --wait -o json) || true
  job=$(tail -n1 <<<"$out")
  id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$job")
  status=$(python3 -c 'import json,sys; j=json.loads(sys.argv[1]); print(j["status"]); print(j.get("error",""), file=sys.stderr)' "$job")
  echo "== job $id: $status"
  bin/hostedtrain train get "$id" || true
  echo "-- metrics (headline series by prime-rl's names)"
  bin/hostedtrain train metrics "$id" || true
  echo "-- checkpoints"
  bin/hostedtrain train checkpoints "$id" || true
  echo "-- warnings and errors in its logs"
  bin/hostedtrain train logs "$id" --level WARNING --tail 40 || true
  [ "$status" = COMPLETED ]
}

rc=0
if [ "$parts" = all ] || [ "$parts" = torch ]; then
  echo
  echo "== 1. torch: a PyTorch run as the rl pipeline"
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'
  gpus=()
  if [ "$ngpus" -lt 2 ]; then
    # An rl job takes two GPUs (prime-rl's inference and trainer); the torch program uses the
    # first visible one, so one real GPU serves when the agent is told of a second.
    echo "(one GPU: the agent is told the node has two $model; the program trains on GPU 0)"
    gpus=(--gpus "$model:2")
  fi
  agent torch "${gpus[@]}" \
    --rl-command "python3 examples/gpu/train_torch.py @ {config} --output-dir {output_dir} --run.name {run_name} {resume}" \
    --preflight-command "" --install-command "" --versions-command "echo {}" --allow-unpinned
  cat >"$data/torch.toml" <<'TOML'
model = "Qwen/Qwen3-4B-Instruct-2507"
num_gpus = 2
max_steps = 300
batch_size = 16
rollouts_per_example = 4
learning_rate = 0.001
[[env]]
id = "primeintellect/alphabet-sort"
[checkpoints]
interval = 50
keep_cloud = 2
TOML
  follow "$data/torch.toml" || rc=1
  echo "-- the agent"
  grep '"agent started"' "$data/torch.log" || true
  curl -fsS http://127.0.0.1:9400/metrics | grep -E '^hostedtrain_agent_(checkpoint_upload_(seconds_sum|seconds_count|bytes_total)|idle_gap|jobs_ended_total|gpus)' || true
  kill -TERM "$agent_pid"; wait "$agent_pid" || true
fi

if [ "$parts" = all ] || [ "$parts" = prime-rl ]; then
  echo
  echo "== 2. prime-rl: reverse-text on 2 GPUs through the agent's default pipeline"
  if [ "$ngpus" -lt 2 ]; then
    echo "skipped: $ngpus GPU(s) here; prime-rl runs inference and the trainer on GPUs of their own"
  elif [ -z "${GPU_CHECK_AGENT_FLAGS:-}" ] && [ ! -d "$PRIME_RL/.venv" ]; then
    echo "skipped: no prime-rl checkout with its .venv at $PRIME_RL (install it as infra/gpu-node/cloud-init.yaml does, or set PRIME_RL)"
  else
    # GPU_CHECK_AGENT_FLAGS replaces the agent's pipeline flags: "--emulated" rehearses this
    # script on a machine without GPUs (with a stand-in nvidia-smi on PATH).
    read -r -a flags <<<"${GPU_CHECK_AGENT_FLAGS:---prime-rl $PRIME_RL --stop-grace 120s}"
    agent prime-rl "${flags[@]}"
    follow examples/gpu/reverse-text.toml || rc=1
    echo "-- the agent (upstream versions it found and reports on the job)"
    grep '"agent started"' "$data/prime-rl.log" || true
    kill -TERM "$agent_pid"; wait "$agent_pid" || true
  fi
fi
exit $rc
