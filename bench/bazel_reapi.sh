#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# examples/attention's 24 kernels plus its API unit as a Bazel build (Debian's
# Bazel 4.2.3, one nvcc_object target per unit: tests/e2e/bazel_workspace's
# rule), side by side in one run:
#   local        bazel --spawn_strategy=local --jobs=JOBS (Bazel runs nvcc itself)
#   remote_cold  --remote_executor at the coordinator's REAPI address, one
#                worker of SLOTS slots with its memory cap, nothing cached
#   remote_warm  the same from a fresh Bazel output base: every action an
#                action-cache hit on the coordinator
#   buildgrid_cold  --remote_executor at a real BuildGrid 0.9.1 (scripts/buildgrid,
#                tests/e2e/buildgrid/serve) whose one bot is a distcc-cuda-worker
#                of SLOTS slots (--bots-api), nothing cached
#   buildgrid_warm  the same from a fresh output base: BuildGrid's action cache
# JOBS and SLOTS default to the usable cores. Takes about 6 minutes on 2
# cores; BUILDGRID=0 leaves BuildGrid out. Results: build/bench-bazel-reapi/results.txt; the last line is the
# summary with the ratios to `local`.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD
. bench/buildgrid_bot.sh
CORES=$(nproc)
JOBS=${JOBS:-$CORES}
SLOTS=${SLOTS:-$CORES}
./scripts/setup --target distcc-cuda-coordinator distcc-cuda-worker >/dev/null
if [[ ! -x /usr/bin/bazel-4 ]]; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
    bazel-bootstrap >/dev/null
fi
WORK=$REPO/build/bench-bazel-reapi
rm -rf "$WORK"
mkdir -p "$WORK/ws"
RESULTS=$WORK/results.txt
: > "$RESULTS"

# The workspace: the example's headers, one generated .cu per grid point.
cp "$REPO/tests/e2e/bazel_workspace/nvcc.bzl" "$WORK/ws/"
cp "$REPO"/examples/attention/{attention.h,attention_kernels.cuh,attention_api.cu,attention_api.h} \
  "$WORK/ws/"
echo 'workspace(name = "attention_bench")' > "$WORK/ws/WORKSPACE"
{
  echo 'load(":nvcc.bzl", "nvcc_object")'
  echo 'HDRS = ["attention.h", "attention_kernels.cuh", "attention_api.h"]'
  echo 'FLAGS = ["-O3", "-std=c++17", "-gencode", "arch=compute_100,code=sm_100", "-Xcompiler=-fPIC"]'
  echo 'nvcc_object(name = "attention_api", srcs = "attention_api.cu", hdrs = HDRS, copts = FLAGS)'
} > "$WORK/ws/BUILD"
for dtype in fp16 bf16; do
  for hdim in 32 64 96 128 192 256; do
    for causal in true false; do
      name=attention_fwd_${dtype}_hdim${hdim}_${causal}
      printf '#include "attention_kernels.cuh"\ntemplate cudaError_t RunAttentionForward<%s, %s, %s>(const AttentionParams&, cudaStream_t);\n' \
        "$dtype" "$hdim" "$causal" > "$WORK/ws/$name.cu"
      echo "nvcc_object(name = \"$name\", srcs = \"$name.cu\", hdrs = HDRS, copts = FLAGS)" \
        >> "$WORK/ws/BUILD"
    done
  done
done

