#!/usr/bin/env python3
"""tern recommend when parts of its world are slow or dead (issue 12), two experiments:

`hedge` ("The Tail at Scale", Dean and Barroso 2013): one graph shard served by two replicas of `tern graph`,
one of which answers --stall-share of its calls --stall-ms late (its fault injection: the reply waits on a
timer, the replica's CPU is not busy), tern cache with the features, and tern recommend asking both replicas
in turn. tern load sends Suggested Users in open loop at --rate for --seconds; latency is measured from each
request's scheduled send time. Each round runs the recommender with hedging (the default: a second call to
the other replica once a call has been out longer than its source's recent p95, at most --hedge-budget
extra calls) and without (--hedge-percentile 0), in alternating order, and reports p99 and p99.9 and the
extra calls the recommender made (from its /metrics: hedges over calls). With the service's default
deadline (100 ms, each source call cut at 60 ms) a stalled call costs at most its budget; with
--deadline-ms 1000 the stall shows whole, as in the paper's experiment.

`overload`: the peak (closed loop, --connections), then open loop at --overload times the peak, then at half
the peak right after it (--busy-neighbour: with a busy loop sharing the recommender's CPU), with overload control (the default: skip the costliest sources while the ranking
pool has a standing queue, then refuse requests on the I/O thread) and without it (--degrade-after-ms 0
--shed-after-ms 0), alternating. Reports goodput (answers with items per second, partial or not) as a share
of the peak, the answers' p99 from their actual send (against the deadline: an answer later than that is no
use to its caller), the answers tern load gave up on after 2 s, the recommender's largest RSS during the
overload, and the half-peak run's p99 and refusals
after a one-second warm-up (the service is back to normal within that second if they match the half-peak
run before the overload).

`source-down`: one source (each of --method in turn) never answers (delayed 10 s, past every deadline);
every answer must come by its deadline, marked partial, with items: reports the share of non-empty answers,
of partial ones, and p99 against the deadline, for Suggested Users and Chaining. tern load checks that every answer whose
sources include one that timed out or failed is marked partial (else it counts an error).

    python3 bench/recommend_faults.py hedge --tern target/release/tern --deadline-ms 1000
    python3 bench/recommend_faults.py hedge --tern target/release/tern
    python3 bench/recommend_faults.py source-down --tern target/release/tern
    python3 bench/recommend_faults.py overload --tern target/release/tern

The recommender runs on CPUs of its own (--recommend-cpus), the cache, the graph and tern load on the rest
(--other-cpus), with taskset.

Prints one line per run, then a Markdown table.
"""

import argparse
import os
import subprocess
import threading

from common import REPO, Process, accepts, answers_version, free_port, median, metrics, table, tern_load


def counter(scrape, name, label, value):
    return scrape.get(f'{name}{{{label}="{value}"}}', 0)


def keys_of(graph):
    """Viewers are accounts 0..N-1 (a graph-tool file's ids are its vertex indices)."""
    return "39796" if "pgp" in graph else "36692"


def start_cache(args, processes):
    """tern cache holding the features of args.graph; answers its port."""
    port = free_port()
    processes.append(Process([args.tern, "cache", "-p", str(port), "-l", "127.0.0.1", "-U", "0", "-t", "1"],
                             args.other_cpus,
                             port, answers_version))
    subprocess.run([args.tern, "recommend", "prepare", "--graph", args.graph, "--cache", f"127.0.0.1:{port}"],
                   check=True, stdout=subprocess.DEVNULL)
    return port


def start_graph(args, processes, extra=()):
    """A tern graph replica of the whole graph; answers its port."""
    port = free_port()
    processes.append(Process([args.tern, "graph", "--graph", args.graph, "--io-threads", "1", "--cpu-workers", "1",
                              "--listen", f"127.0.0.1:{port}", *extra], args.other_cpus, port, accepts))
    return port


