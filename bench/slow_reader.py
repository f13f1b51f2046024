#!/usr/bin/env python3
"""Clients that never read, against tern cache and memcached side by side (issue 16's experiment).

Per server: store 61 values of 1 MB, then 40 connections each send one `get` of all 61 keys and read
nothing. For a few seconds another client sends `version` every 5 ms; the server's RSS is sampled
throughout. Then one of the silent clients reads its reply, which must be all 61 values and END.

    python3 bench/slow_reader.py --tern target/release/tern --rounds 3

Prints one line per run, then a Markdown table of medians.
"""

import argparse
import socket
import time

from common import Server, median, table

VALUE = b"v" * 1_000_000
KEYS = 61
SILENT = 40


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS")


def run(template, seconds):
    with Server(template, None) as server:
        conn = socket.create_connection(("127.0.0.1", server.port))
        for i in range(KEYS):
            conn.sendall(b"set key%d 0 0 %d\r\n" % (i, len(VALUE)) + VALUE + b"\r\n")
            assert conn.recv(100).startswith(b"STORED"), i
        base = rss_mb(server.pid)
        request = b"get " + b" ".join(b"key%d" % i for i in range(KEYS)) + b"\r\n"
        silent = []
        for _ in range(SILENT):
            s = socket.create_connection(("127.0.0.1", server.port))
            s.sendall(request)
            silent.append(s)
        worst, peak = 0.0, base
        end = time.time() + seconds
        while time.time() < end:
            t = time.perf_counter()
            conn.sendall(b"version\r\n")
            assert conn.recv(100).startswith(b"VERSION")
            worst = max(worst, time.perf_counter() - t)
            peak = max(peak, rss_mb(server.pid))
            time.sleep(0.005)
        reader = silent[0]
        reader.settimeout(20)
        got = bytearray()
        while not got.endswith(b"END\r\n"):
            chunk = reader.recv(1 << 20)
            if not chunk:
                break
            got += chunk
        complete = got.count(b"VALUE ") == KEYS and got.endswith(b"END\r\n") and got.count(VALUE) == KEYS
        for s in silent:
            s.close()
        return {"base": base, "peak": peak, "worst_ms": worst * 1000, "complete": complete}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default="target/release/tern")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=3)
    args = ap.parse_args()
    servers = {
        "memcached": "memcached -u root -l 127.0.0.1 -p {port} -m 1024 -t 2",
        "tern cache": f"{args.tern} cache -l 127.0.0.1 -p {{port}} -m 1024 -t 2",
    }
    results = {name: [] for name in servers}
    for r in range(args.rounds):
        for name, template in servers.items():
            res = run(template, args.seconds)
            results[name].append(res)
            print(
                f"{name} round {r + 1}: RSS {res['base']:.0f} MB after the sets, peak {res['peak']:.0f} MB; "
                f"other client's worst wait {res['worst_ms']:.2f} ms; silent client's reply complete: {res['complete']}",
                flush=True,
            )
    rows = []
    for metric, key in [("peak RSS (MB)", "peak"), ("other client's worst wait (ms)", "worst_ms")]:
        m = median([x[key] for x in results["memcached"]])
        t = median([x[key] for x in results["tern cache"]])
        rows.append([metric, m, t])
    print()
    print(table(["metric (medians)", "memcached", "tern cache"], rows))
    ok = all(x["complete"] for xs in results.values() for x in xs)
    print(f"every silent client's reply complete: {ok}")


if __name__ == "__main__":
    main()
