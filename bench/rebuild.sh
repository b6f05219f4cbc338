#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# A rebuild with nothing changed, on real flash-attention units (its PyPI
# source distribution, trimmed by flash_attention/trim.py; setup.py's own
# nvcc flags for sm_100), side by side in one run:
#   cold           distcc-cuda build compile_commands.json, embedded, empty state
#   rebuild        the same again: result cache and scan cache
#   no_scan_cache  the same again with DISTCC_CUDA_SCAN_CACHE=off: nvcc -M per unit
#   ccache         ccache 4.7 (Debian) around nvcc, the same commands, warm
# Units: UNITS (default 2) of the 8 forward kernels. Takes about 15 minutes
# on 2 cores (the cold compiles, ours and ccache's). Results:
# build/bench-rebuild/results.txt; the last line is the summary.
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD
UNITS=${UNITS:-2}
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
if ! command -v ccache >/dev/null; then
  sudo=""; [[ $(id -u) -ne 0 ]] && sudo=sudo
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends ccache >/dev/null
fi
PY=$(./scripts/torch_python)
WORK=$REPO/build/bench-rebuild
mkdir -p "$WORK"
VERSION=2.8.3.post2
SDIST=$REPO/build/bench-flash-attention/flash_attn-$VERSION.tar.gz
if [[ ! -f $SDIST ]]; then
  mkdir -p "$(dirname "$SDIST")"
  # Its setup.py imports torch, psutil and packaging even to be downloaded
  # (as bench/flash_attention/run installs them).
  "$PY" -m pip install --quiet --disable-pip-version-check psutil packaging wheel
  (cd "$(dirname "$SDIST")" && "$PY" -m pip download --quiet --no-build-isolation \
    --no-binary :all: --no-deps "flash-attn==$VERSION" -d .)
fi
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
BIN=$REPO/build/bin
RESULTS=$WORK/results.txt
: > "$RESULTS"

SRC=$WORK/flash_attn-$VERSION
rm -rf "$SRC" "$WORK/state" "$WORK/ccache" "$WORK/out"
tar xzf "$SDIST" -C "$WORK"
python3 "$REPO/bench/flash_attention/trim.py" "$SRC" > "$WORK/trim.log"
TORCH=$("$PY" -c "import os, torch; print(os.path.dirname(torch.__file__))")
FLAGS="-I$SRC/csrc/flash_attn -I$SRC/csrc/flash_attn/src -I$SRC/csrc/cutlass/include \
-I$TORCH/include -I$TORCH/include/torch/csrc/api/include \
-D__CUDA_NO_HALF_OPERATORS__ -D__CUDA_NO_HALF_CONVERSIONS__ -D__CUDA_NO_BFLOAT16_CONVERSIONS__ \
-D__CUDA_NO_HALF2_OPERATORS__ --expt-relaxed-constexpr -Xcompiler=-fPIC -O3 -std=c++20 \
-U__CUDA_NO_HALF_OPERATORS__ -U__CUDA_NO_HALF_CONVERSIONS__ -U__CUDA_NO_HALF2_OPERATORS__ \
-U__CUDA_NO_BFLOAT16_CONVERSIONS__ --expt-extended-lambda --use_fast_math \
-gencode arch=compute_100,code=sm_100 --threads 4 -DTORCH_API_INCLUDE_EXTENSION_H \
-DTORCH_EXTENSION_NAME=flash_attn_2_cuda"
mapfile -t SOURCES < <(cd "$SRC" && ls csrc/flash_attn/src/flash_fwd_*hdim64*.cu | sort | head -n "$UNITS")
mkdir -p "$SRC/obj"
python3 - "$SRC" "$NVCC" "$FLAGS" "${SOURCES[@]}" > "$SRC/compile_commands.json" <<'PY'
import json, os, sys
src, nvcc, flags, sources = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
print(json.dumps([{"directory": src, "file": s,
                   "command": f"{nvcc} {flags} -c {s} -o obj/{os.path.basename(s)[:-3]}.o"}
                  for s in sources], indent=1))
PY
# Files written just now are too new for the scan cache to trust.
sleep 1

seconds() { python3 -c "import time; print(f'{time.time() - $1:.2f}')"; }
build() {  # build NAME [ENV...]: one distcc-cuda build, timed
  local name=$1; shift
  local start; start=$(python3 -c "import time; print(time.time())")
  if ! env "$@" "$BIN/distcc-cuda" build "$SRC/compile_commands.json" --library libfa.so \
    -o "$WORK/out" --state-dir "$WORK/state" --nvcc "$NVCC" > "$WORK/$name.log" 2>&1; then
    cat "$WORK/$name.log" >&2; echo "bench: the $name build failed" >&2; return 1
  fi
  local wall; wall=$(seconds "$start")
  printf '%-14s %8s s   %s\n' "$name" "$wall" \
    "$(grep -o 'scanned in [^)]*)*' "$WORK/$name.log" | head -1)" | tee -a "$RESULTS" >&2
  echo "$wall"
}
COLD=$(build cold)
REBUILD=$(build rebuild)
NO_SCAN=$(build no_scan_cache DISTCC_CUDA_SCAN_CACHE=off)

# ccache: the same commands, once to fill it (not timed), then timed warm.
ccache_pass() {
  (cd "$SRC" && python3 -c "
import json, sys
for c in json.load(open('compile_commands.json')): print(c['command'])" |
    CCACHE_DIR=$WORK/ccache xargs -P "$(nproc)" -I{} sh -c 'ccache {}')
}
ccache_pass > "$WORK/ccache-cold.log" 2>&1
rm -f "$SRC"/obj/*.o
START=$(python3 -c "import time; print(time.time())")
ccache_pass > "$WORK/ccache-warm.log" 2>&1
CCACHE=$(seconds "$START")
printf '%-14s %8s s   %s\n' ccache "$CCACHE" \
  "$(CCACHE_DIR=$WORK/ccache ccache -s | grep -iE '^ *(direct|hits)' | tr -s ' ' | paste -sd' ')" |
  tee -a "$RESULTS"

python3 - "$COLD" "$REBUILD" "$NO_SCAN" "$CCACHE" "$UNITS" <<'PY' | tee -a "$RESULTS"
import sys
cold, rebuild, no_scan, ccache, units = map(float, sys.argv[1:])
print(f"units={units:.0f} cold_s={cold:.1f} rebuild_s={rebuild:.2f} no_scan_cache_s={no_scan:.2f} "
      f"ccache_s={ccache:.2f} scan_cache_speedup={no_scan / rebuild:.1f} "
      f"rebuild_speedup={cold / rebuild:.0f} rebuild_vs_ccache={rebuild / ccache:.2f}")
PY
