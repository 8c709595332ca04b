"""Benchmark the scheduler: widest-path time on full meshes, convergence and path sets in the simulator.

    .venv/bin/python bench/scheduler.py [--seeds N] [--duration-s S]
    .venv/bin/python bench/scheduler.py --multipath [--seeds N] [--margins 0.05,0.1,0.15,0.25]

Prints tables and, last, one JSON line with every figure. Targets (issue 4): widest path under 5 ms on a
full mesh of 50 vertices and under 0.5 s at 1000; in the simulator, at most as many path attempts as vertices
(the seed needed 13 for its 8). ``--multipath`` (issue 12) runs only the path-set table: cold transfers at 2
streams a hop on ``two_routes``, ``three_routes`` and ``one_bottleneck`` with ``max_paths`` 1, 2 and 3 and each
path margin; targets: at least 0.85 of the sum of the disjoint routes' pinned rates, at least 1.4x ``max_paths``
1 where two routes of similar rate exist, never below 0.95x of it where every route shares one bottleneck.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from dataclasses import dataclass, replace
from typing import Any

import networkx as nx

from lnet.scheduler import THROUGHPUT, EdgeMemory, PathScheduler, SchedulerConfig, edges_of, widest_path
from lnet.scheduler.simulator import (
    ABILENE_DST,
    ABILENE_SRC,
    MULTIPATH_DST,
    MULTIPATH_SRC,
    THREE_ROUTES,
    TWO_ROUTES,
    SimNetwork,
    SimResult,
    abilene,
    abilene_shared,
    one_bottleneck,
    random_topology,
    simulate_transfer,
    three_routes,
    two_routes,
)

MODES = {"seed": SchedulerConfig(probes_per_round=0), "probes": SchedulerConfig()}


def full_mesh(n: int, seed: int, *, narrow_dst: bool) -> nx.DiGraph:
    """Random weights; with ``narrow_dst``, every edge into the destination is the narrowest, so that the first pass
    cannot stop early and the second pass scans every vertex."""
    rng = random.Random(seed)
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_edges_from(
        (u, v, {THROUGHPUT: 0.5 if narrow_dst and v == n - 1 else rng.uniform(1.0, 100.0)})
        for u in range(n)
        for v in range(n)
        if u != v
    )
    return graph


def time_widest_path(n: int, *, narrow_dst: bool) -> float:
    graph = full_mesh(n, seed=n, narrow_dst=narrow_dst)
    repeats = 3 if n >= 1000 else 20
    timings = []
    for _ in range(repeats):
        started = time.perf_counter()
        widest_path(graph, 0, n - 1)
        timings.append(time.perf_counter() - started)
    return statistics.median(timings)


@dataclass(frozen=True)
class Convergence:
    attempts_to_90: int | None
    """Path attempts begun up to the first step at 90% of the best path's throughput (None: never got there)."""
    seconds_to_90: float | None
    attempts_total: int


def convergence(result: SimResult, best_bps: float, start_s: float) -> Convergence:
    at = result.first_time_at(0.9 * best_bps)
    attempts = None if at is None else sum(1 for a in result.attempts if a.start <= at)
    return Convergence(attempts, None if at is None else at - start_s, len(result.attempts))


def best_rate(network: SimNetwork, src: str, dst: str, streams: int) -> float:
    """The oracle: the best path's rate with ``streams`` a hop and nothing else running (every simple path
    tried where links are shared; the widest path over the capacities where they are not)."""
    if not network.links:
        return network.truth(src, dst)[1] * streams
    graph = nx.complete_graph(network.vertices, nx.DiGraph)
    best = 0.0
    for path in nx.all_simple_paths(graph, src, dst):
        hops = list(zip(path, path[1:], strict=False))
        shares = network.share(dict.fromkeys(hops, streams), 0.0)
        best = max(best, min(shares[hop] for hop in hops))
    return best


