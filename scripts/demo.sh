#!/usr/bin/env bash
# The demo: start the local stack, submit examples/quickstart.toml, follow it to the end,
# print its summary, stop the stack, and check that nothing it started is still running.
# Exits 0 only if the job COMPLETED. `make demo` builds first and runs this.
set -uo pipefail
cd "$(dirname "$0")/.."

data=$(mktemp -d "${TMPDIR:-/tmp}/hostedtrain-demo.XXXXXX")
dev_pid=""

stop_stack() {
  if [ -n "$dev_pid" ] && kill -0 "$dev_pid" 2>/dev/null; then
    kill -TERM "$dev_pid"
    wait "$dev_pid" 2>/dev/null
  fi
  dev_pid=""
}
trap 'stop_stack; exit 130' INT TERM
trap 'stop_stack' EXIT

# The agent runs every job in its sandbox (bubblewrap, a user per job slot), which needs root.
sandbox=""
if [ "$(id -u)" != 0 ]; then
  echo "== not root: the demo's jobs run WITHOUT the sandbox (--unsafe-no-sandbox); run it as root to have them sandboxed"
  sandbox="--unsafe-no-sandbox"
fi
echo "== starting the local stack (hostedtrain dev, data in $data)"
bin/hostedtrain dev --addr 127.0.0.1:0 --data "$data" --agents 1 --step-time 250ms $sandbox >"$data/dev.out" 2>&1 &
dev_pid=$!

# Wait for the stack to say it is ready (it writes api.url last), or to die.
for _ in $(seq 1 300); do
  [ -s "$data/api.url" ] && break
  if ! kill -0 "$dev_pid" 2>/dev/null; then
    echo "hostedtrain dev exited before it was ready:"; cat "$data/dev.out"; exit 1
  fi
  sleep 0.1
done
if [ ! -s "$data/api.url" ]; then
  echo "hostedtrain dev was not ready after 30 s:"; cat "$data/dev.out"; exit 1
fi
cat "$data/dev.out"

export HOSTEDTRAIN_URL; HOSTEDTRAIN_URL=$(cat "$data/api.url")
export HOSTEDTRAIN_TOKEN; HOSTEDTRAIN_TOKEN=$(cat "$data/admin.token")

echo
echo "== hostedtrain train submit examples/quickstart.toml --wait"
bin/hostedtrain train submit examples/quickstart.toml --wait
rc=$?

echo
echo "== stopping the stack"
stop_stack
# Every process the stack starts names the data folder in its command line.
left=""
for f in /proc/[0-9]*/cmdline; do
  cmd=$(tr '\0' ' ' <"$f" 2>/dev/null) || continue
  [[ "$cmd" == *"$data"* ]] && left="$left\n  ${f#/proc/}: $cmd"
done
if [ -n "$left" ]; then
  echo -e "processes left behind:$left"; rc=1
else
  echo "nothing left running"
fi
[ $rc -eq 0 ] && rm -rf "$data"
exit $rc