def recommender(args, shard, cache_port, extra=()):
    """tern recommend serve over one shard (a comma-separated replica list); answers (process, port, admin)."""
    port, admin = free_port(), free_port()
    # A source call may use all of a long deadline but the ranking reserve.
    budget_ms = max(60, args.deadline_ms - 40)
    serve = [args.tern, "recommend", "serve", "--listen", f"127.0.0.1:{port}", "--graph-shard", shard, "--cache",
             f"127.0.0.1:{cache_port}", "--io-threads", "1", "--cpu-workers", "1", "--admin", f"127.0.0.1:{admin}",
             "--deadline-ms", str(args.deadline_ms), "--source-budget-ms", str(budget_ms), *extra]
    if args.model:
        serve += ["--model", args.model]
    return Process(serve, args.recommend_cpus, port, accepts), port, admin


def load(args, port, call, rate=None, seconds=None, warmup=3, tolerate=()):
    """tern load in open loop at `rate` (closed loop if 0), failing on any error but those named in `tolerate`."""
    rate = args.rate if rate is None else rate
    seconds = args.seconds if seconds is None else seconds
    # One request in flight per connection: enough connections for every request to take its whole deadline
    # at the offered rate, twice over.
    connections = max(32, round(rate * args.deadline_ms / 1000 * 2)) if rate else args.connections
    flags = ["--rate", str(rate)] if rate else []
    report, _ = tern_load(["--protocol", "recommend", "-s", f"127.0.0.1:{port}", "--keys", keys_of(args.graph),
                           "--key-dist", "zipf:0.9", "--recommend-wire", "thrift-binary", "--recommend-call", call,
                           "--warmup", str(warmup), "--duration", str(seconds), "--connections", str(connections),
                           *flags], seconds + 60, args.other_cpus)
    if report["errors"] > sum(report["outcomes"].get(name, 0) for name in tolerate):
        raise RuntimeError(f"tern load counted {report['errors']} errors: {report['outcomes']}")
    return report


def hedge(args):
    processes = []
    try:
        cache_port = start_cache(args, processes)
        healthy = start_graph(args, processes)
        stalling = start_graph(args, processes, ["--inject-delay-ms", str(args.stall_ms), "--inject-delay-share",
                                                 str(args.stall_share)])
        rows, summary = [], {"hedged": [], "not hedged": []}
        for round_no in range(args.rounds):
            order = ["hedged", "not hedged"] if round_no % 2 == 0 else ["not hedged", "hedged"]
            for mode in order:
                extra = ["--hedge-budget", str(args.hedge_budget)]
                if mode == "not hedged":
                    extra += ["--hedge-percentile", "0"]
                server, port, admin = recommender(args, f"127.0.0.1:{healthy},127.0.0.1:{stalling}", cache_port,
                                                  extra)
                with server:
                    before = metrics(admin)
                    report = load(args, port, "suggested-users")
                    after = metrics(admin)
                calls = {k: counter(after, "tern_recommend_graph_calls_total", "kind", k)
                         - counter(before, "tern_recommend_graph_calls_total", "kind", k)
                         for k in ("call", "hedge", "failover")}
                won = (counter(after, "tern_recommend_hedges_total", "outcome", "won")
                       - counter(before, "tern_recommend_hedges_total", "outcome", "won"))
                extra_calls = calls["hedge"] / calls["call"] if calls["call"] else 0
                lat = report["latency_us"]
                partial = report["outcomes"].get("recommended_partial", 0)
                print(f"round {round_no + 1} {mode}: {report['requests_per_s']:,.0f} answers/s, p50 "
                      f"{lat['p50'] / 1000:.2f} ms, p99 {lat['p99'] / 1000:.2f} ms, p99.9 {lat['p999'] / 1000:.2f} ms, "
                      f"max {lat['max'] / 1000:.1f} ms, partial {partial}, graph calls {calls['call']:.0f} + "
                      f"{calls['hedge']:.0f} hedged ({extra_calls:.2%}, {won:.0f} won) + {calls['failover']:.0f} "
                      f"failed over", flush=True)
                rows.append([round_no + 1, mode, report["requests_per_s"], lat["p50"] / 1000, lat["p99"] / 1000,
                             lat["p999"] / 1000, partial, f"{extra_calls:.2%}"])
                summary[mode].append((lat["p99"] / 1000, lat["p999"] / 1000, extra_calls))
        for mode, runs in summary.items():
            rows.append(["median", mode, "", "", median([r[0] for r in runs]), median([r[1] for r in runs]), "",
                         f"{median([r[2] for r in runs]):.2%}"])
        ratio = median([r[1] for r in summary["not hedged"]]) / median([r[1] for r in summary["hedged"]])
        print(table(["round", "hedging", "answers/s", "p50 ms", "p99 ms", "p99.9 ms", "partial", "extra calls"],
                    rows))
        print(f"p99.9 without hedging / with: {ratio:.1f}x (stall {args.stall_ms} ms on {args.stall_share:.1%} of "
              f"one replica's calls, deadline {args.deadline_ms} ms, {args.rate}/s)")
    finally:
        for p in reversed(processes):
            p.stop()