def cold_and_warm(
    network: SimNetwork, src: str, dst: str, config: SchedulerConfig, duration_s: float, seed: int
) -> tuple[Convergence, Convergence]:
    """A cold transfer, then a warm one starting where it ended, with the memory it left."""
    best = best_rate(network, src, dst, config.streams)
    memory = EdgeMemory()
    rtt = network.rtts_from(src) or None
    cold = simulate_transfer(
        network, PathScheduler(network.vertices, src, dst, memory, config, rtt_s=rtt), duration_s=duration_s,
        seed=seed,
    )
    warm = simulate_transfer(
        network,
        PathScheduler(network.vertices, src, dst, memory, config, rtt_s=rtt),
        start_s=duration_s,
        duration_s=duration_s,
        seed=seed + 1,
    )
    return convergence(cold, best, 0.0), convergence(warm, best, duration_s)


def summarise(runs: list[Convergence]) -> dict[str, Any]:
    reached = [r for r in runs if r.seconds_to_90 is not None]
    return {
        "runs": len(runs),
        "missed_90": len(runs) - len(reached),
        "attempts_to_90_median": statistics.median(r.attempts_to_90 or 0 for r in reached) if reached else None,
        "attempts_to_90_max": max((r.attempts_to_90 or 0 for r in reached), default=None),
        "seconds_to_90_median": statistics.median(r.seconds_to_90 or 0.0 for r in reached) if reached else None,
        "seconds_to_90_max": max((r.seconds_to_90 or 0.0 for r in reached), default=None),
        "attempts_total_median": statistics.median(r.attempts_total for r in runs),
    }


def fmt(value: float | None, spec: str = "g") -> str:
    return "-" if value is None else format(value, spec)


MULTIPATH_TOPOLOGIES: dict[str, tuple[Any, tuple[tuple[str, ...], ...]]] = {
    "two-routes": (two_routes, TWO_ROUTES),
    "three-routes": (three_routes, THREE_ROUTES),
    "one-bottleneck": (one_bottleneck, ()),
}
MULTIPATH_STREAMS = 2


def pinned_rate(network: SimNetwork, path: tuple[str, ...]) -> float:
    """What ``path`` carries alone at the benchmark's streams a hop (the pinned run's rate)."""
    return min(network.share(dict.fromkeys(edges_of(path), MULTIPATH_STREAMS), 0.0).values())


