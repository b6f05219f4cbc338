#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# What the worker's sandbox costs: examples/attention (25 units, real nvcc)
# built on a coordinator and two 1-slot workers, with the bubblewrap sandbox
# and with --insecure-no-sandbox, alternating, ROUNDS times each (default 3),
# every build from an empty store. Prints each build's wall time and the
# ratio of the means. Run as root (the sandbox drops to an unprivileged user).
#
# Usage: bench/sandbox.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
nvcc="${CUDA_HOME:-/usr/local/cuda}/bin/nvcc"
work=$(mktemp -d /tmp/bench-sandbox.XXXXXX)
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# build MODE: one build on a fresh cluster; prints its wall seconds.
build() {
  local mode=$1 dir extra=() address pid
  dir=$(mktemp -d "$work/$mode.XXXX")
  [[ $mode == plain ]] && extra=(--insecure-no-sandbox)
  build/bin/distcc-cuda-coordinator --listen 127.0.0.1:0 --state-dir "$dir/c" >"$dir/c.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do grep -q '^listening on' "$dir/c.log" 2>/dev/null && break; sleep 0.1; done
  address=$(sed -n 's/^listening on //p' "$dir/c.log")
  for name in a b; do
    build/bin/distcc-cuda-worker --coordinator "$address" --name "$name" --slots 1 \
      --memory-cap 8GiB --nvcc "$nvcc" --work-dir "$dir/$name" "${extra[@]}" >"$dir/$name.log" 2>&1 &
    pids+=($!)
  done
  for name in a b; do
    for _ in $(seq 600); do grep -q registered "$dir/$name.log" 2>/dev/null && break; sleep 0.1; done
  done
  local start end
  start=$(date +%s.%N)
  build/bin/distcc-cuda build examples/attention/kernels.toml --coordinator "$address" \
    -o "$dir/out" >"$dir/build.log" 2>&1
  end=$(date +%s.%N)
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  wait 2>/dev/null || true
  pids=()
  echo "$end - $start" | bc
}

sandboxed=()
plain=()
for round in $(seq "$rounds"); do
  sync
  s=$(build sandboxed)
  p=$(build plain)
  sandboxed+=("$s")
  plain+=("$p")
  printf 'round %d: sandboxed %.1f s, no sandbox %.1f s\n' "$round" "$s" "$p"
done
mean() { printf '%s\n' "$@" | awk '{ t += $1 } END { printf "%.2f", t / NR }'; }
ms=$(mean "${sandboxed[@]}")
mp=$(mean "${plain[@]}")
printf 'mean: sandboxed %s s, no sandbox %s s; sandboxed / no sandbox = %s\n' "$ms" "$mp" \
  "$(echo "scale=3; $ms / $mp" | bc)"
