#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Benchmark of the memory-aware scheduler against static job limits, through
# the real coordinator and workers with the fake compiler (see replay.py).
# Run as root where possible so the workers enforce their caps with cgroups.
# Extra arguments go to replay.py (e.g. --workloads fa96 --time-scale 100).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup --target distcc-cuda distcc-cuda-coordinator distcc-cuda-worker fake_nvcc >/dev/null
exec python3 bench/replay.py --bin-dir build/bin --fake "$PWD/build/tests/fake_nvcc" \
  --profiles ../shared/data/nvcc_unit_profiles.csv "$@"