def source_down(args):
    processes = []
    try:
        cache_port = start_cache(args, processes)
        rows = []
        for method in args.method.split(","):
            down = []
            graph = start_graph(args, down, ["--inject-delay-ms", "10000", "--inject-method", method])
            server, port, admin = recommender(args, f"127.0.0.1:{graph}", cache_port)
            down.append(server)
            try:
                for call in ("suggested-users", "chaining"):
                    rows.append(source_down_run(args, method, call, port, admin))
            finally:
                for p in reversed(down):
                    p.stop()
        print(table(["source down", "call", "answers", "non-empty", "partial, non-empty", "p50 ms", "p99 ms",
                     "deadline ms"], rows))
    finally:
        for p in reversed(processes):
            p.stop()


def source_down_run(args, method, call, port, admin):
    before = metrics(admin)
    report = load(args, port, call)
    after = metrics(admin)
    outcomes = report["outcomes"]
    answers = sum(outcomes.get(k, 0) for k in ("recommended", "recommended_partial", "recommended_empty"))
    empty = outcomes.get("recommended_empty", 0)
    partial = outcomes.get("recommended_partial", 0)
    timeouts = (counter(after, "tern_recommend_source_calls_total", "outcome", "timeout")
                - counter(before, "tern_recommend_source_calls_total", "outcome", "timeout"))
    lat = report["latency_us"]
    print(f"{call} with {method} down: {report['requests_per_s']:,.0f} answers/s, {answers} answers, "
          f"{empty} empty, {partial} partial (non-empty), {timeouts:.0f} source calls timed out, "
          f"overloaded {outcomes.get('overloaded', 0)}, p50 {lat['p50'] / 1000:.2f} ms, "
          f"p99 {lat['p99'] / 1000:.2f} ms, max {lat['max'] / 1000:.1f} ms (deadline {args.deadline_ms} ms)",
          flush=True)
    return [method, call, answers, f"{1 - empty / answers:.2%}", f"{partial / answers:.2%}", lat["p50"] / 1000,
            lat["p99"] / 1000, args.deadline_ms]


