#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Measures real flash-attention kernel units with the real nvcc: one target
# (sm_100), --threads 1, flash-attention's own flags (-std=c++20: torch
# 2.15's headers need it), two at a time, each in a memory cgroup of its own
# (v1 max_usage: the whole process tree, as ../shared/data's profiles). What
# coordinator/memory/data/unit_priors.csv's rows of measure_units.sh came from:
#   unit,marker,size,wall_s,cgroup_peak_mib
# Usage: measure_units.sh UNIT_FILE... (file names under csrc/flash_attn/src,
# e.g. flash_fwd_hdim64_fp16_sm80.cu). Needs root (cgroup v1 memory).
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
PY=$(./scripts/torch_python)
TORCH=$("$PY" -c "import torch, os; print(os.path.dirname(torch.__file__))")
PYINC=$("$PY" -c "import sysconfig; print(sysconfig.get_paths()['include'])")
WORK=$REPO/build/bench-flash-attention/measure
VERSION=2.8.3.post2
SDIST=$REPO/build/bench-flash-attention/flash_attn-$VERSION.tar.gz
[[ -f $SDIST ]] || { echo "run bench/flash_attention/run once first (it downloads $SDIST)" >&2; exit 2; }
rm -rf "$WORK" && mkdir -p "$WORK" && tar xzf "$SDIST" -C "$WORK"
SRC=$WORK/flash_attn-$VERSION/csrc
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
FLAGS=(-O3 -std=c++20 -U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__
  -U__CUDA_NO_HALF2_OPERATORS__ -U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-relaxed-constexpr
  --expt-extended-lambda --use_fast_math -gencode arch=compute_100,code=sm_100 --threads 1
  -I"$SRC/flash_attn" -I"$SRC/flash_attn/src" -I"$SRC/cutlass/include"
  -I"$TORCH/include" -I"$TORCH/include/torch/csrc/api/include" -I"$PYINC")
CG=/sys/fs/cgroup/memory

measure() {
  local file=$1 name=${1%.cu} group=$CG/distcc-measure-$$-${1%.cu}
  mkdir -p "$group"
  local start=$(date +%s.%N)
  sh -c "echo \$\$ > $group/tasks; exec \"$NVCC\" \"\$@\"" nvcc "${FLAGS[@]}" \
    -c "$SRC/flash_attn/src/$file" -o "$WORK/$name.o" > "$WORK/$name.log" 2>&1 || {
    echo "$file failed: $(tail -3 "$WORK/$name.log")" >&2; rmdir "$group"; return 1; }
  local wall=$(echo "$(date +%s.%N) - $start" | bc)
  local peak=$(( $(cat "$group/memory.max_usage_in_bytes") / 1048576 ))
  rmdir "$group"
  local marker=flash_fwd_launch_template.h
  [[ $file == flash_bwd* ]] && marker=flash_bwd_launch_template.h
  local size=$(echo "$file" | sed -E 's/.*hdim([0-9]+).*/\1/')
  printf '%s,%s,%s,%.1f,%s\n' "$name" "$marker" "$size" "$wall" "$peak"
}

echo "unit,marker,size,wall_s,cgroup_peak_mib"
pids=()
for file in "$@"; do
  measure "$file" &
  pids+=($!)
  if (( ${#pids[@]} == 2 )); then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
wait
