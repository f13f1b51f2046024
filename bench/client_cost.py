#!/usr/bin/env python3
"""How cheap is `tern load`? It and memcaslap drive the same memcached in turn (A B A B ...).

Two comparisons, each printed as a Markdown table of medians:
  * cost: both closed loop with the same connections, 90% get / 10% set, same key and value
    sizes; requests per client CPU-second (whole process, from getrusage of the child).
  * agreement: memcaslap with one connection (one request in flight) stays well below
    saturation; `tern load` then runs open loop (Poisson arrivals over several connections) at
    the rate memcaslap reached. Throughput and latency are compared (memcaslap reports mean
    and geometric-mean latency, not percentiles).

memcached is pinned to CPU 0 and the clients to CPU 1 (taskset), as on a 2-core machine.

    python3 bench/client_cost.py --rounds 3 --seconds 10
"""

import argparse
import re

from common import Server, median, pinned, run_measured, table, tern_load

MEMCACHED = "memcached -u nobody -l 127.0.0.1 -p {port} -t 1 -m 1024"


def memcaslap(port, conns, seconds, value, cpu):
    argv = ["memcaslap", "-s", f"127.0.0.1:{port}", "-T", "1", "-c", str(conns), "-X", str(value)]
    argv += ["-t", f"{seconds}s", "-S", f"{seconds}s"]
    out, cpu_s = run_measured(pinned(cpu, argv), timeout=seconds * 3 + 30)
    ops = int(re.search(r"Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", out).group(1))
    tps = int(re.search(r"Run time: [\d.]+s Ops: (\d+) TPS: (\d+)", out).group(2))
    total = out[out.index("Total Statistics ("):]
    avg = float(re.search(r"Avg:\s+([\d.]+)", total).group(1))
    geo = float(re.search(r"Geo:\s+([\d.]+)", total).group(1))
    return {"ops": ops, "tps": tps, "cpu": cpu_s, "per_cpu": ops / cpu_s, "kernel_us": cpu_s.kernel / ops * 1e6,
            "avg_us": avg, "geo_us": geo}


def tern(port, conns, seconds, value, key, cpu, rate=None):
    args = ["-s", f"127.0.0.1:{port}", "-c", str(conns), "-d", str(seconds), "--warmup", "1"]
    args += ["--value-size", str(value), "--key-size", str(key), "--mix", "get=9,set=1", "--preload", "--keys", "10000"]
    if rate:
        args += ["--rate", str(rate), "--arrival", "poisson"]
    return tern_load(args, timeout=seconds * 3 + 60, cpu=cpu)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--connections", type=int, default=50)
    ap.add_argument("--agree-connections", type=int, default=1, help="memcaslap's, for the agreement run")
    ap.add_argument("--agree-tern-connections", type=int, default=8)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--key-size", type=int, default=64, help="memcaslap's keys are 64 bytes")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args()

    cost = {"memcaslap": [], "tern": []}
    agree = []
    with Server(MEMCACHED, a.server_cpu) as server:
        for _ in range(a.rounds):
            m = memcaslap(server.port, a.connections, a.seconds, a.value_size, a.client_cpu)
            cost["memcaslap"].append((m["tps"], m["per_cpu"], m["kernel_us"]))
            report, cpu_s = tern(server.port, a.connections, a.seconds, a.value_size, a.key_size, a.client_cpu)
            # Whole-process CPU against every reply (warm-up and preload included), like memcaslap's.
            replies = sum(report["timeline_per_s"]) + report["config"]["key_count"]
            cost["tern"].append((report["requests_per_s"], replies / cpu_s, report["requests_per_client_cpu_s"],
                                 cpu_s.kernel / replies * 1e6))

            m = memcaslap(server.port, a.agree_connections, a.seconds, a.value_size, a.client_cpu)
            report, _ = tern(server.port, a.agree_tern_connections, a.seconds, a.value_size, a.key_size, a.client_cpu, rate=m["tps"])
            agree.append((m, report))

    mc_tps = median([t for t, _, _ in cost["memcaslap"]])
    mc_cpu = median([c for _, c, _ in cost["memcaslap"]])
    mc_kernel = median([k for _, _, k in cost["memcaslap"]])
    t_tps = median([t for t, _, _, _ in cost["tern"]])
    t_cpu = median([c for _, c, _, _ in cost["tern"]])
    t_win = median([w for _, _, w, _ in cost["tern"]])
    t_kernel = median([k for _, _, _, k in cost["tern"]])
    print(f"## Client cost: closed loop, {a.connections} connections, 90/10 get/set, {a.value_size}-byte values, "
          f"{a.key_size}-byte keys, {a.seconds} s x {a.rounds} rounds (medians)\n")
    print(table(
        ["client", "requests/s", "requests per client CPU-s", "vs memcaslap", "kernel µs per request"],
        [
            ["memcaslap", float(mc_tps), mc_cpu, 1.0, mc_kernel],
            ["tern load (whole process)", t_tps, t_cpu, t_cpu / mc_cpu, t_kernel],
            ["tern load (load threads, measured window)", t_tps, t_win, t_win / mc_cpu, None],
        ],
    ))
    # The kernel's part alone caps what any client making the same system calls can reach.
    print(f"\nmemcaslap's whole cost per request / tern load's kernel part alone = {1e6 / mc_cpu / t_kernel:.2f}x: "
          "the most any client with one send and one receive per request could reach")
    print(f"\n## Agreement: memcaslap closed loop on {a.agree_connections} connection(s); tern load open loop "
          f"(Poisson) on {a.agree_tern_connections} at memcaslap's rate (medians)\n")
    rows = []
    for name, pick in [
        ("throughput (req/s)", lambda m, r: (m["tps"], r["requests_per_s"])),
        ("mean latency (us)", lambda m, r: (m["avg_us"], r["latency_us"]["mean"])),
        ("memcaslap geo-mean vs tern p50 (us)", lambda m, r: (m["geo_us"], r["latency_us"]["p50"])),
        ("memcaslap geo-mean vs tern p50 from send (us)", lambda m, r: (m["geo_us"], r["service_latency_us"]["p50"])),
    ]:
        pairs = [pick(m, r) for m, r in agree]
        x, y = median([p[0] for p in pairs]), median([p[1] for p in pairs])
        rows.append([name, float(x), float(y), y / x if x else None])
    print(table(["metric", "memcaslap", "tern load", "tern / memcaslap"], rows))


if __name__ == "__main__":
    main()
