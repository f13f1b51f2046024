#!/usr/bin/env python3
"""tern cache vs memcached with libmemcached's memcaslap as the client (issue 3's comparison).

For each workload, alternates A (memcached) and B (tern cache), each started fresh and pinned to one CPU,
with memcaslap pinned to the other; measures operations (keys for multi-gets) per second and per server
CPU-second (utime+stime of the server process from /proc over the memcaslap run), and the two split into
user and kernel microseconds per operation. Prints a Markdown table of medians and B/A ratios.

    python3 bench/cache_vs_memcached.py --tern target/release/tern --rounds 3 --seconds 10

memcaslap reports no latency percentiles; p99 comes from `bench/compare_servers.py` (tern load).
"""

import argparse
import re
import subprocess

from common import Server, median, pinned, table

WORKLOADS = {
    "single-key, 90% get / 10% set": ["-X", "100"],
    "16-key multi-get": ["-X", "100", "-d", "16"],
}


def cpu_seconds(pid):
    """(user, kernel) CPU seconds the process has used."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) / 100.0, int(fields[12]) / 100.0


def memcaslap(port, seconds, extra, cpu):
    argv = pinned(cpu, ["memcaslap", "-s", f"127.0.0.1:{port}", "-T", "1", "-c", "50", "-t", f"{seconds}s"] + extra)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds * 3 + 30)
    m = re.search(r"Run time: ([0-9.]+)s Ops: (\d+) TPS: (\d+)", out.stdout)
    if not m:
        raise RuntimeError(f"unexpected memcaslap output:\n{out.stdout}\n{out.stderr}")
    return float(m.group(1)), int(m.group(2))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default="target/release/tern", help="the tern binary")
    ap.add_argument("--threads", type=int, default=1, help="-t of both servers")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=int, default=10)
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--a-tern", help="compare with this other tern binary as A instead of memcached (A/B of two builds)")
    a = ap.parse_args()
    servers = {
        "A": f"{a.a_tern} cache -p {{port}} -t {a.threads}" if a.a_tern
        else f"memcached -u root -l 127.0.0.1 -p {{port}} -t {a.threads}",
        "B": f"{a.tern} cache -p {{port}} -t {a.threads}",
    }
    rows = []
    for workload, extra in WORKLOADS.items():
        runs = {"A": [], "B": []}
        for r in range(a.rounds):
            for name in ("A", "B"):
                with Server(servers[name], a.server_cpu) as server:
                    user0, kernel0 = cpu_seconds(server.pid)
                    secs, ops = memcaslap(server.port, a.seconds, extra, a.client_cpu)
                    user1, kernel1 = cpu_seconds(server.pid)
                user, kernel = user1 - user0, kernel1 - kernel0
                used = user + kernel
                runs[name].append((ops / secs, ops / used if used > 0 else None, user / ops * 1e6, kernel / ops * 1e6))
                print(f"{workload} round {r + 1} {name}: {ops / secs:,.0f} ops/s, {ops / max(used, 1e-9):,.0f} ops "
                      f"per server CPU-s, user {user / ops * 1e6:.3f} + kernel {kernel / ops * 1e6:.3f} us per op")
        for i, label in enumerate(["ops/s", "ops per server CPU-s", "server user µs per op", "server kernel µs per op"]):
            ma = median([x[i] for x in runs["A"]])
            mb = median([x[i] for x in runs["B"]])
            rows.append([f"{workload}: {label}", ma, mb, mb / ma if ma else None])
    print(f"\nA: `{servers['A']}`  \nB: `{servers['B']}`  \nclient: memcaslap -T 1 -c 50, {a.seconds} s, "
          f"{a.rounds} rounds A B A B, medians\n")
    names = ["A (tern)", "B (tern)", "B / A"] if a.a_tern else ["memcached", "tern cache", "tern / memcached"]
    print(table(["workload: metric"] + names, rows))


if __name__ == "__main__":
    main()
