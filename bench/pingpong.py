#!/usr/bin/env python3
"""Round-trip latency of `get` on one connection (one request at a time): p50/p90/p99.

    python3 bench/pingpong.py PORT [REQUESTS]

Start the server first (e.g. pinned: `taskset -c 0 target/release/tern cache -p 23701 -t 1`) and pin this
client to the other CPU (`taskset -c 1 python3 bench/pingpong.py 23701 20000`).
"""

import socket
import sys
import time


def main():
    port = int(sys.argv[1])
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"set k 0 0 100\r\n" + b"x" * 100 + b"\r\n")
    s.recv(100)
    lat = []
    for _ in range(n):
        t = time.perf_counter_ns()
        s.sendall(b"get k\r\n")
        got = b""
        while not got.endswith(b"END\r\n"):
            chunk = s.recv(4096)
            if not chunk:
                sys.exit("server closed the connection")
            got += chunk
        lat.append(time.perf_counter_ns() - t)
    lat.sort()
    print(f"p50 {lat[n // 2] / 1000:.1f}us p90 {lat[n * 9 // 10] / 1000:.1f}us p99 {lat[n * 99 // 100] / 1000:.1f}us")


if __name__ == "__main__":
    main()
