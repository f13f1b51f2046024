#!/usr/bin/env python3
"""What a TLS connection costs, in tern cache and in memcached (issue 13): idle memory and CPU per request.

Four servers, each started fresh per round and pinned to one CPU: memcached and tern cache, each plain and
with `-Z` (the same certificate, made here by `openssl`). Per round and server:
- idle: N connections opened (TLS ones complete their handshake and one `version` exchange, so each has
  been used), then the server's RSS growth over its RSS before, divided by N;
- per request: `tern load` (pinned to the other CPU; `--tls` for the TLS servers) closed loop, 50
  connections, 90% get / 10% set of 100-byte values over preloaded keys; requests per second, per server
  CPU-second, and the p99.

Prints a Markdown table of medians with the TLS/plain ratio per server and the tern/memcached ratio per
mode.

    python3 bench/tls_cost.py --tern target/release/tern --rounds 3 --seconds 5 --idle 2000
"""

import argparse
import os
import resource
import socket
import ssl
import subprocess
import tempfile
import time

from common import Process, accepts, free_port, median, table, tern_load


def certificates(directory):
    """A self-signed certificate for 127.0.0.1 and its key (the load generator does not check the chain)."""
    cert, key = os.path.join(directory, "crt.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key, "-out", cert,
         "-days", "1", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1"],
        check=True, capture_output=True,
    )
    return cert, key


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def idle_cost(server, n, tls):
    """Bytes of RSS per idle connection: N connections, each used once, held."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    time.sleep(0.5)
    before = rss_kb(server.pid)
    conns = []
    for _ in range(n):
        sock = socket.create_connection(("127.0.0.1", server.port), timeout=10)
        if tls:
            sock = context.wrap_socket(sock, server_hostname="127.0.0.1")
        sock.sendall(b"version\r\n")
        if not sock.recv(100).startswith(b"VERSION"):
            raise RuntimeError("no VERSION")
        conns.append(sock)
    time.sleep(1.0)
    after = rss_kb(server.pid)
    for c in conns:
        c.close()
    return (after - before) * 1024 / n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default="target/release/tern")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=5)
    ap.add_argument("--idle", type=int, default=2000, help="idle connections per measure")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    a = ap.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, min(hard, a.idle + 1000)), hard))
    work = tempfile.mkdtemp(prefix="tern-tls-cost-")
    cert, key = certificates(work)
    tls = f"-Z -o ssl_chain_cert={cert},ssl_key={key}"
    limit = f"-c {a.idle + 100} -t 1 -m 256"
    servers = {
        "memcached": f"memcached -u root -l 127.0.0.1 -p {{port}} {limit}",
        "memcached TLS": f"memcached -u root -l 127.0.0.1 -p {{port}} {limit} {tls}",
        "tern cache": f"{a.tern} cache -l 127.0.0.1 -p {{port}} {limit}",
        "tern cache TLS": f"{a.tern} cache -l 127.0.0.1 -p {{port}} {limit} {tls}",
    }
    load = ["--connections", "50", "--mix", "get=9,set=1", "--value-size", "100", "--keys", "10000",
            "--preload", "--duration", str(a.seconds), "--warmup", "1"]
    runs = {name: [] for name in servers}
    for r in range(a.rounds):
        for name, template in servers.items():
            is_tls = name.endswith("TLS")
            port = free_port()
            argv = template.format(port=port).split()
            with Process(argv, a.server_cpu, port, accepts) as server:
                idle = idle_cost(server, a.idle, is_tls)
            with Process(argv, a.server_cpu, port, accepts) as server:
                args = ["-s", f"127.0.0.1:{port}", "--server-pid", str(server.pid)] + load
                if is_tls:
                    args.append("--tls")
                report, _ = tern_load(args, timeout=a.seconds * 4 + 60, cpu=a.client_cpu)
            if report["errors"]:
                raise RuntimeError(f"{name}: errors {report['outcomes']}")
            runs[name].append((idle, report["requests_per_s"], report["requests_per_server_cpu_s"],
                               report["latency_us"]["p99"]))
            print(f"round {r + 1} {name}: idle {idle:,.0f} B/conn, {report['requests_per_s']:,.0f} req/s, "
                  f"{report['requests_per_server_cpu_s']:,.0f} req per server CPU-s, "
                  f"p99 {report['latency_us']['p99']:,.0f} us", flush=True)
    med = {name: [median([run[i] for run in rs]) for i in range(4)] for name, rs in runs.items()}
    labels = ["idle connection (bytes of RSS)", "requests/s", "requests per server CPU-s", "p99 (us)"]
    rows = []
    for i, label in enumerate(labels):
        m, mt, t, tt = (med[n][i] for n in servers)
        rows.append([label, m, mt, mt / m, t, tt, tt / t, tt / mt])
    print(f"\n{a.rounds} rounds, medians; servers pinned to CPU {a.server_cpu}, tern load to CPU "
          f"{a.client_cpu}; idle: {a.idle} connections; load: tern load {' '.join(load)}\n")
    print(table(["measure", "memcached", "memcached TLS", "TLS / plain", "tern cache", "tern cache TLS",
                 "TLS / plain", "tern TLS / memcached TLS"], rows))


if __name__ == "__main__":
    main()
