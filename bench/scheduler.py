"""Benchmark the scheduler: widest-path time on full meshes, convergence and path sets in the simulator.

    .venv/bin/python bench/scheduler.py [--seeds N] [--duration-s S]
    .venv/bin/python bench/scheduler.py --multipath [--seeds N] [--margins 0.05,0.1,0.15,0.25]
    .venv/bin/python bench/scheduler.py --random N [--seed S] [--jobs J] [--only I,J,...]

Prints tables and, last, one JSON line with every figure. Targets: widest path under 5 ms on a
full mesh of 50 vertices and under 0.5 s at 1000; in the simulator, at most as many path attempts as vertices
(the seed needed 13 for its 8). ``--multipath`` runs only the path-set table: cold transfers at 2
streams a hop on ``two_routes``, ``three_routes`` and ``one_bottleneck`` with ``max_paths`` 1, 2 and 3 and each
path margin; targets: at least 0.85 of the sum of the disjoint routes' pinned rates, at least 1.4x ``max_paths``
1 where two routes of similar rate exist, never below 0.95x of it where every route shares one bottleneck.

``--random N`` runs only the distribution: N seeded scenarios (``lnet.scheduler.scenarios``; a fresh seed unless
``--seed``, always printed), each a cold transfer of ``COLD_S`` (600) simulated seconds and then a warm one of
``WARM_S`` (300) from the memory it left, both with lnet-send's defaults (16 blocks in flight a hop at most, 2 at
least, the in-flight rule, up to 3 paths), against the scenario's oracle. It prints a table per kind, writes
every scenario's figures to ``bench/results/scheduler-random-<seed>-<time>.json`` and the ratios' CDFs to
``bench/results/scheduler-random-<seed>.png``.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, NamedTuple

import networkx as nx

from lnet.client.commands.send_args import DEFAULT_MAX_PATHS
from lnet.client.sending.relay import RelayConfig
from lnet.scheduler import THROUGHPUT, EdgeMemory, PathScheduler, SchedulerConfig, edges_of, widest_path
from lnet.scheduler.scenarios import COLD_S, KINDS, MIN_STREAMS, SIZES, STEP_S, STREAMS, WARM_S, scenario
from lnet.scheduler.simulator import (
    ABILENE_DST,
    ABILENE_SRC,
    MULTIPATH_DST,
    MULTIPATH_SRC,
    RTT_BIAS,
    RTT_HOST_S,
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
from lnet.units import parse_size

sys.path.insert(0, str(Path(__file__).resolve().parent))
from reruns import rerun_command  # noqa: E402  (bench/reruns.py)

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


# -- the distribution over random scenarios ----------------------------------------------------------------

RESULTS = Path(__file__).resolve().parent / "results"
SIZE_CLASSES = ("<=8", "16", "32")
SEND_BLOCK = parse_size("4MiB")  # lnet-send's --block-size default


def send_config() -> SchedulerConfig:
    """lnet-send's scheduler settings when nothing is given: ``send()`` replaces the streams by the relay's
    in-flight bounds, and ``--max-paths`` defaults to ``DEFAULT_MAX_PATHS``."""
    relay = RelayConfig()
    if (relay.max_inflight, relay.min_inflight) != (STREAMS, MIN_STREAMS):
        raise RuntimeError("lnet-send's in-flight defaults moved: update lnet.scheduler.scenarios to match")
    return replace(SchedulerConfig(max_paths=DEFAULT_MAX_PATHS), streams=relay.max_inflight,
                   min_streams=relay.min_inflight, block_bytes=relay.block_size, first_depth=relay.initial_inflight)


def _mbps(bps: float | None) -> float | None:
    return None if bps is None else round(bps * 8e-6, 3)


def _ratio(num: float, den: float | None) -> float | None:
    return None if not den else num / den


class RandomJob(NamedTuple):
    """One scenario of ``--random`` and the switches it runs with (sent to a worker process)."""

    seed: int
    index: int
    cold_s: float
    warm_s: float
    step_s: float
    deep: bool
    """Deep probes (not ``--no-deep-probes``)."""
    scouts: bool
    """Cold scouts (not ``--no-cold-scouts``)."""
    depots: int | None
    max_depots: int | None
    block: int | None
    wait: bool
    """``--scouts-wait``."""
    peers: bool
    """``--peer-rtts``."""
    at_start: bool
    """``--warm-probes-at-start``."""
    trace: bool
    routes: bool = True
    """A trial's loss blamed on the newcomers on the set's links (not ``--no-route-blame``)."""
    exact: bool = False
    """``--exact-rtts``: round trips without the hosts' own time."""
    max_min: bool = False
    """``--max-min``: full links shared max-min, not favouring short round trips (``simulator.RTT_BIAS``)."""


