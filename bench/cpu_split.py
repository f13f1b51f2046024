#!/usr/bin/env python3
"""Where a server's CPU goes per request: user vs kernel microseconds per operation, for memcached and tern cache
under the same memcaslap load (both `-t 1` on CPU 0, `memcaslap -T 1 -c 50` on CPU 1), alternating, and the
requests served per context switch of the server's threads. Extra arguments go to memcaslap (default `-X 100`).
With `--uring-floor PATH` (the `uring_floor` example of tern-bench), the same load also drives that minimal
io_uring get/set server: the least CPU per request a server spends with io_uring on this kernel.

    python3 bench/cpu_split.py target/release/tern [--uring-floor PATH] [memcaslap args...]
"""

import glob
import re
import subprocess
import sys
import time

from common import free_port

CPU_TICK = 100.0


def cpu_and_switches(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    switches = 0
    for status in glob.glob(f"/proc/{pid}/task/*/status"):
        with open(status) as f:
            switches += sum(int(l.split()[1]) for l in f if "ctxt_switches" in l)
    return int(fields[11]) / CPU_TICK, int(fields[12]) / CPU_TICK, switches


def run(cmd, extra, seconds=5):
    port = free_port()
    server = subprocess.Popen(["taskset", "-c", "0"] + cmd.format(port=port).split(),
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        time.sleep(0.5)
        u0, s0, c0 = cpu_and_switches(server.pid)
        out = subprocess.run(["taskset", "-c", "1", "memcaslap", "-s", f"127.0.0.1:{port}", "-T", "1", "-c", "50",
                              "-t", f"{seconds}s"] + extra, capture_output=True, text=True).stdout
        u1, s1, c1 = cpu_and_switches(server.pid)
    finally:
        server.kill()
        server.wait()
    m = re.search(r"Run time: ([0-9.]+)s Ops: (\d+)", out)
    secs, ops = float(m.group(1)), int(m.group(2))
    return ops / secs, (u1 - u0) / ops * 1e6, (s1 - s0) / ops * 1e6, ops / max(1, c1 - c0)


def main():
    args = sys.argv[1:]
    tern = args.pop(0) if args else "target/release/tern"
    servers = [("memcached", "memcached -u root -l 127.0.0.1 -p {port} -t 1"),
               ("tern cache", tern + " cache -p {port} -t 1")]
    if args[:1] == ["--uring-floor"] and len(args) >= 2:
        servers.append(("io_uring floor", args[1] + " {port}"))
        args = args[2:]
    extra = args or ["-X", "100"]
    print("| server | ops/s | user µs/op | kernel µs/op | total µs/op | requests per context switch |")
    print("|---|---:|---:|---:|---:|---:|")
    for _ in range(2):
        for name, cmd in servers:
            ops, user, kernel, per_switch = run(cmd, extra)
            print(f"| {name} | {ops:,.0f} | {user:.2f} | {kernel:.2f} | {user + kernel:.2f} | {per_switch:,.0f} |")


if __name__ == "__main__":
    main()
