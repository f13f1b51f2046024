#!/usr/bin/env python3
"""tern's Thrift front against Apache Thrift's C++ non-blocking server (issue 12): requests per server CPU-second.

Both serve idl/recommend.thrift (framed transport, binary or compact protocol) with the same trivial handler
answered on their I/O threads: `tern bench thrift-front` (crates/tern-bench/src/thrift_front.rs) and
bench/thrift_peer/server.cpp, which this script builds with g++ against the code `thrift --gen cpp` generates
(into target/thrift-peer/) and Debian's libthrift-dev (TNonblockingServer, libthriftnb).

Before measuring, Apache Thrift's Python client (Debian's python3-thrift, with code generated from the IDL)
calls both servers and checks that they answer the same. Then, for --rounds rounds, tern then the peer, each
started fresh, pinned to --server-cpu with --io-threads I/O threads, is driven by the same client: `tern load
--protocol recommend` in a closed loop of --connections connections for --seconds, pinned to --client-cpu.
Server CPU is user+system from /proc/<pid>/stat over the measured window (tern load --server-pid). Every
answer must be a valid full recommendation (tern load checks them); any other outcome fails the run.

    python3 bench/thrift_front.py --rounds 5 --seconds 10

Prints one line per run, a Markdown table (per round, then medians) and one final line with the ratio of
medians of requests per server CPU-second (tern / peer; the goal is >= 2).
"""

import argparse
import os
import shutil
import subprocess
import sys

from common import REPO, Process, accepts, free_port, median, table, tern_load

TARGET = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
IDL = os.path.join(REPO, "idl", "recommend.thrift")
PEER_SOURCE = os.path.join(REPO, "bench", "thrift_peer", "server.cpp")
PEER_DIR = os.path.join(TARGET, "thrift-peer")
# Debian's Python, which has python3-thrift (a pyenv python3 first on the PATH may not).
DEBIAN_PYTHON = "/usr/bin/python3"
# The Debian packages the peer's build and the answer check need.
PACKAGES = ["g++", "pkg-config", "thrift-compiler", "libthrift-dev", "libevent-dev", "libboost-dev", "python3-thrift"]


def missing_packages():
    missing = []
    for package in PACKAGES:
        status = subprocess.run(["dpkg-query", "-W", "-f", "${Status}", package], capture_output=True, text=True)
        if status.stdout.strip() != "install ok installed":
            missing.append(package)
    return missing


def ensure_packages(install):
    """Installs the missing packages with --install; otherwise names the command and stops."""
    missing = missing_packages()
    if not missing:
        return
    command = ["apt-get", "install", "-y"] + missing
    if not install:
        sys.exit(f"missing Debian packages: {' '.join(missing)}\ninstall them with: {' '.join(command)}"
                 " (or run this script with --install)")
    if os.geteuid() != 0:
        command = ["sudo"] + command
    print(f"installing: {' '.join(command)}", flush=True)
    subprocess.run(command, check=True, env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"})


def build_peer():
    """Generates the C++ code of the IDL and builds the peer; answers the binary's path."""
    gen = os.path.join(PEER_DIR, "gen-cpp")
    shutil.rmtree(gen, ignore_errors=True)
    os.makedirs(gen)
    subprocess.run(["thrift", "--gen", "cpp", "-out", gen, IDL], check=True)
    binary = os.path.join(PEER_DIR, "server")
    # libthriftnb.so is not linked against libevent in Debian's package, so libevent is named too.
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "thrift-nb", "libevent"], check=True,
                           capture_output=True, text=True).stdout.split()
    subprocess.run(["g++", "-O2", "-std=c++17", "-Wall", "-I", gen, PEER_SOURCE,
                    os.path.join(gen, "Recommend.cpp"), os.path.join(gen, "recommend_types.cpp"),
                    "-o", binary] + flags, check=True)
    return binary


def generate_python():
    """Python modules of the IDL for the answer check; answers their directory."""
    gen = os.path.join(PEER_DIR, "gen-py")
    shutil.rmtree(gen, ignore_errors=True)
    os.makedirs(gen)
    subprocess.run(["thrift", "--gen", "py", "-out", gen, IDL], check=True)
    return gen


def same_answers(protocol, ports):
    """Run by Debian's Python with the generated modules importable: asks each server the same calls
    through Apache Thrift's Python client and exits non-zero unless they all answer alike."""
    from thrift.protocol import TBinaryProtocol, TCompactProtocol
    from thrift.transport import TSocket, TTransport
    from tern_recommend import Recommend
    from tern_recommend.ttypes import ChainingRequest, SuggestedUsersRequest

    calls = [
        ("suggested_users", SuggestedUsersRequest(viewer=42, n=20)),
        ("suggested_users", SuggestedUsersRequest(viewer=-3, n=1000)),
        ("chaining", ChainingRequest(viewer=42, profile=44, n=5)),
    ]
    protocol_class = TCompactProtocol.TCompactProtocol if protocol == "compact" else TBinaryProtocol.TBinaryProtocol
    answers = []
    for port in ports:
        transport = TTransport.TFramedTransport(TSocket.TSocket("127.0.0.1", int(port)))
        client = Recommend.Client(protocol_class(transport))
        transport.open()
        answers.append([getattr(client, name)(request) for name, request in calls])
        transport.close()
    for port, got in zip(ports[1:], answers[1:]):
        if got != answers[0]:
            sys.exit(f"the servers answer differently:\n  port {ports[0]}: {answers[0]}\n  port {port}: {got}")
    first = answers[0][2]
    print(f"same answers from both ({protocol}, {len(calls)} calls), e.g. chaining(42, 44, n=5): "
          f"{[(i.account, i.score) for i in first.items]}, model {first.model_version!r}", flush=True)


