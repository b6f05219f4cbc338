#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# examples/attention (24 kernels plus its API unit, real nvcc for sm_100)
# built by the distcc-cuda client on each kind of cluster, side by side in
# one run, each from a new client state dir (nothing in the client's own
# caches):
#   embedded          no cluster: the embedded coordinator and worker here
#   coordinator_cold  --coordinator: distcc-cuda-coordinator with one worker
#                     of SLOTS slots, nothing cached
#   coordinator_warm  the same again: the coordinator's result cache
#   buildgrid_cold    --remote-executor: a real BuildGrid 0.9.1
#                     (scripts/buildgrid, tests/e2e/buildgrid/serve) whose one
#                     bot is a distcc-cuda-worker of SLOTS slots (--bots-api),
#                     nothing cached
#   buildgrid_warm    the same again: BuildGrid's ActionCache
# SLOTS defaults to the usable cores. Takes about 3 minutes on 2 cores.
# Results: build/bench-client-engines/results.txt; the last line is the
# summary with the ratios.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD
. bench/buildgrid_bot.sh
SLOTS=${SLOTS:-$(nproc)}
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
BGD=$(./scripts/buildgrid)
WORK=$REPO/build/bench-client-engines
rm -rf "$WORK"
mkdir -p "$WORK"
chmod 755 "$WORK"
RESULTS=$WORK/results.txt
: > "$RESULTS"
PLAN=$REPO/examples/attention/kernels.toml

# client_build NAME FLAGS...: one `distcc-cuda build` of the plan from a new
# state dir; its wall time goes to the results.
client_build() {
  local name=$1
  shift
  local start end
  start=$(date +%s.%N)
  "$REPO/build/bin/distcc-cuda" build "$PLAN" -o "$WORK/out-$name" --state-dir "$WORK/state-$name" \
    "$@" > "$WORK/$name.log" 2>&1
  end=$(date +%s.%N)
  printf '%s %.1f %s\n' "$name" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" \
    "$(grep -o '^  units .*' "$WORK/$name.log" | head -n 1 | sed 's/^  units *//')" | tee -a "$RESULTS"
}

client_build embedded --slots "$SLOTS"

"$REPO/build/bin/distcc-cuda-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/coordinator" \
  > "$WORK/coordinator.log" 2>&1 &
COORDINATOR=$!
trap 'kill $COORDINATOR ${WORKER:-} 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "^listening on " "$WORK/coordinator.log" && break; sleep 0.1; done
ADDRESS=$(sed -n 's/^listening on //p' "$WORK/coordinator.log")
"$REPO/build/bin/distcc-cuda-worker" --coordinator "$ADDRESS" --slots "$SLOTS" \
  --work-dir "$WORK/worker" > "$WORK/worker.log" 2>&1 &
WORKER=$!
for _ in $(seq 100); do grep -q registered "$WORK/worker.log" && break; sleep 0.1; done
client_build coordinator_cold --coordinator "$ADDRESS"
client_build coordinator_warm --coordinator "$ADDRESS"
kill "$COORDINATOR" "$WORKER"
wait "$COORDINATOR" "$WORKER" 2>/dev/null || true

start_buildgrid_bot "$WORK" "$BGD" "$SLOTS"
# As many units at once as the bot has slots: the coordinator plans units
# for the slots it sees, as for a worker of that many.
ENGINE=(--remote-executor "grpc://127.0.0.1:$PORT" --remote-instance main --remote-jobs "$SLOTS")
client_build buildgrid_cold "${ENGINE[@]}"
client_build buildgrid_warm "${ENGINE[@]}"

time_of() { awk -v n="$1" '$1 == n {print $2}' "$RESULTS"; }
awk -v e="$(time_of embedded)" -v c="$(time_of coordinator_cold)" -v cw="$(time_of coordinator_warm)" \
  -v g="$(time_of buildgrid_cold)" -v gw="$(time_of buildgrid_warm)" -v s="$SLOTS" 'BEGIN {
  printf "units=25 slots=%s buildgrid_cold_vs_coordinator_cold=%.2f coordinator_cold_vs_embedded=%.2f buildgrid_cold_vs_embedded=%.2f coordinator_warm_vs_cold=%.2f buildgrid_warm_vs_cold=%.2f\n",
    s, g / c, c / e, g / e, cw / c, gw / g }' | tee -a "$RESULTS"
