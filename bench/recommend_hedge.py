#!/usr/bin/env python3
"""Hedged calls against a stalling replica (issue 12; "The Tail at Scale", Dean and Barroso 2013).

One graph shard served by two replicas of `tern graph`, one of which answers --stall-share of its calls
--stall-ms late (its fault injection: the reply waits on a timer, the replica's CPU is not busy), tern cache
with the features, and tern recommend asking both replicas in turn. tern load sends Suggested Users in open
loop at --rate for --seconds; latency is measured from each request's scheduled send time. Each round runs
the recommender with hedging (the default: a second call to the other replica once a call has been out
longer than its source's recent p95, at most --hedge-budget extra calls) and without (--hedge-percentile 0),
in alternating order, and reports p99 and p99.9 and the extra calls the recommender made (from its
/metrics: hedges over calls).

With the service's default deadline (100 ms, each source call cut at 60 ms) a stalled call costs at most
its budget; with --deadline-ms 1000 the stall shows whole, as in the paper's experiment. Run both:

    python3 bench/recommend_hedge.py --tern target/release/tern --model MODEL --deadline-ms 1000
    python3 bench/recommend_hedge.py --tern target/release/tern --model MODEL

Prints one line per run, then a Markdown table of each round and the medians.
"""

import argparse
import os
import subprocess

from common import REPO, Process, accepts, answers_version, free_port, median, metrics, table, tern_load


def counter(scrape, name, label, value):
    return scrape.get(f'{name}{{{label}="{value}"}}', 0)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tern", default=os.path.join(REPO, "target", "release", "tern"))
    ap.add_argument("--graph", default=os.path.join(REPO, "target", "graphs", "pgp-strong-2009.gt.gz"))
    ap.add_argument("--model", help="a trained model (default: the committed one, for the generated graph)")
    ap.add_argument("--rate", type=int, default=1000, help="requests per second, open loop")
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--stall-ms", type=int, default=200)
    ap.add_argument("--stall-share", type=float, default=0.01)
    ap.add_argument("--deadline-ms", type=int, default=100, help="the recommender's default deadline")
    ap.add_argument("--hedge-budget", type=float, default=0.05)
    args = ap.parse_args()
    tern = args.tern
    # A source call may use all of a long deadline but the ranking reserve.
    budget_ms = max(60, args.deadline_ms - 40)
    cache_port, healthy, stalling = free_port(), free_port(), free_port()
    processes = []
    try:
        cache = Process([tern, "cache", "-p", str(cache_port), "-l", "127.0.0.1", "-U", "0", "-t", "1"], None,
                        cache_port, answers_version)
        processes.append(cache)
        graph = [tern, "graph", "--graph", args.graph, "--io-threads", "1", "--cpu-workers", "1"]
        processes.append(Process(graph + ["--listen", f"127.0.0.1:{healthy}"], None, healthy, accepts))
        processes.append(Process(graph + ["--listen", f"127.0.0.1:{stalling}", "--inject-delay-ms",
                                          str(args.stall_ms), "--inject-delay-share", str(args.stall_share)],
                                 None, stalling, accepts))
        subprocess.run([tern, "recommend", "prepare", "--graph", args.graph, "--cache", f"127.0.0.1:{cache_port}"],
                       check=True, stdout=subprocess.DEVNULL)
        keys = "39796" if "pgp" in args.graph else "36692"
        rows, summary = [], {"hedged": [], "not hedged": []}
        for round_no in range(args.rounds):
            order = ["hedged", "not hedged"] if round_no % 2 == 0 else ["not hedged", "hedged"]
            for mode in order:
                port, admin = free_port(), free_port()
                serve = [tern, "recommend", "serve", "--listen", f"127.0.0.1:{port}", "--graph-shard",
                         f"127.0.0.1:{healthy},127.0.0.1:{stalling}", "--cache", f"127.0.0.1:{cache_port}",
                         "--io-threads", "1", "--cpu-workers", "1", "--admin", f"127.0.0.1:{admin}",
                         "--deadline-ms", str(args.deadline_ms), "--source-budget-ms", str(budget_ms),
                         "--hedge-budget", str(args.hedge_budget)]
                if args.model:
                    serve += ["--model", args.model]
                if mode == "not hedged":
                    serve += ["--hedge-percentile", "0"]
                with Process(serve, None, port, accepts):
                    before = metrics(admin)
                    report, _ = tern_load(["--protocol", "recommend", "-s", f"127.0.0.1:{port}", "--keys", keys,
                                           "--key-dist", "zipf:0.9", "--recommend-wire", "thrift-binary",
                                           "--recommend-call", "suggested-users", "--warmup", "3",
                                           "--duration", str(args.seconds), "--connections", "32",
                                           "--rate", str(args.rate)], args.seconds + 60)
                    after = metrics(admin)
                calls = {k: counter(after, "tern_recommend_graph_calls_total", "kind", k)
                         - counter(before, "tern_recommend_graph_calls_total", "kind", k)
                         for k in ("call", "hedge", "failover")}
                won = (counter(after, "tern_recommend_hedges_total", "outcome", "won")
                       - counter(before, "tern_recommend_hedges_total", "outcome", "won"))
                extra = calls["hedge"] / calls["call"] if calls["call"] else 0
                lat = report["latency_us"]
                partial = report["outcomes"].get("recommended_partial", 0)
                print(f"round {round_no + 1} {mode}: {report['requests_per_s']:,.0f} answers/s, p50 "
                      f"{lat['p50'] / 1000:.2f} ms, p99 {lat['p99'] / 1000:.2f} ms, p99.9 {lat['p999'] / 1000:.2f} ms, "
                      f"max {lat['max'] / 1000:.1f} ms, errors {report['errors']}, partial {partial}, "
                      f"graph calls {calls['call']:.0f} + {calls['hedge']:.0f} hedged ({extra:.2%}, "
                      f"{won:.0f} won) + {calls['failover']:.0f} failed over", flush=True)
                row = [round_no + 1, mode, report["requests_per_s"], lat["p50"] / 1000, lat["p99"] / 1000,
                       lat["p999"] / 1000, partial, f"{extra:.2%}"]
                rows.append(row)
                summary[mode].append((lat["p99"] / 1000, lat["p999"] / 1000, extra))
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


if __name__ == "__main__":
    main()