def check_answers(servers, protocol, python_path):
    ports = [str(s.port) for s in servers]
    subprocess.run([DEBIAN_PYTHON, os.path.abspath(__file__), "--same-answers", protocol] + ports, check=True,
                   env={**os.environ, "PYTHONPATH": python_path})


def measure(server, args):
    """One run against a started server; fails on any answer that is not a full recommendation."""
    load = ["-s", f"127.0.0.1:{server.port}", "--server-pid", str(server.pid), "--protocol", "recommend",
            "--recommend-wire", f"thrift-{args.protocol}", "--recommend-call", args.call,
            "--connections", str(args.connections), "--warmup", str(args.warmup), "--duration", str(args.seconds)]
    report, _ = tern_load(load, timeout=args.warmup + args.seconds + 60, cpu=args.client_cpu)
    wrong = {k: v for k, v in report["outcomes"].items() if v and k != "recommended"}
    if report["errors"] or wrong or not report["requests"]:
        raise RuntimeError(f"bad answers from {server.name}: errors {report['errors']}, outcomes {wrong}, "
                           f"{report['requests']} requests, connection error: {report.get('connection_error')}")
    return report


def main():
    if sys.argv[1:2] == ["--same-answers"]:
        return same_answers(sys.argv[2], sys.argv[3:])
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default=os.path.join(TARGET, "release", "tern"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--warmup", type=float, default=2)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--io-threads", type=int, default=1)
    ap.add_argument("--protocol", choices=["binary", "compact"], default="binary")
    ap.add_argument("--call", choices=["suggested-users", "chaining"], default="suggested-users")
    ap.add_argument("--server-cpu", type=int, default=0)
    ap.add_argument("--client-cpu", type=int, default=1)
    ap.add_argument("--install", action="store_true", help="apt-get install the missing Debian packages")
    args = ap.parse_args()
    if not os.path.exists(args.tern):
        sys.exit(f"{args.tern} is missing: cargo build --release -p tern")
    ensure_packages(args.install)
    peer = build_peer()
    threads = str(args.io_threads)
    commands = {
        "tern": lambda port: [args.tern, "bench", "thrift-front", "--listen", f"127.0.0.1:{port}",
                              "--io-threads", threads],
        "peer": lambda port: [peer, "--listen", f"127.0.0.1:{port}", "--io-threads", threads,
                              "--protocol", args.protocol],
    }

    def start(name):
        port = free_port()
        server = Process(commands[name](port), args.server_cpu, port, accepts)
        server.name = name
        return server

    with start("tern") as tern, start("peer") as thrift:
        check_answers([tern, thrift], args.protocol, generate_python())

    runs = {"tern": [], "peer": []}
    for round_index in range(args.rounds):
        for name in runs:
            with start(name) as server:
                report = measure(server, args)
            runs[name].append(report)
            print(f"round {round_index + 1} {name}: {report['requests_per_s']:,.0f} req/s, "
                  f"{report['requests_per_server_cpu_s']:,.0f} req per server CPU-s, "
                  f"p99 {report['latency_us']['p99']:,.0f} us", file=sys.stderr, flush=True)

    def figures(report):
        busy = report["server_cpu_s"] / report["measured_s"]
        return [report["requests_per_s"], report["latency_us"]["p99"], busy, report["requests_per_server_cpu_s"]]

    rows = []
    for i, (t, p) in enumerate(zip(runs["tern"], runs["peer"])):
        ratio = t["requests_per_server_cpu_s"] / p["requests_per_server_cpu_s"]
        rows.append([str(i + 1)] + figures(t) + figures(p) + [ratio])
    medians = [median([row[c] for row in rows]) for c in range(1, len(rows[0]))]
    ratio_of_medians = medians[3] / medians[7]
    rows.append(["median (ratio of medians)"] + medians[:-1] + [ratio_of_medians])
    print(f"tern: `tern bench thrift-front --io-threads {threads}`  \n"
          f"peer: Apache Thrift 0.17 C++ TNonblockingServer, {threads} I/O thread(s), {args.protocol} protocol  \n"
          f"load: `tern load --protocol recommend --recommend-wire thrift-{args.protocol} --recommend-call "
          f"{args.call} --connections {args.connections} --duration {args.seconds:g}`, servers on CPU "
          f"{args.server_cpu}, client on CPU {args.client_cpu}, {args.rounds} rounds tern, peer, ...\n")
    side = ["req/s", "p99 µs", "CPU busy", "req per CPU-s"]
    print(table(["round"] + [f"tern {h}" for h in side] + [f"peer {h}" for h in side] + ["tern / peer"], rows))
    # Closed loop: a server the client could not keep busy does more wake-ups per request than a saturated one.
    starved = [f"round {row[0]} {name}" for row in rows[:-1] for name, busy in (("tern", row[3]), ("peer", row[7]))
               if busy < 0.8]
    if starved:
        print(f"\nnote: server CPU busy under 80% in {', '.join(starved)}: the client, or something else on CPU "
              f"{args.client_cpu}, held the load back, so those runs are not at saturation")
    print(f"\nthrift-front: tern {medians[3]:,.0f} vs Apache Thrift C++ {medians[7]:,.0f} requests per server "
          f"CPU-second (medians of {args.rounds} rounds): ratio of medians {ratio_of_medians:.2f} (goal >= 2)")


if __name__ == "__main__":
    main()
