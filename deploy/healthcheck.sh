#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Docker HEALTHCHECK for either role; prints what `distcc-cuda status` says,
# which `docker inspect` then shows under .State.Health.
#
#   healthcheck.sh coordinator  healthy when the coordinator answers on the
#                               port of DISTCC_CUDA_LISTEN (asked on 127.0.0.1
#                               when it listens on every address)
#   healthcheck.sh worker       healthy when the coordinator at
#                               DISTCC_CUDA_COORDINATOR lists this worker:
#                               DISTCC_CUDA_NAME, else HOSTNAME-PID (the
#                               worker's default name; in a container the
#                               hostname is the container's id)
#
# Exits 0 (healthy) or 1 (unhealthy): Docker reserves 2, which `distcc-cuda
# status` returns for an unreachable coordinator.
set -eu

client="${DISTCC_CUDA_BIN_DIR:-/usr/local/bin}/distcc-cuda"
timeout="${DISTCC_CUDA_HEALTHCHECK_TIMEOUT_S:-3}"

status() {
  "$client" status --coordinator "$1" --connect-timeout-s "$timeout"
}

case "${1:-}" in
  coordinator)
    listen="${DISTCC_CUDA_LISTEN:-0.0.0.0:3633}"
    host="${listen%:*}"
    port="${listen##*:}"
    case "$host" in
      "" | 0.0.0.0 | "[::]" | "*") host=127.0.0.1 ;;
    esac
    if status "$host:$port"; then exit 0; fi
    exit 1
    ;;
  worker)
    coordinator="${DISTCC_CUDA_COORDINATOR:-127.0.0.1:3633}"
    if ! out=$(status "$coordinator" 2>&1); then
      echo "$out"
      exit 1
    fi
    echo "$out"
    # A worker line is "  NAME  slots B/N busy ...". With no name set, accept
    # HOSTNAME-<digits>: the worker need not be PID 1 (docker run --init).
    if printf '%s\n' "$out" | awk -v name="${DISTCC_CUDA_NAME:-}" -v host="$(uname -n)" '
        $2 == "slots" {
          if (name != "") { if ($1 == name) found = 1 }
          else if (index($1, host "-") == 1 &&
                   substr($1, length(host) + 2) ~ /^[0-9]+$/) found = 1
        }
        END { exit found ? 0 : 1 }'; then
      exit 0
    fi
    echo "healthcheck: ${DISTCC_CUDA_NAME:-$(uname -n)-PID} is not among the coordinator's workers"
    exit 1
    ;;
  *)
    echo "usage: healthcheck.sh coordinator|worker" >&2
    exit 1
    ;;
esac
