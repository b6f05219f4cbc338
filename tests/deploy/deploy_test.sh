#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Checks deploy/ without a Docker engine:
#   (a) the Compose file is valid (`docker compose config`, else Debian's
#       `docker-compose config`) and says what the deployment relies on;
#   (b) the Dockerfile, statically: pinned base images, a non-root user, a
#       HEALTHCHECK and an ENTRYPOINT per role, COPY sources that exist;
#   (c) the entrypoints and the healthcheck outside Docker: a coordinator and
#       two workers started through them on 127.0.0.1 with the fake compiler,
#       configured only by DISTCC_CUDA_* variables, seen by `distcc-cuda
#       status` and by healthcheck.sh;
#   (d) a worker whose nvcc is not DISTCC_CUDA_REQUIRE_NVCC refuses to start
#       and names the release it found;
#   (e) mutual TLS as the Compose file deploys it, outside Docker: certs-init.sh
#       makes the CA and the role certificates (again: nothing changes), a
#       coordinator and a worker start with them through the entrypoints, the
#       healthchecks pass, a client without a certificate is refused and one
#       with the client certificate is served.
# Exit 0: all passed; 1: a check failed; 77 (ctest's SKIP_RETURN_CODE): the
# rest passed but (a) had no compose tool, or (d) a worker without
# --require-nvcc. Every wait is bounded; every process started is stopped and
# the temporary folder removed on exit.
#
# Usage: deploy_test.sh BIN_DIR FAKE_NVCC
set -euo pipefail

