"""Benchmark the scheduler: widest-path time on full meshes, and convergence in the simulator.

    .venv/bin/python bench/scheduler.py [--seeds N] [--duration-s S]

Prints two tables and, last, one JSON line with every figure. Targets (issue 4): widest path under 5 ms on a
full mesh of 50 vertices and under 0.5 s at 1000; in the simulator, at most as many path attempts as vertices
(the seed needed 13 for its 8).
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

from lnet.scheduler import THROUGHPUT, EdgeMemory, PathScheduler, SchedulerConfig, widest_path
from lnet.scheduler.simulator import (
    ABILENE_DST,
    ABILENE_SRC,
    SimNetwork,
    SimResult,
    abilene,
    abilene_shared,
    random_topology,
    simulate_transfer,
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="random topologies per size (default 5)")
    parser.add_argument("--duration-s", type=float, default=600.0, help="simulated seconds per transfer")
    args = parser.parse_args(argv)

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
