#!/usr/bin/env python3
"""tern recommend's speed on this machine, everything on it (issue 11's benchmark): tern cache holding the
features, two tern graph shards, tern recommend with a LightGBM model trained on the graph, and tern load in
open loop, all on the same cores.

Per call (Suggested Users, Chaining): the peak (a closed loop of --connections connections for --seconds,
its answers per second), then an open loop at --load-share of the peak for --seconds, latency measured from
each request's scheduled send time. CPU per request of each process from /proc, user and system apart (the
graph shards' is the sources' cost, the cache's the features' cost), tern load's own CPU, context switches per
request of each server (all its threads), and the recommender's own time per stage from its
/metrics: the wall time of the fan-out and of the feature multi-get, and the CPU time of ranking (building
the rows, scoring with the model, the blend), measured with the worker thread's CPU clock.

    python3 bench/recommend_speed.py --tern target/release/tern --graph target/graphs/pgp-strong-2009.gt.gz

Prints one line per step, then a Markdown table.
"""

import argparse
import os
import subprocess
import tempfile
import time

from common import REPO, Process, accepts, answers_version, free_port, metrics, table, tern_load

TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User and system CPU seconds of a process so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / TICKS, int(fields[12]) / TICKS


def context_switches(pid):
    """Context switches of all of a process's threads so far (voluntary: it waited; involuntary: preempted)."""
    total = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        with open(f"/proc/{pid}/task/{tid}/status") as f:
            for line in f:
                if line.startswith(("voluntary_ctxt_switches", "nonvoluntary_ctxt_switches")):
                    total += int(line.split()[1])
    return total


