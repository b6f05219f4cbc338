#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# A toolkit the coordinator serves (distcc-cuda-coordinator toolkit add),
# side by side in one run, on loopback:
#   add        the time to add CUDA 13.2.86 (from PyPI, scripts/second_nvcc)
#              to a stopped coordinator's state, its size and files
#   own        a worker whose machine has 13.2 (--nvcc): start to registered
#   fetched    a worker with only 13.0 (/usr/local/cuda) and --served-toolkit
#              13.2, an empty cache, started at the same time: start to
#              registered (the fetch, every file checked, is in it)
#   build      examples/attention with --toolkit 13.2 on those two workers
#              (1 slot each): the units each compiled and their nvcc times
#   cached     the fetched worker restarted: from its cache, checked again
#   both       a second coordinator (a state of its own, so no result is
#              cached) serving 13.2 and this machine's 13.0 (its compile
#              part); one worker (2 slots, empty cache)
#              with --served-toolkit 13.0,13.2: start to registered; then
#              examples/attention built for 13.0 and for 13.2 at the same
#              time, both on that worker
# Its last line:
#   toolkit_mib= files= add_s= own_start_s= fetched_start_s= cached_start_s=
#   build_s= own_units= fetched_units= add_130_s= both_start_s= both_build_s=
#   both_units=
# About two minutes on 2 cores. Logs: build/bench-served-toolkit/.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
B=$REPO/build/bin
NVCC132=$(./scripts/second_nvcc)
HOME132=$(dirname "$(dirname "$NVCC132")")
WORK=$REPO/build/bench-served-toolkit
rm -rf "$WORK" && mkdir -p "$WORK/state"
now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{printf "%.1f", $2 - $1}'; }
# Seconds until FILE holds TEXT (at most 300).
wait_for() {
  for _ in $(seq 3000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "served_toolkit: '$2' never appeared in $1" >&2; exit 1
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

t=$(now)
"$B/distcc-cuda-coordinator" toolkit add --state-dir "$WORK/state" "$HOME132" | tee "$WORK/add.log"
add_s=$(since "$t")
mib=$(sed -n 's/.*(\([0-9.]*\) MiB, \([0-9]*\) files.*/\1/p' "$WORK/add.log")
files=$(sed -n 's/.*MiB, \([0-9]*\) files.*/\1/p' "$WORK/add.log")
"$B/distcc-cuda-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" >"$WORK/coordinator.log" 2>&1 &
pids+=($!)
wait_for "$WORK/coordinator.log" "listening on "
ADDR=$(sed -n 's/.*listening on //p' "$WORK/coordinator.log" | head -1)

worker() {  # NAME LOG ARGS...
  local name=$1 log=$2
  shift 2
  "$B/distcc-cuda-worker" --coordinator "$ADDR" --name "$name" --slots 1 --memory-cap 6GiB \
    --work-dir "$WORK/$name" "$@" >"$log" 2>&1 &
  pids+=($!)
}
t=$(now)
worker own "$WORK/own.log" --nvcc "$NVCC132"
worker fetched "$WORK/fetched.log" --nvcc /usr/local/cuda/bin/nvcc --served-toolkit 13.2
wait_for "$WORK/own.log" "registered"
own_s=$(since "$t")
wait_for "$WORK/fetched.log" "registered"
fetched_s=$(since "$t")

t=$(now)
"$B/distcc-cuda" build examples/attention/kernels.toml --coordinator "$ADDR" --toolkit "$HOME132" \
  -o "$WORK/out" 2>&1 | tee "$WORK/build.log"
build_s=$(since "$t")
own_units=$(sed -n 's/.*workers .*own: \([0-9]*\).*/\1/p' "$WORK/build.log")
fetched_units=$(sed -n 's/.*workers .*fetched: \([0-9]*\).*/\1/p' "$WORK/build.log")

kill "${pids[-1]}" && wait "${pids[-1]}" 2>/dev/null || true
t=$(now)
worker fetched "$WORK/cached.log" --nvcc /usr/local/cuda/bin/nvcc --served-toolkit 13.2
wait_for "$WORK/cached.log" "registered"
cached_s=$(since "$t")
grep -h "fetched CUDA\|from the cache" "$WORK/fetched.log" "$WORK/cached.log"

# One worker, two served toolkits, two builds at once.
kill "${pids[@]}" 2>/dev/null || true
wait "${pids[@]}" 2>/dev/null || true
pids=()
# A state of its own: the first coordinator's result cache would answer
# the 13.2 build without a compile.
mkdir -p "$WORK/state2"
"$B/distcc-cuda-coordinator" toolkit add --state-dir "$WORK/state2" "$HOME132" >/dev/null
t=$(now)
"$B/distcc-cuda-coordinator" toolkit add --state-dir "$WORK/state2" /usr/local/cuda | tee "$WORK/add-130.log"
add_130_s=$(since "$t")
"$B/distcc-cuda-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state2" >"$WORK/coordinator2.log" 2>&1 &
pids+=($!)
wait_for "$WORK/coordinator2.log" "listening on "
ADDR=$(sed -n 's/.*listening on //p' "$WORK/coordinator2.log" | head -1)
release130=$(/usr/local/cuda/bin/nvcc --version | sed -n 's/.*release \([0-9.]*\),.*/\1/p')
t=$(now)
"$B/distcc-cuda-worker" --coordinator "$ADDR" --name both --slots 2 --memory-cap 6GiB \
  --work-dir "$WORK/both" --served-toolkit "$release130,13.2" >"$WORK/both.log" 2>&1 &
pids+=($!)
wait_for "$WORK/both.log" "registered"
both_s=$(since "$t")
grep -h "fetched CUDA" "$WORK/both.log"
t=$(now)
"$B/distcc-cuda" build examples/attention/kernels.toml --coordinator "$ADDR" --toolkit "$HOME132" \
  -o "$WORK/out-132" >"$WORK/both-132.log" 2>&1 &
build132=$!
"$B/distcc-cuda" build examples/attention/kernels.toml --coordinator "$ADDR" \
  -o "$WORK/out-130" >"$WORK/both-130.log" 2>&1
wait "$build132"
both_build_s=$(since "$t")
both_units=$(cat "$WORK/both-130.log" "$WORK/both-132.log" |
  sed -n 's/.*workers .*both: \([0-9]*\).*/\1/p' | awk '{n += $1} END {print n + 0}')
grep -h "toolchain\|workers " "$WORK/both-130.log" "$WORK/both-132.log"
echo "toolkit_mib=$mib files=$files add_s=$add_s own_start_s=$own_s fetched_start_s=$fetched_s" \
  "cached_start_s=$cached_s build_s=$build_s own_units=${own_units:-0}" \
  "fetched_units=${fetched_units:-0} add_130_s=$add_130_s both_start_s=$both_s" \
  "both_build_s=$both_build_s both_units=${both_units:-0}"
