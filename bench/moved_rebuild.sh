#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# A real PyTorch extension rebuilt from another folder, as pip, uv, a second
# checkout or a CI workspace do: flash-attention's PyPI source distribution,
# trimmed by flash_attention/trim.py to its first UNITS kernels (default 1)
# plus flash_api.cpp, sm_100, built by its own `setup.py build_ext --inplace`,
# side by side in one run:
#   first           distcc-cuda build -- ... in folder A, empty state (cold)
#   in_place        A unpacked again where it was (a clean rebuild), warm
#   moved           the same sdist unpacked in folder B, at another depth,
#                   with A's state: answered from the cache
#   teammate        in folder E, at another depth, with torch in another
#                   venv (a hard-linked copy of the torch venv at
#                   home-bob/.venv), with the same state: a teammate on
#                   the same cluster
#   ccache_first    ccache 4.7 (Debian) in front (torch puts it there when it
#                   is on PATH), CCACHE_BASEDIR above every folder and venv
#                   and CCACHE_NOHASHDIR=1, an empty cache, in folder C
#   ccache_moved    the same in folder D, at another depth, warm
#   ccache_teammate the same in folder F with the other venv, warm
# Then the moved and the teammate's objects against the first's (device
# code) and whether every module imports. Its last line:
#   units= first_s= in_place_s= moved_s= teammate_s= moved_vs_first=
#   teammate_vs_in_place= ccache_first_s= ccache_moved_s= ccache_teammate_s=
#   moved_vs_ccache_moved= teammate_vs_ccache_teammate= moved_compiled=
#   teammate_compiled= ccache_teammate_hits= device_code_same=
# UNITS=1: about 8 minutes alone on 2 cores (three cold builds). Results: build/bench-moved-rebuild/.
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
UNITS=${UNITS:-1}
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
PY=$(./scripts/torch_python)
"$PY" -m pip install --quiet --disable-pip-version-check psutil packaging wheel einops ninja numpy
command -v ccache >/dev/null || apt-get install -y -qq ccache >/dev/null
WORK=$REPO/build/bench-moved-rebuild
VERSION=2.8.3.post2
SDIST=$REPO/build/bench-flash-attention/flash_attn-$VERSION.tar.gz
if [[ ! -f $SDIST ]]; then
  mkdir -p "$(dirname "$SDIST")"
  # Its setup.py imports torch even to be downloaded.
  (cd "$(dirname "$SDIST")" && "$PY" -m pip download --quiet --no-build-isolation \
    --no-binary :all: --no-deps "flash-attn==$VERSION" -d .)
fi
NVCC=${NVCC:-/usr/local/cuda/bin/nvcc}
BIN=$REPO/build/bin
rm -rf "$WORK"
mkdir -p "$WORK"
RESULTS=$WORK/results.txt
: > "$RESULTS"

# The teammate's venv: the torch venv's files, each a hard link, elsewhere.
BOB_VENV=$WORK/home-bob/.venv
mkdir -p "$(dirname "$BOB_VENV")"
cp -al "$(dirname "$(dirname "$PY")")" "$BOB_VENV"
BOB_PY=$BOB_VENV/bin/$(basename "$PY")

# run_way NAME FOLDER [PREFIX...]: the trimmed sdist unpacked in FOLDER
# (emptied first), built by $WAY_PY (default $PY) with PREFIX in front of
# setup.py; its wall time to $WORK/NAME.wall.
run_way() {
  local name=$1 folder=$2; shift 2
  local log=$WORK/$name.log
  local PY=${WAY_PY:-$PY}
  rm -rf "$folder"
  mkdir -p "$folder"
  tar xzf "$SDIST" -C "$folder"
  local src=$folder/flash_attn-$VERSION
  python3 "$REPO/bench/flash_attention/trim.py" "$src" "$UNITS" > "$log"
  # Files written just now are too new for the scan cache to trust.
  sleep 1
  local start; start=$(date +%s.%N)
  (cd "$src" && env FLASH_ATTENTION_FORCE_BUILD=TRUE FLASH_ATTN_CUDA_ARCHS=100 MAX_JOBS=2 "$@" \
     "$PY" setup.py build_ext --inplace >> "$log" 2>&1)
  local wall; wall=$(python3 -c "import time; print(f'{time.time() - $start:.1f}')")
  echo "$wall" > "$WORK/$name.wall"
  local imports=no
  if (cd "$src" && "$PY" -c "import torch, flash_attn_2_cuda" >> "$log" 2>&1); then imports=yes; fi
  printf '%-14s wall %6s s   imports: %-3s  %s\n' "$name" "$wall" "$imports" \
    "$(grep -o 'on the cluster ([^)]*)' "$log" | tail -1)" | tee -a "$RESULTS"
}

