#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# What one program start costs a large caller (bench/spawn.cc): RunProcess
# against fork + exec, side by side, from callers of 100 MiB and 1 GiB.
# Flags go to spawn_bench, e.g. ./bench/spawn.sh --runs=500.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup --target spawn_bench >/dev/null
for heap in 100 1000; do
  build/bin/spawn_bench --heap_mb="$heap" "$@"
done
