#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# What the checks on a coordinator's toolkit cost (issue 55), side by side
# in one run: this tree's programs against those of BASE (a commit, by
# default the one before the checks, 5ffb82a), fetching CUDA 13.2.86 from
# PyPI (scripts/second_nvcc) served by one coordinator on loopback, in
# alternating rounds:
#   worker    distcc-cuda-worker --served-toolkit 13.2, an empty cache:
#             start to registered (the fetch, every file checked, and the
#             fingerprint: in the sandbox under the cap for this tree)
#   install   distcc-cuda toolkit install 13.2 --coordinator into an empty
#             folder (for this tree, its nvcc asked in a sandbox)
# BASE's programs are built once into build/bench-base/BASE (a git worktree
# and a build of the programs: about 10 minutes on 2 cores).
# Usage: bench/toolkit_fetch.sh [ROUNDS] [BASE]   (3 rounds by default);
# TOOLKIT_FETCH_WORK=/dev/shm/x puts the fetched files on a tmpfs, out of
# the disk's way (this machine's ext4 slows down round after round as it
# finds room among the files the last round deleted).
# Its last line: rounds= worker_base_s= worker_s= worker_ratio=
#   install_base_s= install_s= install_ratio= (medians; ratio: this / base)
set -euo pipefail
cd "$(dirname "$0")/.."
REPO=$PWD
ROUNDS=${1:-3}
BASE=${2:-5ffb82a}
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker >/dev/null
NVCC132=$(./scripts/second_nvcc)
HOME132=$(dirname "$(dirname "$NVCC132")")

# BASE's programs, built once.
BASE_DIR=$REPO/build/bench-base/$BASE
if [ ! -x "$BASE_DIR/build/bin/distcc-cuda-worker" ]; then
  rm -rf "$BASE_DIR/src"
  mkdir -p "$BASE_DIR"
  git worktree prune
  git worktree add --detach "$BASE_DIR/src" "$BASE" >/dev/null
  cmake -S "$BASE_DIR/src" -B "$BASE_DIR/build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    >/dev/null
  cmake --build "$BASE_DIR/build" --target distcc-cuda distcc-cuda-worker >/dev/null
fi
declare -A BIN=([base]=$BASE_DIR/build/bin [this]=$REPO/build/bin)

WORK=${TOOLKIT_FETCH_WORK:-$REPO/build/bench-toolkit-fetch}
rm -rf "$WORK" && mkdir -p "$WORK/state"
now() { date +%s.%N; }
since() { echo "$1 $(now)" | awk '{printf "%.2f", $2 - $1}'; }
wait_for() {  # FILE TEXT: until FILE holds TEXT (at most 300 s)
  for _ in $(seq 3000); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.1; done
  echo "toolkit_fetch: '$2' never appeared in $1" >&2
  exit 1
}
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT

"${BIN[this]}/distcc-cuda-coordinator" toolkit add --state-dir "$WORK/state" "$HOME132" \
  >"$WORK/add.log"
"${BIN[this]}/distcc-cuda-coordinator" --listen 127.0.0.1:0 --state-dir "$WORK/state" \
  >"$WORK/coordinator.log" 2>&1 &
pids+=($!)
wait_for "$WORK/coordinator.log" "listening on "
ADDR=$(sed -n 's/.*listening on //p' "$WORK/coordinator.log" | head -1)

declare -A WORKER INSTALL
for round in $(seq "$ROUNDS"); do
  for side in base this; do
    name=$side-$round
    t=$(now)
    "${BIN[$side]}/distcc-cuda-worker" --coordinator "$ADDR" --name "$name" --slots 1 \
      --memory-cap 2GiB --work-dir "$WORK/$name" --served-toolkit 13.2 >"$WORK/$name.log" 2>&1 &
    pid=$!
    wait_for "$WORK/$name.log" "registered with"
    WORKER[$side]+="$(since "$t") "
    kill "$pid" && wait "$pid" 2>/dev/null || true
    t=$(now)
    "${BIN[$side]}/distcc-cuda" toolkit install 13.2 --coordinator "$ADDR" \
      --toolkit-dir "$WORK/$name-toolkits" >"$WORK/$name-install.log" 2>&1
    INSTALL[$side]+="$(since "$t") "
    rm -rf "$WORK/$name" "$WORK/$name-toolkits"
  done
done
median() { tr ' ' '\n' | sed '/^$/d' | sort -n | awk '{a[NR] = $1} END {print a[int((NR + 1) / 2)]}'; }
for side in base this; do
  echo "$side: worker ${WORKER[$side]}s; install ${INSTALL[$side]}s"
done
wb=$(echo "${WORKER[base]}" | median)
wt=$(echo "${WORKER[this]}" | median)
ib=$(echo "${INSTALL[base]}" | median)
it=$(echo "${INSTALL[this]}" | median)
echo "rounds=$ROUNDS worker_base_s=$wb worker_s=$wt" \
  "worker_ratio=$(echo "$wt $wb" | awk '{printf "%.2f", $1 / $2}')" \
  "install_base_s=$ib install_s=$it" \
  "install_ratio=$(echo "$it $ib" | awk '{printf "%.2f", $1 / $2}')"
