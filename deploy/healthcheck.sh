#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Docker HEALTHCHECK for either role; prints what it found, which `docker
# inspect` then shows under .State.Health.
#
#   healthcheck.sh coordinator  healthy when the coordinator answers
#                               `distcc-cuda status` on the port of
#                               DISTCC_CUDA_LISTEN (asked on 127.0.0.1 when it
#                               listens on every address). Under TLS it uses
#                               the client certificate in
#                               DISTCC_CUDA_HEALTHCHECK_TLS_CERT/_KEY with
#                               DISTCC_CUDA_TLS_CA.
#   healthcheck.sh worker       healthy when the coordinator accepted one of
#                               this worker's heartbeats in the last
#                               DISTCC_CUDA_HEALTH_MAX_AGE_S seconds (default
#                               30): the worker writes DISTCC_CUDA_WORK_DIR/health
#                               then. A worker needs no client certificate.
#
# Exits 0 (healthy) or 1 (unhealthy): Docker reserves 2, which `distcc-cuda
# status` returns for an unreachable coordinator.
set -eu

client="${DISTCC_CUDA_BIN_DIR:-/usr/local/bin}/distcc-cuda"
timeout="${DISTCC_CUDA_HEALTHCHECK_TIMEOUT_S:-3}"

case "${1:-}" in
  coordinator)
    listen="${DISTCC_CUDA_LISTEN:-0.0.0.0:3633}"
    host="${listen%:*}"
    port="${listen##*:}"
    case "$host" in
      "" | 0.0.0.0 | "[::]" | "*") host=127.0.0.1 ;;
    esac
    set -- status --coordinator "$host:$port" --connect-timeout-s "$timeout"
    if [ -n "${DISTCC_CUDA_HEALTHCHECK_TLS_CERT:-}" ]; then
      set -- "$@" --tls-ca "${DISTCC_CUDA_TLS_CA:-}" \
        --tls-cert "$DISTCC_CUDA_HEALTHCHECK_TLS_CERT" \
        --tls-key "${DISTCC_CUDA_HEALTHCHECK_TLS_KEY:-}"
    fi
    if "$client" "$@"; then exit 0; fi
    exit 1
    ;;
  worker)
    health="${DISTCC_CUDA_WORK_DIR:-/tmp/distcc-cuda-worker-$(uname -n)}/health"
    max_age="${DISTCC_CUDA_HEALTH_MAX_AGE_S:-30}"
    if [ ! -f "$health" ]; then
      echo "healthcheck: no $health: the worker has not had a heartbeat accepted (yet)"
      exit 1
    fi
    age=$(($(date +%s) - $(stat -c %Y "$health")))
    cat "$health"
    if [ "$age" -le "$max_age" ]; then exit 0; fi
    echo "healthcheck: the last accepted heartbeat was ${age} s ago (over ${max_age} s)"
    exit 1
    ;;
  *)
    echo "usage: healthcheck.sh coordinator|worker" >&2
    exit 1
    ;;
esac
