#!/usr/bin/env bash
# A/B of tern recommend builds on this machine (the ad-hoc comparisons of docs/benchmarks.md, issue 11): for
# each round and each binary in turn, start tern cache, two tern graph shards of pgp-strong-2009 and tern
# recommend (one I/O thread and one CPU worker each) from that binary, warm up 5 s, then run a closed loop of 32
# connections for SECONDS per call (Suggested Users, then Chaining) and print its answers/s, the server
# processes' CPU µs per answer (from /proc) and the candidates ranked per answer (from /metrics). Only the
# binaries of one round compare: this VM's speed moves between rounds.
#
#   bash bench/recommend_ab.sh MODEL ROUNDS SECONDS BINARY...
#   bash bench/recommend_ab.sh /tmp/model.txt 4 10 /tmp/tern-before target/release/tern
#
# MODEL: a LightGBM model for the graph (bench/recommend_speed.py trains one in its work directory). Ports
# 21211 (cache), 21300-21301 (graph), 21400-21401 (recommend, admin) must be free.
set -euo pipefail
cd "$(dirname "$0")/.."
model=$1 rounds=$2 seconds=$3
shift 3
graph=target/graphs/pgp-strong-2009.gt.gz
servers='(cache -p 21211|graph --graph|recommend serve)'
trap 'pkill -f "$servers" || true' EXIT

cpu_ticks() {
    local total=0 fields
    for pid in "$@"; do
        read -ra fields < <(cut -d')' -f2 "/proc/$pid/stat")
        total=$((total + fields[11] + fields[12]))
    done
    echo "$total"
}

candidates() {
    curl -s 127.0.0.1:21401/metrics | awk '/^tern_recommend_candidates_(sum|count)/ {printf "%s ", $2}'
}

load() {
    "$1" load --protocol recommend -s 127.0.0.1:21400 --keys 39796 --key-dist zipf:0.9 \
        --recommend-wire thrift-binary --warmup 0 --duration "$3" --recommend-call "$2" --connections 32 2> /dev/null
}

start() {
    local tern=$1
    pkill -f "$servers" || true
    sleep 1
    "$tern" cache -p 21211 -l 127.0.0.1 -U 0 -t 1 > /dev/null 2>&1 &
    for shard in 0 1; do
        "$tern" graph --graph "$graph" --shard "$shard/2" --listen "127.0.0.1:2130$shard" --io-threads 1 \
            --cpu-workers 1 > /dev/null 2>&1 &
    done
    sleep 4
    "$tern" recommend prepare --graph "$graph" --cache 127.0.0.1:21211 > /dev/null
    "$tern" recommend serve --listen 127.0.0.1:21400 --graph-shard 127.0.0.1:21300 \
        --graph-shard 127.0.0.1:21301 --cache 127.0.0.1:21211 --model "$model" --io-threads 1 \
        --cpu-workers 1 --admin 127.0.0.1:21401 > /dev/null 2>&1 &
    sleep 1
    for pid in $(pgrep -f "$servers"); do
        [ "$(readlink "/proc/$pid/exe")" = "$(readlink -f "$tern")" ] ||
            { echo "process $pid is not $tern: are the ports free?" >&2; exit 1; }
    done
}

for _ in $(seq "$rounds"); do
    for tern in "$@"; do
        start "$tern"
        rec=$(pgrep -f "recommend serve") graphs=$(pgrep -f "graph --graph" | tr '\n' ' ')
        cache=$(pgrep -f "cache -p 21211")
        load "$tern" suggested-users 5 > /dev/null
        for call in suggested-users chaining; do
            # shellcheck disable=SC2086 # the pid lists split on purpose
            before=("$(cpu_ticks $rec)" "$(cpu_ticks $graphs)" "$(cpu_ticks $cache)")
            m0=$(candidates)
            n=$(load "$tern" "$call" "$seconds" | grep -oE 'recommended=[0-9]+' | cut -d= -f2)
            m1=$(candidates)
            # shellcheck disable=SC2086
            after=("$(cpu_ticks $rec)" "$(cpu_ticks $graphs)" "$(cpu_ticks $cache)")
            per=() # CPU µs per answer: ticks are 1/100 s
            for i in 0 1 2; do per+=($(((after[i] - before[i]) * 10000 / n))); done
            pool=$(python3 -c "a='$m0'.split(); b='$m1'.split(); print(round((float(b[0])-float(a[0]))/(float(b[1])-float(a[1]))))")
            echo "$(basename "$tern") $call answers/s $((n / seconds)) CPU µs/answer recommend ${per[0]} graph ${per[1]} cache ${per[2]} candidates $pool"
        done
    done
done
