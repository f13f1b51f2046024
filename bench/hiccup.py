#!/usr/bin/env python3
"""The machine's own stalls: a busy loop pinned to each CPU reads the clock as fast as it can and records
every gap between two reads over 0.2 ms. On an idle machine any such gap is time the thread was not
running (the hypervisor, the kernel's own threads and interrupts), which no server on that CPU can avoid:
it bounds the tail latency a benchmark here can show.

    python3 bench/hiccup.py --seconds 8
"""

import argparse
import json
import multiprocessing
import os
import time


def measure(cpu, seconds, out):
    os.sched_setaffinity(0, {cpu})
    end = time.perf_counter_ns() + int(seconds * 1e9)
    last = time.perf_counter_ns()
    gaps = []
    while last < end:
        now = time.perf_counter_ns()
        if now - last > 200_000:
            gaps.append(now - last)
        last = now
    out.put((cpu, gaps))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seconds", type=float, default=8)
    a = ap.parse_args()
    out = multiprocessing.Queue()
    cpus = sorted(os.sched_getaffinity(0))
    procs = [multiprocessing.Process(target=measure, args=(cpu, a.seconds, out)) for cpu in cpus]
    for p in procs:
        p.start()
    results = dict(out.get() for _ in procs)
    for p in procs:
        p.join()
    report = {}
    for cpu in cpus:
        gaps = sorted(results[cpu])
        report[cpu] = {
            "gaps_over_0.2ms": len(gaps),
            "gaps_over_1ms": sum(1 for g in gaps if g > 1e6),
            "stalled_ms": round(sum(gaps) / 1e6, 2),
            "largest_ms": [round(g / 1e6, 2) for g in gaps[-5:]],
        }
        print(f"CPU {cpu}: {report[cpu]}")
    print(json.dumps({"bench": "hiccup", "seconds": a.seconds, "cpus": report, "load_average": os.getloadavg()[0]}))


if __name__ == "__main__":
    main()
