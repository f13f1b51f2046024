#!/usr/bin/env python3
"""Side-by-side benchmark of two servers, A B A B ..., with `tern load` as the client.

Each server is given as a command template with {port}; it is started fresh for every run,
pinned to one CPU, with `tern load` pinned to the other. Per run: throughput, latency
percentiles, and requests per server CPU-second (from /proc/<pid>/stat utime+stime, measured by
tern load over its measured window via --server-pid). Prints a Markdown table of medians and
B/A ratios, ready for docs/benchmarks.md.

    python3 bench/compare_servers.py \\
        --a "memcached -u nobody -l 127.0.0.1 -p {port} -t 1" \\
        --b "memcached -u nobody -l 127.0.0.1 -p {port} -t 1" \\
        --rounds 3 -- --connections 50 --duration 10 --preload

Everything after `--` is passed to `tern load` (default: closed loop, its default workload).
"""

import argparse
import sys

from common import Server, median, table, tern_load

METRICS = [
    ("requests/s", lambda r: r["requests_per_s"]),
    ("p50 (us)", lambda r: r["latency_us"]["p50"]),
    ("p99 (us)", lambda r: r["latency_us"]["p99"]),
    ("p99.9 (us)", lambda r: r["latency_us"]["p999"]),
    ("requests per server CPU-s", lambda r: r["requests_per_server_cpu_s"]),
    ("keys per server CPU-s", lambda r: r.get("keys_per_server_cpu_s")),
    ("server CPU (s)", lambda r: r["server_cpu_s"]),
    ("server user µs per key", lambda r: per_key(r, "server_user_s")),
    ("server kernel µs per key", lambda r: per_key(r, "server_system_s")),
    ("requests per client CPU-s", lambda r: r["requests_per_client_cpu_s"]),
    ("errors", lambda r: float(r["errors"])),
]


def per_key(report, field):
    """Microseconds of the server's CPU time of one kind (user or kernel) per key served."""
    seconds = report.get(field)
    return seconds / report["keys"] * 1e6 if seconds is not None and report.get("keys") else None


def main():
    argv = sys.argv[1:]
    load_args = []
    if "--" in argv:
        i = argv.index("--")
        argv, load_args = argv[:i], argv[i + 1 :]
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="server A command, with {port}")
    ap.add_argument("--b", required=True, help="server B command, with {port}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args(argv)

    runs = {"A": [], "B": []}
    for round_index in range(a.rounds):
        for name, template in (("A", a.a), ("B", a.b)):
            with Server(template, a.server_cpu) as server:
                args = ["-s", f"127.0.0.1:{server.port}", "--server-pid", str(server.pid)] + load_args
                report, _ = tern_load(args, timeout=3600, cpu=a.client_cpu)
            runs[name].append(report)
            print(
                f"round {round_index + 1} {name}: {report['requests_per_s']:,.0f} req/s, "
                f"p99 {report['latency_us']['p99']:,.0f} us, errors {report['errors']}",
                file=sys.stderr,
            )
    rows = []
    for label, pick in METRICS:
        ma, mb = median([pick(r) for r in runs["A"]]), median([pick(r) for r in runs["B"]])
        rows.append([label, ma, mb, (mb / ma) if ma else None])
    print(f"A: `{a.a}`  \nB: `{a.b}`  \nload: `tern load {' '.join(load_args)}`, {a.rounds} rounds A B A B, medians\n")
    print(table(["metric", "A", "B", "B / A"], rows))


if __name__ == "__main__":
    main()
