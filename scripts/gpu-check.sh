#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU (and Go, redis-server, python3 with torch),
# run the real agent — GPU inventory from nvidia-smi — with a small PyTorch training program as
# its rl command (examples/gpu/train_torch.py), against a local API, and print what it measured:
# the inventory, the run's metrics and checkpoints through the API, and the agent's upload and
# idle-gap figures from /metrics. Exits 0 only if the job COMPLETED.
set -euo pipefail
cd "$(dirname "$0")/.."

echo "== nvidia-smi inventory"
nvidia-smi --query-gpu=index,uuid,name,memory.total --format=csv,noheader,nounits
python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.cuda.is_available())'

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
HOSTEDTRAIN_AGENT_TOKEN=$(bin/hostedtrain admin token --data "$data" --org agents --scopes agent --subject gpu-check) \
  bin/gpuagent --api "$HOSTEDTRAIN_URL" --store "$data/objects" --work-dir "$data/work" \
  --rl-command "python3 examples/gpu/train_torch.py @ {config} --output-dir {output_dir} --run.name {run_name}" \
  --install-command "" --poll-interval 200ms --flush-interval 1s --metrics-addr 127.0.0.1:9400 2>"$data/agent.log" &
pids+=($!)

cat >"$data/job.toml" <<'TOML'
model = "Qwen/Qwen3-4B-Instruct-2507"
num_gpus = 1
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
echo "== submitting a 300-step PyTorch run on one GPU"
out=$(bin/hostedtrain train submit "$data/job.toml" --wait -o json)
job=$(tail -n1 <<<"$out")
id=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["id"])' "$job")
status=$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["status"])' "$job")

echo "== the agent's inventory"
grep '"agent started"' "$data/agent.log"
echo "== metrics through the API (first and last rows)"
curl -fsS -H "Authorization: Bearer $HOSTEDTRAIN_TOKEN" "$HOSTEDTRAIN_URL/v1/jobs/$id/metrics?names=loss/mean,time/step&limit=10000" |
  python3 -c 'import json,sys; r=json.load(sys.stdin)["items"]; print(len(r), "rows"); print(r[0]); print(r[-1])'
echo "== checkpoints through the API"
curl -fsS -H "Authorization: Bearer $HOSTEDTRAIN_TOKEN" "$HOSTEDTRAIN_URL/v1/jobs/$id/checkpoints"; echo
echo "== the agent's figures"
curl -fsS http://127.0.0.1:9400/metrics | grep -E '^hostedtrain_agent_(checkpoint_upload_(seconds_sum|seconds_count|bytes_total)|idle_gap|jobs_ended_total|gpus)' || true
echo "job $id: $status"
[ "$status" = COMPLETED ]