def run_random(job: RandomJob) -> dict[str, Any]:
    """One scenario's cold and warm transfers and its figures (run in a worker process); with ``trace``, each
    run's steps and decisions too (``run_trace``)."""
    (seed, index, cold_s, warm_s, step_s, deep, scouts, depots, max_depots, block, wait, peers, at_start, trace, routes,
     exact, max_min) = job
    began = time.perf_counter()
    case = scenario(seed, index, cold_s=cold_s, warm_s=warm_s, step_s=step_s, depots=depots)
    built = time.perf_counter() - began
    defaults = SchedulerConfig()
    network = replace(case.network, rtt_bias=0.0) if max_min else case.network
    config = replace(send_config(), deep_probes=deep, cold_scouts=scouts,
                     scout_after_s=None if wait else defaults.scout_after_s,
                     warm_probes_after_s=0.0 if at_start else defaults.warm_probes_after_s,
                     max_depots=max_depots or None, route_blame=routes)
    noise = seed * 1_000_003 + 2 * index
    # the client's round trips, and what the depots measure to their peers (every pair but the source's own), as
    # measured: with the hosts' own time (simulator.RTT_HOST_S) unless ``exact``
    rtt, measured_pairs = network.measured_rtts(case.src, seed=noise, peers=peers,
                                                host_s=(0.0, 0.0) if exact else RTT_HOST_S)
    pairs = measured_pairs or None
    memory = EdgeMemory()
    options: dict[str, Any] = {"step_s": step_s, "depth": "adaptive", "min_depth": config.min_streams,
                               "block_bytes": block}
    cold = simulate_transfer(network, PathScheduler(network.vertices, case.src, case.dst, memory, config, rtt_s=rtt,
                                                    peer_rtt_s=pairs),
                             duration_s=cold_s, seed=noise, **options)
    warm = simulate_transfer(network, PathScheduler(network.vertices, case.src, case.dst, memory, config, rtt_s=rtt,
                                                    peer_rtt_s=pairs),
                             start_s=cold_s, duration_s=warm_s, seed=noise + 1, **options)
    cold_bps, warm_bps = cold.mean_rate(0.0), warm.mean_rate(cold_s)
    reached = cold.first_time_at(0.9 * case.cold.steady_bps)
    traced = {"trace": {"cold": run_trace(cold, 0.0), "warm": run_trace(warm, cold_s)}} if trace else {}
    return {
        "index": index, "kind": case.kind, "depots": case.depots, "size_class": case.size_class, "draws": case.draws,
        "change_at_s": list(case.change_at_s),
        "oracle": {
            "cold_mbps": _mbps(case.cold.best_bps), "warm_mbps": _mbps(case.warm.best_bps),
            "steady_mbps": _mbps(case.cold.steady_bps), "best_paths": [list(p) for p in case.cold.best_paths],
            "warm_best_paths": [list(p) for p in case.warm.best_paths],
            "direct_cold_mbps": _mbps(case.cold.direct_bps), "direct_warm_mbps": _mbps(case.warm.direct_bps),
            "routes_cold_mbps": _mbps(case.cold.routes_bps), "routes_warm_mbps": _mbps(case.warm.routes_bps),
            "routes": [list(r) for r in case.routes],
        },
        "cold_mbps": _mbps(cold_bps), "warm_mbps": _mbps(warm_bps),
        "cold_ratio": _ratio(cold_bps, case.cold.best_bps), "warm_ratio": _ratio(warm_bps, case.warm.best_bps),
        "warm_over_direct": _ratio(warm_bps, case.warm.direct_bps),
        "cold_over_direct": _ratio(cold_bps, case.cold.direct_bps),
        "warm_over_routes": _ratio(warm_bps, case.warm.routes_bps),
        "cold_over_routes": _ratio(cold_bps, case.cold.routes_bps),
        "cold_to_90_s": reached,
        "cold_attempts": len(cold.attempts), "warm_attempts": len(warm.attempts),
        "cold_final_paths": [list(p) for p in cold.final_paths],
        "warm_final_paths": [list(p) for p in warm.final_paths],
        "warm_first_paths": [list(p) for p in warm.samples[0].paths],
        "build_s": round(built, 3), "run_s": round(time.perf_counter() - began - built, 3),
        **traced,
    }


