#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# bench/peers.sh's two rebuilds with nothing changed, ccache's and
# distcc-cuda's embedded one, run alternately TIMES (default 10) times each
# on the projects and caches a `ROWS="ccache embedded" ./bench/peers.sh`
# left in build/bench-peers/. peers.sh times its ccache rebuilds minutes
# before its embedded ones (the embedded cold build comes between), and this
# machine's speed drifts by more than the difference; alternating puts both
# in the same minute. Last line: the medians and their ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
TIMES=${TIMES:-10}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
WORK=$PWD/build/bench-peers
BIN=$PWD/build/bin
for dir in ccache embedded; do
  if [[ ! -f $WORK/$dir/build.ninja ]]; then
    echo "bench/peers_rebuilds.sh: no $WORK/$dir; run ROWS=\"ccache embedded\" ./bench/peers.sh first" >&2
    exit 2
  fi
done

# wall DIR COMMAND...: seconds COMMAND takes in DIR after `ninja -t clean`.
wall() {
  local dir=$1 start end
  shift
  ninja -C "$dir" -t clean > /dev/null
  start=$(date +%s.%N)
  (cd "$dir" && "$@") > "$dir/rebuild.log" 2>&1
  end=$(date +%s.%N)
  python3 -c "print(f'{$end - $start:.3f}')"
}

ccache_walls=() embedded_walls=()
for ((i = 0; i < TIMES; i++)); do
  ccache_walls+=("$(CCACHE_DIR=$WORK/ccache/cache wall "$WORK/ccache" ninja -j"$(nproc)")")
  embedded_walls+=("$(wall "$WORK/embedded" "$BIN/distcc-cuda" build --state-dir "$WORK/embedded/state" \
    --nvcc "$NVCC" -- ninja -j8)")
done
echo "ccache_rebuild   ${ccache_walls[*]}"
echo "embedded_rebuild ${embedded_walls[*]}"
python3 - "${ccache_walls[*]}" "${embedded_walls[*]}" <<'PY'
import statistics, sys
ccache = statistics.median(map(float, sys.argv[1].split()))
embedded = statistics.median(map(float, sys.argv[2].split()))
print(f"ccache_rebuild={ccache:.3f} embedded_rebuild={embedded:.3f} rebuild_vs_ccache={embedded / ccache:.2f}")
PY
