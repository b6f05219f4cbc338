#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# The coordinator at the size of a full CUTLASS sm100 library: 55,000 units
# over a tree of 3,000 headers (each unit includes 150 core headers and 50
# of its kernel family's),
# sent in parts as input trees and BuildPlan blobs, each part planned while
# the client makes the next, and dispatched to 1,000 simulated one-slot
# workers, in one process (bench/scale.cc says what each figure measures).
# Flags go to scale_bench, e.g.
#   ./bench/scale.sh --units=20000 --workers=16 --part_units=2000
# The last line: units=… parts=… submit_s=… coordinator_rss_mb=… units_per_s=… p99_dispatch_ms=…
# lock_p50_us=… lock_p99_us=… (how long each call held the scheduler's lock)
# Targets (issue 13): submit_s <= 10, coordinator_rss_mb <= 200,
# units_per_s >= 2000, p99_dispatch_ms <= 1.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup --target scale_bench >/dev/null
exec /usr/bin/time -f "process peak RSS %M KiB, %e s" build/bin/scale_bench "$@"
