"""memcached's restartable cache (`-e FILE`) on tern cache and on memcached, in the same run: a cache filled
with N items of S bytes, stopped gracefully (SIGUSR1) and started again on the same file. Reports, per server,
the median over rounds of the wall time from the signal to the process's exit (the stop) and from the start
to the first connection accepted (the start, restore included), and checks that every item came back.

    python3 bench/cache_restart.py                       # 200,000 items of 4,000 bytes, -m 1024, 3 rounds
    python3 bench/cache_restart.py --items 50000 --size 100 --rounds 5
"""

import argparse
import os
import signal
import socket
import statistics
import subprocess
import time

from common import REPO, free_port


def wait_port(port, proc, within=60):
    deadline = time.time() + within
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.002)
    raise RuntimeError("server did not start")


def stat(port, name):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"stats\r\n")
        buf = b""
        while not buf.endswith(b"END\r\n"):
            buf += s.recv(65536)
    for line in buf.decode().splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] == name:
            return int(parts[2])
    raise KeyError(name)


def fill(port, items, size):
    value = b"v" * size
    with socket.create_connection(("127.0.0.1", port)) as s:
        batch = 1000
        for start in range(0, items, batch):
            s.sendall(b"".join(
                b"set key:%d 0 0 %d noreply\r\n%s\r\n" % (i, size, value)
                for i in range(start, min(items, start + batch))))
        s.sendall(b"mn\r\n")
        buf = b""
        while not buf.endswith(b"MN\r\n"):
            buf += s.recv(65536)


def command(server, port, file, memory):
    tern = os.environ.get("TERN", os.path.join(REPO, "target", "release", "tern"))
    common = ["-p", str(port), "-U", "0", "-l", "127.0.0.1", "-m", str(memory), "-e", file]
    if server == "tern":
        return [tern, "cache"] + common
    return ["memcached", "-u", "root"] + common


def round_trip(server, directory, items, size, memory):
    """(stop seconds, start seconds) of one fill, graceful stop and start."""
    file = os.path.join(directory, f"bench-restart-{server}-{os.getpid()}")
    port = free_port()
    proc = subprocess.Popen(command(server, port, file, memory),
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        fill(port, items, size)
        stored = stat(port, "curr_items")
        began = time.perf_counter()
        proc.send_signal(signal.SIGUSR1)
        proc.wait(timeout=300)
        stopped = time.perf_counter() - began
        # memcached discards a cache restarted within the second it stopped in (its metadata's stop_time
        # must be in the past): both wait for the next second, outside the timing.
        time.sleep(1.05 - time.time() % 1)
        began = time.perf_counter()
        proc = subprocess.Popen(command(server, port, file, memory),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(port, proc, within=300)
        started = time.perf_counter() - began
        restored = stat(port, "curr_items")
        if restored != stored:
            raise RuntimeError(f"{server}: {stored} items before the stop, {restored} after the start")
        return stopped, started
    finally:
        proc.kill()
        proc.wait()
        for path in (file, file + ".meta"):
            if os.path.exists(path):
                os.remove(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--items", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=4000)
    parser.add_argument("--memory", type=int, default=1024, help="-m, in MB")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else "/tmp")
    args = parser.parse_args()
    print(f"{args.items} items of {args.size} bytes, -m {args.memory}, files in {args.dir}, "
          f"median of {args.rounds} rounds")
    print("| server | graceful stop (s) | start with restore (s) |")
    print("|---|---|---|")
    for server in ["tern", "memcached"]:
        times = [round_trip(server, args.dir, args.items, args.size, args.memory) for _ in range(args.rounds)]
        stop = statistics.median(t[0] for t in times)
        start = statistics.median(t[1] for t in times)
        print(f"| {server} | {stop:.3f} | {start:.3f} |", flush=True)


if __name__ == "__main__":
    main()