def run_trace(result: SimResult, start_s: float) -> dict[str, Any]:
    """A run step by step, in seconds from its start: each path's true rate, the probes beside it (edge and
    streams), and every decision that changed the set."""
    return {
        "steps": [{"t": s.t - start_s, "mbps": _mbps(s.rate_bps),
                   "paths": [[list(p), _mbps(r)] for p, r in zip(s.paths, s.rates, strict=True)],
                   "probes": [[list(edge), streams] for edge, streams in s.probes]} for s in result.samples],
        "decisions": [{"t": t - start_s, "decision": type(d).__name__,
                       "reason": getattr(d, "reason", None),
                       "paths": [list(p) for p in getattr(d, "paths", ())]} for t, d in result.decisions],
    }


def print_trace(row: dict[str, Any]) -> None:
    """``--trace``: a scenario's cold and warm runs, a line a step (Mbit/s; probes as u>v, xN when deep)."""
    for run in ("cold", "warm"):
        trace = row["trace"][run]
        print(f"r{row['index']:03d} {row['kind']}, {row['depots']} depots: {run} run, "
              f"{row[run + '_mbps']:.1f} Mbit/s ({row[run + '_ratio']:.2f} of the oracle)")
        decisions = iter(trace["decisions"])
        pending = next(decisions, None)
        for step in trace["steps"]:
            while pending is not None and pending["t"] <= step["t"]:  # taken at the end of the step before
                print(f"  {pending['t']:6.1f} s  {pending['decision']} ({pending['reason']}): "
                      + ", ".join(">".join(p) for p in pending["paths"]))
                pending = next(decisions, None)
            paths = " ".join(f"{'>'.join(p)}={mbps:.1f}" for p, mbps in step["paths"])
            probes = " ".join(f"{u}>{v}" + (f"x{n}" if n > 1 else "") for (u, v), n in step["probes"])
            print(f"  {step['t']:6.1f} s {step['mbps']:7.1f}  {paths}" + (f"  probes {probes}" if probes else ""))


def p10(values: Sequence[float]) -> float:
    """The 10th percentile, nearest rank."""
    ordered = sorted(values)
    return ordered[max(0, math.ceil(0.1 * len(ordered)) - 1)]