# bazel_build NAME OUTPUT_BASE FLAGS...: one cold Bazel (--batch) building
# every target; its wall time goes to the results.
bazel_build() {
  local name=$1 base=$2
  shift 2
  local start end
  start=$(date +%s.%N)
  (cd "$WORK/ws" && /usr/bin/bazel-4 --nohome_rc --nosystem_rc --noworkspace_rc \
    --install_base=/usr/share/bazel --trust_install_base --output_user_root="$WORK/bazel-root" \
    --output_base="$base" --batch --host_jvm_args=-Xmx512m build --color=no --curses=no \
    --noshow_progress --symlink_prefix=/ "$@" //:all) > "$WORK/$name.log" 2>&1
  end=$(date +%s.%N)
  printf '%s %.1f %s\n' "$name" "$(awk -v a="$start" -v b="$end" 'BEGIN {print b - a}')" \
    "$(grep -o '[0-9]* processes: .*' "$WORK/$name.log" | head -n 1)" | tee -a "$RESULTS"
}

bazel_build local "$WORK/base-local" --spawn_strategy=local --jobs="$JOBS"

"$REPO/build/bin/distcc-cuda-coordinator" --listen 127.0.0.1:0 --reapi-listen 127.0.0.1:0 \
  --state-dir "$WORK/coordinator" > "$WORK/coordinator.log" 2>&1 &
COORDINATOR=$!
trap 'kill $COORDINATOR ${WORKER:-} 2>/dev/null || true' EXIT
for _ in $(seq 100); do grep -q "remote_executor=" "$WORK/coordinator.log" && break; sleep 0.1; done
ADDRESS=$(sed -n 's/^listening on //p' "$WORK/coordinator.log")
REAPI=$(sed -n 's/.*--remote_executor=\(grpc:[^)]*\)).*/\1/p' "$WORK/coordinator.log")
"$REPO/build/bin/distcc-cuda-worker" --coordinator "$ADDRESS" --slots "$SLOTS" \
  --work-dir "$WORK/worker" > "$WORK/worker.log" 2>&1 &
WORKER=$!
for _ in $(seq 100); do grep -q registered "$WORK/worker.log" && break; sleep 0.1; done

REMOTE=(--remote_executor="$REAPI" --spawn_strategy=remote --noremote_local_fallback
        --noremote_upload_local_results --remote_timeout=600s --jobs=64)
bazel_build remote_cold "$WORK/base-remote-cold" "${REMOTE[@]}"
bazel_build remote_warm "$WORK/base-remote-warm" "${REMOTE[@]}"

kill "$COORDINATOR" "$WORKER"
wait "$COORDINATOR" "$WORKER" 2>/dev/null || true

if [[ ${BUILDGRID:-1} == 1 ]] && BGD=$(./scripts/buildgrid); then
  start_buildgrid_bot "$WORK" "$BGD" "$SLOTS"
  GRID=(--remote_executor="grpc://127.0.0.1:$PORT" --remote_instance_name=main
        --spawn_strategy=remote --noremote_local_fallback --noremote_upload_local_results
        --remote_timeout=600s --jobs=64)
  bazel_build buildgrid_cold "$WORK/base-buildgrid-cold" "${GRID[@]}"
  bazel_build buildgrid_warm "$WORK/base-buildgrid-warm" "${GRID[@]}"
fi

local_s=$(awk '$1 == "local" {print $2}' "$RESULTS")
cold_s=$(awk '$1 == "remote_cold" {print $2}' "$RESULTS")
warm_s=$(awk '$1 == "remote_warm" {print $2}' "$RESULTS")
awk -v l="$local_s" -v c="$cold_s" -v w="$warm_s" -v j="$JOBS" -v s="$SLOTS" 'BEGIN {
  printf "units=25 jobs=%s slots=%s remote_cold_vs_local=%.2f remote_warm_vs_local=%.2f",
    j, s, c / l, w / l }' | tee -a "$RESULTS"
grid_cold=$(awk '$1 == "buildgrid_cold" {print $2}' "$RESULTS")
grid_warm=$(awk '$1 == "buildgrid_warm" {print $2}' "$RESULTS")
if [[ -n $grid_cold ]]; then
  awk -v l="$local_s" -v c="$cold_s" -v gc="$grid_cold" -v gw="$grid_warm" 'BEGIN {
    printf " buildgrid_cold_vs_local=%.2f buildgrid_cold_vs_remote_cold=%.2f buildgrid_warm_vs_local=%.2f",
      gc / l, gc / c, gw / l }' | tee -a "$RESULTS"
fi
echo | tee -a "$RESULTS"
