"""Helpers shared by the bench scripts: servers, pinning, CPU accounting, medians, tables."""

import json
import os
import re
import resource
import shlex
import random
import shutil
import socket
import statistics
import subprocess
import tempfile
import time
import urllib.request

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_command():
    """The `tern load` command line prefix: $TERN_LOAD, the `tern` binary, or the example build."""
    if os.environ.get("TERN_LOAD"):
        return shlex.split(os.environ["TERN_LOAD"])
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(REPO, "target"))
    for candidate in [os.path.join(target, "release", "tern")]:
        if os.path.exists(candidate) and subprocess.run(
            [candidate, "load", "--help"], capture_output=True
        ).returncode == 0:
            return [candidate, "load"]
    subprocess.run(
        ["cargo", "build", "--release", "-q", "-p", "tern-load", "--example", "tern-load"],
        cwd=REPO,
        check=True,
    )
    return [os.path.join(target, "release", "examples", "tern-load")]


def pinned(cpu, argv):
    """Prefix argv with taskset when a CPU is given and taskset exists."""
    if cpu is None or not shutil.which("taskset"):
        return argv
    return ["taskset", "-c", str(cpu)] + argv


def free_port():
    """A free 127.0.0.1 port below the kernel's ephemeral range, as tern-testkit's `free_port` takes one: a
    port from inside the range (bound to 0 and released) can be taken meanwhile as a connection's source
    port, or a readiness probe can connect to itself, and the server then fails to bind."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        first = int(f.read().split()[0])
    for _ in range(1000):
        port = random.randrange(10_000, first)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port between 10000 and {first}")


class Process:
    """A server process pinned to `cpu`, listening on 127.0.0.1:`port`; `ready(port)` says when it serves.
    Stopped on exit (terminate, then kill after 5 s)."""

    def __init__(self, argv, cpu, port, ready):
        self.port = port
        # stderr to a file, not a pipe: a chatty server must never block on a pipe nobody reads.
        self.log = tempfile.TemporaryFile()
        self.proc = subprocess.Popen(pinned(cpu, argv), stdout=subprocess.DEVNULL, stderr=self.log)
        deadline = time.time() + 10
        while True:
            try:
                if ready(port):
                    break
            except OSError:
                pass
            if self.proc.poll() is not None:
                self.log.seek(0)
                raise RuntimeError(f"server exited: {argv}: {self.log.read().decode(errors='replace')}")
            if time.time() > deadline:
                self.stop()
                raise RuntimeError(f"server did not start: {argv}")
            time.sleep(0.05)

    @property
    def pid(self):
        # taskset execs the server, so the pid is the server's own.
        return self.proc.pid

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def answers_version(port):
    """A memcached-protocol server answers `version`."""
    with socket.create_connection(("127.0.0.1", port), timeout=0.5) as s:
        s.sendall(b"version\r\n")
        return s.recv(100).startswith(b"VERSION")


def accepts(port):
    """The server accepts TCP connections."""
    socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
    return True


class Server(Process):
    """A memcached-protocol server started from a command template with {port}; stopped on exit."""

    def __init__(self, template, cpu):
        port = free_port()
        super().__init__(shlex.split(template.format(port=port)), cpu, port, answers_version)


class Cpu(float):
    """CPU seconds a child used (user + kernel), with the kernel's part as `.kernel`."""

    def __new__(cls, user, kernel):
        cpu = super().__new__(cls, user + kernel)
        cpu.kernel = kernel
        return cpu


def run_measured(argv, timeout):
    """Runs argv to completion; answers (stdout, Cpu the child used)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    out = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode != 0:
        raise RuntimeError(f"{argv} failed ({out.returncode}):\n{out.stdout}\n{out.stderr}")
    return out.stdout, Cpu(after.ru_utime - before.ru_utime, after.ru_stime - before.ru_stime)


def tern_load(args, timeout, cpu=None):
    """Runs `tern load` (pinned to `cpu`) with args plus --json; answers (report, CPU seconds)."""
    with tempfile.NamedTemporaryFile(suffix=".json") as f:
        out, cpu = run_measured(pinned(cpu, load_command() + args + ["-q", "--json", f.name]), timeout)
        with open(f.name) as j:
            return json.load(j), cpu


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def table(header, rows):
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    for row in rows:
        lines.append("| " + " | ".join(fmt(v) for v in row) + " |")
    return "\n".join(lines)


def fmt(v):
    if v is None:
        return "-"
    if isinstance(v, float):
        return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"
    return str(v)


def metrics(admin_port):
    """Every `name{labels} value` sample of the admin endpoint's Prometheus text."""
    text = urllib.request.urlopen(f"http://127.0.0.1:{admin_port}/metrics", timeout=5).read().decode()
    samples = {}
    for line in text.splitlines():
        m = re.match(r"^([a-z_]+)(\{[^}]*\})? ([0-9.eE+-]+)$", line)
        if m:
            samples[m.group(1) + (m.group(2) or "")] = float(m.group(3))
    return samples