if (($# != 2)); then
  echo "usage: $0 BIN_DIR FAKE_NVCC" >&2
  exit 2
fi
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deploy=$repo/deploy
bin_dir=$(cd "$1" && pwd)
fake_nvcc=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
for program in distcc-cuda distcc-cuda-coordinator distcc-cuda-worker; do
  [[ -x $bin_dir/$program ]] || { echo "deploy_test: no $bin_dir/$program" >&2; exit 2; }
done
[[ -x $fake_nvcc ]] || { echo "deploy_test: no executable $fake_nvcc" >&2; exit 2; }

# Nothing in the caller's environment may configure what is under test.
while read -r variable; do unset "$variable"; done < <(compgen -v DISTCC_CUDA_ || true)
unset CUDA_HOME FAKE_NVCC_RELEASE

started=$SECONDS
tmp=$(mktemp -d "${TMPDIR:-/tmp}/deploy_test.XXXXXX")
pids=()
skipped=()

# gone PID SECONDS: true once PID has exited, false if it still runs then.
gone() {
  local deadline=$((SECONDS + $2))
  while kill -0 "$1" 2>/dev/null; do
    ((SECONDS < deadline)) || return 1
    sleep 0.1
  done
}

# Each process is started by `spawn` as the leader of its own process group,
# so that cleanup reaches whatever it started too (were an entrypoint not to
# exec, the binary would be its child).
if command -v setsid >/dev/null 2>&1; then own_group=(setsid); else own_group=(); fi
cleanup() {
  local pid
  for pid in "${pids[@]}"; do
    kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
  done
  for pid in "${pids[@]}"; do
    gone "$pid" 10 || kill -KILL -- "-$pid" 2>/dev/null || kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

fail() {
  echo "FAIL: $*" >&2
  local log
  for log in "$tmp"/*.log; do
    [[ -f $log ]] || continue
    echo "--- $(basename "$log") (last 30 lines)" >&2
    tail -n 30 "$log" >&2
  done
  exit 1
}

pass() { echo "ok: $*"; }

# spawn LOG COMMAND...: starts COMMAND in the background, output to LOG; its
# pid is in $spawned and in pids (stopped on exit).
spawn() {
  local log=$1
  shift
  "${own_group[@]}" "$@" >"$log" 2>&1 &
  spawned=$!
  pids+=("$spawned")
}

# wait_for_line FILE REGEX SECONDS PID: until FILE has a line matching REGEX;
# fails if PID exits first or the time runs out.
wait_for_line() {
  local deadline=$((SECONDS + $3))
  until grep -qE "$2" "$1" 2>/dev/null; do
    kill -0 "$4" 2>/dev/null || fail "$(basename "$1"): process exited before printing /$2/"
    ((SECONDS < deadline)) || fail "$(basename "$1"): no line /$2/ within $3 s"
    sleep 0.1
  done
}

# stop PID NAME: SIGTERM, then it must exit with status 0 within 10 s.
stop() {
  kill -TERM "$1"
  gone "$1" 10 || fail "$2 still runs 10 s after SIGTERM"
  local status=0
  wait "$1" || status=$?
  ((status == 0)) || fail "$2 exited with status $status after SIGTERM"
}

# The executable a process runs: proves that an entrypoint exec'd the binary
# (so that Docker's SIGTERM reaches it) rather than running it as a child.
check_exec() {
  local exe
  exe=$(readlink -f "/proc/$1/exe" 2>/dev/null) || return 0  # no /proc: nothing to check
  [[ $exe == "$(readlink -f "$2")" ]] || fail "pid $1 runs $exe, not $2: the entrypoint did not exec"
}

# --- (a) the Compose file -----------------------------------------------------
compose_file=$deploy/docker-compose.yml
compose=()
if timeout 30 docker compose version >/dev/null 2>&1; then
  compose=(docker compose)
elif command -v docker-compose >/dev/null 2>&1; then
  compose=(docker-compose)
fi
# service_block SERVICE < CONFIG: the lines of one service in normalized output.
service_block() {
  awk -v service="$1" '
    /^[^ ]/ { in_services = ($0 == "services:"); inside = 0; next }
    in_services && /^  [^ ]/ { inside = ($0 == "  " service ":"); next }
    inside { print }'
}
if ((${#compose[@]} == 0)); then
  echo "SKIP (a): neither \`docker compose\` nor \`docker-compose\` is installed" \
    "(apt-get install docker-compose)"
  skipped+=("(a) compose validation")
else
  config=$tmp/compose-config.yml
  timeout 60 "${compose[@]}" -f "$compose_file" config >"$config" 2>"$tmp/compose.log" ||
    fail "${compose[*]} -f deploy/docker-compose.yml config rejects the file"
  coordinator_block=$(service_block coordinator <"$config")
  worker_block=$(service_block worker <"$config")
  [[ -n $coordinator_block ]] || fail "compose: no service 'coordinator'"
  [[ -n $worker_block ]] || fail "compose: no service 'worker'"
  # Scalable: a fixed container name or host port would clash at --scale.
  ! grep -q 'container_name:' <<<"$worker_block" || fail "compose: worker has a container_name"
  ! grep -qE '^    ports:' <<<"$worker_block" || fail "compose: worker publishes ports"
  grep -qE '^    mem_limit:' <<<"$worker_block" || fail "compose: worker has no mem_limit"
  grep -qE "DISTCC_CUDA_REQUIRE_NVCC: ['\"]?12\.8['\"]?$" <<<"$worker_block" ||
    fail "compose: worker does not require nvcc 12.8"
  grep -q 'systempaths=unconfined' <<<"$worker_block" ||
    fail "compose: the worker's masked /proc refuses the sandbox its own /proc"
  grep -q 'DISTCC_CUDA_BASE_IMAGE' <<<"$worker_block" ||
    fail "compose: the worker's base image cannot be chosen (build arg DISTCC_CUDA_BASE_IMAGE)"
  # One version: the images' default tag is the project's (CMakeLists.txt).
  version=$(sed -n 's/^project(distcc_cuda VERSION \([0-9.]*\).*/\1/p' "$repo/CMakeLists.txt")
  grep -qE "image: distcc-cuda-worker-served:$version\$" <<<"$worker_block" ||
    fail "compose: the worker image's default tag is not the project's version $version"
  # The workers fetch the coordinator's toolkit; their image is built on one
  # without it, and the coordinator serves its own.
  grep -qE "DISTCC_CUDA_SERVED_TOOLKIT: ['\"]?12\.8['\"]?$" <<<"$worker_block" ||
    fail "compose: worker does not fetch the served 12.8"
  grep -qE "DISTCC_CUDA_RUNTIME_IMAGE: ['\"]?ubuntu:24\.04['\"]?$" <<<"$worker_block" ||
    fail "compose: the worker's image is not built on plain ubuntu:24.04"
  grep -qE "DISTCC_CUDA_SERVE_TOOLKITS: ['\"]?/usr/local/cuda['\"]?$" <<<"$coordinator_block" ||
    fail "compose: the coordinator does not serve its image's toolkit"
  pinned_block=$(service_block worker-pinned <"$config")
  grep -qE "image: distcc-cuda-worker:$version\$" <<<"$pinned_block" ||
    fail "compose: no worker-pinned with the toolkit in its image distcc-cuda-worker:$version"
  ! grep -q 'DISTCC_CUDA_SERVED_TOOLKIT' <<<"$pinned_block" ||
    fail "compose: worker-pinned fetches a toolkit"
  grep -q 'DISTCC_CUDA_COORDINATOR: coordinator:3633' <<<"$worker_block" ||
    fail "compose: worker is not pointed at coordinator:3633"
  grep -q 'condition: service_healthy' <<<"$worker_block" ||
    fail "compose: worker does not wait for a healthy coordinator"
  grep -qE '^      target: worker$' <<<"$worker_block" || fail "compose: worker not built from target worker"
  grep -q 'healthcheck.sh' <<<"$coordinator_block" || fail "compose: coordinator has no healthcheck"
  grep -qE 'coordinator-state:/var/lib/distcc-cuda' <<<"$coordinator_block" ||
    fail "compose: the coordinator's state is not on the named volume"
  grep -qE '^  coordinator-state:' <(sed -n '/^volumes:/,/^[^ v]/p' "$config") ||
    fail "compose: no top-level volume coordinator-state"
  certs_block=$(service_block certs <"$config")
  [[ -n $certs_block ]] || fail "compose: no service 'certs' that makes the cluster's certificates"
  grep -q 'certs-init.sh' <<<"$certs_block" || fail "compose: the certs service does not run certs-init.sh"
  grep -q 'service_completed_successfully' <<<"$coordinator_block" ||
    fail "compose: the coordinator does not wait for its certificates"
  for variable in DISTCC_CUDA_TLS_CA DISTCC_CUDA_TLS_CERT DISTCC_CUDA_TLS_KEY; do
    grep -q "$variable" <<<"$coordinator_block" || fail "compose: coordinator without $variable"
    grep -q "$variable" <<<"$worker_block" || fail "compose: worker without $variable"
  done
  ! grep -q 'cluster-ca' <<<"$coordinator_block$worker_block" ||
    fail "compose: the CA's key volume is mounted into the coordinator or a worker"
  grep -q 'DISTCC_CUDA_INSECURE' <<<"$coordinator_block" &&
    fail "compose: the coordinator runs --insecure"
  grep -q 'seccomp=unconfined' <<<"$worker_block" ||
    fail "compose: the worker's seccomp profile refuses the sandbox's user namespaces"
  ! grep -qE 'privileged: true|cap_add' <<<"$worker_block" ||
    fail "compose: the worker is privileged or has added capabilities"
  grep -qE "(published: ['\"]?3633['\"]?|- ['\"]?3633:3633)" <<<"$coordinator_block" ||
    fail "compose: the coordinator does not publish port 3633"
  grep -qE "(host_ip: 127\.0\.0\.1|- ['\"]?127\.0\.0\.1:9464:9464)" <<<"$coordinator_block" ||
    fail "compose: the coordinator's metrics are not published on the host's loopback"
  grep -q 'DISTCC_CUDA_METRICS_LISTEN: 0.0.0.0:9464' <<<"$coordinator_block" ||
    fail "compose: the coordinator serves no metrics"
  grep -q 'DISTCC_CUDA_HTTP_LISTEN: 0.0.0.0:8080' <<<"$coordinator_block" ||
    fail "compose: the coordinator serves no dashboard"
  grep -qE "(host_ip: 127\.0\.0\.1|- ['\"]?127\.0\.0\.1:8080:8080)" <<<"$coordinator_block" ||
    fail "compose: the dashboard is not published on the host's loopback"
  grep -q 'DISTCC_CUDA_METRICS_LISTEN: 0.0.0.0:9465' <<<"$worker_block" ||
    fail "compose: the workers serve no metrics"
  grep -qE "^ +- ['\"]?9465['\"]?$" <<<"$worker_block" ||
    fail "compose: the workers' metrics port is not exposed on the Compose network"
  # The memory limit is a setting: DISTCC_CUDA_WORKER_MEMORY=8g reaches mem_limit.
  DISTCC_CUDA_WORKER_MEMORY=8g timeout 60 "${compose[@]}" -f "$compose_file" config \
    >"$tmp/compose-8g.yml" 2>>"$tmp/compose.log" || fail "compose config with a memory setting"
  service_block worker <"$tmp/compose-8g.yml" |
    grep -qE "mem_limit: ['\"]?(8g|8589934592)['\"]?$" ||
    fail "compose: DISTCC_CUDA_WORKER_MEMORY does not set the worker's mem_limit"
  pass "(a) ${compose[*]} config accepts deploy/docker-compose.yml; services, scaling, limits" \
    "and health dependencies as expected"
fi

# --- (b) the Dockerfile, statically -----------------------------------------
dockerfile=$deploy/Dockerfile
# One instruction per line: continuations joined, comments and blanks dropped.
instructions=$tmp/dockerfile.instructions
awk '
  /^[[:space:]]*#/ && !continued { next }
  {
    line = $0
    continued = sub(/\\[[:space:]]*$/, "", line)
    text = text line
    if (!continued) { if (text ~ /[^[:space:]]/) print text; text = "" }
  }' "$dockerfile" >"$instructions"
problems=$(awk -v repo="$repo" '
  function problem(message) { print message; bad = 1 }
  # An ARG before the first FROM may name the base image: its default is
  # the pin, and must be one.
  toupper($1) == "ARG" && count == 0 {
    split($2, kv, "="); base_args[kv[1]] = kv[2]
    next
  }
  toupper($1) == "FROM" {
    image = ""; name = ""
    for (i = 2; i <= NF; i++) {
      if ($i ~ /^--/) continue
      if (image == "") image = $i
      else if (toupper($i) == "AS") name = $(i + 1)
    }
    parent = image
    # An ARG whose default is another ARG (${A}) resolves through it.
    for (depth = 0; depth < 4 && image ~ /^\$/; depth++) {
      variable = image; gsub(/[${}]/, "", variable)
      if (!(variable in base_args) || base_args[variable] == "") break
      image = base_args[variable]
    }
    if (image in stages) { user[name] = user[image]; health[name] = health[image] }
    else if (image == "scratch") { user[name] = "root"; health[name] = "" }
    else {
      user[name] = "root"; health[name] = ""
      ref = image; sub(/@sha256:.*/, "", ref)
      n = split(ref, parts, "/"); last = parts[n]
      if (last !~ /:/) problem("FROM " image ": no tag (means latest)")
      else {
        tag = last; sub(/^[^:]*:/, "", tag)
        if (tag == "latest") problem("FROM " image ": the tag latest is not a pin")
        else if (tag !~ /[0-9]/) problem("FROM " image ": tag " tag " names no version")
      }
      if (image ~ /^nvidia\/cuda:/ && image !~ /^nvidia\/cuda:12\.8\.[0-9]+-devel-/)
        problem("FROM " image ": not a CUDA 12.8 devel image")
      if (image ~ /\$/) problem("FROM " image ": a variable without a pinned default (ARG NAME=IMAGE:TAG)")
    }
    stage = name; stages[name] = 1; order[++count] = name
    next
  }
  toupper($1) == "USER" {
    u = $2; sub(/:.*/, "", u)
    if (u == "root" || u == "0") problem("USER " $2 " is root")
    user[stage] = u
  }
  toupper($1) == "HEALTHCHECK" {
    health[stage] = (toupper($2) == "NONE") ? "" : $0
  }
  toupper($1) == "ENTRYPOINT" { entry[stage] = $0 }
  toupper($1) == "COPY" {
    from = 0
    for (i = 2; i < NF; i++) {
      if ($i ~ /^--from=/) from = 1
      else if ($i !~ /^--/ && !from) {
        source = $i
        gsub(/[\[\]",]/, "", source)
        if (system("test -e \"" repo "/" source "\"") != 0)
          problem("COPY " source ": not in the repository")
      }
    }
  }
  END {
    for (i = 1; i <= count; i++) {
      s = order[i]
      if (!(s in entry) && i < count) continue
      if (user[s] == "root") problem("stage " s " runs as root (no USER)")
      if (health[s] == "") problem("stage " s " has no HEALTHCHECK")
    }
    if (!("coordinator" in entry) || entry["coordinator"] !~ /entrypoint-coordinator\.sh/)
      problem("no stage coordinator with ENTRYPOINT entrypoint-coordinator.sh")
    if (!("worker" in entry) || entry["worker"] !~ /entrypoint-worker\.sh/)
      problem("no stage worker with ENTRYPOINT entrypoint-worker.sh")
    exit bad
  }' "$instructions") || fail "Dockerfile: ${problems//$'\n'/; }"
# What the image copies from the build context must not be left out of it.
while read -r pattern; do
  [[ -z $pattern || $pattern == \#* ]] && continue
  for needed in deploy/entrypoint-coordinator.sh deploy/entrypoint-worker.sh \
    deploy/healthcheck.sh CMakeLists.txt pyproject.toml cmake proto common coordinator worker \
    client docs/pypi.md scripts/wheel; do
    [[ $needed == "$pattern" || $needed == "$pattern"/* ]] &&
      fail ".dockerignore leaves out $needed, which the image build needs"
  done
done <"$repo/.dockerignore"
for script in "$deploy"/entrypoint-coordinator.sh "$deploy"/entrypoint-worker.sh "$deploy"/healthcheck.sh; do
  sh -n "$script" || fail "$(basename "$script"): not valid sh"
  [[ -x $script ]] || fail "$(basename "$script") is not executable (chmod +x; git keeps the mode)"
done
if command -v shellcheck >/dev/null 2>&1; then
  shellcheck -S warning -s sh "$deploy"/entrypoint-coordinator.sh "$deploy"/entrypoint-worker.sh \
    "$deploy"/healthcheck.sh >"$tmp/shellcheck.log" 2>&1 || fail "shellcheck: $(cat "$tmp/shellcheck.log")"
fi
pass "(b) Dockerfile: pinned FROM tags, non-root USER, HEALTHCHECK and ENTRYPOINT per role;" \
  "scripts are valid sh"

# --- (c) the entrypoints and the healthcheck, outside Docker ----------------
# A first argument that is not a flag is run instead of the binary.
[[ $(DISTCC_CUDA_BIN_DIR=$bin_dir "$deploy/entrypoint-worker.sh" echo passed through) == \
  "passed through" ]] || fail "entrypoint-worker.sh does not run a command given as arguments"
[[ $(DISTCC_CUDA_BIN_DIR=$bin_dir "$deploy/entrypoint-coordinator.sh" echo passed through) == \
  "passed through" ]] || fail "entrypoint-coordinator.sh does not run a command given as arguments"
status=0
DISTCC_CUDA_BIN_DIR=$tmp/nowhere "$deploy/entrypoint-worker.sh" >"$tmp/nowhere.out" 2>&1 || status=$?
if ! { ((status == 127)) && grep -q 'DISTCC_CUDA_BIN_DIR' "$tmp/nowhere.out"; }; then
  fail "entrypoint-worker.sh with no binary: status $status, '$(cat "$tmp/nowhere.out")'"
fi

# Port 0: the coordinator picks a free port and prints it. It serves a
# toolkit (the fake compiler as bin/nvcc, release 12.8) and says why it
# cannot serve a folder without nvcc, and starts all the same.
state_dir=$tmp/state
mkdir -p "$tmp/cuda-served/bin" "$tmp/cuda-served/nvvm/bin" "$tmp/not-cuda"
# A worker asks a served nvcc what it is inside its sandbox, whose
# environment has no FAKE_NVCC_RELEASE: the toolkit says its release itself.
cp "$fake_nvcc" "$tmp/cuda-served/nvvm/bin/fake_nvcc"
printf '#!/bin/sh
FAKE_NVCC_RELEASE=12.8 exec "$(dirname "$0")/../nvvm/bin/fake_nvcc" "$@"
' \
  >"$tmp/cuda-served/bin/nvcc"
chmod 755 "$tmp/cuda-served/bin/nvcc"
spawn "$tmp/coordinator.log" env DISTCC_CUDA_BIN_DIR="$bin_dir" DISTCC_CUDA_LISTEN=127.0.0.1:0 \
  DISTCC_CUDA_STATE_DIR="$state_dir" DISTCC_CUDA_HTTP_LISTEN=127.0.0.1:0 \
  DISTCC_CUDA_SERVE_TOOLKITS="$tmp/cuda-served $tmp/not-cuda" FAKE_NVCC_RELEASE=12.8 \
  DISTCC_CUDA_REAPI_LISTEN=127.0.0.1:0 "$deploy/entrypoint-coordinator.sh"
coordinator_pid=$spawned
wait_for_line "$tmp/coordinator.log" '^listening on ' 20 "$coordinator_pid"
# Said after the line above.
wait_for_line "$tmp/coordinator.log" '^Remote Execution API on 127\.0\.0\.1:[1-9]' 20 "$coordinator_pid"
address=$(sed -n 's/^listening on //p' "$tmp/coordinator.log" | head -n 1)
[[ $address =~ ^127\.0\.0\.1:([0-9]+)$ ]] || fail "coordinator listens on '$address', not 127.0.0.1"
port=${BASH_REMATCH[1]}
((port != 0)) || fail "coordinator reports port 0"
check_exec "$coordinator_pid" "$bin_dir/distcc-cuda-coordinator"
grep -q "^added CUDA 12.8.0 " "$tmp/coordinator.log" ||
  fail "DISTCC_CUDA_SERVE_TOOLKITS: the toolkit was not added: $(head -c 2000 "$tmp/coordinator.log")"
grep -q "not serving the toolkit at $tmp/not-cuda" "$tmp/coordinator.log" ||
  fail "DISTCC_CUDA_SERVE_TOOLKITS: a folder without nvcc was not said: $(head -c 2000 "$tmp/coordinator.log")"
[[ -d $state_dir && -n $(ls -A "$state_dir") ]] ||
  fail "DISTCC_CUDA_STATE_DIR: the coordinator wrote nothing to $state_dir"

# Worker 1: every setting from a variable; the fake compiler says release 12.8.
name=deploy-test-$$
worker_env=(DISTCC_CUDA_BIN_DIR="$bin_dir" DISTCC_CUDA_COORDINATOR="127.0.0.1:$port"
  DISTCC_CUDA_NVCC="$fake_nvcc" DISTCC_CUDA_MEMORY_CAP=512MiB DISTCC_CUDA_SLOTS=2
  DISTCC_CUDA_MEMORY_MECHANISM=watchdog FAKE_NVCC_RELEASE=12.8)
worker_env+=(DISTCC_CUDA_REQUIRE_NVCC=12.8)
spawn "$tmp/worker1.log" env "${worker_env[@]}" DISTCC_CUDA_NAME="$name" \
  DISTCC_CUDA_WORK_DIR="$tmp/work1" DISTCC_CUDA_METRICS_LISTEN=127.0.0.1:0 \
  "$deploy/entrypoint-worker.sh"
worker1_pid=$spawned
# Worker 2: no name (so HOST-PID), an argument that overrides a variable,
# and the coordinator's toolkit instead of its own.
spawn "$tmp/worker2.log" env "${worker_env[@]}" DISTCC_CUDA_SLOTS=3 DISTCC_CUDA_WORK_DIR="$tmp/work2" \
  DISTCC_CUDA_SERVED_TOOLKIT=12.8 DISTCC_CUDA_TOOLKIT_CACHE_SIZE=1GiB \
  "$deploy/entrypoint-worker.sh" --slots 1
worker2_pid=$spawned
wait_for_line "$tmp/worker1.log" 'registered' 20 "$worker1_pid"
wait_for_line "$tmp/worker2.log" 'registered' 20 "$worker2_pid"
check_exec "$worker1_pid" "$bin_dir/distcc-cuda-worker"
check_exec "$worker2_pid" "$bin_dir/distcc-cuda-worker"

# http_get URL: the body, by bash's own /dev/tcp (no curl in a bare image).
http_get() {
  [[ $1 =~ ^http://([0-9.]+):([0-9]+)(/.*)$ ]] || return 1
  local response
  response=$(timeout 10 bash -c 'exec 3<>"/dev/tcp/$0/$1"; printf "GET %s HTTP/1.0\r\n\r\n" "$2" >&3; cat <&3' \
    "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}") || return 1
  [[ $response == "HTTP/1.1 200 "* ]] || return 1
  printf '%s\n' "${response#*$'\r\n\r\n'}"
}
wait_for_line "$tmp/worker1.log" 'metrics at http://' 20 "$worker1_pid"
metrics_url=$(grep -oE 'http://127\.0\.0\.1:[0-9]+/metrics' "$tmp/worker1.log" | head -n 1)
http_get "$metrics_url" >"$tmp/worker1.metrics" || fail "DISTCC_CUDA_METRICS_LISTEN: no metrics at '$metrics_url'"
grep -qE '^distcc_cuda_worker_slots 2$' "$tmp/worker1.metrics" ||
  fail "worker metrics without its 2 slots: $(head -c 2000 "$tmp/worker1.metrics")"
dashboard_url=$(sed -n 's/^dashboard at //p' "$tmp/coordinator.log" | head -n 1)
http_get "${dashboard_url}api/status" >"$tmp/dashboard.json" ||
  fail "DISTCC_CUDA_HTTP_LISTEN: no dashboard at '$dashboard_url'"
grep -q "\"name\":\"$name\"" "$tmp/dashboard.json" ||
  fail "the dashboard's status does not list $name: $(head -c 2000 "$tmp/dashboard.json")"
[[ -d $tmp/work1 ]] || fail "DISTCC_CUDA_WORK_DIR: $tmp/work1 was not made"

timeout 30 "$bin_dir/distcc-cuda" status --coordinator "127.0.0.1:$port" >"$tmp/status.out" 2>&1 ||
  fail "distcc-cuda status: $(cat "$tmp/status.out")"
worker1_line=$(grep -E "^  $name +slots" "$tmp/status.out") ||
  fail "status does not list $name: $(cat "$tmp/status.out")"
[[ $worker1_line =~ slots\ [0-9]+/2\  ]] || fail "DISTCC_CUDA_SLOTS=2 not applied: $worker1_line"
[[ $worker1_line =~ cap\ 512\ MiB ]] || fail "DISTCC_CUDA_MEMORY_CAP=512MiB not applied: $worker1_line"
worker2_name=$(uname -n)-$worker2_pid
worker2_line=$(grep -E "^  $worker2_name +slots" "$tmp/status.out") ||
  fail "status does not list $worker2_name (the default name HOST-PID): $(cat "$tmp/status.out")"
[[ $worker2_line =~ slots\ [0-9]+/1\  ]] || fail "--slots 1 after DISTCC_CUDA_SLOTS=3 did not win: $worker2_line"
grep -qE 'enforced by .*watchdog' "$tmp/status.out" ||
  fail "DISTCC_CUDA_MEMORY_MECHANISM=watchdog not applied: $(cat "$tmp/status.out")"
grep -q 'nvcc 12\.8 ' "$tmp/status.out" ||
  fail "DISTCC_CUDA_NVCC (the fake, release 12.8) not applied: $(cat "$tmp/status.out")"
[[ $(grep -c 'toolkit served by the coordinator: CUDA 12\.8\.0' "$tmp/status.out") == 1 ]] ||
  fail "DISTCC_CUDA_SERVED_TOOLKIT: worker 2 does not say it runs the served toolkit: $(cat "$tmp/status.out")"
[[ -x $(echo "$tmp"/work2/toolkits/cuda-12.8.0-*/bin/nvcc) ]] ||
  fail "DISTCC_CUDA_SERVED_TOOLKIT: no served nvcc in worker 2's toolkit cache"

# healthcheck.sh ROLE [VARIABLE=VALUE...]: its exit status.
health() {
  local role=$1 status=0
  shift
  env DISTCC_CUDA_BIN_DIR="$bin_dir" "$@" timeout 30 "$deploy/healthcheck.sh" "$role" \
    >>"$tmp/healthcheck.log" 2>&1 || status=$?
  echo "$status"
}
[[ $(health coordinator DISTCC_CUDA_LISTEN="127.0.0.1:$port") == 0 ]] ||
  fail "healthcheck.sh coordinator: unhealthy while the coordinator runs"
[[ $(health coordinator DISTCC_CUDA_LISTEN="0.0.0.0:$port") == 0 ]] ||
  fail "healthcheck.sh coordinator: does not ask 127.0.0.1 for a coordinator on 0.0.0.0"
# A worker is healthy while the coordinator takes its heartbeats (it writes
# WORK_DIR/health then); it needs no client certificate to say so.
wait_for_line "$tmp/work1/health" 'heartbeat accepted' 20 "$worker1_pid"
wait_for_line "$tmp/work2/health" 'heartbeat accepted' 20 "$worker2_pid"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/work1") == 0 ]] ||
  fail "healthcheck.sh worker: unhealthy for $name, whose heartbeats are accepted"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/work2") == 0 ]] ||
  fail "healthcheck.sh worker: unhealthy for the unnamed worker $worker2_name"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/no-such-worker") == 1 ]] ||
  fail "healthcheck.sh worker: not 1 for a worker that never had a heartbeat accepted"
touch -d '2 minutes ago' "$tmp/stale-health" && mkdir -p "$tmp/stale" &&
  mv "$tmp/stale-health" "$tmp/stale/health"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/stale") == 1 ]] ||
  fail "healthcheck.sh worker: not 1 for a worker whose last heartbeat is 2 minutes old"
[[ $(health nonsense) == 1 ]] || fail "healthcheck.sh with an unknown role: not 1"
pass "(c) coordinator and workers started through the entrypoints, configured by DISTCC_CUDA_*," \
  "registered; status and healthcheck.sh see them; a worker serves /metrics, the dashboard lists it"

# --- (d) a worker with another nvcc release refuses to start -----------------
status=0
env "${worker_env[@]}" DISTCC_CUDA_REQUIRE_NVCC=99.9 DISTCC_CUDA_NAME="$name-mismatch" \
  DISTCC_CUDA_WORK_DIR="$tmp/work3" timeout 20 "$deploy/entrypoint-worker.sh" \
  >"$tmp/mismatch.log" 2>&1 || status=$?
((status != 0)) || fail "a worker requiring nvcc 99.9 started with release 12.8"
((status != 124)) || fail "a worker requiring nvcc 99.9 neither started nor exited in 20 s"
# Its own message (not the entrypoint's command line) names both releases.
messages=$(grep -v '^entrypoint-worker:' "$tmp/mismatch.log" || true)
if ! { grep -qF '99.9' <<<"$messages" && grep -qF '12.8' <<<"$messages"; }; then
  fail "the refusal does not name the release required (99.9) and found (12.8): $messages"
fi
timeout 30 "$bin_dir/distcc-cuda" status --coordinator "127.0.0.1:$port" >"$tmp/status2.out" 2>&1 ||
  fail "distcc-cuda status: $(cat "$tmp/status2.out")"
! grep -q "$name-mismatch" "$tmp/status2.out" || fail "the refused worker registered anyway"
pass "(d) DISTCC_CUDA_REQUIRE_NVCC=99.9 with nvcc 12.8: exit status $status," \
  "'$(head -n 1 <<<"$messages")'"

# --- shutdown: SIGTERM reaches the binaries, which exit cleanly --------------
stop "$worker1_pid" "worker $name"
stop "$worker2_pid" "worker $worker2_name"
stop "$coordinator_pid" coordinator
[[ $(health coordinator DISTCC_CUDA_LISTEN="127.0.0.1:$port") == 1 ]] ||
  fail "healthcheck.sh coordinator: not 1 once the coordinator is gone"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/work1") == 1 ]] ||
  fail "healthcheck.sh worker: not 1 once the worker is stopped"
pass "SIGTERM stops workers and coordinator with status 0; healthcheck then says unhealthy"

# --- (e) mutual TLS as deployed: certs-init.sh, then the entrypoints ----------
certs=$tmp/certs
hosts=localhost,127.0.0.1
certs_env=(DISTCC_CUDA_BIN_DIR="$bin_dir" DISTCC_CUDA_CERTS_DIR="$certs/ca"
  DISTCC_CUDA_COORDINATOR_HOSTS="$hosts"
  DISTCC_CUDA_EXPORT_COORDINATOR="$certs/coordinator" DISTCC_CUDA_EXPORT_WORKER="$certs/worker"
  DISTCC_CUDA_EXPORT_CLIENT="$certs/client")
env "${certs_env[@]}" "$deploy/certs-init.sh" >"$tmp/certs-init.log" 2>&1 ||
  fail "certs-init.sh: $(cat "$tmp/certs-init.log")"
for file in coordinator/ca.crt coordinator/coordinator.key coordinator/admin.crt \
  worker/ca.crt worker/worker.crt worker/worker.key client/admin.crt client/admin.key; do
  [[ -f $certs/$file ]] || fail "certs-init.sh did not export $file"
done
[[ ! -e $certs/worker/ca.key && ! -e $certs/worker/admin.key && ! -e $certs/client/ca.key ]] ||
  fail "certs-init.sh exported a key a role must not have"
[[ $(stat -c %a "$certs/worker/worker.key") == 600 ]] || fail "the worker's key is not private"
before=$(sha256sum "$certs"/ca/*.crt)
env "${certs_env[@]}" "$deploy/certs-init.sh" >>"$tmp/certs-init.log" 2>&1 ||
  fail "certs-init.sh a second time: $(cat "$tmp/certs-init.log")"
[[ $(sha256sum "$certs"/ca/*.crt) == "$before" ]] || fail "certs-init.sh replaced certificates"

spawn "$tmp/tls-coordinator.log" env DISTCC_CUDA_BIN_DIR="$bin_dir" \
  DISTCC_CUDA_LISTEN=127.0.0.1:0 DISTCC_CUDA_STATE_DIR="$tmp/tls-state" \
  DISTCC_CUDA_TLS_CA="$certs/coordinator/ca.crt" \
  DISTCC_CUDA_TLS_CERT="$certs/coordinator/coordinator.crt" \
  DISTCC_CUDA_TLS_KEY="$certs/coordinator/coordinator.key" "$deploy/entrypoint-coordinator.sh"
tls_coordinator_pid=$spawned
wait_for_line "$tmp/tls-coordinator.log" '^listening on ' 20 "$tls_coordinator_pid"
tls_port=$(sed -n 's/^listening on 127\.0\.0\.1://p' "$tmp/tls-coordinator.log" | head -n 1)
spawn "$tmp/tls-worker.log" env "${worker_env[@]}" DISTCC_CUDA_COORDINATOR="127.0.0.1:$tls_port" \
  DISTCC_CUDA_NAME="$name-tls" DISTCC_CUDA_WORK_DIR="$tmp/tls-work" \
  DISTCC_CUDA_TLS_CA="$certs/worker/ca.crt" DISTCC_CUDA_TLS_CERT="$certs/worker/worker.crt" \
  DISTCC_CUDA_TLS_KEY="$certs/worker/worker.key" "$deploy/entrypoint-worker.sh"
tls_worker_pid=$spawned
wait_for_line "$tmp/tls-worker.log" 'registered' 20 "$tls_worker_pid"
wait_for_line "$tmp/tls-work/health" 'heartbeat accepted' 20 "$tls_worker_pid"
[[ $(health worker DISTCC_CUDA_WORK_DIR="$tmp/tls-work") == 0 ]] ||
  fail "healthcheck.sh worker: unhealthy for a worker over mutual TLS"
[[ $(health coordinator DISTCC_CUDA_LISTEN="127.0.0.1:$tls_port" \
  DISTCC_CUDA_TLS_CA="$certs/coordinator/ca.crt" \
  DISTCC_CUDA_HEALTHCHECK_TLS_CERT="$certs/coordinator/admin.crt" \
  DISTCC_CUDA_HEALTHCHECK_TLS_KEY="$certs/coordinator/admin.key") == 0 ]] ||
  fail "healthcheck.sh coordinator: unhealthy over mutual TLS"
[[ $(health coordinator DISTCC_CUDA_LISTEN="127.0.0.1:$tls_port") == 1 ]] ||
  fail "healthcheck.sh coordinator: healthy without a certificate for a TLS coordinator"
status=0
timeout 30 "$bin_dir/distcc-cuda" status --coordinator "127.0.0.1:$tls_port" \
  >"$tmp/tls-status-anonymous.out" 2>&1 || status=$?
((status != 0)) || fail "distcc-cuda status without a certificate was served by a TLS coordinator"
timeout 30 "$bin_dir/distcc-cuda" status --coordinator "localhost:$tls_port" \
  --tls-ca "$certs/client/ca.crt" --tls-cert "$certs/client/admin.crt" \
  --tls-key "$certs/client/admin.key" >"$tmp/tls-status.out" 2>&1 ||
  fail "distcc-cuda status with the client certificate: $(cat "$tmp/tls-status.out")"
grep -qE "^  $name-tls +slots" "$tmp/tls-status.out" ||
  fail "status over TLS does not list $name-tls: $(cat "$tmp/tls-status.out")"
grep -q 'compiles sandboxed by bubblewrap' "$tmp/tls-status.out" ||
  fail "status does not say the worker sandboxes its compiles: $(cat "$tmp/tls-status.out")"
stop "$tls_worker_pid" "worker $name-tls"
stop "$tls_coordinator_pid" "TLS coordinator"
pass "(e) certs-init.sh makes and exports the role certificates once; coordinator and worker" \
  "run over mutual TLS through the entrypoints; a client without a certificate is refused"

echo "deploy_test: $((SECONDS - started)) s"
if ((${#skipped[@]})); then
  echo "deploy_test: SKIPPED ${skipped[*]}; everything else passed"
  exit 77
fi
echo "deploy_test: PASS"
