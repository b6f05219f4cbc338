#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Starts distcc-cuda-worker with flags taken from the environment, so that a
# Compose file or `docker run -e` configures it. Works outside Docker too
# (point DISTCC_CUDA_BIN_DIR at build/bin).
#
#   DISTCC_CUDA_COORDINATOR       --coordinator HOST:PORT (the binary's default
#                                 is 127.0.0.1:3633, rarely right in a container)
#   DISTCC_CUDA_SLOTS             --slots N (default: the usable cores)
#   DISTCC_CUDA_MEMORY_CAP        --memory-cap SIZE (default: the container's
#                                 memory limit less 5%, else available memory
#                                 less 10%)
#   DISTCC_CUDA_MEMORY_MECHANISM  --memory-mechanism auto|watchdog
#   DISTCC_CUDA_REQUIRE_NVCC      --require-nvcc RELEASE: refuse to start with
#                                 another nvcc release (e.g. 12.8)
#   DISTCC_CUDA_NVCC              --nvcc PATH (default $CUDA_HOME/bin/nvcc, else
#                                 /usr/local/cuda/bin/nvcc)
#   DISTCC_CUDA_SERVED_TOOLKIT    --served-toolkit RELEASE: compile with the
#                                 coordinator's toolkit of RELEASE (e.g. 12.8),
#                                 fetched at start, instead of one in the image
#   DISTCC_CUDA_TOOLKIT_CACHE_SIZE --toolkit-cache-size SIZE (default 8GiB)
#   DISTCC_CUDA_NAME              --name NAME (default HOST-PID); healthcheck.sh
#                                 looks for this name, so set the name here
#                                 rather than with --name
#   DISTCC_CUDA_WORK_DIR          --work-dir DIR (healthcheck.sh reads its
#                                 health file)
#   DISTCC_CUDA_TLS_CA            --tls-ca FILE (the cluster's ca.crt)
#   DISTCC_CUDA_TLS_CERT          --tls-cert FILE (role worker)
#   DISTCC_CUDA_TLS_KEY           --tls-key FILE
#   DISTCC_CUDA_SANDBOX_USER      --sandbox-user USER (when the worker is root)
#   DISTCC_CUDA_METRICS_LISTEN    --metrics-listen HOST:PORT: Prometheus metrics at
#                                 /metrics (e.g. 0.0.0.0:9465 in a container)
#   DISTCC_CUDA_HTTP_OPEN         1: --http-open (metrics on an address other than
#                                 loopback; they need no credentials to read)
#   DISTCC_CUDA_LOG_FORMAT        --log-format text|json (json: one object a line)
#   DISTCC_CUDA_BIN_DIR           where the binaries are (default /usr/local/bin)
#
# Unset and empty variables are the same: the binary's default applies.
# Arguments are passed on after these flags, so one given there wins. A first
# argument that is not a flag is run as a command instead, e.g.
# `docker run --rm IMAGE distcc-cuda-worker --print-toolchain`.
set -eu

case "${1:-}" in
  "" | -*) ;;
  *) exec "$@" ;;
esac

binary="${DISTCC_CUDA_BIN_DIR:-/usr/local/bin}/distcc-cuda-worker"
if [ ! -x "$binary" ]; then
  echo "entrypoint-worker: no executable $binary (set DISTCC_CUDA_BIN_DIR)" >&2
  exit 127
fi

# Each variable that is set and not empty becomes a flag, prepended one by one
# so that "$@" (the caller's arguments) stays last. The --flag=VALUE form keeps
# a value that starts with '-' a value.
if [ -n "${DISTCC_CUDA_COORDINATOR:-}" ]; then
  set -- "--coordinator=$DISTCC_CUDA_COORDINATOR" "$@"
else
  case " $* ${DISTCC_CUDA_CONFIG:+--config} " in
    *" --coordinator"* | *" --config"*) ;;
    *) echo "entrypoint-worker: DISTCC_CUDA_COORDINATOR is not set; the worker will try" \
      "127.0.0.1:3633" >&2 ;;
  esac
fi
if [ -n "${DISTCC_CUDA_WORK_DIR:-}" ]; then set -- "--work-dir=$DISTCC_CUDA_WORK_DIR" "$@"; fi
if [ -n "${DISTCC_CUDA_SANDBOX_USER:-}" ]; then
  set -- "--sandbox-user=$DISTCC_CUDA_SANDBOX_USER" "$@"
fi
if [ -n "${DISTCC_CUDA_LOG_FORMAT:-}" ]; then set -- "--log-format=$DISTCC_CUDA_LOG_FORMAT" "$@"; fi
if [ -n "${DISTCC_CUDA_METRICS_LISTEN:-}" ]; then
  set -- "--metrics-listen=$DISTCC_CUDA_METRICS_LISTEN" "$@"
fi
if [ "${DISTCC_CUDA_HTTP_OPEN:-}" = 1 ]; then set -- --http-open "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_KEY:-}" ]; then set -- "--tls-key=$DISTCC_CUDA_TLS_KEY" "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_CERT:-}" ]; then set -- "--tls-cert=$DISTCC_CUDA_TLS_CERT" "$@"; fi
if [ -n "${DISTCC_CUDA_TLS_CA:-}" ]; then set -- "--tls-ca=$DISTCC_CUDA_TLS_CA" "$@"; fi
if [ -n "${DISTCC_CUDA_NAME:-}" ]; then set -- "--name=$DISTCC_CUDA_NAME" "$@"; fi
if [ -n "${DISTCC_CUDA_NVCC:-}" ]; then set -- "--nvcc=$DISTCC_CUDA_NVCC" "$@"; fi
if [ -n "${DISTCC_CUDA_SERVED_TOOLKIT:-}" ]; then
  set -- "--served-toolkit=$DISTCC_CUDA_SERVED_TOOLKIT" "$@"
fi
if [ -n "${DISTCC_CUDA_TOOLKIT_CACHE_SIZE:-}" ]; then
  set -- "--toolkit-cache-size=$DISTCC_CUDA_TOOLKIT_CACHE_SIZE" "$@"
fi
if [ -n "${DISTCC_CUDA_REQUIRE_NVCC:-}" ]; then
  set -- "--require-nvcc=$DISTCC_CUDA_REQUIRE_NVCC" "$@"
fi
if [ -n "${DISTCC_CUDA_MEMORY_MECHANISM:-}" ]; then
  set -- "--memory-mechanism=$DISTCC_CUDA_MEMORY_MECHANISM" "$@"
fi
if [ -n "${DISTCC_CUDA_MEMORY_CAP:-}" ]; then set -- "--memory-cap=$DISTCC_CUDA_MEMORY_CAP" "$@"; fi
if [ -n "${DISTCC_CUDA_SLOTS:-}" ]; then set -- "--slots=$DISTCC_CUDA_SLOTS" "$@"; fi
echo "entrypoint-worker: $binary $*" >&2
# exec: the worker takes this process's place, so `docker stop`'s SIGTERM
# reaches it, and (without --init) it is alone in the container's cgroup,
# which a cgroup v2 memory cap needs where the cgroup is writable.
exec "$binary" "$@"
