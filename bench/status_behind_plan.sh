#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# Whether `distcc-cuda status` waits behind a large plan (issue 30, finding
# 2; bench/status_behind_plan.cc says what it measures): starts a
# coordinator on loopback with a state dir under build/, runs the bench
# against it, stops it. Flags go to status_behind_plan_bench, e.g.
# ./bench/status_behind_plan.sh --side=100
# The last line: points=… accept_s=… idle_max_ms=… planning_max_ms=… after_max_ms=…
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup --target status_behind_plan_bench distcc-cuda-coordinator >/dev/null
state=build/status-behind-plan
rm -rf "$state" && mkdir -p "$state"
build/bin/distcc-cuda-coordinator --listen 127.0.0.1:0 --state-dir "$state/coordinator" \
  >"$state/coordinator.log" 2>&1 &
coordinator=$!
trap 'kill $coordinator 2>/dev/null; wait $coordinator 2>/dev/null; rm -rf "$state"' EXIT
address=""
for _ in $(seq 100); do
  address=$(sed -n 's/.*listening on \([0-9.:]*\).*/\1/p' "$state/coordinator.log" | head -1)
  [ -n "$address" ] && break
  sleep 0.2
done
[ -n "$address" ] || { cat "$state/coordinator.log"; echo "the coordinator did not start" >&2; exit 1; }
build/bin/status_behind_plan_bench --coordinator="$address" --coordinator_pid="$coordinator" "$@"