EMBEDDED=("$BIN/distcc-cuda" build --state-dir "$WORK/state" --nvcc "$NVCC" --)
run_way first "$WORK/a" env TORCH_NO_COMPILER_WRAPPER=1 "${EMBEDDED[@]}"
cp -a "$WORK/a" "$WORK/a.first"
run_way in_place "$WORK/a" env TORCH_NO_COMPILER_WRAPPER=1 "${EMBEDDED[@]}"
run_way moved "$WORK/b/at/another/depth" env TORCH_NO_COMPILER_WRAPPER=1 "${EMBEDDED[@]}"
WAY_PY=$BOB_PY run_way teammate "$WORK/e/home-bob/src/x" env TORCH_NO_COMPILER_WRAPPER=1 \
  "${EMBEDDED[@]}"
# base_dir with hash_dir off, as ccache advises for sharing across folders
# (Python's CFLAGS give flash_api.cpp -g, and with -g ccache hashes the
# folder it runs in).
CCACHE=(env CCACHE_DIR="$WORK/ccache" CCACHE_BASEDIR="$WORK" CCACHE_NOHASHDIR=1)
run_way ccache_first "$WORK/c" "${CCACHE[@]}"
run_way ccache_moved "$WORK/d/at/another/depth" "${CCACHE[@]}"
CCACHE_DIR="$WORK/ccache" ccache -z >/dev/null
WAY_PY=$BOB_PY run_way ccache_teammate "$WORK/f/home-bob/src/x" "${CCACHE[@]}"
CCACHE_DIR="$WORK/ccache" ccache -s | tee "$WORK/ccache_teammate.stats" |
  grep -iE '^ *(direct|hits|misses)' | sed 's/^/  ccache (teammate): /' | tee -a "$RESULTS"

python3 - "$WORK" "$VERSION" "$UNITS" "$REPO" <<'PY' | tee -a "$RESULTS"
import glob, os, re, subprocess, sys
work, version, units, repo = sys.argv[1:]
wall = {w: float(open(f"{work}/{w}.wall").read())
        for w in ("first", "in_place", "moved", "teammate", "ccache_first", "ccache_moved",
                  "ccache_teammate")}
def compiled(way):
    m = re.findall(r"on the cluster \((\d+) compiled", open(f"{work}/{way}.log").read())
    return m[-1] if m else "?"
stats = open(f"{work}/ccache_teammate.stats").read()
m = re.search(r"^\s*Hits:\s*(\d+)\s*/\s*(\d+)", stats, re.M)
ccache_hits = f"{m.group(1)}/{m.group(2)}" if m else "?"
# The device code (.nv_fatbin) of every object of a build against the
# first's.
def images(tree):
    out = {}
    for obj in sorted(glob.glob(f"{tree}/flash_attn-{version}/build/temp*/**/*.o", recursive=True)):
        rel = obj.split(f"/flash_attn-{version}/", 1)[1]
        subprocess.run(["objcopy", "-O", "binary", "--only-section=.nv_fatbin", obj,
                        f"{work}/fatbin.bin"], check=True)
        out[rel] = open(f"{work}/fatbin.bin", "rb").read()
    return out
first = images(f"{work}/a.first")
def same(tree):
    other = images(tree)
    if first and first == other:
        return "yes"
    return f"no({','.join(sorted(k for k in first if first.get(k) != other.get(k)))})"
print(f"units={units} first_s={wall['first']} in_place_s={wall['in_place']} "
      f"moved_s={wall['moved']} teammate_s={wall['teammate']} "
      f"moved_vs_first={wall['moved'] / wall['first']:.3f} "
      f"teammate_vs_in_place={wall['teammate'] / wall['in_place']:.2f} "
      f"ccache_first_s={wall['ccache_first']} ccache_moved_s={wall['ccache_moved']} "
      f"ccache_teammate_s={wall['ccache_teammate']} "
      f"moved_vs_ccache_moved={wall['moved'] / wall['ccache_moved']:.2f} "
      f"teammate_vs_ccache_teammate={wall['teammate'] / wall['ccache_teammate']:.2f} "
      f"moved_compiled={compiled('moved')} teammate_compiled={compiled('teammate')} "
      f"ccache_teammate_hits={ccache_hits} "
      f"device_code_same=moved:{same(work + '/b/at/another/depth')},"
      f"teammate:{same(work + '/e/home-bob/src/x')}")
PY
