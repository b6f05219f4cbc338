# SPDX-License-Identifier: Apache-2.0
# Sourced by the benchmarks that build through BuildGrid:
#   start_buildgrid_bot WORK BGD SLOTS
# starts a real BuildGrid (tests/e2e/buildgrid/serve, instance main) with
# its PostgreSQL on a free loopback port, and one distcc-cuda-worker of
# SLOTS slots as its bot (bench-bot, --bots-api); sets PORT, and a trap
# that stops the bot first (so that it can tell BuildGrid it is going),
# then BuildGrid. Logs in WORK/buildgrid.log and WORK/bot.log.
start_buildgrid_bot() {
  local work=$1 bgd=$2 slots=$3
  PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  chmod 755 "$work"
  tests/e2e/buildgrid/serve --bgd "$bgd" "$work/buildgrid" "$PORT" main > "$work/buildgrid.log" 2>&1 &
  SERVE=$!
  trap 'kill ${BOT:-} 2>/dev/null; wait ${BOT:-} 2>/dev/null; kill $SERVE 2>/dev/null;
        wait 2>/dev/null || true' EXIT
  for _ in $(seq 600); do grep -q "buildgrid: serving" "$work/buildgrid.log" && break; sleep 0.1; done
  build/bin/distcc-cuda-worker --bots-api "grpc://127.0.0.1:$PORT" --instance main \
    --name bench-bot --slots "$slots" --work-dir "$work/bot" > "$work/bot.log" 2>&1 &
  BOT=$!
  for _ in $(seq 100); do grep -q "joined" "$work/bot.log" && break; sleep 0.1; done
}
