#!/usr/bin/env python3
"""Bursts of connects and closes against tern cache and memcached side by side (issue 16's experiment).

Per server (one worker thread, `-t 1`, so the probe shares the thread that takes the new connections):
a probe client sends `version` every millisecond from its own process while the main one opens
`--count` connections, `--burst` at a time with `--pause-ms` between bursts, holds them a second, then
closes them all at once. The probe's worst and 99th-percentile wait are reported for each phase.

    python3 bench/connect_burst.py --tern target/release/tern --rounds 5

Prints one line per run, then a Markdown table of medians.
"""

import argparse
import multiprocessing
import resource
import socket
import time

from common import Server, median, table


PHASES = ["idle", "connect", "held", "close", "stop"]


def probe(port, phase, results):
    """Runs in its own process (no GIL shared with the connecting side): sends `version` every
    millisecond and sends back the waits of each phase."""
    conn = socket.create_connection(("127.0.0.1", port))
    conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    waits = {}
    while PHASES[phase.value] != "stop":
        now = PHASES[phase.value]
        t = time.perf_counter()
        conn.sendall(b"version\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            got += conn.recv(100)
        waits.setdefault(now, []).append(time.perf_counter() - t)
        time.sleep(0.001)
    results.put(waits)


def p99(xs):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * 0.99))]


def run(template, count, burst, pause):
    with Server(template, None) as server:
        phase = multiprocessing.Value("i", PHASES.index("idle"))
        results = multiprocessing.Queue()
        prober = multiprocessing.Process(target=probe, args=(server.port, phase, results))
        prober.start()
        time.sleep(0.2)
        phase.value = PHASES.index("connect")
        held = []
        while len(held) < count:
            for _ in range(min(burst, count - len(held))):
                held.append(socket.create_connection(("127.0.0.1", server.port)))
            time.sleep(pause)
        phase.value = PHASES.index("held")
        time.sleep(1.0)
        phase.value = PHASES.index("close")
        for s in held:
            s.close()
        time.sleep(0.5)
        phase.value = PHASES.index("stop")
        waits = results.get(timeout=30)
        prober.join()
        out = {}
        for name in ("connect", "close"):
            got = waits.get(name, [0.0])
            out[name + "_worst"] = max(got) * 1000
            out[name + "_p99"] = p99(got) * 1000
        return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default="target/release/tern")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--count", type=int, default=3000)
    ap.add_argument("--burst", type=int, default=100)
    ap.add_argument("--pause-ms", type=float, default=50)
    ap.add_argument("--extra", default="", help="more flags for tern cache")
    args = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, args.count + 1000)), hard))
    flags = "-l 127.0.0.1 -p {port} -U 0 -m 1024 -t 1 -c 20000"
    servers = {
        "memcached": f"memcached -u root {flags}",
        "tern cache": f"{args.tern} cache {flags} {args.extra}",
    }
    results = {name: [] for name in servers}
    for r in range(args.rounds):
        for name, template in servers.items():
            res = run(template, args.count, args.burst, args.pause_ms / 1000)
            results[name].append(res)
            print(
                f"{name} round {r + 1}: connects: worst {res['connect_worst']:.2f} ms, p99 {res['connect_p99']:.2f} ms; "
                f"close at once: worst {res['close_worst']:.2f} ms, p99 {res['close_p99']:.2f} ms",
                flush=True,
            )
    rows = []
    for metric, key in [
        ("probe worst while connecting (ms)", "connect_worst"),
        ("probe p99 while connecting (ms)", "connect_p99"),
        ("probe worst while all close (ms)", "close_worst"),
        ("probe p99 while all close (ms)", "close_p99"),
    ]:
        rows.append([metric] + [median([x[key] for x in results[name]]) for name in servers])
    print()
    print(table(["metric (medians)"] + list(servers), rows))


if __name__ == "__main__":
    main()
