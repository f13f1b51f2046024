#!/usr/bin/env bash
# Sets at full memory over TCP: memcached 1.6.18 and each tern binary given, in turn, ROUNDS times, each
# server alone on CPU 1 (-t 1 -m 64), `tern load` on CPU 0 sending new keys (sequential, 100-byte values) at
# 30,000 sets/s open loop for 30 s after a 20 s warm-up (the cache is full after about 5 s). One line per
# run: the latency from each request's scheduled time (no coordinated omission), in µs.
#
#   bash scripts/set_tail.sh target/release/tern [other-tern ...]     # ROUNDS=3 by default
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "usage: $0 TERN [TERN ...]" >&2; exit 2; }
load=$(realpath "$1")
rounds=${ROUNDS:-3}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for round in $(seq "$rounds"); do
  for server in memcached "$@"; do
    port=$((41000 + RANDOM % 1000))
    if [ "$server" = memcached ]; then
      taskset -c 1 memcached -u root -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 64 &
    else
      taskset -c 1 "$server" cache -u root -l 127.0.0.1 -p "$port" -U 0 -t 1 -m 64 2>/dev/null &
    fi
    pid=$!
    sleep 0.5
    taskset -c 0 "$load" load -s "127.0.0.1:$port" -c 4 -t 1 --rate 30000 -d 30 --warmup 20 --keys 3000000 \
      --key-dist sequential --value-size 100 --mix set=1 -q > "$out/run.txt" 2>&1 || true
    kill "$pid"
    wait "$pid" 2>/dev/null || true
    echo "round $round $server: mean p50 p90 p99 p99.9 p99.99 max (us) $(grep 'from schedule' "$out/run.txt" | tr -s ' ' | cut -d' ' -f3-)"
  done
done
