#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
#
# What planning a large instantiation grid costs the coordinator (issue 30,
# finding 2; bench/plan_grid.cc says what it measures). Flags go to
# plan_grid_bench, e.g. ./bench/plan_grid.sh --side=100
# The last line: points=… plan_s=… source_mb=… store_mb=… stored_as_before_mb=… …
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup --target plan_grid_bench >/dev/null
exec build/bin/plan_grid_bench "$@"
