#!/bin/sh
# SPDX-License-Identifier: Apache-2.0
# Makes the cluster's certificates once, for the Compose deployment (its
# `certs` service) or by hand: a CA, the coordinator's certificate, one for
# the workers and one for a client. Files that exist are kept, so running it
# again changes nothing; delete the folder to start over (every certificate
# then changes, and clients need the new ones).
#
#   DISTCC_CUDA_CERTS_DIR      where (default /certs)
#   DISTCC_CUDA_CLUSTER        the CA's name (default distcc-cuda)
#   DISTCC_CUDA_COORDINATOR_HOSTS  the names and addresses clients and workers
#                              dial the coordinator by, comma-separated
#                              (default coordinator,localhost,127.0.0.1)
#   DISTCC_CUDA_WORKER_CERT    the workers' certificate name (default worker)
#   DISTCC_CUDA_CLIENT_CERT    the client certificate's name (default admin)
#   DISTCC_CUDA_BIN_DIR        where the binaries are (default /usr/local/bin)
#   DISTCC_CUDA_EXPORT_COORDINATOR, DISTCC_CUDA_EXPORT_WORKER,
#   DISTCC_CUDA_EXPORT_CLIENT  folders that get a copy of what that role
#                              needs and nothing more: ca.crt and the role's
#                              certificate and key (the coordinator's also
#                              the client certificate, for its health check).
#                              The CA's key never leaves DISTCC_CUDA_CERTS_DIR.
set -eu

dir="${DISTCC_CUDA_CERTS_DIR:-/certs}"
tool="${DISTCC_CUDA_BIN_DIR:-/usr/local/bin}/distcc-cuda-coordinator"
if [ ! -x "$tool" ]; then
  echo "certs-init: no executable $tool (set DISTCC_CUDA_BIN_DIR)" >&2
  exit 127
fi

if [ ! -e "$dir/ca.crt" ]; then
  "$tool" certs init --dir "$dir" --cluster "${DISTCC_CUDA_CLUSTER:-distcc-cuda}"
fi

# issue ROLE NAME [--host H]...: unless NAME.crt exists already.
issue() {
  role=$1
  name=$2
  shift 2
  if [ -e "$dir/$name.crt" ]; then
    echo "certs-init: $dir/$name.crt exists; kept"
    return 0
  fi
  "$tool" certs issue --dir "$dir" --role "$role" "$@" "$name"
}

hosts=""
old_ifs=$IFS
IFS=,
for host in ${DISTCC_CUDA_COORDINATOR_HOSTS:-coordinator,localhost,127.0.0.1}; do
  hosts="$hosts --host $host"
done
IFS=$old_ifs
# shellcheck disable=SC2086 # one word per --host and host, by design
issue coordinator coordinator $hosts
issue worker "${DISTCC_CUDA_WORKER_CERT:-worker}"
issue client "${DISTCC_CUDA_CLIENT_CERT:-admin}"

# export TARGET NAME...: ca.crt and NAME.crt/NAME.key into TARGET, private.
export_to() {
  target=$1
  shift
  [ -n "$target" ] || return 0
  mkdir -p "$target"
  chmod 0700 "$target"
  cp "$dir/ca.crt" "$target/ca.crt"
  for name in "$@"; do
    cp "$dir/$name.crt" "$target/$name.crt"
    cp "$dir/$name.key" "$target/$name.key"
    chmod 0600 "$target/$name.key"
  done
  echo "certs-init: $target holds ca.crt and the certificates of: $*"
}
client="${DISTCC_CUDA_CLIENT_CERT:-admin}"
export_to "${DISTCC_CUDA_EXPORT_COORDINATOR:-}" coordinator "$client"
export_to "${DISTCC_CUDA_EXPORT_WORKER:-}" "${DISTCC_CUDA_WORKER_CERT:-worker}"
export_to "${DISTCC_CUDA_EXPORT_CLIENT:-}" "$client"
echo "certs-init: certificates in $dir"