def summarise_random(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per kind and overall: median and 10th percentile of warm/oracle and cold/oracle; the direct kind's least
    warm/pinned-direct; the median multipath/sum where the kind has disjoint routes; the cold start's seconds to
    90% of the best path by size class (a run that never got there counts as slower than any)."""
    summary: dict[str, Any] = {"kinds": {}, "to_90": {}}
    for kind in (*KINDS, "all"):
        mine = [r for r in rows if kind in ("all", r["kind"])]
        if not mine:
            continue
        figures: dict[str, Any] = {"n": len(mine)}
        for start in ("warm", "cold"):
            ratios = [r[f"{start}_ratio"] for r in mine]
            figures[f"{start}_median"], figures[f"{start}_p10"] = statistics.median(ratios), p10(ratios)
        direct = [r["warm_over_direct"] for r in mine if r["kind"] == "direct"]
        if direct:
            figures["warm_over_direct_min"] = min(direct)
            figures["warm_over_direct_median"] = statistics.median(direct)
        for start in ("warm", "cold"):
            routes = [r[f"{start}_over_routes"] for r in mine if r[f"{start}_over_routes"] is not None]
            if routes:
                figures[f"{start}_over_routes_median"] = statistics.median(routes)
        worst = sorted(mine, key=lambda r: r["warm_ratio"])[:3]
        figures["worst_warm"] = [
            {"index": r["index"], "depots": r["depots"], "warm_ratio": r["warm_ratio"], "cold_ratio": r["cold_ratio"]}
            for r in worst
        ]
        summary["kinds"][kind] = figures
    for size in [*SIZE_CLASSES, *sorted({r["size_class"] for r in rows} - set(SIZE_CLASSES), key=int)]:
        times = [r["cold_to_90_s"] for r in rows if r["size_class"] == size]
        if times:
            reached = [t for t in times if t is not None]
            summary["to_90"][size] = {
                "n": len(times),
                "median_s": statistics.median(math.inf if t is None else t for t in times),
                "max_s": math.inf if len(reached) < len(times) else max(reached),
                "max_reached_s": max(reached, default=None),
                "never": len(times) - len(reached),
            }
    return summary


def _f(value: float | None, spec: str = ".2f") -> str:
    if value is None:
        return "-"
    return "never" if math.isinf(value) else format(value, spec)


def print_random(seed: int, summary: dict[str, Any], cold_s: float, warm_s: float) -> None:
    print(f"seed {seed}: cold runs of {cold_s:g} s, then warm runs of {warm_s:g} s, lnet-send's defaults")
    print("ratios of mean rates over each run to the oracle's (median / 10th percentile); 'direct' = warm over the")
    print("pinned direct path (least / median, direct kind); '/sum' = over the disjoint routes' pinned sum (median)")
    print(f"{'kind':>9} {'n':>4} {'warm':>12} {'cold':>12} {'direct':>12} {'warm /sum':>9} {'cold /sum':>9}  "
          "worst warm: #index (depots) ratio")
    for kind, k in summary["kinds"].items():
        direct = (f"{_f(k['warm_over_direct_min'])} / {_f(k['warm_over_direct_median'])}"
                  if "warm_over_direct_min" in k else "-")
        worst = ", ".join(f"#{w['index']} ({w['depots']}) {w['warm_ratio']:.2f}" for w in k["worst_warm"])
        print(f"{kind:>9} {k['n']:>4} {_f(k['warm_median'])} / {_f(k['warm_p10'])} "
              f"{_f(k['cold_median'])} / {_f(k['cold_p10'])} {direct:>12} {_f(k.get('warm_over_routes_median')):>9} "
              f"{_f(k.get('cold_over_routes_median')):>9}  {worst}")
    print()
    print("cold start: seconds to 90% of the best path (median / max), by depots")
    for size, t in summary["to_90"].items():
        print(f"{size:>9} {t['n']:>4} {_f(t['median_s'], '.1f')} / {_f(t['max_s'], '.1f')}"
              f"  never: {t['never']}, slowest that got there: {_f(t['max_reached_s'], '.1f')}")


def plot_random(rows: list[dict[str, Any]], seed: int, path: Path) -> None:
    """One panel per ratio: its CDF over all scenarios and, for the two main ratios, over each kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = [
        ("warm_ratio", "warm / oracle", True),
        ("cold_ratio", "cold / oracle", True),
        ("warm_over_direct", "warm / pinned direct (direct kind)", False),
        ("warm_over_routes", "warm / sum of disjoint routes", False),
    ]
    figure, axes = plt.subplots(2, 2, figsize=(11, 8))
    for ax, (key, title, by_kind) in zip(axes.flat, panels, strict=True):
        groups: list[tuple[str, list[dict[str, Any]]]] = [("all", rows)]
        if by_kind:
            groups += [(kind, [r for r in rows if r["kind"] == kind]) for kind in KINDS]
        elif key == "warm_over_direct":
            groups = [("direct", [r for r in rows if r["kind"] == "direct"])]
        for label, group in groups:
            values = sorted(r[key] for r in group if r[key] is not None)
            if values:
                ys = [(i + 1) / len(values) for i in range(len(values))]
                ax.step(values, ys, where="post", label=f"{label} ({len(values)})", linewidth=2.5 if label == "all"
                        else 1.2)
        ax.axvline(1.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_title(title)
        ax.set_xlabel("ratio")
        ax.set_ylabel("fraction of scenarios")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    figure.suptitle(f"bench/scheduler.py --random {len(rows)} --seed {seed}")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)


def _commit() -> str:
    repo = Path(__file__).resolve().parent.parent
    try:
        return subprocess.run(["git", "describe", "--always", "--dirty"], cwd=repo, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def random_distribution(args: argparse.Namespace, argv: list[str]) -> int:
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    indices = [int(i) for i in args.only.split(",")] if args.only else list(range(args.random))
    print(f"seed {seed} (rerun: {rerun_command('scheduler', argv, seed)})", flush=True)
    jobs = [RandomJob(seed, i, args.cold_s, args.warm_s, args.step_s, deep=not args.no_deep_probes,
                      scouts=not args.no_cold_scouts, depots=args.depots, max_depots=args.max_depots,
                      block=args.block_size or None, wait=args.scouts_wait, peers=args.peer_rtts,
                      at_start=args.warm_probes_at_start, trace=args.trace, routes=not args.no_route_blame,
                      exact=args.exact_rtts, max_min=args.max_min) for i in indices]
    # Biggest first, so that the workers finish together.
    jobs.sort(key=lambda job: -scenario_size_class(job.index))
    # The scheduler's runs depend on the order of some sets of strings, so on Python's hash seed: the workers get
    # a fixed one, so that a seed gives the same figures on every run.
    os.environ["PYTHONHASHSEED"] = "0"
    started = time.perf_counter()
    rows: list[dict[str, Any]] = []
    with multiprocessing.get_context("spawn").Pool(args.jobs) as pool:
        for row in pool.imap_unordered(run_random, jobs):
            rows.append(row)
            if len(rows) % 20 == 0 or len(rows) == len(jobs):
                print(f"  {len(rows)}/{len(jobs)} scenarios, {time.perf_counter() - started:.0f} s", flush=True)
    rows.sort(key=lambda r: r["index"])
    elapsed = time.perf_counter() - started
    summary = summarise_random(rows)
    print()
    print_random(seed, summary, args.cold_s, args.warm_s)
    if args.only:
        for r in rows:
            if args.trace:
                print_trace(r)
            print(json.dumps({k: v for k, v in r.items() if k != "trace"}))
        return 0
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    rule = ("-no-deep-probes" if args.no_deep_probes else "") + ("-no-cold-scouts" if args.no_cold_scouts else "")
    rule += "-fluid" if not args.block_size else ""
    rule += "-scouts-wait" if args.scouts_wait else ""
    rule += "-warm-probes-at-start" if args.warm_probes_at_start else ""
    rule += "-peer-rtts" if args.peer_rtts else ""
    rule += ("-no-route-blame" if args.no_route_blame else "") + ("-exact-rtts" if args.exact_rtts else "")
    rule += "-max-min" if args.max_min else ""
    rule += f"-cold-{args.cold_s:g}s" if args.cold_s != COLD_S else ""
    rule += (f"-{args.depots}-depots" if args.depots else "") + (
        f"-max-depots-{args.max_depots}" if args.max_depots != SchedulerConfig().max_depots else "")
    out = RESULTS / f"scheduler-random-{seed}{rule}-{stamp}.json"
    document = {
        "bench": "scheduler-random", "commit": _commit(), "command": " ".join(["bench/scheduler.py", *argv]),
        "seed": seed, "scenarios": len(rows), "cold_s": args.cold_s, "warm_s": args.warm_s, "step_s": args.step_s,
        "config": {"streams": STREAMS, "min_streams": MIN_STREAMS, "max_paths": send_config().max_paths,
                   "depth": "adaptive", "deep_probes": not args.no_deep_probes,
                   "cold_scouts": not args.no_cold_scouts,
                   "scout_after_s": None if args.scouts_wait else SchedulerConfig().scout_after_s,
                   "warm_probes_after_s": 0.0 if args.warm_probes_at_start else SchedulerConfig().warm_probes_after_s,
                   "depots": args.depots, "peer_rtts": args.peer_rtts, "route_blame": not args.no_route_blame,
                   "rtt_host_s": None if args.exact_rtts else list(RTT_HOST_S),
                   "rtt_bias": 0.0 if args.max_min else RTT_BIAS,
                   "max_depots": args.max_depots or None, "block_bytes": args.block_size or None,
                   "python_hash_seed": 0},
        "wall_s": round(elapsed, 1), "jobs": args.jobs, "summary": summary, "rows": rows,
    }
    out.write_text(json.dumps(_finite(document), indent=1, allow_nan=False) + "\n")
    picture = RESULTS / f"scheduler-random-{seed}{rule}.png"
    plot_random(rows, seed, picture)
    print(f"\n{len(rows)} scenarios in {elapsed:.0f} s on {args.jobs} processes; wrote {out} and {picture}")
    return 0


def scenario_size_class(index: int) -> int:
    """Which size class ``scenario`` gives the index (0 smallest), to start the slow ones first."""
    return (index // len(KINDS)) % len(SIZES)


def _finite(value: Any) -> Any:
    """``value`` with every infinite figure (a cold start that never got to 90%) written ``"never"``."""
    if isinstance(value, float) and math.isinf(value):
        return "never"
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_finite(item) for item in value]
    return value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=5, help="random topologies per size (default 5)")
    parser.add_argument("--duration-s", type=float, default=600.0, help="simulated seconds per transfer")
    parser.add_argument("--multipath", action="store_true", help="only the path-set table")
    parser.add_argument(
        "--margins", default="0.05,0.1,0.15,0.25", help="path margins for --multipath (default 0.05,0.1,0.15,0.25)"
    )
    parser.add_argument("--noise", type=float, default=0.03, help="relative noise of a measurement, --multipath")
    parser.add_argument("--random", type=int, metavar="N", help="only the distribution over N random scenarios")
    parser.add_argument("--seed", type=int, help="--random: the scenarios' seed (default: a fresh one)")
    parser.add_argument("--jobs", type=int, default=2, help="--random: worker processes (default 2)")
    parser.add_argument("--no-deep-probes", action="store_true",
                        help="--random: one stream a probe, as before deep probes (to compare the rules)")
    parser.add_argument("--no-cold-scouts", action="store_true",
                        help="--random: a cold start runs one path, as before cold scouts (to compare the rules)")
    parser.add_argument("--scouts-wait", action="store_true",
                        help="--random: a cold start's scouts wait for its first path's reports however long, as "
                        "before scout_after_s (to compare the rules)")
    parser.add_argument("--warm-probes-at-start", action="store_true",
                        help="--random: a warm start probes from its first second, as before warm_probes_after_s "
                        "(to compare the rules)")
    parser.add_argument("--peer-rtts", action="store_true",
                        help="--random: the scheduler also knows the round trip between every two depots (as "
                        "depots measure to their peers), not only the client's own to each")
    parser.add_argument("--no-route-blame", action="store_true",
                        help="--random: a trial shares a loss among its newcomers by their shortfalls alone, not "
                        "first among those the round trips place on the set's links, as before 2026-12-07 (to compare)")
    parser.add_argument("--exact-rtts", action="store_true",
                        help="--random: round trips are the links' delays alone, without the hosts' own time a "
                        "measured one carries (the model before 2026-12-07)")
    parser.add_argument("--max-min", action="store_true",
                        help="--random: full links are shared max-min, every stream alike, not favouring streams of "
                        "short round trips as the testbed's TCP does (the model before 2026-12-08)")
    parser.add_argument("--depots", type=int, metavar="N",
                        help="--random: every scenario with N depots, instead of the size classes (4-8, 16, 32)")
    parser.add_argument("--max-depots", type=int, metavar="M", default=SchedulerConfig().max_depots,
                        help="--random: the scheduler's candidates at most (default %(default)s; 0: every depot)")
    parser.add_argument("--block-size", type=parse_size, default=SEND_BLOCK, metavar="SIZE",
                        help="--random: each hop reports a sample per block's worth, as the engine reports a copy "
                        "when it ends (default lnet-send's, %(default)s bytes; 0: a sample every step, the fluid "
                        "model)")
    parser.add_argument("--only", metavar="I,J", help="--random: only these scenario indices (printed, not saved)")
    parser.add_argument("--trace", action="store_true",
                        help="--random with --only: print each run step by step (every path's rate, the probes "
                        "beside it, the decisions)")
    parser.add_argument("--cold-s", type=float, default=COLD_S, help=f"--random: cold run, sim. s ({COLD_S:g})")
    parser.add_argument("--warm-s", type=float, default=WARM_S, help=f"--random: warm run, sim. s ({WARM_S:g})")
    parser.add_argument("--step-s", type=float, default=STEP_S, help=f"--random: simulator step ({STEP_S:g} s)")
    args = parser.parse_args(argv)
    if args.trace and not args.only:
        parser.error("--trace needs --only I,J (a trace a scenario)")
    if args.random is not None:
        return random_distribution(args, sys.argv[1:] if argv is None else argv)
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