def multipath(seeds: int, duration_s: float, margins: list[float], noise: float) -> dict[str, Any]:
    """Cold transfers on the multipath topologies: mean Mbit/s over the whole transfer and over its second half,
    medians over ``seeds`` noise seeds, for max_paths 1, 2, 3 and each margin."""
    figures: dict[str, Any] = {}
    print(f"path sets: cold transfers of {duration_s:g} sim. s, {MULTIPATH_STREAMS} streams a hop, noise {noise:g}")
    print(f"medians of {seeds} seeds; Mbit/s over the whole transfer / its second half; '/sum' = over the")
    print("disjoint routes' pinned rates added up; 'x1' = over max_paths 1's whole-transfer rate; 'trials' = joins")
    print(
        f"{'topology':>14} {'margin':>6} {'paths':>5} {'whole':>7} {'2nd half':>8} {'/sum':>5} {'x1':>5} {'trials':>6}"
    )
    for name, (make, routes) in MULTIPATH_TOPOLOGIES.items():
        network = make(noise=noise)
        total = sum(pinned_rate(network, route) for route in routes)
        single: float | None = None
        for margin in margins:
            for max_paths in (1, 2, 3):
                if max_paths == 1 and single is not None:
                    continue  # the margin plays no part with one path
                whole, half, joins = [], [], []
                for seed in range(seeds):
                    config = SchedulerConfig(streams=MULTIPATH_STREAMS, max_paths=max_paths, path_margin=margin)
                    scheduler = PathScheduler(
                        network.vertices, MULTIPATH_SRC, MULTIPATH_DST, EdgeMemory(), config,
                        rtt_s=network.rtts_from(MULTIPATH_SRC),
                    )
                    result = simulate_transfer(network, scheduler, duration_s=duration_s, seed=seed)
                    whole.append(result.mean_rate(0.0))
                    half.append(result.mean_rate(duration_s / 2))
                    joins.append(sum(1 for _, d in result.decisions if getattr(d, "reason", None) == "join"))
                row = {
                    "whole_mbps": statistics.median(whole) * 8e-6,
                    "second_half_mbps": statistics.median(half) * 8e-6,
                    "joins": statistics.median(joins),
                    "of_sum": statistics.median(whole) / total if total else None,
                }
                if max_paths == 1:
                    single = statistics.median(whole)
                    label = "any"
                else:
                    label = f"{margin:g}"
                assert single is not None
                row["x1"] = statistics.median(whole) / single
                figures[f"{name}/{label}/{max_paths}"] = row
                print(
                    f"{name:>14} {label:>6} {max_paths:>5} {row['whole_mbps']:>7.2f} {row['second_half_mbps']:>8.2f} "
                    f"{fmt(row['of_sum'], '.2f'):>5} {row['x1']:>5.2f} {fmt(row['joins']):>6}"
                )
        figures[f"{name}/pinned_sum_mbps"] = total * 8e-6
    return figures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="random topologies per size (default 5)")
    parser.add_argument("--duration-s", type=float, default=600.0, help="simulated seconds per transfer")
    parser.add_argument("--multipath", action="store_true", help="only the path-set table (issue 12)")
    parser.add_argument(
        "--margins", default="0.05,0.1,0.15,0.25", help="path margins for --multipath (default 0.05,0.1,0.15,0.25)"
    )
    parser.add_argument("--noise", type=float, default=0.03, help="relative noise of a measurement, --multipath")
    args = parser.parse_args(argv)
    if args.multipath:
        margins = [float(m) for m in args.margins.split(",")]
        paths = multipath(args.seeds, args.duration_s, margins, args.noise)
        head = {"bench": "scheduler-multipath", "seeds": args.seeds, "duration_s": args.duration_s, "noise": args.noise}
        print(json.dumps({**head, **paths}))
        return 0

    figures: dict[str, Any] = {"widest_path_s": {}, "simulator": {}}
    print("widest path on a full mesh (median seconds)")
    print(f"{'vertices':>8} {'random':>10} {'narrow-dst':>10}  target")
    for n, target in ((50, 0.005), (200, None), (1000, 0.5)):
        typical, narrow = time_widest_path(n, narrow_dst=False), time_widest_path(n, narrow_dst=True)
        figures["widest_path_s"][str(n)] = {"random": typical, "narrow_dst": narrow, "target": target}
        print(f"{n:>8} {typical:>10.4f} {narrow:>10.4f}  {'' if target is None else f'< {target:g}'}")

    print()
    print(f"simulated transfers of {args.duration_s:g} s, {args.seeds} random full meshes per size;")
    print("attempts and seconds until the transfer first runs at 90% of the best path (median / max),")
    print("'missed' = runs that never got there, 'total' = median attempts over the whole transfer")
    header = f"{'topology':>10} {'mode':>6} {'start':>5} {'attempts':>9} {'seconds':>13} {'missed':>6} {'total':>5}"
    print(header)
    cases: list[tuple[str, list[tuple[SimNetwork, str, str]]]] = [
        ("abilene", [(abilene(), ABILENE_SRC, ABILENE_DST)]),
        ("ab-shared", [(abilene_shared(), "ornl", "svl")]),
    ]
    for n in (8, 16, 32):
        networks = [random_topology(n, seed) for seed in range(args.seeds)]
        cases.append((f"random-{n}", [(net, net.vertices[0], net.vertices[-1]) for net in networks]))
    for name, networks in cases:
        for mode, config in MODES.items():
            if name == "ab-shared":  # the emulated testbed at the demo's 2 blocks a hop, links shared
                config = replace(config, streams=2)
            runs = [
                cold_and_warm(net, src, dst, config, args.duration_s, seed)
                for seed, (net, src, dst) in enumerate(networks)
            ]
            for start, index in (("cold", 0), ("warm", 1)):
                summary = summarise([r[index] for r in runs])
                figures["simulator"][f"{name}/{mode}/{start}"] = summary
                attempts = f"{fmt(summary['attempts_to_90_median'])} / {fmt(summary['attempts_to_90_max'])}"
                seconds = f"{fmt(summary['seconds_to_90_median'], '.1f')} / {fmt(summary['seconds_to_90_max'], '.1f')}"
                print(
                    f"{name:>10} {mode:>6} {start:>5} {attempts:>9} {seconds:>13} "
                    f"{summary['missed_90']:>6} {fmt(summary['attempts_total_median']):>5}"
                )
    print(json.dumps({"bench": "scheduler", "seeds": args.seeds, "duration_s": args.duration_s, **figures}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