def stage_means(before, after, name, label, values):
    """Mean per recorded sample of a histogram family between two scrapes, in microseconds."""
    means = {}
    for v in values:
        key = f'{{{label}="{v}"}}'
        count = after.get(f"{name}_count{key}", 0) - before.get(f"{name}_count{key}", 0)
        total = after.get(f"{name}_sum{key}", 0) - before.get(f"{name}_sum{key}", 0)
        means[v] = total / count / 1000 if count else None
    return means


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default=os.path.join(REPO, "target", "release", "tern"))
    ap.add_argument("--graph", default=os.path.join(REPO, "target", "graphs", "pgp-strong-2009.gt.gz"))
    ap.add_argument("--model", help="a trained model (default: train one on the graph, 100 trees, LambdaRank)")
    ap.add_argument("--seconds", type=float, default=20)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--load-share", type=float, default=0.7)
    ap.add_argument("--calls", default="suggested-users,chaining")
    ap.add_argument("--graph-args", default="", help="more flags for both tern graph shards, e.g. '--walk-steps 5000'")
    args = ap.parse_args()
    tern = args.tern
    work = tempfile.mkdtemp(prefix="tern-recommend-speed-")
    model = args.model
    if not model:
        rows = os.path.join(work, "rows.csv")
        model = os.path.join(work, "model.txt")
        subprocess.run([tern, "recommend", "train-data", "--graph", args.graph, "--out", rows], check=True,
                       stdout=subprocess.DEVNULL)
        subprocess.run(["python3", os.path.join(REPO, "scripts", "train_model.py"), "--train", rows, "--out",
                        model, "--trees", "100", "--objective", "lambdarank"], check=True, stdout=subprocess.DEVNULL)
        print(f"model: 100 trees (LambdaRank) trained on {args.graph}", flush=True)
    cache_port = free_port()
    shards = [free_port(), free_port()]
    port, admin = free_port(), free_port()
    processes = []
    try:
        cache = Process([tern, "cache", "-p", str(cache_port), "-l", "127.0.0.1", "-U", "0", "-t", "1"], None,
                        cache_port, answers_version)
        processes.append(cache)
        for i, shard_port in enumerate(shards):
            processes.append(Process([tern, "graph", "--graph", args.graph, "--shard", f"{i}/2", "--listen",
                                      f"127.0.0.1:{shard_port}", "--io-threads", "1", "--cpu-workers", "1"]
                                     + args.graph_args.split(),
                                     None, shard_port, accepts))
        subprocess.run([tern, "recommend", "prepare", "--graph", args.graph, "--cache", f"127.0.0.1:{cache_port}"],
                       check=True, stdout=subprocess.DEVNULL)
        recommend = Process([tern, "recommend", "serve", "--listen", f"127.0.0.1:{port}",
                             "--graph-shard", f"127.0.0.1:{shards[0]}", "--graph-shard", f"127.0.0.1:{shards[1]}",
                             "--cache", f"127.0.0.1:{cache_port}", "--model", model, "--io-threads", "1",
                             "--cpu-workers", "1", "--admin", f"127.0.0.1:{admin}"], None, port, accepts)
        processes.append(recommend)
        # Viewers are accounts 0..N-1 (a graph-tool file's ids are its vertex indices).
        keys = "39796" if "pgp" in args.graph else "36692"
        common = ["--protocol", "recommend", "-s", f"127.0.0.1:{port}", "--keys", keys, "--key-dist", "zipf:0.9",
                  "--recommend-wire", "thrift-binary", "--warmup", "2", "--duration", str(args.seconds)]
        rows = []
        for call in args.calls.split(","):
            call_args = common + ["--recommend-call", call]
            peak, _ = tern_load(call_args + ["--connections", str(args.connections)], args.seconds + 60)
            peak_rate = peak["requests_per_s"]
            print(f"{call}: peak {peak_rate:,.0f} answers/s (closed loop, {args.connections} connections, "
                  f"p99 {peak['latency_us']['p99'] / 1000:.1f} ms)", flush=True)
            rate = round(peak_rate * args.load_share)
            names = ["recommend", "graph 0/2", "graph 1/2", "cache"]
            pids = [recommend.pid, processes[1].pid, processes[2].pid, cache.pid]
            cpu_before = [cpu_seconds(p) for p in pids]
            switches_before = [context_switches(p) for p in pids]
            scrape_before = metrics(admin)
            report, load_cpu = tern_load(call_args + ["--connections", str(args.connections), "--rate", str(rate)],
                                  args.seconds + 60)
            scrape_after = metrics(admin)
            cpu_after = [cpu_seconds(p) for p in pids]
            switches_after = [context_switches(p) for p in pids]
            answered = report["requests"]
            per_request = {n: (sum(a) - sum(b)) / answered * 1e6 for n, a, b in zip(names, cpu_after, cpu_before)}
            split = {n: f"{(a[0] - b[0]) / answered * 1e6:.0f}+{(a[1] - b[1]) / answered * 1e6:.0f}"
                     for n, a, b in zip(names, cpu_after, cpu_before)}
            switches = {n: round((a - b) / answered, 1) for n, a, b in zip(names, switches_after, switches_before)}
            # tern load's CPU covers its 2 s warm-up too, at the same rate.
            load_us = load_cpu * args.seconds / (args.seconds + 2) / answered * 1e6
            stages = stage_means(scrape_before, scrape_after, "tern_recommend_stage_ns", "stage",
                                 ["fanout", "features", "ranking", "total"])
            ranking_cpu = stage_means(scrape_before, scrape_after, "tern_recommend_ranking_cpu_ns", "part",
                                      ["rows", "scoring", "blend"])
            ranked = (scrape_after.get("tern_recommend_candidates_sum", 0)
                      - scrape_before.get("tern_recommend_candidates_sum", 0))
            asked = (scrape_after.get("tern_recommend_candidates_count", 0)
                     - scrape_before.get("tern_recommend_candidates_count", 0))
            candidates = ranked / asked if asked else 0
            partial = report["outcomes"].get("recommended_partial", 0)
            print(f"{call}: {report['requests_per_s']:,.0f} answers/s offered {rate:,}/s, p50 "
                  f"{report['latency_us']['p50'] / 1000:.2f} ms, p99 {report['latency_us']['p99'] / 1000:.2f} ms, "
                  f"p99.9 {report['latency_us']['p999'] / 1000:.2f} ms, errors {report['errors']}, partial {partial}, "
                  f"candidates ranked per answer {candidates:.0f}; "
                  f"CPU µs per answer {per_request} (user+system {split}; tern load {load_us:.0f}), "
                  f"context switches per answer {switches}, stages µs {stages}, ranking CPU µs {ranking_cpu}",
                  flush=True)
            rows.append([call, peak_rate, rate, report["requests_per_s"], report["latency_us"]["p50"] / 1000,
                         report["latency_us"]["p99"] / 1000, report["latency_us"]["p999"] / 1000, report["errors"],
                         partial, round(candidates), per_request["recommend"], per_request["graph 0/2"] + per_request["graph 1/2"],
                         per_request["cache"], ranking_cpu["rows"], ranking_cpu["scoring"], ranking_cpu["blend"],
                         stages["fanout"], stages["features"]])
        print(table(["call", "peak/s", "offered/s", "answered/s", "p50 ms", "p99 ms", "p99.9 ms", "errors",
                     "partial", "candidates", "recommend CPU µs", "graph CPU µs", "cache CPU µs", "rows CPU µs",
                     "scoring CPU µs", "blend CPU µs", "fan-out wall µs", "features wall µs"], rows))
    finally:
        for p in reversed(processes):
            p.stop()


if __name__ == "__main__":
    main()
