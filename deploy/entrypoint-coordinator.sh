#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Starts distcc-cuda-coordinator with flags taken from the environment, so
# that a Compose file or `docker run -e` configures it. Works outside Docker
# too (point DISTCC_CUDA_BIN_DIR at build/bin).
#
#   DISTCC_CUDA_LISTEN               --listen HOST:PORT (default 0.0.0.0:3633)
#   DISTCC_CUDA_STATE_DIR            --state-dir DIR (default /var/lib/distcc-cuda):
#                                    content store, result cache, history.tsv;
#                                    keep it on a volume
#   DISTCC_CUDA_DEFAULT_UNIT_MEMORY  --default-unit-memory SIZE
#   DISTCC_CUDA_HEARTBEAT_TIMEOUT_S  --heartbeat-timeout-s N
#   DISTCC_CUDA_TLS_CA               --tls-ca FILE (the cluster's ca.crt)
#   DISTCC_CUDA_TLS_CERT             --tls-cert FILE (role coordinator)
#   DISTCC_CUDA_TLS_KEY              --tls-key FILE
#   DISTCC_CUDA_INSECURE             1: --insecure (no TLS on a reachable address)
#   DISTCC_CUDA_METRICS_LISTEN       --metrics-listen HOST:PORT: Prometheus metrics
#                                    at /metrics (e.g. 0.0.0.0:9464 in a container)
#   DISTCC_CUDA_REAPI_LISTEN         --reapi-listen HOST:PORT: the Remote Execution
#                                    API for Bazel (e.g. 0.0.0.0:3634 with TLS)
#   DISTCC_CUDA_HTTP_LISTEN          --http-listen HOST:PORT: the live dashboard
#                                    (e.g. 0.0.0.0:8080 in a container)
#   DISTCC_CUDA_HTTP_OPEN            1: --http-open (metrics and dashboard on an
#                                    address other than loopback; no credentials)
#   DISTCC_CUDA_LOG_FORMAT           --log-format text|json (json: one object a line)
#   DISTCC_CUDA_SERVE_TOOLKITS       CUDA folders (space-separated) to serve to the
#                                    workers and clients: each is added before the
#                                    coordinator starts (`distcc-cuda-coordinator
#                                    toolkit add --state-dir DISTCC_CUDA_STATE_DIR`);
#                                    unchanged ones in a second or two. One that
#                                    cannot be added is said, and not served
#   DISTCC_CUDA_BIN_DIR              where the binaries are (default /usr/local/bin)
#
# Unset and empty variables are the same: the binary's default applies.
# Arguments are passed on after these flags, so one given there wins
# (`docker run IMAGE --listen 0.0.0.0:4000`). A first argument that is not a
# flag is run as a command instead (`docker run IMAGE distcc-cuda --help`).
set -eu

case "${1:-}" in
  "" | -*) ;;
  *) exec "$@" ;;
esac

binary="${DISTCC_CUDA_BIN_DIR:-/usr/local/bin}/distcc-cuda-coordinator"
if [ ! -x "$binary" ]; then
  echo "entrypoint-coordinator: no executable $binary (set DISTCC_CUDA_BIN_DIR)" >&2
  exit 127
fi

# The toolkits to serve, into the state dir, while no coordinator holds it.
if [ -n "${DISTCC_CUDA_SERVE_TOOLKITS:-}" ]; then
  state_dir="${DISTCC_CUDA_STATE_DIR:-/var/lib/distcc-cuda}"
  mkdir -p "$state_dir"
  for folder in $DISTCC_CUDA_SERVE_TOOLKITS; do
    "$binary" toolkit add --state-dir "$state_dir" "$folder" >&2 ||
      echo "entrypoint-coordinator: not serving the toolkit at $folder (above);" \
        "workers started with --served-toolkit for it will wait and say so" >&2
  done
fi

# Prepended one by one, so that "$@" (the caller's arguments) stays last.
# The --flag=VALUE form keeps a value that starts with '-' a value.
if [ -n "${DISTCC_CUDA_HEARTBEAT_TIMEOUT_S:-}" ]; then
  set -- "--heartbeat-timeout-s=$DISTCC_CUDA_HEARTBEAT_TIMEOUT_S" "$@"
fi
if [ "${DISTCC_CUDA_INSECURE:-}" = 1 ]; then set -- --insecure "$@"; fi
if [ -n "${DISTCC_CUDA_LOG_FORMAT:-}" ]; then set -- "--log-format=$DISTCC_CUDA_LOG_FORMAT" "$@"; fi
if [ -n "${DISTCC_CUDA_METRICS_LISTEN:-}" ]; then
  set -- "--metrics-listen=$DISTCC_CUDA_METRICS_LISTEN" "$@"
fi
if [ -n "${DISTCC_CUDA_REAPI_LISTEN:-}" ]; then
  set -- "--reapi-listen=$DISTCC_CUDA_REAPI_LISTEN" "$@"
fi
if [ -n "${DISTCC_CUDA_HTTP_LISTEN:-}" ]; then set -- "--http-listen=$DISTCC_CUDA_HTTP_LISTEN" "$@"; fi
if [ "${DISTCC_CUDA_HTTP_OPEN:-}" = 1 ]; then set -- --http-open "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_KEY:-}" ]; then set -- "--tls-key=$DISTCC_CUDA_TLS_KEY" "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_CERT:-}" ]; then set -- "--tls-cert=$DISTCC_CUDA_TLS_CERT" "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_CA:-}" ]; then set -- "--tls-ca=$DISTCC_CUDA_TLS_CA" "$@"; fi
if [ -n "${DISTCC_CUDA_DEFAULT_UNIT_MEMORY:-}" ]; then
  set -- "--default-unit-memory=$DISTCC_CUDA_DEFAULT_UNIT_MEMORY" "$@"
fi
set -- "--listen=${DISTCC_CUDA_LISTEN:-0.0.0.0:3633}" \
  "--state-dir=${DISTCC_CUDA_STATE_DIR:-/var/lib/distcc-cuda}" "$@"

echo "entrypoint-coordinator: $binary $*" >&2
# exec: the coordinator takes this process's place (PID 1 in a container), so
# `docker stop`'s SIGTERM reaches it and it shuts down cleanly.
exec "$binary" "$@"