def rss_mb(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0


def goodput(report):
    """Answers with items per second (partial or not)."""
    answered = report["outcomes"].get("recommended", 0) + report["outcomes"].get("recommended_partial", 0)
    return answered / report["measured_s"]


def overload(args):
    processes = []
    try:
        if args.busy_neighbour:
            # A process that never sleeps on the recommender's CPU: the scheduler gives the recommender about half
            # of it, as on a slower or shared machine.
            processes.append(Process(["python3", "-c", "while True: pass"], args.recommend_cpus, None,
                                     lambda _port: True))
        cache_port = start_cache(args, processes)
        graph = start_graph(args, processes)
        rows = []
        for round_no in range(args.rounds):
            order = ["controlled", "uncontrolled"] if round_no % 2 == 0 else ["uncontrolled", "controlled"]
            for mode in order:
                extra = (args.control.split() if mode == "controlled"
                         else ["--degrade-after-ms", "0", "--shed-after-ms", "0"])
                server, port, admin = recommender(args, f"127.0.0.1:{graph}", cache_port, extra)
                with server:
                    peak = load(args, port, "suggested-users", rate=0)
                    peak_rate = peak["requests_per_s"]
                    calm = load(args, port, "suggested-users", rate=round(peak_rate / 2))
                    before = metrics(admin)
                    largest = [rss_mb(server.pid)]
                    sampler = threading.Event()

                    def sample():
                        while not sampler.wait(0.25):
                            largest.append(rss_mb(server.pid))

                    watcher = threading.Thread(target=sample)
                    watcher.start()
                    try:
                        # Without control, answers may come later than tern load waits (2 s): counted, not fatal.
                        hot = load(args, port, "suggested-users", rate=round(peak_rate * args.overload),
                                   tolerate=("timeout",))
                    finally:
                        sampler.set()
                        watcher.join()
                    after = metrics(admin)
                    cooled = load(args, port, "suggested-users", rate=round(peak_rate / 2), seconds=3, warmup=1)
                shed = (after.get("tern_recommend_shed_total", 0) - before.get("tern_recommend_shed_total", 0))
                degraded = (after.get("tern_recommend_degraded_total", 0)
                            - before.get("tern_recommend_degraded_total", 0))
                hot_good = goodput(hot)
                print(f"round {round_no + 1} {mode}: peak {peak_rate:,.0f}/s; at {args.overload}x: goodput "
                      f"{hot_good:,.0f}/s ({hot_good / peak_rate:.0%} of peak), refused {shed:.0f}, degraded "
                      f"{degraded:.0f}, timed out (2 s) {hot['outcomes'].get('timeout', 0)}, p99 "
                      f"{hot['latency_us']['p99'] / 1000:.1f} ms (from the actual send: p50 "
                      f"{hot['service_latency_us']['p50'] / 1000:.1f}, p99 "
                      f"{hot['service_latency_us']['p99'] / 1000:.1f} ms), largest RSS {max(largest):.0f} MB "
                      f"({largest[0]:.0f} MB before); "
                      f"half peak before: p99 {calm['latency_us']['p99'] / 1000:.2f} ms; after (from 1 s on): p99 "
                      f"{cooled['latency_us']['p99'] / 1000:.2f} ms, refused "
                      f"{cooled['outcomes'].get('overloaded', 0)}", flush=True)
                rows.append([round_no + 1, mode, peak_rate, hot_good, f"{hot_good / peak_rate:.0%}",
                             hot["service_latency_us"]["p99"] / 1000, hot["outcomes"].get("timeout", 0), shed,
                             degraded, max(largest),
                             calm["latency_us"]["p99"] / 1000, cooled["latency_us"]["p99"] / 1000,
                             cooled["outcomes"].get("overloaded", 0)])
        print(table(["round", "overload control", "peak/s", f"goodput/s at {args.overload}x", "of peak",
                     "p99 ms from send", "timed out", "refused", "degraded", "largest RSS MB", "half-peak p99 ms before",
                     "half-peak p99 ms after", "refused after"], rows))
    finally:
        for p in reversed(processes):
            p.stop()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("experiment", choices=["hedge", "source-down", "overload"])
    ap.add_argument("--tern", default=os.path.join(REPO, "target", "release", "tern"))
    ap.add_argument("--graph", default=os.path.join(REPO, "target", "graphs", "pgp-strong-2009.gt.gz"))
    ap.add_argument("--model", help="a trained model (default: the committed one)")
    ap.add_argument("--rate", type=int, default=1000, help="requests per second, open loop")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--deadline-ms", type=int, default=100, help="the recommender's default deadline")
    ap.add_argument("--rounds", type=int, default=3, help="hedge: rounds of both modes")
    ap.add_argument("--stall-ms", type=int, default=200, help="hedge: the stalling replica's delay")
    ap.add_argument("--stall-share", type=float, default=0.01, help="hedge: the share of its calls delayed")
    ap.add_argument("--hedge-budget", type=float, default=0.05)
    ap.add_argument("--connections", type=int, default=32, help="overload: closed-loop connections for the peak")
    ap.add_argument("--overload", type=float, default=2.0, help="overload: the offered rate over the peak")
    ap.add_argument("--busy-neighbour", action="store_true",
                    help="overload: a busy loop shares the recommender's CPU throughout")
    ap.add_argument("--control", default="", help="overload: flags of the controlled recommender")
    ap.add_argument("--recommend-cpus", default="0",
                    help="the recommender's CPUs (taskset list; the rest on --other-cpus), so that the recommender, "
                         "not its neighbours, is what overload and hedging meet")
    ap.add_argument("--other-cpus", default="1", help="the CPUs of the cache, the graph and tern load")
    ap.add_argument("--method", default="personalized_pagerank,co_follow",
                    help="source-down: the sources taken down, one at a time")
    args = ap.parse_args()
    {"hedge": hedge, "source-down": source_down, "overload": overload}[args.experiment](args)


if __name__ == "__main__":
    main()
